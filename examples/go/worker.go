// A pg_jobs worker in Go with lib/pq (database/sql).
//
//	go run . --dsn "host=... dbname=... sslmode=disable" [--queue default] [--batch 10]
//	         [--lease 30] [--poll 5] [--until-empty] [--quiet]
//
// Runs up to --batch jobs at once, each on a goroutine (database/sql gives each its own
// connection), and claims more as soon as one finishes: a slow job never holds back the others.
// Heartbeats held jobs every lease/3 on connections of their own (database/sql replaces one
// that broke); a heartbeat answering NULL (the claim is lost) cancels the job's context, which
// handlers watch. Runs each handler and jobs.complete in ONE transaction (rolled back when
// complete answers false), reports failures with jobs.fail, snoozes a job whose name has no
// handler (no attempt used), sleeps on LISTEN pg_jobs with a polling fallback, and on SIGTERM or
// SIGINT stops claiming, finishes what it holds, and exits 0.
package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lib/pq"
)

type job struct {
	ID          string
	Claim       int64
	Name        string
	Payload     json.RawMessage
	Attempt     int
	MaxAttempts int
}

// The handlers: each runs inside the transaction that completes its job.
var handlers = map[string]func(ctx context.Context, tx *sql.Tx, j job) (any, error){
	"record": func(ctx context.Context, tx *sql.Tx, j job) (any, error) {
		_, err := tx.ExecContext(ctx, "insert into example_log (job_id, worker, payload) values ($1, $2, $3)",
			j.ID, "go", string(j.Payload))
		return map[string]bool{"recorded": true}, err
	},
	"sleep": func(ctx context.Context, tx *sql.Tx, j job) (any, error) {
		p := struct{ Seconds *float64 }{}
		_ = json.Unmarshal(j.Payload, &p)
		seconds := 1.0
		if p.Seconds != nil {
			seconds = *p.Seconds
		}
		select { // ctx is cancelled when the claim is lost
		case <-time.After(time.Duration(seconds * float64(time.Second))):
		case <-ctx.Done():
			return nil, errors.New("the claim was lost: stopped")
		}
		_, err := tx.Exec("insert into example_log (job_id, worker, payload) values ($1, $2, $3)",
			j.ID, "go", string(j.Payload))
		return map[string]float64{"slept": seconds}, err
	},
	"fail": func(ctx context.Context, tx *sql.Tx, j job) (any, error) {
		p := struct{ Message string }{"this job always fails"}
		_ = json.Unmarshal(j.Payload, &p)
		return nil, errors.New(p.Message)
	},
}

type queues []string

func (q *queues) String() string     { return strings.Join(*q, ",") }
func (q *queues) Set(v string) error { *q = append(*q, v); return nil }

// runJob runs one job's handler and jobs.complete in one transaction; a failure rolls back
// and is reported with jobs.fail. ctx is the job's: cancelled when its claim is lost. The
// transaction and the settles use the worker's own context, so a lost claim still rolls back
// and reports cleanly.
func runJob(ctx context.Context, db *sql.DB, j job) (string, error) {
	handler, ok := handlers[j.Name]
	if !ok { // not a failure: no attempt used; a worker that knows the name will run it
		_, err := db.Exec("select jobs.snooze($1, $2, now() + interval '1 minute')", j.ID, j.Claim)
		return "no handler for this name here; snoozed for a minute (no attempt used)", err
	}
	tx, err := db.Begin()
	if err != nil {
		return "", err
	}
	landed, failure := false, error(nil)
	if result, err := handler(ctx, tx, j); err != nil {
		failure = err
	} else if encoded, err := json.Marshal(result); err != nil {
		failure = err
	} else {
		failure = tx.QueryRow("select jobs.complete($1, $2, $3)", j.ID, j.Claim, string(encoded)).Scan(&landed)
	}
	switch {
	case failure == nil && landed:
		return "completed", tx.Commit()
	case failure == nil:
		return "lost its claim; its writes were rolled back", tx.Rollback() // undo this job's writes
	}
	if err := tx.Rollback(); err != nil {
		return "", err
	}
	var outcome sql.NullString
	err = db.QueryRow("select jobs.fail($1, $2, $3)", j.ID, j.Claim, failure.Error()).Scan(&outcome)
	then := map[string]string{"retried": "retried after its backoff", "dead": "dead-lettered: out of attempts",
		"failed": "failed: out of attempts"}[outcome.String]
	if !outcome.Valid {
		then = "the claim was already lost"
	}
	return fmt.Sprintf("failed (%s); %s", failure.Error(), then), err
}

// A held job: its claim, and how to stop its handler.
type holding struct {
	j      job
	cancel context.CancelFunc
}

