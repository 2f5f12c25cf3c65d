"""The instructions a Python worker process executes per job, counted by valgrind's callgrind:
the same from run to run (within 1%), where its CPU time on a shared machine varies by a third,
so a change of a few percent in the worker shows. One worker process of bench/libraries.py
(bench/python/workers.py) runs under callgrind with counting off; it drains --warm-up jobs (its
connections made, its statements prepared), then counting is turned on, --jobs no-op jobs are
enqueued in one commit and drained, and counting is turned off. Under callgrind the worker runs
some fifty times slower than the server answers, so its claims come back full: this is the
worker at its busiest, not its throughput. Systems alternate, --reps times.

    apt-get install valgrind   # callgrind_control and callgrind_annotate come with it
    .venv/bin/python bench/python/instructions.py --systems library-async,library-sync,bare \\
        --dsn postgres://postgres@127.0.0.1:54430/postgres [--concurrency 32] [--jobs 2000] \\
        [--reps 2] [--root DIR]   # the checkout whose bench/ and clients/ to run
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

import psycopg

HERE = os.path.dirname(os.path.abspath(__file__))
LEFT = "select count(*) from jobs_data.jobs where queue = 'bench' and state in ('ready', 'running')"


def enqueue(args, env, jobs):
    subprocess.run([sys.executable, os.path.join(args.root, "bench", "python", "workers.py"), "--system", "bare",
                    "--dsn", args.dsn, "--enqueue", str(jobs)], check=True, env=env)


def drained(args, system):
    deadline = time.monotonic() + 600
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        while conn.execute(LEFT).fetchone()[0] > 0:
            assert time.monotonic() < deadline, f"{system} did not drain"
            time.sleep(0.2)


def once(args, system):
    env = dict(os.environ, PYTHONPATH=os.path.join(args.root, "clients", "python", "src"))
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        worker = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
             sys.executable, os.path.join(args.root, "bench", "python", "workers.py"), "--system", system,
             "--dsn", args.dsn, "--concurrency", str(args.concurrency)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        try:
            assert worker.stdout.readline().strip() == "ready", f"{system} worker did not start"
            enqueue(args, env, args.warm_up)
            drained(args, system)
            subprocess.run(["callgrind_control", "--instr=on", str(worker.pid)], check=True, capture_output=True)
            enqueue(args, env, args.jobs)
            drained(args, system)
            subprocess.run(["callgrind_control", "--instr=off", str(worker.pid)], check=True, capture_output=True)
        finally:
            worker.terminate()
            worker.communicate(timeout=120)
        totals = subprocess.run(["callgrind_annotate", out], check=True, capture_output=True, text=True).stdout
    line = next(x for x in totals.splitlines() if "PROGRAM TOTALS" in x)
    return int(line.split()[0].replace(",", "")) / args.jobs


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", required=True, help="comma-separated: library-async, library-sync, bare, ...")
    p.add_argument("--dsn", required=True)
    p.add_argument("--concurrency", type=int, default=32)
    p.add_argument("--jobs", type=int, default=2000)
    p.add_argument("--warm-up", type=int, default=300)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(HERE)))
    args = p.parse_args()
    systems = args.systems.split(",")
    counts = {s: [] for s in systems}
    for _ in range(args.reps):
        for s in systems:
            counts[s].append(once(args, s))
            print(f"{s}: {counts[s][-1]:,.0f} instructions per job", file=sys.stderr, flush=True)
    print("| system | instructions per job (each rep) |")
    print("|---|---|")
    for s in systems:
        print(f"| {s} | {' / '.join(f'{v:,.0f}' for v in counts[s])} |")


if __name__ == "__main__":
    main()
