"""A/B of two builds of pg_jobs, each a tarball of scripts/package.sh, on one cluster of
scripts/cluster.sh (PostgreSQL 15): for each repetition, in alternating order, a build is
installed (its install.sh), the cluster restarted and a database made afresh, and measured as
bench/ab/claim_check_cost.py measures (CPU-bound, synchronous_commit = off, 4 clients): single
enqueues, heartbeats over 1000 held jobs, drains at B = 10 and at B = 100. At B = 100 also
with the same jobs given random ids (gen_random_uuid()), to show what time-ordered ids buy.

    python bench/ab/builds.py CLUSTER_DIR PORT old.tar.gz new.tar.gz [REPS]
"""

import os
import statistics
import subprocess
import sys
import tempfile

from claim_check_cost import BATCH, ROOT, hold, pgbench, sql

RANDOM_IDS = """select count(*) from jobs.enqueue_batch(
                  (select jsonb_agg(jsonb_build_object('name', 'r', 'queue', 'bench', 'id', gen_random_uuid()))
                   from generate_series(1, %s::int)))"""


def install(tarball):
    with tempfile.TemporaryDirectory() as unpacked:
        subprocess.run(["tar", "-xzf", tarball, "-C", unpacked], check=True)
        subprocess.run(["sh", os.path.join(unpacked, "install.sh")], check=True, capture_output=True)


def restart(directory, port):
    cluster = os.path.join(ROOT, "scripts/cluster.sh")
    subprocess.run(["bash", cluster, "stop", directory], check=True)
    out = subprocess.run(["bash", cluster, "start", directory, str(port)], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def measure(base, results, label):
    sql(base, "drop database if exists ab")
    sql(base, "create database ab")
    dsn = base + " dbname=ab"
    sql(dsn, "create extension pg_jobs")
    results.setdefault(("single enqueues/s", label), []).append(pgbench(dsn, "pgjobs_enqueue.sql"))
    hold(dsn)
    results.setdefault(("heartbeats/s", label), []).append(pgbench(dsn, "pgjobs_heartbeat.sql", held=1000))
    for batch, jobs in ((10, 20000), (100, 100000)):
        sql(dsn, "truncate jobs_data.jobs")
        for _ in range(jobs // 10000):
            sql(dsn, BATCH, ("b", 10000))
        sql(dsn, "vacuum analyze jobs_data.jobs")
        drained = batch * pgbench(dsn, "pgjobs_drain.sql", seconds=4, batch=batch)
        results.setdefault((f"drain B={batch}, jobs/s", label), []).append(drained)
    sql(dsn, "truncate jobs_data.jobs")
    for _ in range(10):
        sql(dsn, RANDOM_IDS, (10000,))
    sql(dsn, "vacuum analyze jobs_data.jobs")
    drained = 100 * pgbench(dsn, "pgjobs_drain.sql", seconds=4, batch=100)
    results.setdefault(("drain B=100, random ids", label), []).append(drained)


def main(directory, port, old, new, reps=3):
    builds = {"old": old, "new": new}
    results = {}
    for rep in range(reps):
        for label in ("new", "old") if rep % 2 == 0 else ("old", "new"):
            install(builds[label])
            base = restart(directory, port).replace(" dbname=postgres", "")
            measure(base, results, label)
    for (what, label), values in sorted(results.items()):
        print(f"{what:26} {label}: {[round(v) for v in values]} median {statistics.median(values):,.0f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 3)