func main() {
	var qs queues
	dsn := flag.String("dsn", os.Getenv("PG_JOBS_DSN"), "connection string")
	batch := flag.Int("batch", 10, "jobs per claim")
	lease := flag.Float64("lease", 30, "lease in seconds")
	poll := flag.Float64("poll", 5, "seconds between polls when idle")
	untilEmpty := flag.Bool("until-empty", false, "exit once the queues have no live job (needs an admin role)")
	quiet := flag.Bool("quiet", false, "do not print each job")
	flag.Var(&qs, "queue", "queue to work (repeatable; default: default)")
	flag.Parse()
	if len(qs) == 0 {
		qs = queues{"default"}
	}
	ctx := context.Background()
	workerID := fmt.Sprintf("go:%d", os.Getpid())
	logf := func(format string, args ...any) {
		if !*quiet {
			fmt.Printf("  "+format+"\n", args...)
		}
	}

	db, err := sql.Open("postgres", *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	var stopping atomic.Bool
	wake := make(chan struct{}, 1)
	nudge := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	listener := pq.NewListener(*dsn, 10*time.Millisecond, time.Minute, nil)
	if err := listener.Listen("pg_jobs"); err != nil {
		log.Fatal(err)
	}
	go func() {
		for n := range listener.Notify {
			for _, q := range qs {
				if n == nil || n.Extra == q { // nil: reconnected, notifications may have been missed
					nudge()
				}
			}
		}
	}()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stopping.Store(true)
		nudge()
	}()

	// Held jobs, heartbeated every lease/3 on connections of their own.
	beatDB, err := sql.Open("postgres", *dsn+" application_name='pg_jobs heartbeat'")
	if err != nil {
		log.Fatal(err)
	}
	defer beatDB.Close()
	var mu sync.Mutex
	held := map[string]holding{}
	beats := time.NewTicker(time.Duration(*lease / 3 * float64(time.Second)))
	defer beats.Stop()
	go func() {
		for range beats.C {
			mu.Lock()
			now := make([]holding, 0, len(held))
			for _, h := range held {
				now = append(now, h)
			}
			mu.Unlock()
			for _, h := range now {
				var until sql.NullTime
				if err := beatDB.QueryRow("select jobs.heartbeat($1, $2)", h.j.ID, h.j.Claim).Scan(&until); err != nil {
					break // a broken connection: database/sql makes a new one at the next beat
				}
				if !until.Valid {
					logf("job %s %s: the claim is lost; stopping its handler", h.j.ID[len(h.j.ID)-8:], h.j.Name)
					mu.Lock()
					delete(held, h.j.ID)
					mu.Unlock()
					h.cancel()
				}
			}
		}
	}()

	var running sync.WaitGroup
	done := make(chan struct{}, *batch) // a job ended: a slot is free
	inFlight := 0
	for !stopping.Load() {
		for drained := false; !drained; { // count the jobs that ended
			select {
			case <-done:
				inFlight--
			default:
				drained = true
			}
		}
		var jobs []job
		if free := *batch - inFlight; free > 0 {
			rows, err := db.QueryContext(ctx, `select id, claim, name, payload, attempt, max_attempts
				from jobs.claim($1, $2, $3, make_interval(secs => $4))`, workerID, pq.Array(qs), free, *lease)
			if err != nil {
				log.Fatal(err)
			}
			for rows.Next() {
				var j job
				if err := rows.Scan(&j.ID, &j.Claim, &j.Name, &j.Payload, &j.Attempt, &j.MaxAttempts); err != nil {
					log.Fatal(err)
				}
				jobs = append(jobs, j)
			}
			if err := rows.Err(); err != nil {
				log.Fatal(err)
			}
		}
		for _, j := range jobs {
			jobCtx, cancel := context.WithCancel(ctx)
			mu.Lock()
			held[j.ID] = holding{j, cancel}
			mu.Unlock()
			inFlight++
			running.Add(1)
			go func(j job) {
				defer running.Done()
				outcome, err := runJob(jobCtx, db, j)
				cancel()
				mu.Lock()
				delete(held, j.ID)
				mu.Unlock()
				if err != nil {
					log.Fatal(err)
				}
				logf("job %s %-13s attempt %d/%d: %s", j.ID[len(j.ID)-8:], j.Name, j.Attempt, j.MaxAttempts, outcome)
				done <- struct{}{}
				nudge()
			}(j)
		}
		if len(jobs) > 0 && inFlight < *batch {
			continue // room for more: claim again at once
		}
		if inFlight == 0 && *untilEmpty {
			var live int
			err := db.QueryRowContext(ctx, `select count(*) from jobs.jobs where queue = any($1)
				and state in ('ready', 'delayed', 'running', 'suspended')`, pq.Array(qs)).Scan(&live)
			if err != nil {
				log.Fatal(err)
			}
			if live == 0 {
				break
			}
		}
		// Sleep until a wake-up on our queues, a job ending, a signal, or the poll interval.
		select {
		case <-wake:
		case <-time.After(time.Duration(*poll * float64(time.Second))):
		}
	}
	running.Wait() // a signal: stop claiming, finish the jobs held
	_ = listener.Close()
}
