#!/usr/bin/env python3
"""Benchmarks pg_jobs beside its peers, in one run, on one throwaway cluster.

    bash bench/run.sh [--quick] [--reps N] [--out FILE]

Candidates: pg_jobs, a minimal plain-SQL queue (one SKIP LOCKED claim, then a delete), and
pgmq 1.1.4 (its SQL-only install from the pgmq wheel on PyPI, downloaded at run time, never
committed). Before each candidate's run, `pgbench -N` at the same client count measures the
machine's ceiling at that moment: this machine's fsync rate drifts, so only ratios within a
run mean anything. Repetitions are interleaved and medians reported. The run writes a JSON
file of every measurement and a Markdown report, and exits 1 when one of its targets is
missed, 0 when all are met.
"""

import argparse
import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile

import psycopg

BENCH = os.path.dirname(os.path.abspath(__file__))
# The binaries of the release run against: scripts/lib.sh exports PG_JOBS_PG_BIN.
PG_BIN = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")
PGBENCH = os.path.join(PG_BIN, "pgbench")
PSQL = os.path.join(PG_BIN, "psql")


def release_bin(major):
    """Where scripts/lib.sh keeps PostgreSQL `major`'s binaries."""
    return "/usr/lib/postgresql/15/bin" if major == "15" else f"/opt/pg_jobs-pg/{major}/bin"


def log(*args):
    print(*args, file=sys.stderr, flush=True)


class Db:
    def __init__(self, dsn, bin_dir=PG_BIN):
        self.dsn = dsn
        self.pgbench_path = os.path.join(bin_dir, "pgbench")

    def sql(self, query, args=None):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cur = conn.execute(query, args)
            return cur.fetchall() if cur.description else None

    def one(self, query, args=None):
        return self.sql(query, args)[0][0]

    def pgbench(self, script, clients, transactions=None, seconds=None, rate=None, defines=None,
                prepared=False, env=None):
        how = ["-b", script[len("builtin:"):]] if script.startswith("builtin:") else ["-f", script]
        cmd = [self.pgbench_path, "-n", "-c", str(clients), "-j", str(min(clients, 4))] + how
        if prepared:
            cmd += ["-M", "prepared"]
        cmd += ["-t", str(transactions)] if transactions else ["-T", str(seconds)]
        if rate:
            cmd += ["-R", str(rate)]
        for key, value in (defines or {}).items():
            cmd += ["-D", f"{key}={value}"]
        started = time.monotonic()
        out = subprocess.run(cmd + [self.dsn], capture_output=True, text=True,
                             env={**os.environ, **(env or {})})
        wall = time.monotonic() - started
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
        tps = float(re.search(r"tps = ([\d.]+) \(without initial", out.stdout).group(1))
        return {"tps": tps, "wall": wall}


# ---------------------------------------------------------------- candidates


def in_chunks(db, n, sql, size=10_000):
    """Runs sql (taking a first and last number) over 1..n, size numbers at a time."""
    for start in range(0, n, size):
        db.sql(sql, (start + 1, min(n, start + size)))



class PgJobs:
    name = "pg_jobs"
    drain_script = "pgjobs_drain.sql"

    def setup(self, db):
        db.sql("drop extension if exists pg_jobs cascade")
        db.sql("create extension pg_jobs")

    retention = None  # pg_jobs.completed_retention: the default, 7 days of history

    def fill(self, db, n):
        set_completed_retention(db, self.retention)
        db.sql("truncate jobs_data.jobs")
        in_chunks(db, n, """select count(*) from jobs.enqueue_batch(
                              (select jsonb_agg(jsonb_build_object('name', 'bench', 'queue', 'bench',
                                                                   'payload', jsonb_build_object('n', g)))
                               from generate_series(%s::int, %s::int) g))""")
        db.sql("vacuum analyze jobs_data.jobs")

    def left(self, db):
        return db.one("select count(*) from jobs.jobs where state <> 'completed'")


class PgJobsNoHistory(PgJobs):
    """pg_jobs keeping no completed jobs (pg_jobs.completed_retention = 0): complete_many
    deletes them, as the plain queue and pgmq do. Failed and dead jobs are still kept."""
    name = "pg_jobs, no history"
    retention = "0"

    def setup(self, db):
        pass  # the same extension as PgJobs


def set_completed_retention(db, value):
    """Sets pg_jobs.completed_retention (None: the default) and waits until new sessions see it."""
    if value is None:
        db.sql("alter system reset pg_jobs.completed_retention")
    else:
        db.sql(f"alter system set pg_jobs.completed_retention = '{value}'")
    db.sql("select pg_reload_conf()")
    wanted = value or "7d"
    for _ in range(200):
        if db.one("show pg_jobs.completed_retention") == wanted:
            return
        time.sleep(0.05)
    raise RuntimeError(f"pg_jobs.completed_retention did not become {wanted}")


