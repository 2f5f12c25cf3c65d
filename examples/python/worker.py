"""A pg_jobs worker in Python with psycopg 3.

    python worker.py --dsn "host=127.0.0.1 dbname=app" [--queue default] [--batch 10]
                     [--lease 30] [--poll 5] [--until-empty]

- Runs up to --batch jobs at once, each on a thread and a connection of its own, and claims
  more (jobs.claim) as soon as a slot frees up: one slow job never holds back the others.
- Heartbeats every held job from a thread of its own, on its own connection, every lease/3.
  A connection that fails is made again. A heartbeat that answers NULL means the claim is
  lost (the lease lapsed, the job was cancelled or claimed again): the job's `stop` event is
  set, and a handler that checks it stops.
- Runs each job's handler and jobs.complete in ONE transaction: when complete answers false
  (the claim was lost), the transaction rolls back, so the job's writes land exactly once.
- A handler that raises is reported with jobs.fail and the error text: retried with the job
  type's backoff, or dead-lettered when out of attempts.
- A job whose name has no handler (typically: producers were deployed before workers) is
  snoozed for a minute with jobs.snooze, which uses no attempt, instead of failed.
- Sleeps on LISTEN pg_jobs while idle, woken when its queue gets work, and polls every
  --poll seconds anyway (for delayed jobs coming due).
- On SIGTERM or SIGINT it stops claiming, finishes the jobs it holds, and exits 0.
"""

import argparse
import os
import signal
import socket
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import psycopg
from psycopg.types.json import Jsonb

# ------------------------------------------------------------------ handlers
# Each takes (conn, job) and returns the job's result (a JSON value). `conn` is in the
# transaction that will complete the job: write through it to commit with the completion.

HANDLERS = {}


def handler(name):
    def register(fn):
        HANDLERS[name] = fn
        return fn

    return register


@handler("record")
def record(conn, job):
    """Writes one row to example_log, in the completing transaction."""
    conn.execute("insert into example_log (job_id, worker, payload) values (%s, %s, %s)",
                 (job["id"], "python", Jsonb(job["payload"])))
    return {"recorded": True}


@handler("sleep")
def sleep(conn, job):
    """Sleeps, and stops early when the claim is lost (job["stop"]); then writes its row."""
    if job["stop"].wait(float(job["payload"].get("seconds", 1))):
        raise InterruptedError("the claim was lost: stopped")
    conn.execute("insert into example_log (job_id, worker, payload) values (%s, %s, %s)",
                 (job["id"], "python", Jsonb(job["payload"])))
    return {"slept": job["payload"].get("seconds", 1)}


@handler("fail")
def fail(conn, job):
    raise RuntimeError(job["payload"].get("message", "this job always fails"))


@handler("resize_image")
def resize_image(conn, job):
    w, h = job["payload"]["width"], job["payload"]["height"]
    return {"thumbnail": f"{w // 4}x{h // 4}"}


@handler("send_email")
def send_email(conn, job):
    if job["attempt"] == 1:
        raise RuntimeError("smtp timeout (the first attempt always fails in this demo)")
    return {"sent_to": job["payload"]["to"]}


@handler("charge_card")
def charge_card(conn, job):
    raise ValueError(f"card {job['payload']['card']} declined")


# ------------------------------------------------------------------ the worker


class Heartbeats(threading.Thread):
    """Extends the lease of every held job every interval seconds, on its own connection,
    made again when it fails. A NULL answer (the claim is lost) sets the job's stop event."""

    def __init__(self, dsn, interval, log):
        super().__init__(daemon=True)
        self.dsn, self.interval, self.log = dsn, interval, log
        self.held = {}  # id -> job
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def hold(self, job):
        with self.lock:
            self.held[job["id"]] = job

    def release(self, job):
        with self.lock:
            self.held.pop(job["id"], None)

    def run(self):
        conn = None
        while not self.stopped.wait(self.interval):
            with self.lock:
                held = list(self.held.values())
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, application_name="pg_jobs heartbeat")
                for job in held:
                    if conn.execute("select jobs.heartbeat(%s, %s)", (job["id"], job["claim"])).fetchone()[0] is None:
                        self.log(f"job {str(job['id'])[-8:]} {job['name']}: the claim is lost; stopping its handler")
                        job["stop"].set()
                        self.release(job)
            except psycopg.Error as exc:  # made again at the next beat
                self.log(f"heartbeat connection failed ({exc.__class__.__name__}); reconnecting")
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()


