"""A pg_jobs worker in Python with psycopg 3.

    python worker.py --dsn "host=127.0.0.1 dbname=app" [--queue default] [--batch 10]
                     [--lease 30] [--poll 5] [--until-empty]

- Claims jobs in batches (jobs.claim).
- Heartbeats every held job from a thread of its own, on its own connection, every lease/3.
- Runs each job's handler and jobs.complete in ONE transaction: when complete answers false
  (the claim was lost), the transaction rolls back, so the job's writes land exactly once.
- A handler that raises is reported with jobs.fail and the error text: retried with the job
  type's backoff, or dead-lettered when out of attempts.
- Sleeps on LISTEN pg_jobs between claims, woken when its queue gets work, and polls every
  --poll seconds anyway (for delayed jobs coming due).
- On SIGTERM or SIGINT it stops claiming, finishes the jobs it holds, and exits 0.
"""

import argparse
import os
import signal
import socket
import threading
import time

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
    time.sleep(float(job["payload"].get("seconds", 1)))
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
    """Extends the lease of every held job every interval seconds, on its own connection."""

    def __init__(self, dsn, interval):
        super().__init__(daemon=True)
        self.dsn, self.interval = dsn, interval
        self.held = {}  # id -> claim
        self.lock = threading.Lock()
        self.stopped = threading.Event()

    def hold(self, job_id, claim):
        with self.lock:
            self.held[job_id] = claim

    def release(self, job_id):
        with self.lock:
            self.held.pop(job_id, None)

    def run(self):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.stopped.wait(self.interval):
                with self.lock:
                    held = list(self.held.items())
                for job_id, claim in held:
                    conn.execute("select jobs.heartbeat(%s, %s)", (job_id, claim))


def run_job(conn, job, log):
    fn = HANDLERS.get(job["name"])
    try:
        with conn.transaction():
            if fn is None:
                raise LookupError(f"no handler for job {job['name']!r}")
            result = fn(conn, job)
            landed = conn.execute("select jobs.complete(%s, %s, %s)",
                                  (job["id"], job["claim"], Jsonb(result))).fetchone()[0]
            if not landed:
                raise psycopg.Rollback()  # the claim was lost: undo this job's writes
        outcome = "completed" if landed else "lost its claim"
    except psycopg.Rollback:
        outcome = "lost its claim"
    except Exception as exc:  # the handler failed: retry or dead-letter it
        outcome = conn.execute("select jobs.fail(%s, %s, %s)",
                               (job["id"], job["claim"], f"{type(exc).__name__}: {exc}")).fetchone()[0]
    log(f"{job['name']:<13} attempt {job['attempt']}/{job['max_attempts']}: {outcome}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("PG_JOBS_DSN", ""))
    ap.add_argument("--queue", action="append", dest="queues")
    ap.add_argument("--batch", type=int, default=10)
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

    beats = Heartbeats(args.dsn, args.lease / 3)
    beats.start()
    with psycopg.connect(args.dsn, autocommit=True) as conn, \
            psycopg.connect(args.dsn, autocommit=True) as listener:
        listener.execute("listen pg_jobs")
        while not stopping.is_set():
            cur = conn.execute(
                "select id, claim, name, payload, attempt, max_attempts"
                " from jobs.claim(%s, %s, %s, make_interval(secs => %s))",
                (worker_id, queues, args.batch, args.lease))
            cols = [c.name for c in cur.description]
            jobs = [dict(zip(cols, row)) for row in cur.fetchall()]
            for job in jobs:  # held: heartbeat all of them while the batch runs
                beats.hold(job["id"], job["claim"])
            for job in jobs:  # a SIGTERM now still lets the batch finish
                run_job(conn, job, log)
                beats.release(job["id"])
            if jobs:
                continue
            if args.until_empty and conn.execute(
                    "select count(*) from jobs.jobs where queue = any(%s)"
                    " and state in ('ready', 'delayed', 'running', 'suspended')", (queues,)).fetchone()[0] == 0:
                break
            # Idle: sleep until a wake-up on our queues, a signal, or the poll interval.
            deadline = time.monotonic() + args.poll
            while not stopping.is_set() and time.monotonic() < deadline:
                if any(n.payload in queues for n in listener.notifies(timeout=0.2, stop_after=1)):
                    break
    beats.stopped.set()


if __name__ == "__main__":
    main()
