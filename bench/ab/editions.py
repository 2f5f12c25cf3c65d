"""The SQL-only edition beside the extension, each where it is deployed, in two clusters of one
machine with the same settings: the extension in ab_ext of one that preloads pg_jobs (a
cluster of scripts/cluster.sh), the edition (sql-only/pg_jobs.sql) in ab_sql of one that does
not. 4 clients, durable commits (as the servers are configured) or, with --async,
synchronous_commit = off (CPU-bound); REPS repetitions, the order alternating: single
enqueues, heartbeats over 1000 held jobs, and a drain at each batch size (claim B,
complete_many, from a backlog (BACKLOG) the faster one does not empty in the run: the jobs
completed over the run's seconds); then the
backend CPU of one claim and one complete of one job (bench/ab/hot_calls.py's measure).
Medians.

    python bench/ab/editions.py "host=127.0.0.1 port=EXT_PORT user=postgres" \
        "host=127.0.0.1 port=SQL_PORT user=postgres" [--async] [--reps N] [--batches 1,10,100]
"""

import argparse
import os
import statistics
import time

import claim_check_cost
from claim_check_cost import BATCH, ROOT, hold, pgbench, sql
from hot_calls import CALLS, per_call

SQL_ONLY = os.path.join(ROOT, "sql-only", "pg_jobs.sql")
# The backlog a drain at each batch size starts from: more than 4 s of the faster edition's drain.
BACKLOG = {1: 20000, 10: 60000, 100: 200000}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("extension_server")
    parser.add_argument("sql_only_server")
    parser.add_argument("--async", dest="asynchronous", action="store_true")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--batches", default="1,10,100")
    args = parser.parse_args()
    if not args.asynchronous:
        claim_check_cost.ENV.pop("PGOPTIONS", None)
    servers = {"extension": args.extension_server, "sql-only": args.sql_only_server}
    dbs = {"extension": args.extension_server + " dbname=ab_ext", "sql-only": args.sql_only_server + " dbname=ab_sql"}
    for label, dsn in dbs.items():
        name = dsn.rsplit("=", 1)[1]
        sql(servers[label], f"drop database if exists {name}")
        sql(servers[label], f"create database {name}")
        if label == "extension":
            sql(dsn, "create extension pg_jobs")
        else:
            sql(dsn, open(SQL_ONLY).read())
            sql(dsn, "select count(*) from jobs.sweep()")
    results = {}
    for rep in range(args.reps):
        for label in dbs if rep % 2 == 0 else reversed(dbs):
            dsn = dbs[label]
            sql(dsn, "truncate jobs_data.jobs")
            results.setdefault(("single enqueues/s", label), []).append(pgbench(dsn, "pgjobs_enqueue.sql"))
            hold(dsn)
            results.setdefault(("heartbeats/s", label), []).append(pgbench(dsn, "pgjobs_heartbeat.sql", held=1000))
            for b in (int(x) for x in args.batches.split(",")):
                sql(dsn, "truncate jobs_data.jobs")
                for _ in range(BACKLOG[b] // 10000):
                    sql(dsn, BATCH, ("b", 10000))
                started = time.monotonic()
                pgbench(dsn, "pgjobs_drain.sql", seconds=4, batch=b)
                took = time.monotonic() - started
                # (what was completed: a drain that empties the queue claims nothing after)
                drained = sql(dsn, "select count(*) from jobs_data.jobs where state = 'completed'")[0][0] / took
                results.setdefault((f"drain B={b}, jobs/s", label), []).append(drained)
            for what, statement, held in CALLS:
                if what in ("claim", "complete"):
                    results.setdefault((f"{what}, µs of backend CPU", label), []).append(
                        per_call(dsn, statement, held, 2000))
    print("| | extension | SQL-only | SQL-only / extension | each repetition (extension; SQL-only) |")
    print("|---|---|---|---|---|")
    for what in dict.fromkeys(w for w, _ in results):
        ext, sqlo = results[(what, "extension")], results[(what, "sql-only")]
        e, s = statistics.median(ext), statistics.median(sqlo)
        print(f"| {what} | {e:,.0f} | {s:,.0f} | {s / e:.2f}x | {', '.join(f'{v:,.0f}' for v in ext)}; "
              f"{', '.join(f'{v:,.0f}' for v in sqlo)} |")


if __name__ == "__main__":
    main()
