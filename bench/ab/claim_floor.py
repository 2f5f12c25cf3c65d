"""What a claim of one job costs beside the statements it could be: the backend CPU per call
(from /proc, so the cluster must run on this machine), one connection, CPU-bound
(synchronous_commit = off), N calls after 200, repetitions alternating, medians, of

- plain:  the hand-written queue's claim, one UPDATE ... WHERE id IN (SELECT ... LIMIT 1 FOR
          UPDATE SKIP LOCKED) on a table of one partial index (bench/run.py's plain.jobs);
- bare:   the same statement on jobs_data.jobs (its indexes and triggers), setting the
          columns a claim sets, no PL/pgSQL;
- claim:  jobs.claim('w', array['bench'], 1, '30 s');
- fewer:  jobs.claim in a database without the indexes that no claim or settle reads.

    python bench/ab/claim_floor.py "host=127.0.0.1 port=PORT user=postgres" [N] [REPS]

against a cluster of scripts/cluster.sh (pg_jobs preloaded). Makes the databases ab_floor and
ab_fewer.
"""

import statistics
import sys

import psycopg
from claim_check_cost import sql
from claim_cpu_cost import cpu_per_call, fill_queue

FEATURE_INDEXES = ("jobs_waiting_idx", "jobs_wait_until_idx", "jobs_children_idx", "jobs_finished_idx",
                   "jobs_attached_idx", "jobs_tags_idx", "jobs_run_deadline_idx", "jobs_ordering_idx",
                   "jobs_idempotency_live_idx")
PLAIN = """with c as (update plain.jobs set claimed_at = now()
                      where id in (select id from plain.jobs where claimed_at is null
                                   order by id limit 1 for update skip locked)
                      returning id)
           select id from c"""
BARE = """update jobs_data.jobs as j
          set state = 'running', attempt = j.attempt + 1, claim = j.claim + 1, claimed_by = 'w',
              claimed_at = now(), lease_expires_at = now() + interval '30 s',
              lease_scan_at = now() + interval '30 s'
          where j.id = (select x.id from jobs_data.jobs as x where x.queue = 'bench' and x.state = 'ready'
                        order by x.priority desc, x.run_at limit 1 for update skip locked)
          returning j.id, j.claim"""
CLAIM = "select id, claim from jobs.claim('w', array['bench'], 1, '30 s')"


def per_call(dsn, what, query, n):
    if what == "plain":
        sql(dsn, "truncate plain.jobs")
        sql(dsn, "insert into plain.jobs (payload) select jsonb_build_object('n', g) from generate_series(1, %s::int) g",
            (n + 500,))
        sql(dsn, "vacuum analyze plain.jobs")
    else:
        fill_queue(dsn, n + 500)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set synchronous_commit = off")
        return cpu_per_call(conn, lambda _: conn.execute(query), n)


def main(base, n=3000, reps=4):
    floor, fewer = base + " dbname=ab_floor", base + " dbname=ab_fewer"
    for name, dsn in (("ab_floor", floor), ("ab_fewer", fewer)):
        sql(base, f"drop database if exists {name}")
        sql(base, f"create database {name}")
        sql(dsn, "create extension pg_jobs")
    for index in FEATURE_INDEXES:
        sql(fewer, f"drop index jobs_data.{index}")
    sql(floor, "create schema plain")
    sql(floor, """create table plain.jobs (id bigserial primary key, payload jsonb not null,
                                          run_at timestamptz not null default now(), claimed_at timestamptz)""")
    sql(floor, "create index on plain.jobs (id) where claimed_at is null")
    runs = {"plain": (floor, PLAIN), "bare": (floor, BARE), "claim": (floor, CLAIM), "fewer": (fewer, CLAIM)}
    results = {what: [] for what in runs}
    for rep in range(reps):
        for what in runs if rep % 2 == 0 else reversed(list(runs)):
            dsn, query = runs[what]
            results[what].append(per_call(dsn, what, query, n))
    for what, values in results.items():
        print(f"{what}: µs of backend CPU per call {', '.join(f'{v:.0f}' for v in values)}; "
              f"median {statistics.median(values):.0f}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:4]))
