"""The backend CPU of one call of the claim's hot paths, A/B: two databases of one cluster,
ab_new (this build) and ab_old (this build with the bodies of jobs.claim, jobs.complete,
jobs.complete_many and jobs.complete_and_claim, and the triggers on jobs_data.jobs, at COMMIT). One
connection each, CPU-bound (synchronous_commit = off); the CPU the backend spent over N
calls, from /proc (so the cluster must run on this machine), divided by N; repetitions
alternating, medians. The calls are what a worker library makes, a lease given:

- claim:   jobs.claim('w', array['bench'], 1, '30 s'), over a queue filled before each run;
- chained: jobs.complete_and_claim(the job held, its claim, 'w', array['bench'], 1, '30 s');
- empty:   the same claim of an empty queue (a worker polling an idle queue);
- chained10: jobs.complete_and_claim of the 10 jobs held, claiming 10 (a worker at batch 10);
- settle:  the claim, then jobs.complete(the job, its claim, 'null'), as a library completes a
  job whose handler wrote (the CPU of both calls).

    python bench/ab/claim_cpu_cost.py "host=127.0.0.1 port=PORT user=postgres" COMMIT [N] [REPS] [WHAT,...]

against a cluster of scripts/cluster.sh (pg_jobs preloaded, every database swept).
"""

import os
import re
import statistics
import subprocess
import sys

import psycopg
from claim_check_cost import BATCH, ROOT, body_from, sql

CLAIM = "select id, claim from jobs.claim('w', array['bench'], 1, '30 s')"
COMPLETE = "select jobs.complete(%s, %s, 'null')"
CHAINED = "select id, claim from jobs.complete_and_claim(%s, %s, 'w', array['bench'], %s, '30 s')"
BATCH_MAX = 10000  # jobs.enqueue_batch's limit


def backend_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def fill_queue(dsn, n):
    """The queue `bench` emptied and filled with n ready jobs, the table vacuumed."""
    sql(dsn, "truncate jobs_data.jobs, jobs_data.attempts")
    for start in range(0, n, BATCH_MAX):
        sql(dsn, BATCH, ("bench", min(BATCH_MAX, n - start)))
    sql(dsn, "vacuum analyze jobs_data.jobs")


def cpu_per_call(conn, call, n, warm=200):
    """µs of the connection's backend CPU per call of call(i), i counting from 0 over warm + n
    calls; the first `warm`, which make the connection's plans, are not counted."""
    pid = conn.info.backend_pid
    for i in range(warm):
        call(i)
    before = backend_cpu(pid)
    for i in range(warm, warm + n):
        call(i)
    return (backend_cpu(pid) - before) / n * 1e6


def per_call(dsn, what, n):
    batch = 10 if what == "chained10" else 1
    fill_queue(dsn, 0 if what == "empty" else (n + 500) * batch)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set synchronous_commit = off")
        held = conn.execute(CLAIM.replace("1, '30 s'", f"{batch}, '30 s'")).fetchall()

        def call(_):
            nonlocal held
            if what.startswith("chained"):
                held = conn.execute(CHAINED, ([h[0] for h in held], [h[1] for h in held], batch)).fetchall()
            elif what == "settle":
                conn.execute(COMPLETE, held[0])
                held = conn.execute(CLAIM).fetchall()
            else:
                held = conn.execute(CLAIM).fetchall()

        return cpu_per_call(conn, call, n)


def triggers_from(dsn, commit):
    """Gives jobs_data.jobs the triggers of sql/*_triggers.sql at commit (their functions stay
    this build's)."""
    for path in ("sql/children_triggers.sql", "sql/ordering_triggers.sql"):
        old = subprocess.run(["git", "-C", ROOT, "show", f"{commit}:{path}"], capture_output=True, text=True,
                             check=True).stdout
        for name, table in re.findall(r"create trigger (\w+)\s.*?\son (\S+)", old, re.S):
            sql(dsn, f"drop trigger if exists {name} on {table}")
        sql(dsn, old)


def main(base, commit, n=3000, reps=6):
    dbs = {"new": base + " dbname=ab_new", "old": base + " dbname=ab_old"}
    for label, dsn in dbs.items():
        sql(base, f"drop database if exists ab_{label}")
        sql(base, f"create database ab_{label}")
        sql(dsn, "create extension pg_jobs")
    body_from(dbs["old"], "jobs.claim(text, text[], int, interval, interval)", commit, "sql/claim.sql")
    body_from(dbs["old"], "jobs.complete(uuid, bigint, jsonb)", commit, "sql/settle.sql")
    body_from(dbs["old"], "jobs.complete_many(uuid[], bigint[], jsonb[])", commit, "sql/settle.sql")
    body_from(dbs["old"], "jobs.complete_and_claim(uuid[], bigint[], text, text[], int, interval, jsonb[])",
              commit, "sql/settle.sql")
    triggers_from(dbs["old"], commit)
    for what in sys.argv[5].split(",") if len(sys.argv) > 5 else ("claim", "chained", "empty", "chained10", "settle"):
        results = {"new": [], "old": []}
        for rep in range(reps):
            for label in ("new", "old") if rep % 2 == 0 else ("old", "new"):
                results[label].append(per_call(dbs[label], what, n))
        for label, values in results.items():
            print(f"{what} ({label}): µs of backend CPU per call {', '.join(f'{v:.0f}' for v in values)}; "
                  f"median {statistics.median(values):.0f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:5]))
