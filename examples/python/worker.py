"""A pg_jobs worker in Python with psycopg 3.

    python worker.py --dsn "host=127.0.0.1 dbname=app" [--queue default] [--batch 10]
                     [--lease 30] [--poll 5] [--until-empty]

- Runs up to --batch jobs at once, each on a thread and a connection of its own, and claims
  more (jobs.claim) as soon as a slot frees up: one slow job never holds back the others.
- Heartbeats every held job from a thread of its own, on its own connection, every lease/3.
  A connection that fails is made again. A heartbeat that answers NULL means the claim is
  lost (the lease lapsed, the job was cancelled or claimed again): the job's `stop` event is
  set, and a handler that checks it stops; so it is at the attempt's deadline (a timeout).
  The same connection listens on pg_jobs_cancel: a held job cancelled while it runs is
  heartbeaten at once, so its handler stops within moments (not at the next beat; through a
  transaction-pooling PgBouncer no notification comes, and the next beat tells).
- Runs each job's handler and its completion in ONE transaction, and claims the job's
  successor for the same thread in that transaction too (jobs.complete_and_claim: one commit
  per job). When the claim was lost (complete_and_claim raises lease_lost), the transaction
  rolls back, so the job's writes land exactly once.
- A handler that raises is reported with jobs.fail and the error text: retried with the job
  type's backoff, or dead-lettered when out of attempts.
- A job whose name has no handler (typically: producers were deployed before workers) is
  snoozed for a minute with jobs.snooze, which uses no attempt, instead of failed.
- Waits for work in the server: jobs.claim(..., wait => --poll seconds) sleeps until a commit
  makes work in its queues or a job there comes due, so it needs no LISTEN connection and
  works through a transaction-pooling PgBouncer.
- On SIGTERM or SIGINT it cancels a claim that waits, stops claiming, finishes the jobs it
  holds, and exits 0.
"""

import argparse
import os
import signal
import socket
import threading
import time
import uuid
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
        raise InterruptedError("stopped: the claim was lost, or its timeout passed")
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
    made again when it fails. A NULL answer (the claim is lost) sets the job's stop event.
    Between beats it listens on pg_jobs_cancel: a held job named there (cancelled while it
    runs) is beaten at once, so its handler stops within moments. A notification is a hint
    only (any role that can connect may NOTIFY); the heartbeat's answer decides."""

    def __init__(self, dsn, interval, log):
        super().__init__(daemon=True)
        self.dsn, self.interval, self.log = dsn, interval, log
        self.held = {}  # id -> job
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def hold(self, job):
        with self.lock:
            self.held[job["id"]] = job
        if job.get("time_left") is not None:  # a timeout: the handler stops at the deadline
            job["deadline"] = threading.Timer(max(0.0, job["time_left"]), self.timed_out, (job,))
            job["deadline"].daemon = True
            job["deadline"].start()

    def timed_out(self, job):
        self.log(f"job {str(job['id'])[-8:]} {job['name']}: its timeout passed; stopping its handler")
        job["stop"].set()

    def release(self, job):
        with self.lock:
            self.held.pop(job["id"], None)
        if job.get("deadline") is not None:
            job["deadline"].cancel()

    def beat(self, conn, jobs):
        for job in jobs:
            if conn.execute("select jobs.heartbeat(%s, %s)", (job["id"], job["claim"])).fetchone()[0] is None:
                self.log(f"job {str(job['id'])[-8:]} {job['name']}: the claim is lost; stopping its handler")
                job["stop"].set()
                self.release(job)

    def named(self, payload):
        """The held jobs a pg_jobs_cancel payload names: one id, or '*' (every one)."""
        with self.lock:
            if payload == "*":
                return list(self.held.values())
            try:
                job = self.held.get(uuid.UUID(payload))
            except ValueError:
                return []
            return [job] if job else []

    def run(self):
        conn = None
        retry = False  # the last beat failed and is tried again at once, one time
        due = time.monotonic() + self.interval  # the next beat of every held job
        while not self.stopped.is_set():
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, application_name="pg_jobs heartbeat")
                    conn.execute("listen pg_jobs_cancel")
                if retry or time.monotonic() >= due:
                    with self.lock:
                        held = list(self.held.values())
                    self.beat(conn, held)
                    due = time.monotonic() + self.interval
                retry = False
                # Short waits, so that a stop is seen soon.
                wait_s = min(0.2, max(0.0, due - time.monotonic()))
                # (taken first: the connection is busy while notifies() runs)
                for note in list(conn.notifies(timeout=wait_s, stop_after=1)):
                    self.beat(conn, self.named(note.payload))
            except psycopg.Error as exc:  # made again, and the beat tried again, at once
                self.log(f"heartbeat connection failed ({exc.__class__.__name__}); reconnecting")
                if conn is not None:
                    conn.close()
                conn = None
                retry = not retry
        if conn is not None:
            conn.close()


# time_left: seconds to the attempt's deadline (its job type's timeout), NULL for none.
CLAIMED = ("id, claim, name, payload, attempt, max_attempts,"
           " extract(epoch from deadline - clock_timestamp())::float8 as time_left")


class LostClaim(Exception):
    """The job's claim is no longer held: its transaction rolls back."""


