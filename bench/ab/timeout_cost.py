"""A/B of what run-time limits (jobs.job_types.timeout) added to the claim and the heartbeat, for
jobs with no timeout: ab_new (this build) against ab_old (the same build with the deadline,
the capped lease and the timed-out checks taken out of jobs.claim and jobs.heartbeat). The
same measurements as bench/ab/claim_check_cost.py: CPU-bound, 4 clients, 4 repetitions.

    python bench/ab/timeout_cost.py "host=127.0.0.1 port=PORT user=postgres"
"""

import sys

from claim_check_cost import run_ab, sql

CLAIM = "jobs.claim(text, text[], int, interval, interval)"
HEARTBEAT = "jobs.heartbeat(uuid, bigint, interval)"
TIMEOUT = "coalesce(j.timeout, v_timeouts[array_position(v_policy_names, j.name)])"
LEASE = "v_leases[array_position(v_policy_names, j.name)]"


def without(ddl, pairs):
    for old, new in pairs:
        assert old in ddl, f"no longer found: {old}"
        ddl = ddl.replace(old, new)
    return ddl


def make_old(dsn):
    claim = sql(dsn, "select pg_get_functiondef(%s::regprocedure)", (CLAIM,))[0][0]
    sql(dsn, without(claim, [
        ("\n                   or jobs._timed_out(j.lease_expires_at, j.deadline)", ""),
        ("array_agg(p.timeout), ", ""),
        ("v_dead_letter, v_timeouts, v_limited", "v_dead_letter, v_limited"),
        (f"      deadline = v_now + {TIMEOUT},\n", ""),
        (f"least(v_now + {LEASE},\n                               v_now + {TIMEOUT})", f"v_now + {LEASE}"),
        (f"least(v_now + {LEASE},\n                            v_now + {TIMEOUT})", f"v_now + {LEASE}"),
        ("\n      and (j.state <> 'delayed' or j.run_at <= v_now)", ""),
        ("m.last_error, m.deadline", "m.last_error, null::timestamptz"),
    ]))
    beat = sql(dsn, "select pg_get_functiondef(%s::regprocedure)", (HEARTBEAT,))[0][0]
    sql(dsn, without(beat, [
        ("least(v_now + coalesce(heartbeat.lease, j.lease), j.deadline)", "v_now + coalesce(heartbeat.lease, j.lease)"),
    ]))


if __name__ == "__main__":
    run_ab(sys.argv[1], make_old, reps=6)
