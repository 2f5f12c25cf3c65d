"""A/B of what returning parent_id from the claim (jobs.claimed_job, 0880cae) costs: ab_new
(this build) against ab_old (the same build with jobs.claim answering NULL for it). The same
measurements as bench/ab/claim_check_cost.py: CPU-bound, 4 clients, 4 repetitions.

    python bench/ab/parent_id_cost.py "host=127.0.0.1 port=PORT user=postgres"
"""

import sys

from claim_check_cost import run_ab, sql

CLAIM = "jobs.claim(text, text[], int, interval, interval)"


def make_old(dsn):
    claim = sql(dsn, "select pg_get_functiondef(%s::regprocedure)", (CLAIM,))[0][0]
    assert "m.parent_id" in claim, "no longer found: m.parent_id"
    sql(dsn, claim.replace("m.parent_id", "null::uuid"))


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old)