def run_job(conn, job, log, chain=None):
    """Runs one job. With `chain` (its worker id, queues and lease), completes it and claims the
    next in the same call and transaction (jobs.complete_and_claim), and answers that job, or
    None."""
    fn = HANDLERS.get(job["name"])
    where = f"job {str(job['id'])[-8:]} {job['name']:<13} attempt {job['attempt']}/{job['max_attempts']}"
    if fn is None:  # not a failure: no attempt used; a worker that knows the name will run it
        conn.execute("select jobs.snooze(%s, %s, now() + interval '1 minute')", (job["id"], job["claim"]))
        log(f"{where}: no handler for this name here; snoozed for a minute (no attempt used)")
        return None
    nxt = None
    try:
        with conn.transaction():
            result = fn(conn, job)
            if chain is not None:  # raises lease_lost (PJ001) when the claim was lost
                cur = conn.execute(
                    f"select {CLAIMED} from jobs.complete_and_claim(%s, %s, %s, %s, 1,"
                    " make_interval(secs => %s), %s)",
                    ([job["id"]], [job["claim"]], chain["worker"], chain["queues"], chain["lease"],
                     [Jsonb(result)]))
                nxt = next((new_job(cur, row) for row in cur.fetchall()), None)
            elif not conn.execute("select jobs.complete(%s, %s, %s)",
                                  (job["id"], job["claim"], Jsonb(result))).fetchone()[0]:
                raise LostClaim()
        log(f"{where}: completed")
        return nxt
    except Exception as exc:
        if isinstance(exc, LostClaim) or getattr(exc, "sqlstate", None) == "PJ001":
            log(f"{where}: lost its claim; its writes were rolled back")
            return None
        error = f"{type(exc).__name__}: {exc}"  # the handler failed: retry or dead-letter it
        outcome = conn.execute("select jobs.fail(%s, %s, %s)", (job["id"], job["claim"], error)).fetchone()[0]
        then = {"retried": "retried after its backoff", "dead": "dead-lettered: out of attempts",
                "failed": "failed: out of attempts", None: "the claim was already lost"}[outcome]
        log(f"{where}: failed ({error}); {then}")
        return None


def new_job(cur, row):
    return dict(zip([c.name for c in cur.description], row, strict=True), stop=threading.Event())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("PG_JOBS_DSN", ""))
    ap.add_argument("--queue", action="append", dest="queues")
    ap.add_argument("--batch", type=int, default=10, help="jobs run at once")
    ap.add_argument("--lease", type=float, default=30, help="seconds")
    ap.add_argument("--poll", type=float, default=5, help="seconds a claim waits in the server for work")
    ap.add_argument("--until-empty", action="store_true", help="exit when the queues have no live job")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    queues = args.queues or ["default"]
    worker_id = f"{socket.gethostname()}:{os.getpid()}"
    log = (lambda *a: None) if args.quiet else (lambda *a: print(" ", *a, flush=True))

    stopping = threading.Event()
    local = threading.local()  # each job thread's own connection

    chain = {"worker": worker_id, "queues": queues, "lease": args.lease}

    def work(job):
        """Runs a job, and the next one its completion claimed, until none comes or we stop."""
        if getattr(local, "conn", None) is None or local.conn.closed:
            local.conn = psycopg.connect(args.dsn, autocommit=True)
        while job is not None:
            try:
                nxt = run_job(local.conn, job, log, None if stopping.is_set() else chain)
            finally:
                beats.release(job)
            if nxt is not None:
                beats.hold(nxt)
            job = nxt

    beats = Heartbeats(args.dsn, args.lease / 3, log)
    beats.start()
    running = set()
    with psycopg.connect(args.dsn, autocommit=True) as conn, \
            ThreadPoolExecutor(max_workers=args.batch) as pool:

        def on_signal(*_):
            stopping.set()
            conn.cancel()  # ends a claim waiting for work; one that is claiming finishes

        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, on_signal)
        while not stopping.is_set():
            running = {f for f in running if not f.done()}
            free = args.batch - len(running)
            if free == 0:  # full: wait for a job to end
                wait(running, return_when=FIRST_COMPLETED)
                continue
            # The blocking claim: when nothing is claimable it sleeps in the server until a
            # commit makes work in our queues or a job there comes due, up to --poll seconds.
            try:
                cur = conn.execute(
                    f"select {CLAIMED}"
                    " from jobs.claim(%s, %s, %s, make_interval(secs => %s), make_interval(secs => %s))",
                    (worker_id, queues, free, args.lease, args.poll))
                jobs = [new_job(cur, row) for row in cur.fetchall()]
                for job in jobs:
                    beats.hold(job)
                    running.add(pool.submit(work, job))
                if args.until_empty and not jobs and not running and conn.execute(
                        "select count(*) from jobs.jobs where queue = any(%s)"
                        " and state in ('ready', 'delayed', 'running', 'suspended')", (queues,)).fetchone()[0] == 0:
                    break
            except psycopg.errors.QueryCanceled:  # by our signal: the claim took nothing
                if stopping.is_set():
                    break
                raise
        # A signal: stop claiming, and finish the jobs held (the pool waits for them).
    beats.stopped.set()


if __name__ == "__main__":
    main()
