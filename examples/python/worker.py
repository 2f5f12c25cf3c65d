"""A pg_jobs worker in Python: the pg-jobs package (clients/python) with the demo handlers.

    python worker.py --dsn "host=127.0.0.1 dbname=app" [--queue default] [--batch 10]
                     [--lease 30] [--poll 5] [--until-empty] [--quiet]

The package does the rest: a free slot is refilled at once (a claim waiting in the server);
heartbeats every lease/3 on a connection of its own; a lost claim, a cancel or the deadline
sets ctx.cancelled; each handler's writes through ctx.conn commit with its completion;
unknown names are snoozed; SIGTERM finishes what is held and exits 0. --until-empty works
until the queues have no live job left, retries included (pg_jobs.testing.drain; it reads
jobs.jobs, so it needs an admin role).
"""

import argparse
import logging
import os
import sys

from psycopg.types.json import Jsonb

import pg_jobs
from pg_jobs.testing import drain


def write_row(ctx, payload):
    ctx.conn.execute("insert into example_log (job_id, worker, payload) values (%s, %s, %s)",
                     (ctx.job.id, "python", Jsonb(payload)))


@pg_jobs.job("record")
def record(payload, ctx):
    """Writes one row to example_log, in the completing transaction."""
    write_row(ctx, payload)
    return {"recorded": True}


@pg_jobs.job("sleep")
def sleep(payload, ctx):
    """Sleeps, stopping early when its claim is lost, it is cancelled or its deadline passes."""
    if ctx.cancelled.wait(float(payload.get("seconds", 1))):
        raise InterruptedError(f"stopped: {ctx.cancel_reason}")
    write_row(ctx, payload)
    return {"slept": payload.get("seconds", 1)}


@pg_jobs.job("fail")
def fail(payload, ctx):
    raise RuntimeError(payload.get("message", "this job always fails"))


@pg_jobs.job("resize_image")
def resize_image(payload, ctx):
    return {"thumbnail": f"{payload['width'] // 4}x{payload['height'] // 4}"}


@pg_jobs.job("send_email")
def send_email(payload, ctx):
    if ctx.job.attempt == 1:
        raise RuntimeError("smtp timeout (the first attempt always fails in this demo)")
    return {"sent_to": payload["to"]}


@pg_jobs.job("charge_card")
def charge_card(payload, ctx):
    raise ValueError(f"card {payload['card']} declined")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("PG_JOBS_DSN", ""))
    ap.add_argument("--queue", action="append", dest="queues")
    ap.add_argument("--batch", type=int, default=10, help="jobs run at once")
    ap.add_argument("--lease", type=float, default=30, help="seconds")
    ap.add_argument("--poll", type=float, default=5, help="seconds a claim waits in the server for work")
    ap.add_argument("--until-empty", action="store_true", help="exit when the queues have nothing left to do")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="  %(message)s", stream=sys.stdout)
    worker = pg_jobs.Worker(args.dsn, jobs=pg_jobs.jobs_in(globals().values()), queues=args.queues or ["default"],
                            concurrency=args.batch, lease=args.lease, poll=args.poll, shutdown_grace=60)
    if args.until_empty:
        drain(worker, timeout=300, delayed=True)  # retries too
    else:
        worker.run()


if __name__ == "__main__":
    main()
