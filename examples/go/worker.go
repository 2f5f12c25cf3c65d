// A pg_jobs worker in Go with lib/pq (database/sql).
//
//	go run . --dsn "host=... dbname=... sslmode=disable" [--queue default] [--batch 10]
//	         [--lease 30] [--poll 5] [--until-empty] [--quiet]
//
// Runs up to --batch jobs at once, each on a goroutine (database/sql gives each its own
// connection), and claims more as soon as one finishes: a slow job never holds back the others.
// Heartbeats held jobs every lease/3 on connections of their own (database/sql replaces one
// that broke); a heartbeat answering NULL (the claim is lost) cancels the job's context, which
// handlers watch (so it is at the attempt's deadline, a timeout), and a job named on pg_jobs_cancel (a LISTEN connection of its own) is
// heartbeaten at once, so a cancelled job's handler stops within moments. Runs each handler and its completion in ONE transaction, which also claims
// the job's successor for the same goroutine (jobs.complete_and_claim: one commit per job;
// rolled back when it raises lease_lost), reports failures with jobs.fail, snoozes a job whose
// name has no handler (no attempt used), and waits for work in the server (jobs.claim with
// wait: no LISTEN connection, so it works through a transaction-pooling PgBouncer). On SIGTERM or SIGINT it
// cancels a claim that waits, stops claiming, finishes what it holds, and exits 0.
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
	TimeLeft    sql.NullFloat64 // seconds to the attempt's deadline (a timeout); NULL: none
}

// claimed: the columns of a claimed job, time_left computed in the server.
const claimed = `id, claim, name, payload, attempt, max_attempts,
	extract(epoch from deadline - clock_timestamp())::float8 as time_left`

