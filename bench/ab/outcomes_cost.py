"""A/B of what the outcome counters and the signals (src/commit/outcomes.rs) added to the hot paths:
ab_new (this build) against ab_old (the same build with the bodies of jobs.claim,
jobs.complete and jobs.complete_many of c76f33b, before them). Run on a cluster that preloads
pg_jobs (the counters are kept only then). The same measurements as
bench/ab/claim_check_cost.py: CPU-bound, 4 clients, 8 repetitions. Then the cost of one
jobs._outcome call, a million in one transaction against the same query without it, so the
drain's figures can be read against what a job costs.

    python bench/ab/outcomes_cost.py "host=127.0.0.1 port=PORT user=postgres"
"""

import sys
import time

import psycopg
from claim_check_cost import body_from, run_ab


def make_old(dsn):
    for fn, path in (("jobs.claim(text, text[], int, interval, interval)", "sql/claim.sql"),
                     ("jobs.complete(uuid, bigint, jsonb)", "sql/settle.sql"),
                     ("jobs.complete_many(uuid[], bigint[], jsonb[])", "sql/settle.sql")):
        body_from(dsn, fn, "c76f33b", path)


def timed_per_call(dsn, expr, baseline):
    """Microseconds per evaluation of expr beyond baseline: each a million times in one
    transaction, the median of 3."""
    with psycopg.connect(dsn) as conn:
        def timed(e):
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                conn.execute(f"select count({e}) from generate_series(1, 1000000) as g")
                conn.commit()
                runs.append(time.perf_counter() - start)
            return sorted(runs)[1]
        return timed(expr) - timed(baseline)


def per_call(dsn):
    """Microseconds per jobs._outcome call: the same queue each time (a batch), and two
    queues alternating (a new entry each call)."""
    same = timed_per_call(dsn, "jobs._outcome('bench', 'completed')", "'bench'")
    two = timed_per_call(dsn, "jobs._outcome('bench' || (g % 2), 'completed')", "'bench' || (g % 2)")
    print(f"jobs._outcome: {same:.3f} us a call for one queue, {two:.3f} us alternating two")


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old, reps=8)
    per_call(sys.argv[1] + " dbname=ab_new")
