"""A/B of the calls that asynchronous claims and the relay added to hot paths, in two databases
of one cluster: ab_new (this build) and ab_old (the same build with the claim's and the
heartbeat's jobs._async_if_alone taken out, and jobs._wake of d3a083a: the probe, and NOTIFY
only for an empty queue). CPU-bound (synchronous_commit = off), 4 clients, 4 repetitions, the
order alternating: single enqueues, heartbeats over 1000 held jobs, a drain at B = 10.

    python bench/ab/claim_check_cost.py "host=127.0.0.1 port=PORT user=postgres"

against a cluster of scripts/cluster.sh (pg_jobs preloaded, every database swept).
"""

import os
import re
import statistics
import subprocess
import sys

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "bench")
PGBENCH = os.path.join(os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin"), "pgbench")
ENV = {**os.environ, "PGOPTIONS": "-c synchronous_commit=off"}
BATCH = """select count(*) from jobs.enqueue_batch(
             (select jsonb_agg(jsonb_build_object('name', %s::text, 'queue', 'bench')) from generate_series(1, %s::int)))"""


def sql(dsn, query, args=None):
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, args)
        return cur.fetchall() if cur.description else None


def make_old(dsn):
    for fn in ("jobs.claim(text, text[], int, interval, interval)", "jobs.heartbeat(uuid, bigint, interval)"):
        ddl = sql(dsn, "select pg_get_functiondef(%s::regprocedure)", (fn,))[0][0]
        without = re.sub(r"\n\s*perform jobs\._async_if_alone\('\w+'\);", "", ddl)
        assert without != ddl, f"{fn} no longer calls jobs._async_if_alone"
        sql(dsn, without)
    body_from(dsn, "jobs._wake(text[], uuid[])", "d3a083a", "sql/schema.sql")


def body_from(dsn, fn, commit, path):
    """Gives the installed PL/pgSQL function fn the body it had at commit (in path), keeping
    its settings (SECURITY DEFINER, search_path, plan_cache_mode), which CREATE OR REPLACE of
    the old text would drop."""
    old = subprocess.run(["git", "-C", ROOT, "show", f"{commit}:{path}"], capture_output=True, text=True,
                         check=True).stdout
    start = old.index(f"create function {fn[:fn.index('(')]}(")
    body = old[old.index("as $$", start) + len("as $$"):old.index("$$;", start)]
    ddl = sql(dsn, "select pg_get_functiondef(%s::regprocedure)", (fn,))[0][0]
    sql(dsn, ddl[:ddl.index("AS $function$") + len("AS $function$")] + body + "$function$")


def pgbench(dsn, script, seconds=5, clients=4, **defines):
    cmd = [PGBENCH, "-n", "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(seconds),
           "-f", os.path.join(BENCH, script)]
    for key, value in defines.items():
        cmd += ["-D", f"{key}={value}"]
    out = subprocess.run(cmd + [dsn], capture_output=True, text=True, env=ENV, check=True).stdout
    return float(re.search(r"tps = ([\d.]+) \(without", out).group(1))


def hold(dsn):
    sql(dsn, "truncate jobs_data.jobs")
    sql(dsn, "drop table if exists bench_held")
    sql(dsn, "create table bench_held (n int primary key, id uuid, claim bigint)")
    sql(dsn, BATCH, ("beat", 1000))
    sql(dsn, """insert into bench_held select row_number() over (), id, claim
                from jobs.claim('beat', array['bench'], 1000, '1 hour')""")


def run_ab(base, make_old, reps=4, batches=(10,), clients=4):
    """Single enqueues, heartbeats and a drain at each batch size (B = 10) in ab_new (this
    build) and ab_old (this build changed by make_old(dsn)), the order alternating; prints the
    medians."""
    dbs = {"new": base + " dbname=ab_new", "old": base + " dbname=ab_old"}
    for label, dsn in dbs.items():
        sql(base, f"drop database if exists ab_{label}")
        sql(base, f"create database ab_{label}")
        sql(dsn, "create extension pg_jobs")
    make_old(dbs["old"])
    results = {}
    for rep in range(reps):
        for label in ("new", "old") if rep % 2 == 0 else ("old", "new"):
            dsn = dbs[label]
            sql(dsn, "truncate jobs_data.jobs")
            results.setdefault(("single enqueues/s", label), []).append(
                pgbench(dsn, "pgjobs_enqueue.sql", clients=clients))
            hold(dsn)
            results.setdefault(("heartbeats/s", label), []).append(
                pgbench(dsn, "pgjobs_heartbeat.sql", clients=clients, held=1000))
            for b in batches:
                sql(dsn, "truncate jobs_data.jobs")
                for _ in range(2):
                    sql(dsn, BATCH, ("b", 10000))
                drained = b * pgbench(dsn, "pgjobs_drain.sql", seconds=4, clients=clients, batch=b)
                results.setdefault((f"drain B={b}, jobs/s", label), []).append(drained)
    for (what, label), values in sorted(results.items()):
        print(f"{what:20} {label}: {[round(v) for v in values]} median {statistics.median(values):,.0f}")


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old)