class Plain:
    name = "plain SQL"
    drain_script = "plain_drain.sql"

    def setup(self, db):
        db.sql("drop schema if exists plain cascade")
        db.sql("create schema plain")
        db.sql(
            """create table plain.jobs (id bigserial primary key, payload jsonb not null,
                                        run_at timestamptz not null default now(),
                                        claimed_at timestamptz)"""
        )
        db.sql("create index on plain.jobs (id) where claimed_at is null")

    def fill(self, db, n):
        db.sql("truncate plain.jobs")
        db.sql("insert into plain.jobs (payload) select jsonb_build_object('n', g) from generate_series(1, %s::int) g", (n,))
        db.sql("vacuum analyze plain.jobs")

    def left(self, db):
        return db.one("select count(*) from plain.jobs")


class Pgmq:
    name = "pgmq 1.1.4"
    drain_script = "pgmq_drain.sql"

    def __init__(self, sql_file):
        self.sql_file = sql_file

    def setup(self, db):
        db.sql("drop schema if exists pgmq cascade")
        subprocess.run([PSQL, db.dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-f", self.sql_file],
                       check=True, capture_output=True)
        db.sql("select pgmq.create('bench')")

    def fill(self, db, n):
        db.sql("select pgmq.purge_queue('bench')")
        in_chunks(db, n, """select count(*) from pgmq.send_batch('bench',
                              (select array_agg(jsonb_build_object('n', g))
                               from generate_series(%s::int, %s::int) g))""")
        db.sql("vacuum analyze pgmq.q_bench")

    def left(self, db):
        return db.one("select count(*) from pgmq.q_bench")


def fetch_pgmq_sql():
    """pgmq/sql/pgmq.sql from the pgmq==1.1.4 wheel on PyPI, into a temporary directory."""
    tmp = tempfile.mkdtemp(prefix="pgmq-")
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", tmp, "pgmq==1.1.4"],
                   check=True)
    wheel = next(f for f in os.listdir(tmp) if f.endswith(".whl"))
    with zipfile.ZipFile(os.path.join(tmp, wheel)) as zf:
        zf.extract("pgmq/sql/pgmq.sql", tmp)
    return os.path.join(tmp, "pgmq/sql/pgmq.sql")


# ---------------------------------------------------------------- workloads


def ceiling(db, clients, seconds):
    """pgbench -N (simple-update) tps at this client count, now: the machine's ceiling."""
    return db.pgbench("builtin:simple-update", clients, seconds=seconds)["tps"]


def drain(db, cand, clients, batch, n, seconds_ceiling):
    cand.fill(db, n)
    ceil = ceiling(db, clients, seconds_ceiling)
    per_client = math.ceil(n / (clients * batch)) + 2
    run = db.pgbench(os.path.join(BENCH, cand.drain_script), clients, transactions=per_client,
                     defines={"batch": batch})
    left = cand.left(db)
    jobs_per_s = (n - left) / run["wall"]
    return {"candidate": cand.name, "clients": clients, "batch": batch, "jobs": n, "left": left,
            "jobs_per_s": jobs_per_s, "ceiling_tps": ceil, "ratio_to_ceiling": jobs_per_s / ceil}


def run_drains(db, cands, args, results):
    configs = [(k, b) for k in map(int, args.clients.split(",")) for b in (1, 10, 100)]
    for rep in range(args.reps):
        order = configs[:]
        random.Random(rep).shuffle(order)
        for clients, batch in order:
            n = min(args.jobs, args.jobs_per_batch_job * batch)
            for cand in cands:
                r = drain(db, cand, clients, batch, n, args.ceiling_seconds)
                r["rep"] = rep
                results["drain"].append(r)
                log(f"drain rep {rep} {cand.name:10} K={clients} B={batch:3} {r['jobs_per_s']:9.0f} jobs/s"
                    f"  ceiling {r['ceiling_tps']:7.0f} tps  left {r['left']}")
    set_completed_retention(db, None)


def run_release_drains(dbs, args):
    """The drain of pg_jobs and of the plain queue on each release (dbs: {major: Db}), one
    cluster per release, every measurement interleaved: per repetition and configuration, each
    release in turn (the order alternating), each with its own pgbench -N ceiling first."""
    cands = [PgJobs(), Plain()]
    for db in dbs.values():
        subprocess.run([db.pgbench_path, "-i", "-s", "10", "-q", db.dsn], check=True, capture_output=True)
        for cand in cands:
            cand.setup(db)
    configs = [(k, b) for k in map(int, args.clients.split(",")) for b in (1, 10, 100)]
    rows = []
    for rep in range(args.reps):
        order = configs[:]
        random.Random(rep).shuffle(order)
        for clients, batch in order:
            n = min(args.jobs, args.jobs_per_batch_job * batch)
            majors = sorted(dbs) if rep % 2 == 0 else sorted(dbs, reverse=True)
            for major in majors:
                for cand in cands:
                    r = drain(dbs[major], cand, clients, batch, n, args.ceiling_seconds)
                    r.update(rep=rep, release=major)
                    rows.append(r)
                    log(f"drain rep {rep} pg{major} {cand.name:10} K={clients} B={batch:3} "
                        f"{r['jobs_per_s']:9.0f} jobs/s  ceiling {r['ceiling_tps']:7.0f} tps  left {r['left']}")
    return rows


