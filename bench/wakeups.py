"""Waking workers: what it costs the application's commit, and how soon a worker hears of work.

Run by `bash bench/run.sh --wakeups` (a cluster of its own, pg_jobs preloaded, every database
swept): in `bench` the sweeper relays notifications; in `bench_notify` jobs._wake sends them
from the enqueuing transaction (pg_notify, as before the relay); in `bench_silent` it sends
none.

1. Application transactions: 8 pgbench clients (-M prepared), each transaction an INSERT into
   an application table plus jobs.enqueue, at a fixed rate, synchronous_commit = on; two
   workers keep the queue empty (so nearly every enqueue notifies): notifications relayed by
   the sweeper, sent by the transaction, and none at all (the same workers, the same load, no
   NOTIFY), and for reference a backlog with no workers. Average latency and the rate held.
2. Wake latency, from the producer's commit to the worker's claim returning the job: jobs
   enqueued one at a time at a fixed rate; a worker in a blocking claim, one on LISTEN, and one
   polling every 100 ms, one after the other on the same database. p50 and p99.
"""

import argparse
import json
import multiprocessing
import os
import re
import subprocess
import sys
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_BIN = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")
APP_SCRIPT = os.path.join(ROOT, "bench/app_enqueue.sql")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def sql(dsn, query, args=None):
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else None


def prepare(dsn):
    sql(dsn, "create extension if not exists pg_jobs")
    sql(dsn, "create table if not exists app_orders (id bigserial primary key, n int, at timestamptz default now())")


def rewire(dsn, notify):
    """jobs._wake of this database notifying by `notify` instead of jobs._notify: NULL, the
    baseline (the same workers keep the queue empty, and no one notifies), or pg_notify, sent
    by the enqueuing transaction itself (as every transaction did before the relay). Every
    database is swept, so each case has a sweeper beside it."""
    body = sql(dsn, "select prosrc from pg_proc where oid = 'jobs._wake(text[], uuid[])'::regprocedure")[0][0]
    # As without the relay: a notification only for a queue that had no ready job.
    changed = body.replace("if jobs._relays() then", "if false then").replace("perform jobs._notify(v_queue);", notify)
    assert changed.count(notify) == 2 and "if false then" in changed, \
        "jobs._wake changed: update bench/wakeups.py"
    sql(dsn, "create or replace function jobs._wake(p_queues text[], p_new uuid[]) returns void "
             "language plpgsql volatile set search_path = pg_catalog, pg_temp as $body$" + changed + "$body$")


def reset(dsn, queue):
    sql(dsn, "delete from jobs_data.jobs where queue = %s", (queue,))
    sql(dsn, "vacuum jobs_data.jobs")


# ---------------------------------------------------------------- 1. application transactions

