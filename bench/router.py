"""What pg_jobs's router (router/pg_jobs_router.sql, PL/Proxy) costs a call: one connection
runs --rounds rounds of enqueue + claim + complete, each a statement of its own, through the
router and directly on the shard the router picks, alternating --reps times; the median time
of a round each way, and their ratio. A producer's enqueue names its tenant, so the router
routes it by hashing (jobs_router.enqueue_shard); the claim names the shard (claim's shard
argument) as a shard-aware worker would; the complete is routed by the job's id. Then the same
claim across every shard, as a worker that names no shard does. The router and shards are
scripts/shards.sh's (started here, in a directory of its own, and stopped after).

    python3 bench/router.py [--shards 3] [--rounds 2000] [--reps 5]
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shards_sh(env, *args):
    return subprocess.run(["bash", os.path.join(ROOT, "scripts/shards.sh"), *args], check=True,
                          capture_output=True, text=True, env=env).stdout


def round_trips(conn, rounds, tenant, claim_sql):
    started = time.perf_counter()
    for _ in range(rounds):
        conn.execute("select jobs.enqueue('bench', queue => 'router-bench', tenant_id => %s)", (tenant,))
        job_id, claim = conn.execute(claim_sql).fetchone()
        conn.execute("select jobs.complete(%s, %s)", (job_id, claim))
    return (time.perf_counter() - started) / rounds * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="pg_jobs-router-bench-")
    env = {**os.environ, "PG_JOBS_SHARDS_DIR": directory}
    try:
        lines = dict(line.split("=", 1) for line in shards_sh(env, "start", str(args.shards)).splitlines())
        with psycopg.connect(lines["router"], autocommit=True) as router:
            tenant = "tenant-1"
            shard = router.execute("select jobs_router.hash_shard(%s)", (tenant,)).fetchone()[0]
            with psycopg.connect(lines[f"shard{shard}"], autocommit=True) as direct:
                direct.execute("set pg_jobs.async_claims = on")
                plans = {
                    "direct": (direct, "select id, claim from jobs.claim('w', array['router-bench'])"),
                    "router, claim on the shard": (
                        router, f"select id, claim from jobs.claim('w', array['router-bench'], shard => {shard})"),
                    "router, claim across the shards": (
                        router, "select id, claim from jobs.claim('w', array['router-bench'])"),
                }
                for conn, claim_sql in plans.values():  # warm-up: connections and plans
                    round_trips(conn, 200, tenant, claim_sql)
                times = {name: [] for name in plans}
                for _ in range(args.reps):
                    for name, (conn, claim_sql) in plans.items():
                        times[name].append(round_trips(conn, args.rounds, tenant, claim_sql))
        base = statistics.median(times["direct"])
        print(f"{args.shards} shards, {args.rounds} rounds x {args.reps}: ms per enqueue + claim + complete, "
              "median (range)")
        for name, values in times.items():
            print(f"  {name}: {statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f}), "
                  f"{statistics.median(values) / base:.2f}x direct")
    finally:
        shards_sh(env, "stop")
        subprocess.run(["rm", "-rf", directory], check=False)


if __name__ == "__main__":
    main()
