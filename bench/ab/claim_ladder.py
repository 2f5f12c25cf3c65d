"""What each part of a claim of one job costs: the backend CPU per call (from /proc, so the
cluster must run on this machine), one connection, CPU-bound (synchronous_commit = off), N
calls after 200 over a queue filled before each run, repetitions alternating in order,
medians. A ladder from a round trip to jobs.claim, each rung one statement that claims the
first ready job as a claim does, with one part of the contract more than the rung before:

    python bench/ab/claim_ladder.py "host=127.0.0.1 port=PORT user=postgres" [N] [REPS]

against a cluster of scripts/cluster.sh (pg_jobs preloaded). Makes the database ab_ladder;
each rung above the bare statement is a PL/pgSQL function of the schema bench there, with the
settings of the API functions (SECURITY DEFINER, search_path, generic plans, no JIT, no
sequential scans).
"""

import statistics
import sys

import psycopg
from claim_check_cost import sql
from claim_cpu_cost import cpu_per_call, fill_queue
from claim_floor import BARE


# The parts of the contract a rung adds, in order.
RUNGS = (
    ("function", "the same in a PL/pgSQL function with the API functions' settings"),
    ("scans", "+ the due and lapsed scans (three index scans, merged in claim order)"),
    ("queues", "+ the queues: each named once, paused and fair ones looked up"),
    ("policy", "+ the job type's policy: its lease and timeout"),
    ("fence", "+ the token, the tenant binding, the deadline and the lease capped by it"),
    ("checks", "+ the argument checks and the asynchronous commit of a lone claim"),
)


def scans(parts, queue):
    """The candidate scans of a rung, for the queue expression given."""
    tenants = " and (v_tenants is null or j.tenant_id = any(v_tenants))" if "fence" in parts else ""
    plain = " and p.plain is not false" if "queues" in parts else ""
    ready = f"""select * from (select j.id, j.priority, j.run_at from jobs_data.jobs as j
                   where j.queue = {queue} and j.state = 'ready'{tenants}{plain}
                   order by j.priority desc, j.run_at limit max_jobs for update skip locked) as ready"""
    if "scans" not in parts:
        return ready
    return f"""{ready}
            union all
            select * from (select j.id, j.priority, j.run_at from jobs_data.jobs as j
                   where j.queue = {queue} and j.state in ('delayed', 'suspended') and j.run_at <= v_now{tenants}{plain}
                   order by j.run_at limit max_jobs for update skip locked) as due
            union all
            select * from (select j.id, j.priority, j.run_at from jobs_data.jobs as j
                   where j.queue = {queue} and j.state = 'running' and j.lease_scan_at <= v_now
                     and j.lease_expires_at <= v_now{tenants}
                   order by j.lease_scan_at limit max_jobs for update skip locked) as lapsed"""


def function(name, parts):
    """The rung's function: one UPDATE that claims the first max_jobs candidates."""
    if "queues" in parts:
        source = f"""unnest(queues) with ordinality as q(queue, ord)
          left join lateral (select p.paused, p.fairness = 'none' as plain from jobs_data.queues as p
                             where p.queue = q.queue) as p on true
          cross join lateral ({scans(parts, "q.queue")}) as c
          where q.ord = array_position(queues, q.queue) and p.paused is not true"""
    else:
        source = f"({scans(parts, 'queues[1]')}) as c"
    lease = f"coalesce({name}.lease, p.lease)"
    if "fence" in parts:
        sets = f"""claim = jobs._next_claim(j.claim), claimed_by = worker_id, claimed_at = v_now,
            finished_at = null, updated_at = v_now,
            (lease, deadline, lease_expires_at, lease_scan_at) =
              (select {lease}, least(v_now + coalesce(j.timeout, p.timeout), j.run_deadline),
                      least(v_now + {lease}, v_now + coalesce(j.timeout, p.timeout), j.run_deadline),
                      least(v_now + {lease}, v_now + coalesce(j.timeout, p.timeout), j.run_deadline)
               from jobs._policy(j.name) as p)"""
    elif "policy" in parts:
        sets = f"""claim = j.claim + 1, claimed_by = worker_id, claimed_at = v_now,
            (lease, lease_expires_at, lease_scan_at) =
              (select {lease}, v_now + {lease}, v_now + {lease} from jobs._policy(j.name) as p)"""
    else:
        sets = """claim = j.claim + 1, claimed_by = worker_id, claimed_at = v_now,
            lease = interval '30 s', lease_expires_at = v_now + interval '30 s',
            lease_scan_at = v_now + interval '30 s'"""
    checks = """
      if worker_id is null or length(worker_id) > 200 or queues is null
         or array_position(queues, null) is not null or cardinality(queues) not between 1 and 100
         or max_jobs is null or max_jobs not between 1 and 1000 then
        raise exception 'bad arguments';
      end if;
      if lease <= interval '0' or lease > interval '7 days' then
        raise exception 'bad lease';
      end if;
      perform jobs._async_if_alone('claim');""" if "checks" in parts else ""
    tenants = "jobs._tenants()" if "fence" in parts else "null"
    return f"""
    create function bench.{name}(worker_id text, queues text[], max_jobs int, lease interval)
    returns table (id uuid, claim bigint) language plpgsql as $body$
    declare
      v_now     timestamptz := jobs.clock();
      v_tenants text[] := {tenants};
    begin{checks}
      return query
      update jobs_data.jobs as j
      set state = 'running', attempt = j.attempt + 1, {sets}
      where j.id = any(array(select c.id from {source}
                             order by c.priority desc, c.run_at limit max_jobs))
      returning j.id, j.claim;
    end
    $body$;
    alter function bench.{name}(text, text[], int, interval) security definer
      set search_path = pg_catalog, pg_temp set plan_cache_mode = force_generic_plan set jit = off
      set enable_seqscan = off;
    """


def steps(dsn):
    """(what, the statement) of each rung, the functions made in dsn's database."""
    sql(dsn, "drop schema if exists bench cascade")
    sql(dsn, "create schema bench")
    out = [("a round trip and a commit: select 1", "select 1"),
           ("one UPDATE on jobs_data.jobs claiming the first ready job (no function)", BARE)]
    parts = set()
    for i, (part, what) in enumerate(RUNGS):
        parts.add(part)
        sql(dsn, function(f"rung{i}", parts))
        out.append((what, f"select * from bench.rung{i}('w', array['bench'], 1, '30 s')"))
    out.append(("jobs.claim: + finding what its common case cannot claim (a limit, a key, a lapsed "
                "lease, a burial, a fair queue)", "select id, claim from jobs.claim('w', array['bench'], 1, '30 s')"))
    return out


def main(base, n=3000, reps=6):
    dsn = base + " dbname=ab_ladder"
    sql(base, "drop database if exists ab_ladder")
    sql(base, "create database ab_ladder")
    sql(dsn, "create extension pg_jobs")
    ladder = steps(dsn)
    results = {what: [] for what, _ in ladder}
    for rep in range(reps):
        for what, statement in ladder if rep % 2 == 0 else ladder[::-1]:
            fill_queue(dsn, n + 500)
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("set synchronous_commit = off")
                results[what].append(cpu_per_call(conn, lambda _, s=statement: conn.execute(s), n))
    print("| rung | µs of backend CPU per call, each repetition | median |")
    print("|---|---|---|")
    for what, values in results.items():
        print(f"| {what} | {', '.join(f'{v:.0f}' for v in values)} | {statistics.median(values):.0f} |")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:4]))
