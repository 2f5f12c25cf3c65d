"""What one tenant's kept history costs the others: 100,000 children finished a month ago
under a parent that waits until 2099 (retention keeps a finished child while its parent is
live), against an empty history. Measures, in each of two databases of the server given
(made here and dropped after), another tenant's jobs.complete() (claim, then complete: one in
8 also takes a share of retention) and a retention pass (jobs.sweep()), and prints the medians
and the ratio kept / empty. Run it on a cluster whose background worker sweeps another
database (tests/cluster.conf), so that only these calls prune.

    python bench/ab/kept_children_cost.py "host=127.0.0.1 port=PORT user=postgres" [--children N]
"""

import argparse
import statistics
import time
import uuid

import psycopg


def fill(conn, children):
    """A parent waiting until 2099 and its children, completed a month ago."""
    parent = conn.execute("select (jobs.enqueue('fan', tenant_id => 'big', run_at => '2099-01-01')).id").fetchone()[0]
    for start in range(0, children, 10000):
        conn.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
                     "'name', 'kid', 'tenant_id', 'big', 'parent_id', %s::text)) "
                     "from generate_series(1, %s)))", (str(parent), min(10000, children - start)))
    conn.execute("update jobs_data.jobs set state = 'completed', finished_at = now() - interval '30 days' "
                 "where parent_id = %s", (parent,))
    conn.execute("vacuum analyze jobs_data.jobs")


def measure(conn, completes, passes):
    """Median microseconds of another tenant's claim and complete, and of a retention pass."""
    conn.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
                 "'name', 'small', 'tenant_id', 'other')) from generate_series(1, %s)))", (completes,))
    took = []
    for _ in range(completes):
        job, claim = conn.execute("select id, claim from jobs.claim('w')").fetchone()
        start = time.perf_counter()
        conn.execute("select jobs.complete(%s, %s)", (job, claim))
        took.append(time.perf_counter() - start)
    swept = []
    for _ in range(passes):
        start = time.perf_counter()
        conn.execute("select count(*) from jobs.sweep()")
        swept.append(time.perf_counter() - start)
    return statistics.median(took) * 1e6, statistics.mean(took) * 1e6, statistics.median(swept) * 1e6


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("--children", type=int, default=100000)
    p.add_argument("--completes", type=int, default=4000)
    p.add_argument("--passes", type=int, default=40)
    args = p.parse_args()
    results = {}
    for kind in ("empty", "kept"):
        name = f"bench_kept_{kind}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(args.dsn, autocommit=True) as admin:
            admin.execute(f"create database {name}")
        try:
            with psycopg.connect(f"{args.dsn} dbname={name}", autocommit=True) as conn:
                conn.execute("create extension pg_jobs")
                if kind == "kept":
                    fill(conn, args.children)
                results[kind] = measure(conn, args.completes, args.passes)
        finally:
            with psycopg.connect(args.dsn, autocommit=True) as admin:
                admin.execute(f"drop database {name} with (force)")
    (c_e, m_e, s_e), (c_k, m_k, s_k) = results["empty"], results["kept"]
    print(f"{'':28}{'empty':>10}{'kept':>10}{'kept/empty':>12}")
    print(f"{'complete(), median µs':28}{c_e:10.0f}{c_k:10.0f}{c_k / c_e:12.2f}")
    print(f"{'complete(), mean µs':28}{m_e:10.0f}{m_k:10.0f}{m_k / m_e:12.2f}")
    print(f"{'sweep pass, median µs':28}{s_e:10.0f}{s_k:10.0f}{s_k / s_e:12.2f}")


if __name__ == "__main__":
    main()
