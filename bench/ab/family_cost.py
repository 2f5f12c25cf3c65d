"""A/B of what the fixes after 551070c added to the hot paths: jobs._slot_freed in the
RETURNING lists of jobs.complete and jobs.complete_many (and the claim's burials), the claim's
wait moved into a subtransaction per look, the statement-level trigger
jobs_family_statement_end, which every UPDATE and DELETE of jobs_data.jobs fires, and the
tenant test in every fence (jobs._tenant_ok, and the bound tenants in complete_many). ab_new
(this build) against ab_old (the same build with that trigger dropped and the bodies of
jobs.claim, jobs.complete, jobs.complete_many, jobs.heartbeat and jobs._family_changed of
551070c).
Run on a cluster that preloads pg_jobs (the wake-ups are noted only then). The same
measurements as bench/ab/claim_check_cost.py: CPU-bound, 4 clients, 8 repetitions. Then the
cost of one jobs._slot_freed call, a million in one transaction against the same query
without it.

    python bench/ab/family_cost.py "host=127.0.0.1 port=PORT user=postgres"
"""

import sys

from claim_check_cost import body_from, run_ab, sql
from outcomes_cost import timed_per_call


def make_old(dsn):
    sql(dsn, "drop trigger jobs_family_statement_end on jobs_data.jobs")
    for fn, path in (("jobs.claim(text, text[], int, interval, interval)", "sql/claim.sql"),
                     ("jobs.complete(uuid, bigint, jsonb)", "sql/settle.sql"),
                     ("jobs.complete_many(uuid[], bigint[], jsonb[])", "sql/settle.sql"),
                     ("jobs.heartbeat(uuid, bigint, interval)", "sql/settle.sql"),
                     ("jobs._family_changed()", "sql/children.sql")):
        body_from(dsn, fn, "551070c", path)


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old, reps=8)
    cost = timed_per_call(sys.argv[1] + " dbname=ab_new", "jobs._slot_freed('bench', null)", "'bench'")
    print(f"jobs._slot_freed: {cost:.3f} us a call")
