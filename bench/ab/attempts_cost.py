"""A/B of what the attempt history (jobs.attempts) added to the hot paths, for jobs that
complete on their first attempt: ab_new (this build) against ab_old (the same build with the
bodies of jobs.claim, jobs.complete and jobs.complete_many of 102500b, before the history).
The same measurements as bench/ab/claim_check_cost.py: CPU-bound, 4 clients, 8 repetitions.

    python bench/ab/attempts_cost.py "host=127.0.0.1 port=PORT user=postgres"
"""

import sys

from claim_check_cost import body_from, run_ab


def make_old(dsn):
    for fn, path in (("jobs.claim(text, text[], int, interval, interval)", "sql/claim.sql"),
                     ("jobs.complete(uuid, bigint, jsonb)", "sql/settle.sql"),
                     ("jobs.complete_many(uuid[], bigint[], jsonb[])", "sql/settle.sql")):
        body_from(dsn, fn, "102500b", path)


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old, reps=8)
