"""What pg_jobs's router (router/pg_jobs_router.sql, PL/Proxy) costs a call: one connection
runs --rounds rounds of enqueue + claim + complete, each a statement of its own, through the
router and directly on the shard the router picks, alternating --reps times; the median time
of a round each way, and their ratio. A producer's enqueue names its tenant, so the router
routes it by hashing (jobs_router.enqueue_shard); the claim names the shard (claim's shard
argument) as a shard-aware worker would; the complete is routed by the job's id. Then the same
claim across every shard, as a worker that names no shard does. The router and shards are
scripts/shards.sh's (started here, in a directory of its own, and stopped after).

With --drain JOBS, instead: JOBS jobs drained from one shard, then from every shard at once
(JOBS each), by pgbench with bench/pgjobs_drain.sql on each shard (--clients each, batches of
--batch), as workers connected to their shard would; jobs/s, and the CPU each shard's server
spent per job (its postmaster's and every child's user + system time, the backends that ended
included: the postmaster's reaped children's).

    python3 bench/router.py [--shards 3] [--rounds 2000] [--reps 5]
    python3 bench/router.py --drain 100000 [--shards 3] [--clients 4] [--batch 100]
"""

import argparse
import os
import statistics
import subprocess
import tempfile
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_BIN = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")


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


TICK = os.sysconf("SC_CLK_TCK")


def cluster_cpu(directory):
    """Seconds of CPU the cluster in `directory` has used: its postmaster's, its reaped
    children's and its live children's."""
    with open(os.path.join(directory, "postmaster.pid")) as f:
        postmaster = int(f.readline())
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ppid, utime, stime, cutime, cstime = int(fields[1]), *map(int, fields[11:15])
        if int(pid) == postmaster:
            total += utime + stime + cutime + cstime
        elif ppid == postmaster:
            total += utime + stime
    return total / TICK


def drain(lines, directory, shards, jobs, clients, batch):
    """jobs/s of draining `jobs` jobs from each of `shards` at once, and CPU µs per job of each."""
    for shard in shards:
        with psycopg.connect(lines[f"shard{shard}"], autocommit=True) as conn:
            for start in range(0, jobs, 10000):  # (enqueue_batch's most)
                conn.execute("select jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'bench', "
                             "'queue', 'bench')) from generate_series(1, %s)))", (min(10000, jobs - start),))
            conn.execute("vacuum analyze jobs_data.jobs")
    before = {shard: cluster_cpu(f"{directory}/shard{shard}") for shard in shards}
    started = time.perf_counter()
    runs = [subprocess.Popen([os.path.join(PG_BIN, "pgbench"), "-n", "-c", str(clients), "-j", str(clients),
                              "-t", str(jobs // batch // clients + 1), "-D", f"batch={batch}",
                              "-f", os.path.join(ROOT, "bench/pgjobs_drain.sql"), lines[f"shard{shard}"]],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for shard in shards]
    for run in runs:
        run.wait()
    elapsed = time.perf_counter() - started
    cpu = {shard: (cluster_cpu(f"{directory}/shard{shard}") - before[shard]) / jobs * 1e6 for shard in shards}
    for shard in shards:
        with psycopg.connect(lines[f"shard{shard}"], autocommit=True) as conn:
            left = conn.execute("select count(*) from jobs_data.jobs where queue = 'bench' and state = 'ready'")
            assert left.fetchone()[0] == 0, f"shard {shard} was not drained"
            conn.execute("delete from jobs_data.jobs where queue = 'bench'")
    return jobs * len(shards) / elapsed, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--drain", type=int, metavar="JOBS")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="pg_jobs-router-bench-")
    env = {**os.environ, "PG_JOBS_SHARDS_DIR": directory}
    try:
        lines = dict(line.split("=", 1) for line in shards_sh(env, "start", str(args.shards)).splitlines())
        if args.drain:
            layouts = {"one shard": [0], f"{args.shards} shards at once": list(range(args.shards))}
            results = {name: [] for name in layouts}
            drain(lines, directory, [0], min(args.drain, 10000), args.clients, args.batch)  # warm-up
            for _ in range(args.reps):
                for name, shards in layouts.items():
                    results[name].append(drain(lines, directory, shards, args.drain, args.clients, args.batch))
            print(f"drain of {args.drain} jobs per shard, {args.clients} clients per shard, batches of {args.batch}, "
                  f"x {args.reps}: median (range)")
            for name, runs in results.items():
                rates = [rate for rate, _ in runs]
                per_job = [statistics.median(cpu.values()) for _, cpu in runs]
                print(f"  {name}: {statistics.median(rates):,.0f} jobs/s ({min(rates):,.0f}-{max(rates):,.0f}), "
                      f"server CPU per job per shard {statistics.median(per_job):.1f} µs "
                      f"({min(per_job):.1f}-{max(per_job):.1f})")
            return
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