// jobContext is a job's context: cancelled when its claim is lost, and at its deadline.
func jobContext(ctx context.Context, j job) (context.Context, context.CancelFunc) {
	if j.TimeLeft.Valid {
		return context.WithTimeout(ctx, time.Duration(j.TimeLeft.Float64*float64(time.Second)))
	}
	return context.WithCancel(ctx)
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

// chain names what to claim when a job completes: the worker, its queues, the lease.
type chain struct {
	worker string
	qs     queues
	lease  float64
}

// runJob runs one job's handler and its completion in one transaction; a failure rolls back
// and is reported with jobs.fail. With a chain, the completion also claims the job's successor
// in that transaction (jobs.complete_and_claim: one commit per job), returned as next. ctx is
// the job's: cancelled when its claim is lost. The transaction and the settles use the worker's
// own context, so a lost claim still rolls back and reports cleanly.
func runJob(ctx context.Context, db *sql.DB, j job, c *chain) (outcome string, next *job, err error) {
	handler, ok := handlers[j.Name]
	if !ok { // not a failure: no attempt used; a worker that knows the name will run it
		_, err := db.Exec("select jobs.snooze($1, $2, now() + interval '1 minute')", j.ID, j.Claim)
		return "no handler for this name here; snoozed for a minute (no attempt used)", nil, err
	}
	tx, err := db.Begin()
	if err != nil {
		return "", nil, err
	}
	landed, failure := false, error(nil)
	if result, err := handler(ctx, tx, j); err != nil {
		failure = err
	} else if encoded, err := json.Marshal(result); err != nil {
		failure = err
	} else if c == nil {
		failure = tx.QueryRow("select jobs.complete($1, $2, $3)", j.ID, j.Claim, string(encoded)).Scan(&landed)
	} else {
		var got []job
		got, failure = scanJobs(tx.Query(`select `+claimed+`
			from jobs.complete_and_claim(array[$1]::uuid[], array[$2]::bigint[], $3, $4, 1,
			                             make_interval(secs => $5), array[$6]::jsonb[])`,
			j.ID, j.Claim, c.worker, pq.Array(c.qs), c.lease, string(encoded)))
		var pqErr *pq.Error
		if errors.As(failure, &pqErr) && pqErr.Code == "PJ001" {
			failure = nil // lease_lost: the claim is no longer held
		} else if failure == nil {
			landed = true
			if len(got) > 0 {
				next = &got[0]
			}
		}
	}
	switch {
	case failure == nil && landed:
		return "completed", next, tx.Commit()
	case failure == nil:
		return "lost its claim; its writes were rolled back", nil, tx.Rollback() // undo its writes
	}
	if err := tx.Rollback(); err != nil {
		return "", nil, err
	}
	var failed sql.NullString
	err = db.QueryRow("select jobs.fail($1, $2, $3)", j.ID, j.Claim, failure.Error()).Scan(&failed)
	then := map[string]string{"retried": "retried after its backoff", "dead": "dead-lettered: out of attempts",
		"failed": "failed: out of attempts"}[failed.String]
	if !failed.Valid {
		then = "the claim was already lost"
	}
	return fmt.Sprintf("failed (%s); %s", failure.Error(), then), nil, err
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
	poll := flag.Float64("poll", 5, "seconds a claim waits in the server for work")
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
	wake := make(chan struct{}, 1) // a job ended, or a signal
	nudge := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	// Claims run under claimCtx: a signal cancels the one that waits for work (lib/pq sends
	// the server a cancel request); one that is claiming finishes, or claims nothing.
	claimCtx, cancelClaims := context.WithCancel(ctx)
	defer cancelClaims()
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stopping.Store(true)
		cancelClaims()
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
	beat := func(hs []holding) {
		for _, h := range hs {
			var until sql.NullTime
			err := beatDB.QueryRow("select jobs.heartbeat($1, $2)", h.j.ID, h.j.Claim).Scan(&until)
			if err != nil { // a broken connection: database/sql makes a new one, at once
				logf("heartbeat connection failed (%v); reconnecting", err)
				err = beatDB.QueryRow("select jobs.heartbeat($1, $2)", h.j.ID, h.j.Claim).Scan(&until)
			}
			if err != nil {
				break // tried again at the next beat
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
	go func() {
		for range beats.C {
			mu.Lock()
			now := make([]holding, 0, len(held))
			for _, h := range held {
				now = append(now, h)
			}
			mu.Unlock()
			beat(now)
		}
	}()
	// A held job named on pg_jobs_cancel (cancelled while it runs) is heartbeaten at once, so
	// its handler stops within moments. A notification is a hint only (any role that can
	// connect may NOTIFY): the heartbeat's answer decides. "*": every held job.
	cancels := pq.NewListener(*dsn, 100*time.Millisecond, 10*time.Second, nil)
	defer cancels.Close()
	if err := cancels.Listen("pg_jobs_cancel"); err != nil {
		log.Fatal(err)
	}
	go func() {
		for n := range cancels.Notify {
			if n == nil {
				continue // the listener reconnected
			}
			mu.Lock()
			named := []holding{}
			for id, h := range held {
				if n.Extra == "*" || n.Extra == id {
					named = append(named, h)
				}
			}
			mu.Unlock()
			beat(named)
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
		free := *batch - inFlight
		if free == 0 { // full: wait for a job to end
			<-wake
			continue
		}
		// The blocking claim: when nothing is claimable it sleeps in the server until a commit
		// makes work in our queues or a job there comes due, up to --poll seconds.
		jobs, err := claim(claimCtx, db, workerID, qs, free, *lease, *poll)
		if err != nil {
			if stopping.Load() {
				break
			}
			log.Fatal(err)
		}
		for _, j := range jobs {
			jobCtx, cancel := jobContext(ctx, j)
			mu.Lock()
			held[j.ID] = holding{j, cancel}
			mu.Unlock()
			inFlight++
			running.Add(1)
			go func(j job, jobCtx context.Context, cancel context.CancelFunc) {
				defer running.Done()
				for { // the job, then each successor its completion claimed, until none or a signal
					var c *chain
					if !stopping.Load() {
						c = &chain{workerID, qs, *lease}
					}
					outcome, next, err := runJob(jobCtx, db, j, c)
					cancel()
					mu.Lock()
					delete(held, j.ID)
					mu.Unlock()
					if err != nil {
						log.Fatal(err)
					}
					logf("job %s %-13s attempt %d/%d: %s", j.ID[len(j.ID)-8:], j.Name, j.Attempt, j.MaxAttempts, outcome)
					if next == nil {
						break
					}
					j = *next
					jobCtx, cancel = jobContext(ctx, j)
					mu.Lock()
					held[j.ID] = holding{j, cancel}
					mu.Unlock()
				}
				done <- struct{}{}
				nudge()
			}(j, jobCtx, cancel)
		}
		if len(jobs) == 0 && inFlight == 0 && *untilEmpty {
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
	}
	running.Wait() // a signal: stop claiming, finish the jobs held
}

// claim takes up to max jobs, waiting up to wait seconds in the server for work.
func claim(ctx context.Context, db *sql.DB, workerID string, qs queues, max int, lease, wait float64) ([]job, error) {
	return scanJobs(db.QueryContext(ctx, `select `+claimed+`
		from jobs.claim($1, $2, $3, make_interval(secs => $4), make_interval(secs => $5))`,
		workerID, pq.Array(qs), max, lease, wait))
}

// scanJobs reads the jobs a claim answered.
func scanJobs(rows *sql.Rows, err error) ([]job, error) {
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var jobs []job
	for rows.Next() {
		var j job
		if err := rows.Scan(&j.ID, &j.Claim, &j.Name, &j.Payload, &j.Attempt, &j.MaxAttempts, &j.TimeLeft); err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	return jobs, rows.Err()
}
