"""A/B of what rate limits and the look past held-back candidates added to jobs.claim, for
jobs with no limit: ab_new (this build) against ab_old (the same build with jobs.claim's body
of 2f2891e, which stopped at the first look). The same measurements as
bench/ab/claim_check_cost.py: CPU-bound, 4 clients, 8 repetitions, the order alternating.

    python bench/ab/limits_cost.py "host=127.0.0.1 port=PORT user=postgres"
"""

import sys

from claim_check_cost import body_from, run_ab


def make_old(dsn):
    body_from(dsn, "jobs.claim(text, text[], int, interval, interval)", "2f2891e", "sql/claim.sql")


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old, reps=8)
