"""A/B of what keeping who enqueued a job (jobs.jobs.enqueued_by, jobs._enqueuer: the role
and application_name of every enqueue) added to the hot paths, in two databases of one
cluster: ab_new (this build) and ab_old (the same build whose jobs._enqueuer answers NULL at
once, so nothing is read or kept). CPU-bound (synchronous_commit = off), 4 clients, 4
repetitions, the order alternating: single enqueues, heartbeats over 1000 held jobs, drains
at B = 10 and B = 100 (their jobs enqueued in batches of 10,000).

    python bench/ab/provenance_cost.py "host=127.0.0.1 port=PORT user=postgres"

against a cluster of scripts/cluster.sh (pg_jobs preloaded, every database swept).
"""

import sys

from claim_check_cost import run_ab, sql


def make_old(dsn):
    sql(dsn, "create or replace function jobs._enqueuer(p_label text, p_parent uuid) returns text "
             "language sql immutable begin atomic select null::text; end")


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old, batches=(10, 100))
