"""A/B of what child jobs added to the hot paths: the row trigger on jobs_data.jobs
(sql/children.sql), whose WHEN clause every UPDATE that sets a job's state evaluates per row,
and whose DELETE twin every delete does. ab_new (this build) against ab_old (the same build
with the two triggers dropped). The same measurements as bench/ab/claim_check_cost.py:
CPU-bound, 4 clients, 8 repetitions.

    python bench/ab/children_cost.py "host=127.0.0.1 port=PORT user=postgres"
"""

import sys

from claim_check_cost import run_ab, sql


def make_old(dsn):
    sql(dsn, "drop trigger jobs_family_changed on jobs_data.jobs")
    sql(dsn, "drop trigger jobs_child_deleted on jobs_data.jobs")


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old, reps=8)
