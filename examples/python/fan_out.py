"""Fan-out and fan-in with child jobs: a parent spawns one child per number, and sums the
squares its children answer.

    python fan_out.py --dsn "host=127.0.0.1 dbname=app" enqueue 100 [--pause 0.01]
    python fan_out.py --dsn "host=127.0.0.1 dbname=app" work [--until-done] [--lease 2]

- The parent (`sum_squares`) spawns child `i` under the child key `n-<i>` (jobs.spawn), each
  spawn committed on its own and fenced by the parent's claim, heartbeating as it goes. A
  worker killed between two spawns loses the parent's lease; the parent is claimed again and
  spawns every key again, and each spawn already made answers the same child (`deduped`):
  no child is spawned twice.
- Then it waits for its children (jobs.await_children): 'waiting' suspends it, using no
  attempt, until its last child ends, which makes it claimable again; 'done' hands it every
  child's result, and it completes with their sum.
- A child (`square`) completes with the square of its number.
- `--until-done` exits once no parent is live.
"""

import argparse
import os
import socket
import time

import psycopg
from psycopg.types.json import Jsonb

QUEUE = "fan_out"


def parent(conn, job, lease):
    """Spawns the children still missing, then sums their results once none is live."""
    n, pause = job["payload"]["n"], job["payload"].get("pause", 0)
    beat = time.monotonic()
    for i in range(1, n + 1):
        spec = {"name": "square", "queue": QUEUE, "child_key": f"n-{i}", "payload": {"i": i}}
        conn.execute("select jobs.spawn(%s, %s, %s)", (job["id"], job["claim"], Jsonb(spec)))
        time.sleep(pause)
        if time.monotonic() - beat > lease / 3:  # keep the parent's lease while spawning
            conn.execute("select jobs.heartbeat(%s, %s)", (job["id"], job["claim"]))
            beat = time.monotonic()
    status, children = conn.execute("select status, children from jobs.await_children(%s, %s)",
                                    (job["id"], job["claim"])).fetchone()
    if status == "waiting":  # suspended: claimed again when the last child ends
        return
    total = sum(c["result"]["square"] for c in children if c["state"] == "completed")
    conn.execute("select jobs.complete(%s, %s, %s)", (job["id"], job["claim"], Jsonb({"sum": total})))
    print(f"sum of the squares of 1..{n}: {total} ({len(children)} children)", flush=True)


def child(conn, job):
    i = job["payload"]["i"]
    conn.execute("select jobs.complete(%s, %s, %s)", (job["id"], job["claim"], Jsonb({"square": i * i})))


def work(conn, until_done, lease):
    worker = f"{socket.gethostname()}:{os.getpid()}"
    while True:
        row = conn.execute(
            "select id, claim, name, payload from jobs.claim(%s, %s, 1, make_interval(secs => %s),"
            " wait => '1 second')", (worker, [QUEUE], lease)).fetchall()
        for job_id, claim, name, payload in row:
            job = {"id": job_id, "claim": claim, "payload": payload}
            try:
                if name == "sum_squares":
                    parent(conn, job, lease)
                else:
                    child(conn, job)
            except psycopg.Error as exc:
                if exc.sqlstate != "PJ001":  # lease_lost: the job runs again under a new claim
                    raise
        if until_done and not row and conn.execute(
                "select count(*) from jobs.jobs where name = 'sum_squares'"
                " and state in ('ready', 'delayed', 'running', 'suspended')").fetchone()[0] == 0:
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
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        if args.command == "enqueue":
            job_id = conn.execute("select id from jobs.enqueue('sum_squares', %s, queue => %s)",
                                  (Jsonb({"n": args.n, "pause": args.pause}), QUEUE)).fetchone()[0]
            print(f"enqueued the parent {job_id}", flush=True)
        else:
            work(conn, args.until_done, args.lease)


if __name__ == "__main__":
    main()
