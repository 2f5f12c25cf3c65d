// A pg_jobs worker in Go with lib/pq (database/sql).
//
//	go run . --dsn "host=... dbname=... sslmode=disable" [--queue default] [--batch 10]
//	         [--lease 30] [--poll 5] [--until-empty] [--quiet]
//
// Claims in batches, heartbeats held jobs every lease/3, runs each handler and jobs.complete
// in ONE transaction (rolled back when complete answers false), reports failures with
// jobs.fail, sleeps on LISTEN pg_jobs with a polling fallback, and on SIGTERM or SIGINT stops
// claiming, finishes what it holds, and exits 0.
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
		time.Sleep(time.Duration(seconds * float64(time.Second)))
		return map[string]float64{"slept": seconds}, nil
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
// and is reported with jobs.fail.
func runJob(ctx context.Context, db *sql.DB, j job) (string, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", err
	}
	landed, failure := false, error(nil)
	if handler, ok := handlers[j.Name]; !ok {
		failure = fmt.Errorf("no handler for job %q", j.Name)
	} else if result, err := handler(ctx, tx, j); err != nil {
		failure = err
	} else if encoded, err := json.Marshal(result); err != nil {
		failure = err
	} else {
		failure = tx.QueryRowContext(ctx, "select jobs.complete($1, $2, $3)", j.ID, j.Claim, string(encoded)).Scan(&landed)
	}
	switch {
	case failure == nil && landed:
		return "completed", tx.Commit()
	case failure == nil:
		return "lost its claim", tx.Rollback() // the claim was lost: undo this job's writes
	}
	if err := tx.Rollback(); err != nil {
		return "", err
	}
	var outcome sql.NullString
	err = db.QueryRowContext(ctx, "select jobs.fail($1, $2, $3)", j.ID, j.Claim, failure.Error()).Scan(&outcome)
	if !outcome.Valid {
		return "lost its claim", err
	}
	return outcome.String, err
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

	// Held jobs (id -> claim token), heartbeated every lease/3.
	var mu sync.Mutex
	held := map[string]int64{}
	beats := time.NewTicker(time.Duration(*lease / 3 * float64(time.Second)))
	defer beats.Stop()
	go func() {
		for range beats.C {
			mu.Lock()
			now := make(map[string]int64, len(held))
			for id, claim := range held {
				now[id] = claim
			}
			mu.Unlock()
			for id, claim := range now {
				_, _ = db.ExecContext(ctx, "select jobs.heartbeat($1, $2)", id, claim)
			}
		}
	}()

	for !stopping.Load() {
		rows, err := db.QueryContext(ctx, `select id, claim, name, payload, attempt, max_attempts
			from jobs.claim($1, $2, $3, make_interval(secs => $4))`, workerID, pq.Array(qs), *batch, *lease)
		if err != nil {
			log.Fatal(err)
		}
		var jobs []job
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
		mu.Lock()
		for _, j := range jobs {
			held[j.ID] = j.Claim
		}
		mu.Unlock()
		for _, j := range jobs { // a SIGTERM now still lets the batch finish
			outcome, err := runJob(ctx, db, j)
			if err != nil {
				log.Fatal(err)
			}
			mu.Lock()
			delete(held, j.ID)
			mu.Unlock()
			if !*quiet {
				fmt.Printf("  %-13s attempt %d/%d: %s\n", j.Name, j.Attempt, j.MaxAttempts, outcome)
			}
		}
		if len(jobs) > 0 {
			continue
		}
		if *untilEmpty {
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
		// Idle: sleep until a wake-up on our queues, a signal, or the poll interval.
		select {
		case <-wake:
		case <-time.After(time.Duration(*poll * float64(time.Second))):
		}
	}
	_ = listener.Close()
}
