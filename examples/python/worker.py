"""A pg_jobs worker in plain Python (psycopg 3): claim a batch, run each job, settle it.

Each job's own writes and jobs.complete share one transaction: when complete answers false
(the claim was lost: lease lapsed, re-claimed, cancelled) the transaction rolls back, so a
job's effects land exactly once. A handler that raises is reported with jobs.fail, which
retries it with the job type's backoff or dead-letters it when it is out of attempts.

    python worker.py --dsn "host=127.0.0.1 port=5432 dbname=app" --queue default --until-empty
"""

import argparse
import os
import socket
import time

import psycopg
from psycopg.types.json import Jsonb

HANDLERS = {}


def handler(name):
    def register(fn):
        HANDLERS[name] = fn
        return fn

    return register


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


def work_batch(conn, worker_id, queues, batch, lease):
    """Claims and runs one batch; answers how many jobs it claimed."""
    with conn.transaction():
        cur = conn.execute(
            "select id, claim, name, payload, attempt, max_attempts"
            " from jobs.claim(%s, %s, %s, %s::interval)",
            (worker_id, queues, batch, lease),
        )
        cols = [c.name for c in cur.description]
        jobs = [dict(zip(cols, row)) for row in cur.fetchall()]
    for job in jobs:
        fn = HANDLERS.get(job["name"])
        try:
            with conn.transaction():
                if fn is None:
                    raise LookupError(f"no handler for job {job['name']!r}")
                result = fn(conn, job)
                landed = conn.execute(
                    "select jobs.complete(%s, %s, %s)", (job["id"], job["claim"], Jsonb(result))
                ).fetchone()[0]
                if not landed:
                    raise psycopg.Rollback()  # lost the claim: undo this job's writes
            outcome = "completed" if landed else "lost its claim"
        except psycopg.Rollback:
            outcome = "lost its claim"
        except Exception as exc:  # the handler failed: record it, retry or dead-letter
            with conn.transaction():
                outcome = conn.execute(
                    "select jobs.fail(%s, %s, %s)", (job["id"], job["claim"], f"{type(exc).__name__}: {exc}")
                ).fetchone()[0]
        print(f"  {job['name']:<13} attempt {job['attempt']}/{job['max_attempts']}: {outcome}")
    return len(jobs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("PG_JOBS_DSN", ""))
    ap.add_argument("--queue", action="append", dest="queues")
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--lease", default="30 seconds")
    ap.add_argument("--poll", type=float, default=0.2, help="seconds to wait when idle")
    ap.add_argument("--until-empty", action="store_true", help="exit when no live jobs are left")
    args = ap.parse_args()
    queues = args.queues or ["default"]
    worker_id = f"{socket.gethostname()}:{os.getpid()}"
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        while True:
            if work_batch(conn, worker_id, queues, args.batch, args.lease):
                continue
            if args.until_empty:
                live = conn.execute(
                    "select count(*) from jobs.jobs where queue = any(%s)"
                    " and state in ('ready', 'delayed', 'running', 'suspended')",
                    (queues,),
                ).fetchone()[0]
                if live == 0:
                    return
            time.sleep(args.poll)


if __name__ == "__main__":
    main()
