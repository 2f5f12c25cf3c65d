"""Fan-out and fan-in with child jobs, on the pg-jobs package: a parent spawns one child per
number, and sums the squares its children answer.

    python fan_out.py --dsn "host=127.0.0.1 dbname=app" enqueue 100 [--pause 0.01]
    python fan_out.py --dsn "host=127.0.0.1 dbname=app" work [--until-done] [--lease 2]

- The parent (`sum_squares`) spawns child `i` under the child key `n-<i>` (ctx.spawn: each
  spawn committed on its own, fenced by the parent's claim; the worker heartbeats it). A
  worker killed between two spawns loses the parent's lease; the parent is claimed again and
  spawns every key again, and each spawn already made answers the same child: no child is
  spawned twice.
- Then it waits for its children (ctx.await_children): the job is parked, using no attempt,
  until its last child ends; then it is claimed again, gets every child's result, and
  completes with their sum.
- A child (`square`) completes with the square of its number.
- `--until-done` exits once no parent is live.
"""

import argparse
import asyncio
import logging
import os

import psycopg

import pg_jobs

QUEUE = "fan_out"


@pg_jobs.job("sum_squares", queue=QUEUE)
def sum_squares(payload, ctx):
    n = payload["n"]
    for i in range(1, n + 1):
        ctx.spawn(f"n-{i}", "square", {"i": i}, queue=QUEUE)
        if ctx.cancelled.wait(payload.get("pause", 0)):
            raise InterruptedError(f"stopped: {ctx.cancel_reason}")
    children = ctx.await_children()  # parks the job until none is live
    total = sum(c.result["square"] for c in children if c.state == "completed")
    print(f"sum of the squares of 1..{n}: {total} ({len(children)} children)", flush=True)
    return {"sum": total}


@pg_jobs.job("square", queue=QUEUE)
def square(payload, ctx):
    return {"square": payload["i"] ** 2}


async def work(dsn, until_done, lease):
    async with pg_jobs.Worker(dsn, jobs=[sum_squares, square], queues=[QUEUE], concurrency=4, lease=lease, poll=1):
        while True:
            await asyncio.sleep(0.2)
            if until_done:
                async with await psycopg.AsyncConnection.connect(dsn) as conn:
                    cur = await conn.execute("select count(*) from jobs.jobs where name = 'sum_squares'"
                                             " and state in ('ready', 'delayed', 'running', 'suspended')")
                    if (await cur.fetchone())[0] == 0:
                        return


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsn", default=os.environ.get("PG_JOBS_DSN", ""))
    sub = ap.add_subparsers(dest="command", required=True)
    enqueue = sub.add_parser("enqueue")
    enqueue.add_argument("n", type=int)
    enqueue.add_argument("--pause", type=float, default=0, help="seconds between two spawns")
    run = sub.add_parser("work")
    run.add_argument("--until-done", action="store_true")
    run.add_argument("--lease", type=float, default=2, help="seconds")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="  %(message)s")
    if args.command == "enqueue":
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            made = pg_jobs.enqueue(conn, sum_squares, {"n": args.n, "pause": args.pause})
        print(f"enqueued the parent {made.id}", flush=True)
    else:
        asyncio.run(work(args.dsn, args.until_done, args.lease))


if __name__ == "__main__":
    main()
