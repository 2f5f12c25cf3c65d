"""The backend CPU of one call of each hot-path function, one job a call, in one database
(ab_hot) of a cluster on this machine: the CPU the backend spent over N calls, from /proc,
divided by N, repetitions, medians; CPU-bound (synchronous_commit = off). Each call is its
own transaction, as a worker makes it, and passes what a worker library passes (a lease to
the claims, a JSON result to the completions):

    python bench/ab/hot_calls.py "host=127.0.0.1 port=PORT user=postgres" [N] [REPS] [CALL,...]

against a cluster of scripts/cluster.sh (pg_jobs preloaded).
"""

import statistics
import sys

import psycopg
from claim_check_cost import sql
from claim_cpu_cost import cpu_per_call, fill_queue

# Each: (what, the statement, whether it needs held jobs: %s, %s are a job's id and claim).
CALLS = (
    ("claim", "select id, claim from jobs.claim('w', array['bench'], 1, '30 s')", False),
    ("complete_and_claim", "select id, claim from jobs.complete_and_claim(%s, %s, 'w', array['bench'], 1, '30 s')",
     "chained"),
    ("complete", "select jobs.complete(%s, %s, 'null'::jsonb)", True),
    ("complete_many", "select count(*) from jobs.complete_many(array[%s]::uuid[], array[%s]::bigint[])", True),
    ("heartbeat", "select jobs.heartbeat(%s, %s)", True),
    ("fail", "select jobs.fail(%s, %s, 'boom')", True),
    ("snooze", "select jobs.snooze(%s, %s, now() + interval '1 hour')", True),
    ("assert_claim", "select jobs.assert_claim(%s, %s)", True),
    ("start_step", "select done from jobs.start_step(%s, %s, 'one')", True),
    ("save_step", "select jobs.save_step(%s, %s, 'one', '1'::jsonb)", True),
    ("fail_step", "select jobs.fail_step(%s, %s, 'one', 'boom')", True),
)


def per_call(dsn, statement, held, n):
    fill_queue(dsn, n + 500)
    jobs = []
    if held is True:
        while len(jobs) < n + 200:
            jobs += sql(dsn, "select id, claim from jobs.claim('w', array['bench'], 1000, '1 hour')")
        sql(dsn, "vacuum analyze jobs_data.jobs")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set synchronous_commit = off")
        last = conn.execute(CALLS[0][1]).fetchone()

        def call(i):
            nonlocal last
            if held == "chained":
                last = conn.execute(statement, ([last[0]], [last[1]])).fetchone()
            elif held:
                conn.execute(statement, jobs[i])
            else:
                conn.execute(statement)

        return cpu_per_call(conn, call, n)


def main(base, n=3000, reps=3, only=None):
    dsn = base + " dbname=ab_hot"
    sql(base, "drop database if exists ab_hot")
    sql(base, "create database ab_hot")
    sql(dsn, "create extension pg_jobs")
    calls = [c for c in CALLS if only is None or c[0] in only.split(",")]
    results = {what: [] for what, _, _ in calls}
    for _ in range(reps):
        for what, statement, held in calls:
            results[what].append(per_call(dsn, statement, held, n))
    print("| call, one job | µs of backend CPU per call, each repetition | median |")
    print("|---|---|---|")
    for what, values in results.items():
        print(f"| `{what}` | {', '.join(f'{v:.0f}' for v in values)} | {statistics.median(values):.0f} |")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:4]), *sys.argv[4:5])
