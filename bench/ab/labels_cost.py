"""A/B of what tags, run deadlines and ordering keys added to the hot paths, in two databases of
one cluster: ab_new (this build) and ab_old (the same build with the claim's body of a502ca1,
answering the two new columns as NULL, and without the three new partial indexes and the two
ordering-key triggers). None of the new options is used. CPU-bound (synchronous_commit = off),
4 clients, 4 repetitions, the order alternating: single enqueues, heartbeats over 1000 held
jobs, a drain at B = 10.

    python bench/ab/labels_cost.py "host=127.0.0.1 port=PORT user=postgres"

against a cluster of scripts/cluster.sh (pg_jobs preloaded, every database swept).
"""

import sys

from claim_check_cost import body_from, run_ab, sql


def make_old(dsn):
    body_from(dsn, "jobs.claim(text, text[], int, interval, interval)", "a502ca1", "sql/claim.sql")
    ddl = sql(dsn, "select pg_get_functiondef('jobs.claim(text, text[], int, interval, interval)'::regprocedure)")[0][0]
    assert "m.parent_id\n" in ddl
    sql(dsn, ddl.replace("m.parent_id\n", "m.parent_id, null::text[], null::jsonb\n", 1))
    for index in ("jobs_tags_idx", "jobs_run_deadline_idx", "jobs_ordering_idx"):
        sql(dsn, f"drop index jobs_data.{index}")
    for trigger in ("jobs_ordering_ended", "jobs_ordering_deleted"):
        sql(dsn, f"drop trigger {trigger} on jobs_data.jobs")


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old)