def run_job(conn, job, log):
    fn = HANDLERS.get(job["name"])
    where = f"job {str(job['id'])[-8:]} {job['name']:<13} attempt {job['attempt']}/{job['max_attempts']}"
    if fn is None:  # not a failure: no attempt used; a worker that knows the name will run it
        conn.execute("select jobs.snooze(%s, %s, now() + interval '1 minute')", (job["id"], job["claim"]))
        log(f"{where}: no handler for this name here; snoozed for a minute (no attempt used)")
        return
    try:
        with conn.transaction():
            result = fn(conn, job)
            landed = conn.execute("select jobs.complete(%s, %s, %s)",
                                  (job["id"], job["claim"], Jsonb(result))).fetchone()[0]
            if not landed:
                raise psycopg.Rollback()  # the claim was lost: undo this job's writes
        log(f"{where}: completed")
    except psycopg.Rollback:
        log(f"{where}: lost its claim; its writes were rolled back")
    except Exception as exc:  # the handler failed: retry or dead-letter it
        error = f"{type(exc).__name__}: {exc}"
        outcome = conn.execute("select jobs.fail(%s, %s, %s)", (job["id"], job["claim"], error)).fetchone()[0]
        then = {"retried": "retried after its backoff", "dead": "dead-lettered: out of attempts",
                "failed": "failed: out of attempts", None: "the claim was already lost"}[outcome]
        log(f"{where}: failed ({error}); {then}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("PG_JOBS_DSN", ""))
    ap.add_argument("--queue", action="append", dest="queues")
    ap.add_argument("--batch", type=int, default=10, help="jobs run at once")
    ap.add_argument("--lease", type=float, default=30, help="seconds")
    ap.add_argument("--poll", type=float, default=5, help="seconds between claims when idle")
    ap.add_argument("--until-empty", action="store_true", help="exit when the queues have no live job")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    queues = args.queues or ["default"]
    worker_id = f"{socket.gethostname()}:{os.getpid()}"
    log = (lambda *a: None) if args.quiet else (lambda *a: print(" ", *a, flush=True))

    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())

    local = threading.local()  # each job thread's own connection

    def work(job):
        if getattr(local, "conn", None) is None or local.conn.closed:
            local.conn = psycopg.connect(args.dsn, autocommit=True)
        try:
            run_job(local.conn, job, log)
        finally:
            beats.release(job)

    beats = Heartbeats(args.dsn, args.lease / 3, log)
    beats.start()
    running = set()
    with psycopg.connect(args.dsn, autocommit=True) as conn, \
            psycopg.connect(args.dsn, autocommit=True) as listener, \
            ThreadPoolExecutor(max_workers=args.batch) as pool:
        listener.execute("listen pg_jobs")
        while not stopping.is_set():
            running = {f for f in running if not f.done()}
            free = args.batch - len(running)
            jobs = []
            if free > 0:
                cur = conn.execute(
                    "select id, claim, name, payload, attempt, max_attempts"
                    " from jobs.claim(%s, %s, %s, make_interval(secs => %s))",
                    (worker_id, queues, free, args.lease))
                cols = [c.name for c in cur.description]
                jobs = [dict(zip(cols, row, strict=True), stop=threading.Event()) for row in cur.fetchall()]
            for job in jobs:
                beats.hold(job)
                running.add(pool.submit(work, job))
            if jobs and len(running) < args.batch:
                continue  # room for more: claim again at once
            if running:  # full, or the queue is empty for now: wait for a job to end
                wait(running, timeout=0.2 if jobs else args.poll, return_when=FIRST_COMPLETED)
                if jobs or len(running) >= args.batch:
                    continue
            if args.until_empty and not running and conn.execute(
                    "select count(*) from jobs.jobs where queue = any(%s)"
                    " and state in ('ready', 'delayed', 'running', 'suspended')", (queues,)).fetchone()[0] == 0:
                break
            # Idle: sleep until a wake-up on our queues, a signal, a job ending, or the poll.
            deadline = time.monotonic() + args.poll
            while not stopping.is_set() and time.monotonic() < deadline:
                if any(n.payload in queues for n in listener.notifies(timeout=0.2, stop_after=1)):
                    break
                if any(f.done() for f in running):
                    break
        # A signal: stop claiming, and finish the jobs held (the pool waits for them).
    beats.stopped.set()


if __name__ == "__main__":
    main()