def keep_empty(dsn, queue, stop):
    """A worker that keeps the queue empty, as the example workers do: a blocking claim of up
    to 100, then each batch completed and the next claimed in one call. Its commits do not wait
    for the WAL flush (jobs with no effects), so the disk's flushes go to the application's
    transactions, the subject here."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set synchronous_commit = off")
        while not stop.is_set():
            rows = conn.execute("select id, claim from jobs.claim('keeper', array[%s], 100, null, '200 ms')",
                                (queue,)).fetchall()
            while rows and not stop.is_set():
                rows = conn.execute("select id, claim from jobs.complete_and_claim(%s::uuid[], %s::bigint[],"
                                    " 'keeper', array[%s], 100)",
                                    ([r[0] for r in rows], [r[1] for r in rows], queue)).fetchall()


def pgbench(dsn, rate, seconds):
    out = subprocess.run([os.path.join(PG_BIN, "pgbench"), "-n", "-M", "prepared", "-c", "8", "-j", "2",
                          "-R", str(rate), "-T", str(seconds), "-f", APP_SCRIPT, dsn],
                         capture_output=True, text=True, check=True).stdout
    latency = float(re.search(r"latency average = ([\d.]+) ms", out).group(1))
    tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
    return {"latency_ms": latency, "tps": tps}


def app_run(dsn, mode, rate, seconds):
    reset(dsn, "app")
    stop = multiprocessing.Event()
    workers = []
    if mode == "backlog":
        for _ in range(2):  # more than the run enqueues: the queue never empties
            sql(dsn, """select count(*) from jobs.enqueue_batch(
                          (select jsonb_agg(jsonb_build_object('name', 'ship', 'queue', 'app'))
                           from generate_series(1, 10000)))""")
    else:
        workers = [multiprocessing.Process(target=keep_empty, args=(dsn, "app", stop)) for _ in range(2)]
        for w in workers:
            w.start()
        time.sleep(1)
    try:
        return pgbench(dsn, rate, seconds)
    finally:
        stop.set()
        for w in workers:
            w.join(10)


# ---------------------------------------------------------------- 2. wake latency

def produce(dsn, rate, n, out):
    """Enqueues n jobs one at a time at `rate`; puts (id, monotonic time after commit)."""
    sent = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set synchronous_commit = off")  # the rate, not the disk: latency is after commit
        start = time.monotonic()
        for i in range(n):
            due = start + i / rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            job = conn.execute("select id from jobs.enqueue('lat', queue => 'lat')").fetchone()[0]
            sent.append((str(job), time.monotonic()))
    out.put(sent)


def work(dsn, mode, n, ready, out):
    """Claims until it has seen n jobs; puts (id, monotonic time the claim returned it)."""
    seen = []
    heard = []  # notifications that came while the worker claimed: its next sleep ends at once
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set synchronous_commit = off")
        if mode == "listen":
            conn.add_notify_handler(heard.append)
            conn.execute("listen pg_jobs")
        claim = "select id, claim from jobs.claim('lat', array['lat'], 100, null, %s::interval)"
        ready.set()
        while len(seen) < n:
            rows = conn.execute(claim, ("5 s" if mode == "blocking" else "0",)).fetchall()
            now = time.monotonic()
            seen.extend((str(r[0]), now) for r in rows)
            if rows:
                conn.execute("select jobs.complete_many(%s::uuid[], %s::bigint[])",
                             ([r[0] for r in rows], [r[1] for r in rows]))
            elif mode == "listen":
                if not heard:
                    for _ in conn.notifies(timeout=5, stop_after=1):
                        pass
                heard.clear()
            elif mode == "poll":
                time.sleep(0.1)
    out.put(seen)


def median(values):
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def latency_run(dsn, mode, rate, n):
    reset(dsn, "lat")
    ctx = multiprocessing.get_context("fork")
    sent_q, seen_q, ready = ctx.Queue(), ctx.Queue(), ctx.Event()
    worker = ctx.Process(target=work, args=(dsn, mode, n, ready, seen_q))
    worker.start()
    ready.wait(30)
    time.sleep(0.5)
    producer = ctx.Process(target=produce, args=(dsn, rate, n, sent_q))
    producer.start()
    sent, seen = dict(sent_q.get()), dict(seen_q.get())
    producer.join()
    worker.join()
    gaps = [(seen[j] - t) * 1000 for j, t in sent.items() if j in seen]
    return {"p50_ms": round(percentile(gaps, 50), 3), "p99_ms": round(percentile(gaps, 99), 3), "jobs": len(gaps)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True, help="the swept database (its sweeper relays)")
    ap.add_argument("--in-transaction-dsn", required=True, help="a database whose jobs._wake sends pg_notify")
    ap.add_argument("--silent-dsn", required=True, help="a database whose jobs._wake is silenced")
    ap.add_argument("--seconds", type=int, default=15, help="each application-transaction run")
    ap.add_argument("--reps", type=int, default=3, help="interleaved repetitions of each (medians reported)")
    ap.add_argument("--rates", default="1500,2500")
    ap.add_argument("--latency-rates", default="100,1500")
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs per wake-latency run")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench/results/results-wakeups.json"))
    ap.add_argument("--command", default="")
    args = ap.parse_args()
    for dsn in (args.dsn, args.in_transaction_dsn, args.silent_dsn):
        prepare(dsn)
    rewire(args.in_transaction_dsn, "perform pg_notify('pg_jobs', v_queue);")
    rewire(args.silent_dsn, "null;")

    results = {"command": args.command, "app": [], "app_runs": [], "latency": []}
    cases = [("relayed (preloaded, swept)", args.dsn, "empty"),
             ("in-transaction NOTIFY", args.in_transaction_dsn, "empty"),
             ("silent: no notification, same workers", args.silent_dsn, "empty"),
             ("backlog: no notification, no workers", args.dsn, "backlog")]
    log("wakeups: warming up (a run of each database, not counted)")
    for _, dsn, _ in cases[:3]:
        app_run(dsn, "empty", 1000, 5)
    for rate in [int(r) for r in args.rates.split(",")]:
        for rep in range(args.reps):  # interleaved: each repetition runs every case once
            order = cases if rep % 2 == 0 else cases[::-1]
            for label, dsn, mode in order:
                log(f"wakeups: {args.seconds} s of application transactions at {rate}/s, {label} (rep {rep + 1})")
                got = app_run(dsn, mode, rate, args.seconds)
                results["app_runs"].append({"rate": rate, "case": label, "rep": rep + 1, **got})
                log(f"  {got}")
        for label, _, _ in cases:
            runs = [r for r in results["app_runs"] if r["rate"] == rate and r["case"] == label]
            results["app"].append({"rate": rate, "case": label,
                                   "latency_ms": median([r["latency_ms"] for r in runs]),
                                   "tps": median([r["tps"] for r in runs]),
                                   "latency_range_ms": [min(r["latency_ms"] for r in runs),
                                                        max(r["latency_ms"] for r in runs)]})
    for rate in [int(r) for r in args.latency_rates.split(",") if r]:  # --latency-rates '': none
        for mode in ("blocking", "listen", "poll"):
            log(f"wakeups: wake latency of {args.jobs} jobs at {rate}/s, worker: {mode}")
            got = latency_run(args.dsn, mode, rate, args.jobs)
            results["latency"].append({"rate": rate, "worker": mode, **got})
            log(f"  {got}")

    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(report(results))
    return 0 if all(ok for _, ok in targets(results)) else 1


def targets(results):
    out = []
    for rate in sorted({r["rate"] for r in results["app"]}):
        rows = {r["case"].split(" ")[0]: r for r in results["app"] if r["rate"] == rate}
        ratio = rows["relayed"]["latency_ms"] / rows["silent:"]["latency_ms"]
        out.append((f"app transactions at {rate}/s: relayed latency {ratio:.2f}x the silent baseline's "
                    "(target <= 1.2x)", ratio <= 1.2))
        held = rows["relayed"]["tps"] / rate
        out.append((f"app transactions at {rate}/s: {rows['relayed']['tps']:.0f}/s held (target >= 0.98x)", held >= 0.98))
    for rate in sorted({r["rate"] for r in results["latency"]}):
        rows = {r["worker"]: r for r in results["latency"] if r["rate"] == rate}
        for p in ("p50_ms", "p99_ms"):
            out.append((f"wake latency at {rate}/s, {p[:3]}: blocking {rows['blocking'][p]} ms, "
                        f"LISTEN {rows['listen'][p]} ms (target: no slower)",
                        rows["blocking"][p] <= rows["listen"][p] * 1.1 + 0.05))
        if rate >= 1500:
            out.append((f"wake latency at {rate}/s, p99 of the blocking claim under 5 ms: {rows['blocking']['p99_ms']} ms",
                        rows["blocking"]["p99_ms"] < 5))
    return out


def report(results):
    lines = ["| rate | case | avg latency, ms (median) | range over reps | done/s | latency vs silent |",
             "|---|---|---|---|---|---|"]
    for rate in sorted({r["rate"] for r in results["app"]}):
        rows = [r for r in results["app"] if r["rate"] == rate]
        base = next(r for r in rows if r["case"].startswith("silent"))["latency_ms"]
        for r in rows:
            low, high = r["latency_range_ms"]
            lines.append(f"| {rate} | {r['case']} | {r['latency_ms']:.2f} | {low:.2f}–{high:.2f} | "
                         f"{r['tps']:,.0f} | {r['latency_ms'] / base:.2f}x |")
    lines += ["", "| rate | worker | p50, ms | p99, ms | jobs |", "|---|---|---|---|---|"]
    for r in results["latency"]:
        lines.append(f"| {r['rate']} | {r['worker']} | {r['p50_ms']} | {r['p99_ms']} | {r['jobs']:,} |")
    lines += [""] + [("met: " if ok else "MISSED: ") + text for text, ok in targets(results)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
