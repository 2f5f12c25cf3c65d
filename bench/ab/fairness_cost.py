"""A/B of what fair queues added to the hot paths of queues without fairness, in two databases
of one cluster: ab_new (this build) and ab_old (the same build with the bodies of jobs.claim,
jobs._enqueue and jobs._insert_unkeyed of 077eafd, and without jobs_fair_idx). No queue is
fair. CPU-bound (synchronous_commit = off), 4 clients, 4 repetitions, the order alternating:
single enqueues, heartbeats over 1000 held jobs, drains at B = 1 and B = 10.

    python bench/ab/fairness_cost.py "host=127.0.0.1 port=PORT user=postgres" [CLIENTS]

(CLIENTS 1: one client alone, which a 2-core machine measures with less spread.)

against a cluster of scripts/cluster.sh (pg_jobs preloaded, every database swept).
"""

import sys

from claim_check_cost import body_from, run_ab, sql


def make_old(dsn):
    body_from(dsn, "jobs.claim(text, text[], int, interval, interval)", "077eafd", "sql/claim.sql")
    body_from(dsn, "jobs._enqueue(jobs.job_spec[], text)", "077eafd", "sql/enqueue.sql")
    body_from(dsn, "jobs._insert_unkeyed(jobs.job_spec[], uuid[], uuid[], timestamptz, boolean[])",
              "077eafd", "sql/enqueue.sql")
    sql(dsn, "drop index if exists jobs_data.jobs_fair_idx")  # (made only when a queue is made fair)


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old, batches=(1, 10), clients=int(sys.argv[2]) if len(sys.argv) > 2 else 4)