def release_report(rows, args, command):
    majors = sorted({r["release"] for r in rows})
    first, last = majors[0], majors[-1]

    def med(release, cand, clients, batch, key="jobs_per_s"):
        return median([r[key] for r in rows if r["release"] == release and r["candidate"] == cand
                       and r["clients"] == clients and r["batch"] == batch])

    lines = [f"Run: `{command}` on {machine(', '.join(majors))}", "",
             f"Median jobs/s of {args.reps} interleaved repetitions (in brackets, the ratio to `pgbench -N` "
             "tps on the same release at the same K, measured just before)", "",
             "| K | B | " + " | ".join(f"pg_jobs on {m}" for m in majors) + f" | pg_jobs {last} / {first} | "
             + " | ".join(f"plain SQL on {m}" for m in majors) + f" | plain SQL {last} / {first} |",
             "|---" * (4 + 2 * len(majors)) + "|"]
    for clients in map(int, args.clients.split(",")):
        for batch in (1, 10, 100):
            cells = []
            for cand in ("pg_jobs", "plain SQL"):
                for m in majors:
                    cells.append(f"{med(m, cand, clients, batch):,.0f} "
                                 f"({med(m, cand, clients, batch, 'ratio_to_ceiling'):.2f}x)")
                cells.append(f"{med(last, cand, clients, batch) / med(first, cand, clients, batch):.2f}")
            lines.append(f"| {clients} | {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def run_enqueue(db, cands, args, results):
    pgj, plain, pgmq = cands[:3]
    for rep in range(args.reps):
        for label, script in [("pg_jobs enqueue", "pgjobs_enqueue.sql"), ("plain INSERT", "plain_enqueue.sql"),
                              ("pgmq send", "pgmq_enqueue.sql"),
                              ("pg_jobs enqueue_batch(100)", "pgjobs_enqueue_batch.sql"),
                              ("INSERT of the same 100 rows into jobs_data.jobs", "insert_batch.sql"),
                              ("pgmq send_batch(100)", "pgmq_enqueue_batch.sql")]:
            db.sql("truncate jobs_data.jobs")
            db.sql("truncate plain.jobs")
            db.sql("select pgmq.purge_queue('bench')")
            r = db.pgbench(os.path.join(BENCH, script), 4, seconds=args.seconds)
            rows = 100 if "100" in label else 1
            results["enqueue"].append({"rep": rep, "what": label, "tps": r["tps"], "rows_per_s": r["tps"] * rows})
            log(f"enqueue rep {rep} {label:45} {r['tps'] * rows:9.0f} rows/s")


def run_heartbeats(db, args, results):
    held = 1000
    db.sql("truncate jobs_data.jobs")
    db.sql("drop table if exists bench_held")
    db.sql("create table bench_held (n int primary key, id uuid, claim bigint)")
    db.sql(
        """select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'beat', 'queue', 'bench'))
                                                   from generate_series(1, %s::int)))""", (held,))
    db.sql(
        """insert into bench_held select row_number() over (), id, claim
           from jobs.claim('beat', array['bench'], 1000, '1 hour')""")
    db.sql("vacuum analyze jobs_data.jobs")
    before = db.sql("select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables where relid = 'jobs_data.jobs'::regclass")[0]
    r = db.pgbench(os.path.join(BENCH, "pgjobs_heartbeat.sql"), 4, seconds=args.seconds, defines={"held": held})
    time.sleep(1)  # let the statistics collector catch up
    after = db.sql("select n_tup_upd, n_tup_hot_upd from pg_stat_user_tables where relid = 'jobs_data.jobs'::regclass")[0]
    upd, hot = after[0] - before[0], after[1] - before[1]
    results["heartbeat"] = {"tps": r["tps"], "updates": upd, "hot_updates": hot, "hot_ratio": hot / max(upd, 1)}
    log(f"heartbeats {r['tps']:.0f}/s, HOT {hot}/{upd} = {hot / max(upd, 1):.3f}")


def run_claim_backlogs(db, args, results):
    def load(ready, finished):
        db.sql("truncate jobs_data.jobs")
        for state, n in (("completed", finished), ("ready", ready)):
            if n:
                db.sql(
                    """insert into jobs_data.jobs (id, run_id, name, queue, state, priority, run_at, max_attempts,
                                              payload, enqueued_at, created_at, updated_at, finished_at)
                       select gen_random_uuid(), gen_random_uuid(), 'bench', 'bench', %s::jobs.job_state, 0,
                              now() - make_interval(secs => g), 25, '{}', now(), now(), now(),
                              case when %s = 'completed' then now() end
                       from generate_series(1, %s::int) g""", (state, state, n))
        db.sql("vacuum analyze jobs_data.jobs")

    # CPU-bound (synchronous_commit = off): each round commits, and at the fsync rate the
    # claim's own cost would drown in the disk's drift.
    scenarios = [("10k ready", 10_000, 0), ("1M ready", args.big, 0), ("1M finished + 10k ready", 10_000, args.big)]
    db.sql("alter system set synchronous_commit = off")
    db.sql("select pg_reload_conf()")
    try:
        for rep in range(args.reps):
            for label, ready, finished in scenarios:
                load(ready, finished)
                r = db.pgbench(os.path.join(BENCH, "pgjobs_claim_release.sql"), 4, seconds=args.seconds)
                results["claim_backlog"].append({"rep": rep, "what": label, "claims_per_s": r["tps"]})
                log(f"claim rep {rep} {label:25} {r['tps']:8.0f} claims of 10/s")
    finally:
        db.sql("alter system reset synchronous_commit")
        db.sql("select pg_reload_conf()")


def run_churn(db, args, results):
    db.sql("truncate jobs_data.jobs")
    db.sql("alter system set pg_jobs.completed_retention = '1min'")
    db.sql("alter system set pg_jobs.sweep_interval = '1s'")
    db.sql("select pg_reload_conf()")
    db.sql("vacuum analyze jobs_data.jobs")
    producer = subprocess.Popen(
        [db.pgbench_path, "-n", "-c", "2", "-j", "2", "-R", str(args.churn_rate), "-T", str(args.churn_minutes * 60),
         "-f", os.path.join(BENCH, "pgjobs_enqueue.sql"), db.dsn], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    consumer = subprocess.Popen(
        [db.pgbench_path, "-n", "-c", "4", "-j", "4", "-T", str(args.churn_minutes * 60 + 5),
         "-f", os.path.join(BENCH, "churn_consume.sql"), db.dsn], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    start = time.monotonic()
    for minute in range(1, args.churn_minutes + 1):
        time.sleep(max(0, start + minute * 60 - time.monotonic()))
        # Completed in the last minute; and enqueued in it (retention keeps a completed job a
        # minute past its completion, so all of them are still here): the offered load.
        row = db.sql(
            """select count(*) filter (where done),
                      percentile_cont(0.5) within group (order by latency) filter (where done),
                      percentile_cont(0.99) within group (order by latency) filter (where done),
                      count(*) filter (where enqueued_at > now() - interval '1 minute')
               from (select enqueued_at, extract(epoch from finished_at - enqueued_at) as latency,
                            state = 'completed' and finished_at > now() - interval '1 minute' as done
                     from jobs.jobs) as j""")[0]
        stats = db.sql(
            """select n_dead_tup, pg_table_size('jobs_data.jobs'), pg_indexes_size('jobs_data.jobs')
               from pg_stat_user_tables where relid = 'jobs_data.jobs'::regclass""")[0]
        point = {"minute": minute, "enqueued": row[3], "completed": row[0],
                 "p50_ms": (row[1] or 0) * 1000, "p99_ms": (row[2] or 0) * 1000,
                 "n_dead_tup": stats[0], "table_bytes": stats[1], "index_bytes": stats[2]}
        results["churn"].append(point)
        log(f"churn minute {minute}: {point}")
    producer.wait()
    consumer.wait()
    db.sql("alter system reset pg_jobs.completed_retention")
    db.sql("alter system reset pg_jobs.sweep_interval")
    db.sql("select pg_reload_conf()")


# Fewer WAL flushes per job: every candidate as a driver that prepares calls it, at K = 4.
# pg_jobs three ways: its claim waiting for its WAL flush (pg_jobs.async_claims = off, the
# claim of before), its claim on its own not waiting (the default), and chained (each batch
# completed and the next claimed in one call and one commit, as the example workers run).
FLUSH_VARIANTS = [
    ("plain SQL", "plain SQL", "prepared/plain_drain.sql", {}, {}),
    ("plain SQL, chained", "plain SQL", "prepared/plain_chained.sql", {"ids": "{}"}, {}),
    ("pgmq 1.1.4", "pgmq 1.1.4", "prepared/pgmq_drain.sql", {}, {}),
    ("pg_jobs, durable claims", "pg_jobs", "prepared/pgjobs_drain.sql", {},
     {"PGOPTIONS": "-c pg_jobs.async_claims=off"}),
    ("pg_jobs", "pg_jobs", "prepared/pgjobs_drain.sql", {}, {}),
    ("pg_jobs, chained", "pg_jobs", "prepared/pgjobs_chained.sql", {"ids": "{}", "claims": "{}"}, {}),
    # Not a candidate: the contract's two row versions per job in bare statements, the most
    # any implementation of it could drain (bench/prepared/floor_chained.sql).
    ("contract floor", "pg_jobs", "prepared/floor_chained.sql", {"ids": "{}"}, {}),
]


def run_flushes(db, cands, args, results):
    by_name = {c.name: c for c in cands}
    clients = 4
    for rep in range(args.reps):
        batches = [1, 10, 100]
        random.Random(100 + rep).shuffle(batches)
        for batch in batches:
            n = min(args.jobs, args.jobs_per_batch_job * batch)
            order = FLUSH_VARIANTS if rep % 2 == 0 else FLUSH_VARIANTS[::-1]
            for label, cand_name, script, defines, env in order:
                cand = by_name[cand_name]
                cand.fill(db, n)
                ceil = ceiling(db, clients, args.ceiling_seconds)
                per_client = math.ceil(n / (clients * batch)) + 2
                run = db.pgbench(os.path.join(BENCH, script), clients, transactions=per_client,
                                 defines={"batch": batch, **defines}, prepared=True, env=env)
                left = cand.left(db)
                jobs_per_s = (n - left) / run["wall"]
                results["flushes"].append({"candidate": label, "clients": clients, "batch": batch, "jobs": n,
                                           "left": left, "jobs_per_s": jobs_per_s, "ceiling_tps": ceil,
                                           "rep": rep})
                log(f"flushes rep {rep} {label:24} B={batch:3} {jobs_per_s:9.0f} jobs/s  ceiling {ceil:7.0f} tps"
                    f"  left {left}")
    set_completed_retention(db, None)
    run_claim_latency(db, args, results)


def run_claim_latency(db, args, results, claims=2000):
    """A single autocommit claim of 1 job, prepared, its round trip: the durable claim of before
    against the claim that does not wait for its flush, interleaved in blocks of 100."""
    PgJobs().fill(db, 2 * claims + 10)
    times = {"durable claims": [], "async claims": []}
    with psycopg.connect(db.dsn, autocommit=True, prepare_threshold=0) as conn:
        for block in range(2 * claims // 100):
            mode = "durable claims" if block % 2 == 0 else "async claims"
            conn.execute(f"set pg_jobs.async_claims = {'off' if mode == 'durable claims' else 'on'}")
            for _ in range(100):
                started = time.perf_counter()
                conn.execute("select id, claim from jobs.claim('bench', array['bench'], 1)").fetchall()
                times[mode].append((time.perf_counter() - started) * 1000)
    for mode, values in times.items():
        values.sort()
        results["claim_latency"].append({"claims": mode, "n": len(values),
                                         "p50_ms": values[len(values) // 2],
                                         "p99_ms": values[int(len(values) * 0.99)]})
        log(f"claim latency, {mode}: p50 {values[len(values) // 2]:.3f} ms, p99 {values[int(len(values) * 0.99)]:.3f} ms")


def flushes_report(results):
    rows = results["flushes"]

    def med(label, batch):
        values = [r["jobs_per_s"] for r in rows if r["candidate"] == label and r["batch"] == batch]
        return statistics.median(values) if values else float("nan")

    lines = ["| B | " + " | ".join(v[0] for v in FLUSH_VARIANTS)
             + " | chained / plain | chained / plain chained | chained / pgmq | chained / floor | floor / plain |",
             "|---" * (len(FLUSH_VARIANTS) + 6) + "|"]
    for batch in (1, 10, 100):
        cells = [f"{med(v[0], batch):,.0f}" for v in FLUSH_VARIANTS]
        chained = med("pg_jobs, chained", batch)
        plain = med("plain SQL", batch)
        lines.append(f"| {batch} | " + " | ".join(cells) + f" | {chained / plain:.2f}x"
                     f" | {chained / med('plain SQL, chained', batch):.2f}x"
                     f" | {chained / med('pgmq 1.1.4', batch):.2f}x"
                     f" | {chained / med('contract floor', batch):.2f}x"
                     f" | {med('contract floor', batch) / plain:.2f}x |")
    lines += ["", "| claims | p50, ms | p99, ms |", "|---|---|---|"]
    lines += [f"| {r['claims']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} |" for r in results["claim_latency"]]
    best = {b: max(med(v, b) for v in ("pg_jobs", "pg_jobs, chained")) for b in (1, 10, 100)}
    plain = {b: med("plain SQL", b) for b in (1, 10, 100)}
    pgmq = med("pgmq 1.1.4", 10)
    wanted = [(f"B=1: pg_jobs at least 1.2x plain SQL: {best[1] / plain[1]:.2f}x", best[1] >= 1.2 * plain[1]),
              (f"B=10: pg_jobs at least 1.0x plain SQL: {best[10] / plain[10]:.2f}x", best[10] >= plain[10]),
              (f"B=10: pg_jobs at least 1.1x pgmq: {best[10] / pgmq:.2f}x", best[10] >= 1.1 * pgmq),
              (f"B=100: pg_jobs at least 0.8x plain SQL: {best[100] / plain[100]:.2f}x", best[100] >= 0.8 * plain[100])]
    # Issue 36's: the contract floor at every batch, and at B=1 the hand-written queue's
    # chained loop and pgmq.
    floor = {b: med("contract floor", b) for b in (1, 10, 100)}
    wanted += [(f"B={b}: pg_jobs at least 0.95x the contract floor: {best[b] / floor[b]:.2f}x",
                best[b] >= 0.95 * floor[b]) for b in (1, 10, 100)]
    plain_chained = med("plain SQL, chained", 1)
    wanted += [(f"B=1: pg_jobs at least 0.85x plain SQL, chained: {best[1] / plain_chained:.2f}x",
                best[1] >= 0.85 * plain_chained),
               (f"B=1: pg_jobs at least 1.3x pgmq: {best[1] / med('pgmq 1.1.4', 1):.2f}x",
                best[1] >= 1.3 * med("pgmq 1.1.4", 1))]
    lines += [""] + [("met: " if ok else "MISSED: ") + text for text, ok in wanted]
    return "\n".join(lines), sum(1 for _, ok in wanted if not ok)


def run_cpu_bound(db, cands, args, results):
    """The same drain with synchronous_commit = off: CPU-bound, not fsync-bound."""
    db.sql("alter system set synchronous_commit = off")
    db.sql("select pg_reload_conf()")
    try:
        for rep in range(args.reps):
            for cand in cands:
                r = drain(db, cand, 4, 10, min(args.jobs, args.jobs_per_batch_job * 10), args.ceiling_seconds)
                r["rep"] = rep
                results["cpu_bound"].append(r)
                log(f"cpu-bound rep {rep} {cand.name:10} {r['jobs_per_s']:9.0f} jobs/s  ceiling {r['ceiling_tps']:7.0f}")
    finally:
        set_completed_retention(db, None)
        db.sql("alter system reset synchronous_commit")
        db.sql("select pg_reload_conf()")


# ---------------------------------------------------------------- report


def run_node_peer(db, args, results):
    """graphile-worker 0.17.3 beside pg_jobs, each drained end to end from one Node process
    (bench/node/drain.js), K = 4 and B in {1, 10}, repetitions interleaved in shuffled order."""
    node_dir = os.path.join(BENCH, "node")
    if not os.path.isdir(os.path.join(node_dir, "node_modules", "graphile-worker")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=node_dir, check=True)
    params = dict(part.split("=", 1) for part in args.dsn.split())
    url = "postgresql://{user}@{host}:{port}/{dbname}".format(**params)
    jobs = min(args.jobs, 20_000)
    for rep in range(args.reps):
        runs = [(system, batch) for system in ("pg_jobs", "graphile") for batch in (1, 10)]
        random.shuffle(runs)
        for system, batch in runs:
            out = subprocess.run(["node", os.path.join(node_dir, "drain.js"), "--dsn", url, "--system", system,
                                  "--jobs", str(jobs), "--workers", "4", "--batch", str(batch)],
                                 check=True, capture_output=True, text=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            r["rep"] = rep
            results["node"].append(r)
            log(f"node rep {rep} {system:9} K=4 B={batch:<3} {r['jobs_per_s']:8.0f} jobs/s")


DRAIN_COLUMNS = ("pg_jobs", "plain SQL", "pgmq 1.1.4", "pg_jobs, no history")


def median(values):
    return statistics.median(values) if values else float("nan")


def drain_median(results, cand, clients, batch, key="jobs_per_s", section="drain"):
    return median([r[key] for r in results[section]
                   if r["candidate"] == cand and r["clients"] == clients and r["batch"] == batch])


def targets(results):
    """Each target as (what, measured, met)."""
    checks = []

    def at_least(label, value, want):
        checks.append((label, value, value >= want))

    for batch in (10, 100):
        pgj = drain_median(results, "pg_jobs", 4, batch)
        plain = drain_median(results, "plain SQL", 4, batch)
        pgmq = drain_median(results, "pgmq 1.1.4", 4, batch)
        at_least(f"drain K=4 B={batch}: pg_jobs / plain SQL >= 0.9", pgj / plain, 0.9)
        at_least(f"drain K=4 B={batch}: pg_jobs / pgmq >= 1.2", pgj / pgmq, 1.2)
    for batch, want in ((1, 0.4), (10, 1.8), (100, 4.0)):
        ratio = drain_median(results, "pg_jobs", 4, batch, key="ratio_to_ceiling")
        at_least(f"drain K=4 B={batch}: pg_jobs jobs/s / pgbench -N tps >= {want}", ratio, want)
    claims = {w: median([r["claims_per_s"] for r in results["claim_backlog"] if r["what"] == w])
              for w in ("10k ready", "1M ready", "1M finished + 10k ready")}
    at_least("claims with 1M ready / with 10k ready >= 0.8", claims["1M ready"] / claims["10k ready"], 0.8)
    at_least("claims with 1M finished / with 10k ready >= 0.8",
             claims["1M finished + 10k ready"] / claims["10k ready"], 0.8)
    at_least("heartbeats: HOT updates / updates >= 0.95", results["heartbeat"]["hot_ratio"], 0.95)
    churn = results["churn"]
    if len(churn) >= 2:
        first, last = churn[0]["completed"], churn[-1]["completed"]
        ratio = last / max(first, 1)
        checks.append(("churn: last minute's throughput / first's within 0.9 to 1.1", ratio, 0.9 <= ratio <= 1.1))
        half = len(churn) // 2
        grew = churn[-1]["table_bytes"] / max(churn[half]["table_bytes"], 1)
        checks.append(("churn: table size, last / middle minute <= 1.1 (stops growing)", grew, grew <= 1.1))
    enq = {w: median([r["rows_per_s"] for r in results["enqueue"] if r["what"] == w]) for w in
           {r["what"] for r in results["enqueue"]}}
    at_least("enqueue_batch(100) / INSERT of the same rows >= 0.9",
             enq["pg_jobs enqueue_batch(100)"] / enq["INSERT of the same 100 rows into jobs_data.jobs"], 0.9)
    return checks, claims, enq


def report(results, args):
    checks, claims, enq = targets(results)
    lines = [f"Run: `{results['command']}` on {results['machine']}", ""]
    lines += ["### Drain (median jobs/s; in brackets, the ratio to `pgbench -N` tps at the same K)", "",
              "| K | B | pg_jobs | plain SQL | pgmq 1.1.4 | pg_jobs, no history |", "|---|---|---|---|---|---|"]
    for clients in (1, 4, 8):
        for batch in (1, 10, 100):
            cells = []
            for cand in DRAIN_COLUMNS:
                v = drain_median(results, cand, clients, batch)
                c = drain_median(results, cand, clients, batch, key="ratio_to_ceiling")
                cells.append(f"{v:,.0f} ({c:.2f}x)")
            lines.append(f"| {clients} | {batch} | " + " | ".join(cells) + " |")
    lines += ["", "### CPU-bound drain, synchronous_commit = off, K=4, B=10 (median jobs/s)", "",
              "| candidate | jobs/s | ratio to pgbench -N |", "|---|---|---|"]
    for cand in DRAIN_COLUMNS:
        lines.append(f"| {cand} | {drain_median(results, cand, 4, 10, section='cpu_bound'):,.0f} | "
                     f"{drain_median(results, cand, 4, 10, key='ratio_to_ceiling', section='cpu_bound'):.2f}x |")
    lines += ["", "### Enqueue, 4 clients (median rows/s)", "", "| what | rows/s |", "|---|---|"]
    lines += [f"| {w} | {v:,.0f} |" for w, v in sorted(enq.items())]
    hb = results["heartbeat"]
    lines += ["", "### Heartbeats, 4 clients over 1000 held jobs", "",
              f"{hb['tps']:,.0f} heartbeats/s; {hb['hot_updates']:,} of {hb['updates']:,} updates were HOT "
              f"({hb['hot_ratio']:.1%}).", "",
              "### Claim throughput by backlog (claims of 10 then release, 4 clients, synchronous_commit = off, "
              "median per second)", "",
              "| backlog | claims/s |", "|---|---|"]
    lines += [f"| {w} | {v:,.0f} |" for w, v in claims.items()]
    lines += ["", f"### Steady churn: {args.churn_rate} jobs/s for {args.churn_minutes} min, 4 workers, "
              "retention 1 min, the background worker sweeping every second", "",
              "| minute | enqueued | completed | p50 latency ms | p99 latency ms | n_dead_tup | table bytes | index bytes |",
              "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {p['minute']} | {format(p['enqueued'], ',') if 'enqueued' in p else '—'} | {p['completed']:,} | "
              f"{p['p50_ms']:.1f} | {p['p99_ms']:.1f} | {p['n_dead_tup']:,} | "
              f"{p['table_bytes']:,} | {p['index_bytes']:,} |" for p in results["churn"]]
    lines += ["", "### Node peer, end to end from one Node process: graphile-worker 0.17.3 beside pg_jobs, "
              "K = 4 (median jobs/s)", "", "| B | pg_jobs (node-postgres) | graphile-worker 0.17.3 |", "|---|---|---|"]
    for batch in (1, 10):
        cells = [median([r["jobs_per_s"] for r in results["node"] if r["system"] == system and r["batch"] == batch])
                 for system in ("pg_jobs", "graphile")]
        lines.append(f"| {batch} | {cells[0]:,.0f} | {cells[1]:,.0f} |")
    lines += ["", "### Targets", "", "| target | measured | met |", "|---|---|---|"]
    missed = 0
    for label, value, ok in checks:
        missed += not ok
        lines.append(f"| {label} | {value:.2f} | {'yes' if ok else '**no**'} |")
    lines += ["", "Without history (`pg_jobs.completed_retention = 0`, not a target: the targets are for the "
              "default, which keeps completed jobs 7 days):", ""]
    for batch in (10, 100):
        nh = drain_median(results, "pg_jobs, no history", 4, batch)
        lines.append(f"- K=4 B={batch}: {nh / drain_median(results, 'plain SQL', 4, batch):.2f}x plain SQL, "
                     f"{nh / drain_median(results, 'pgmq 1.1.4', 4, batch):.2f}x pgmq, "
                     f"{nh / drain_median(results, 'pg_jobs', 4, batch):.2f}x pg_jobs with history")
    lines += ["", "What the pgmq targets ask, in terms of the plain SQL queue (the no-framework limit: one "
              "claim statement and a delete per batch), from this run's medians:", ""]
    for batch in (10, 100):
        pgmq_to_plain = (drain_median(results, "pgmq 1.1.4", 4, batch)
                         / drain_median(results, "plain SQL", 4, batch))
        lines.append(f"- K=4 B={batch}: pgmq drained {pgmq_to_plain:.2f}x the plain queue, so 1.2x pgmq "
                     f"is {1.2 * pgmq_to_plain:.2f}x the plain queue")
    return "\n".join(lines) + "\n", missed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", help="the database to run every workload in")
    ap.add_argument("--release", action="append", default=[], metavar="N:DSN",
                    help="instead of --dsn: a cluster of PostgreSQL N (twice or more), to compare the "
                         "releases' drains in one run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--clients", default="1,4,8", help="the K of the drain grid (a partial run: e.g. 4)")
    ap.add_argument("--jobs", type=int, default=100_000, help="jobs per drain (capped for small batches)")
    ap.add_argument("--jobs-per-batch-job", type=int, default=100_000,
                    help="cap on jobs per drain as a multiple of the batch size")
    ap.add_argument("--seconds", type=int, default=10, help="length of each timed pgbench run")
    ap.add_argument("--ceiling-seconds", type=int, default=5)
    ap.add_argument("--big", type=int, default=1_000_000)
    ap.add_argument("--churn-rate", type=int, default=500)
    ap.add_argument("--churn-minutes", type=int, default=5)
    ap.add_argument("--only", default="drain,cpu,enqueue,heartbeat,claim,churn,node",
                    # and "flushes": the drains of every candidate prepared, with pg_jobs's
                    # asynchronous and chained claims (bash bench/run.sh --only flushes)
                    help="comma-separated workloads to run (the report needs them all)")
    ap.add_argument("--command", default="bash bench/run.sh")
    ap.add_argument("--out", default="bench-results.json")
    ap.add_argument("--report", default="bench-report.md")
    args = ap.parse_args()

    if args.release:
        dbs = {}
        for spec in args.release:
            major, dsn = spec.split(":", 1)
            dbs[major] = Db(dsn, release_bin(major))
        rows = run_release_drains(dbs, args)
        with open(args.out, "w") as f:
            json.dump({"command": args.command, "machine": machine(", ".join(sorted(dbs))),
                       "args": vars(args), "drain": rows}, f, indent=1)
        text = release_report(rows, args, args.command)
        with open(args.report, "w") as f:
            f.write(text)
        print(text)
        return

    db = Db(args.dsn)
    subprocess.run([PGBENCH, "-i", "-s", "10", "-q", args.dsn], check=True, capture_output=True)
    cands = [PgJobs(), Plain(), Pgmq(fetch_pgmq_sql()), PgJobsNoHistory()]
    for cand in cands:
        cand.setup(db)
    results = {"command": args.command, "machine": machine(), "args": vars(args), "drain": [], "enqueue": [],
               "claim_backlog": [], "churn": [], "cpu_bound": [], "heartbeat": {}, "node": [],
               "flushes": [], "claim_latency": []}
    only = set(args.only.split(","))
    steps = [("drain", lambda: run_drains(db, cands, args, results)),
             ("cpu", lambda: run_cpu_bound(db, cands, args, results)),
             ("enqueue", lambda: run_enqueue(db, cands, args, results)),
             ("heartbeat", lambda: run_heartbeats(db, args, results)),
             ("claim", lambda: run_claim_backlogs(db, args, results)),
             ("churn", lambda: run_churn(db, args, results)),
             ("node", lambda: run_node_peer(db, args, results)),
             ("flushes", lambda: run_flushes(db, cands, args, results))]
    for name, step in steps:
        if name in only:
            step()
    partial = only != {name for name, _ in steps} or args.clients != "1,4,8"
    suffix = "-".join(sorted(only)) + ("" if args.clients == "1,4,8" else "-k" + args.clients.replace(",", ""))
    out = args.out.replace(".json", "-" + suffix + ".json") if partial else args.out
    with open(out, "w") as f:  # a partial run keeps the full run's file
        json.dump(results, f, indent=1)
    if only == {"flushes"}:  # the fewer-flushes comparison alone: its table and its targets
        text, missed = flushes_report(results)
        print(text)
        sys.exit(1 if missed else 0)
    if partial:
        print(json.dumps({k: v for k, v in results.items() if v and k not in ("args",)}, indent=1))
        return
    text, missed = report(results, args)
    with open(args.report, "w") as f:
        f.write(text)
    print(text)
    log(f"{missed} target(s) missed" if missed else "every target met")
    sys.exit(1 if missed else 0)


def machine(releases=None):
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True,
                         text=True).stdout.strip()
    mem = subprocess.run(["sh", "-c", "free -g | awk '/Mem:/ {print $2}'"], capture_output=True, text=True).stdout.strip()
    release = releases or os.path.basename(os.path.dirname(PG_BIN.rstrip("/")))
    return f"{os.cpu_count()} cores ({cpu}), {mem} GiB, PostgreSQL {release}, {time.strftime('%Y-%m-%d')}"


if __name__ == "__main__":
    main()
