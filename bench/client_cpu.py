"""The CPU a worker process spends per job, which throughput on a shared machine hides: one
worker process of bench/libraries.py (bench/node/workers.js or bench/python/workers.py) works
the queue `bench`; after it started, --jobs no-op jobs are enqueued in one commit, and once the
queue is empty the process's user + system CPU since the enqueue, divided by the jobs, is its
cost per job; so is the CPU of the server's backends serving that process's connections (from
/proc: the server must run on this machine; a connection the worker makes during the drain
counts whole). --warm-up N drains N jobs first, uncounted, so that the connections the worker
keeps are made and their plans cached, as bench/libraries.py's warm-up does. Systems
alternate, --reps times; medians.

    python3 bench/client_cpu.py --language node --systems library,bare --concurrency 32 \\
        --dsn postgres://postgres@127.0.0.1:54430/postgres [--jobs 20000] [--reps 3] \\
        [--root DIR]   # the checkout whose bench/ and clients/ to run (default: this one)
        [--warm-up 500]
"""

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import time

import psycopg

from libraries import PG_JOBS_LEFT
from libraries import process_cpu as cpu_seconds

HERE = os.path.dirname(os.path.abspath(__file__))


def command(root, language, system):
    if language == "node":
        return ["node", os.path.join(root, "bench", "node", "workers.js"), "--system", system]
    return [sys.executable, os.path.join(root, "bench", "python", "workers.py"), "--system", system]


def environment(root):
    """The checkout's own Python library first (an earlier commit's, for an A/B)."""
    return dict(os.environ, PYTHONPATH=os.path.join(root, "clients", "python", "src"))


BACKENDS = "select pid from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()"


@contextlib.contextmanager
def drain(args, system, jobs):
    """Enqueues `jobs` in one commit and waits for the worker to drain them; answers a connection."""
    subprocess.run(command(args.root, args.language, system) + ["--dsn", args.dsn, "--enqueue", str(jobs)],
                   check=True, env=environment(args.root))
    deadline = time.monotonic() + 600
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        while conn.execute(PG_JOBS_LEFT).fetchone()[0] > 0:
            assert time.monotonic() < deadline, f"{system} did not drain"
            time.sleep(0.1)
        yield conn


def once(args, system):
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute("delete from jobs.jobs where queue = 'bench'")
    worker = subprocess.Popen(command(args.root, args.language, system)
                              + ["--dsn", args.dsn, "--concurrency", str(args.concurrency)],
                              stdout=subprocess.PIPE, text=True, env=environment(args.root))
    try:
        assert worker.stdout.readline().strip() == "ready", f"{system} worker did not start"
        time.sleep(1)  # its connections made
        if args.warm_up:  # drained first, uncounted: the connections it makes and warms stay
            with drain(args, system, args.warm_up):
                pass
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            backends = [pid for (pid,) in conn.execute(BACKENDS)]
        before = cpu_seconds(worker.pid)
        before_server = sum(map(cpu_seconds, backends))
        with drain(args, system, args.jobs) as conn:
            used = cpu_seconds(worker.pid) - before
            # Connections the worker made during the drain count whole (they began in it).
            backends += [pid for (pid,) in conn.execute(BACKENDS) if pid not in backends]
        server = sum(map(cpu_seconds, backends)) - before_server
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=60)
    return used / args.jobs * 1e6, server / args.jobs * 1e6


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--language", choices=["node", "python"], required=True)
    p.add_argument("--systems", required=True, help="comma-separated: library, bare, library-async, ...")
    p.add_argument("--dsn", required=True)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--root", default=os.path.dirname(HERE))
    p.add_argument("--warm-up", type=int, default=0,
                   help="jobs drained first and not counted, as bench/libraries.py does (default: none)")
    args = p.parse_args()
    systems = args.systems.split(",")
    worker = {s: [] for s in systems}
    server = {s: [] for s in systems}
    for rep in range(args.reps):
        for s in systems:
            own, backends = once(args, s)
            worker[s].append(own)
            server[s].append(backends)
            print(f"rep {rep + 1} {s}: {own:.0f} us/job, its backends {backends:.0f}", file=sys.stderr, flush=True)
    print("| system | worker CPU per job (median, us) | each rep | its backends' CPU per job (median, us) | each rep |")
    print("|---|---|---|---|---|")
    for s in systems:
        print(f"| {s} | {statistics.median(worker[s]):.0f} | {', '.join(f'{v:.0f}' for v in worker[s])} "
              f"| {statistics.median(server[s]):.0f} | {', '.join(f'{v:.0f}' for v in server[s])} |")


if __name__ == "__main__":
    main()
