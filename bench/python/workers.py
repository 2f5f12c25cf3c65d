"""One worker process of bench/libraries.py (--language python): works the queue `bench` with
no-op handlers, `--concurrency` jobs at a time, until SIGTERM (SIGUSR1 zeroes its counts, and
it answers `reset`); then prints one JSON line {completed, first_ms, last_ms}.

    python workers.py --system library-async|library-sync|library-prefetch|bare|bare-prefetch|bare-threads|procrastinate \
        --dsn DSN --concurrency 8
    python workers.py --system ... --dsn DSN --enqueue 10000   (empties the queue, enqueues in one
                                                                statement and commit, and exits)

Each system at its fastest documented setting for a worker of that concurrency:
- library-async, library-sync: clients/python's Worker, `concurrency` slots, an `async def` or a
  plain no-op handler;
- bare: the library's loop as bare psycopg calls, for no-op handlers: claim up to `concurrency`
  jobs, then complete them all and claim as many again in one statement, on one connection
  (psycopg prepares both after their fifth run, as the library prepares its own);
- bare-prefetch: that loop claiming 500 ahead, its claims answering the library's columns (the
  fields of ctx.job) in binary, as the library's do;
- bare-threads: the same loop running each claimed job's plain no-op handler in a thread, as
  asyncio offers (`loop.run_in_executor`, a ThreadPoolExecutor of `concurrency` threads), the
  batch's together, before its settle: what a plain handler's hand-over to a thread and back
  costs without the library;
- procrastinate: its worker with `concurrency` (async no-op task), LISTEN/NOTIFY on, jobs
  deleted on completion (its bench/python/.venv: `pip install procrastinate`).
"""

import argparse
import asyncio
import json
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import psycopg

p = argparse.ArgumentParser()
p.add_argument("--system", required=True)
p.add_argument("--dsn", required=True)
p.add_argument("--concurrency", type=int, default=8)
p.add_argument("--enqueue", type=int)
args = p.parse_args()
stats = {"completed": 0, "first_ms": None, "last_ms": None}


def began():
    if stats["first_ms"] is None:
        stats["first_ms"] = time.time() * 1000


def ended(n=1):
    stats["completed"] += n
    stats["last_ms"] = time.time() * 1000


def enqueue_pg_jobs(n):
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute("delete from jobs.jobs where queue = 'bench'")
        with conn.transaction():  # one commit; enqueue_batch takes at most 10,000 at a time
            for first in range(1, n + 1, 10000):
                conn.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
                             "'name', 'bench', 'queue', 'bench', 'payload', jsonb_build_object('n', g))) "
                             "from generate_series(%s::int, %s::int) g))", (first, min(n, first + 9999)))


def procrastinate_app():
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=args.dsn))

    @app.task(name="bench", queue="bench")
    async def bench(n):
        began()
        ended()

    return app, bench


async def enqueue_procrastinate(n):
    app, bench = procrastinate_app()
    async with app.open_async():
        async with await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as conn:
            cur = await conn.execute("select to_regclass('procrastinate_jobs') is not null")
            if not (await cur.fetchone())[0]:
                await app.schema_manager.apply_schema_async()
            await conn.execute("delete from procrastinate_jobs where queue_name = 'bench'")
        if n:
            await bench.batch_defer_async(*[{"n": i} for i in range(n)])


async def library(handlers, prefetch=0):
    import pg_jobs

    if handlers == "async":
        @pg_jobs.job("bench")
        async def bench(payload, ctx):
            began()
    else:
        @pg_jobs.job("bench")
        def bench(payload, ctx):
            began()

    class Counting:
        def attempt_ended(self, queue, name, outcome, seconds):
            ended()

        def running(self, count):
            pass

    worker = pg_jobs.Worker(args.dsn, jobs=[bench], queues=["bench"], concurrency=args.concurrency,
                            metrics=Counting(), prefetch=prefetch)
    await worker.start()
    return worker.stop


def noop():
    return None


async def bare(threads=None, ahead=0, library_columns=False):
    # library_columns: the claims answer what the library's do (ctx.job's fields), in binary as
    # the library reads them.
    columns, binary, at_claim = "id, claim, payload", False, 1
    if library_columns:
        from pg_jobs.queries import CLAIMED_COLUMNS
        columns, binary = CLAIMED_COLUMNS, True
        at_claim = [c.strip() for c in CLAIMED_COLUMNS.split(",")].index("claim")
    running = asyncio.get_running_loop()
    conn = await psycopg.AsyncConnection.connect(args.dsn, autocommit=True)
    me = f"bare-{id(conn)}"
    stopping = asyncio.Event()

    async def loop():
        rows = []
        while not stopping.is_set():
            if not rows:
                cur = await conn.execute(f"select {columns} from jobs.claim(%s, array['bench'], %s::int, null, "
                                         "'1 second', false, %s)", (me, args.concurrency + ahead, ahead > 0),
                                         binary=binary)
                rows = await cur.fetchall()
                continue
            began()
            n = len(rows)
            if threads is not None:
                await asyncio.gather(*(running.run_in_executor(threads, noop) for _ in rows))
            ids, claims = [r[0] for r in rows], [r[at_claim] for r in rows]
            # Ahead: every job claimed ends before the next settle, so none needs a start mark (the
            # library sends none for those either).
            cur = await conn.execute(f"select {columns} from jobs.complete_and_claim(%s::uuid[], "
                                     "%s::bigint[], %s, array['bench'], %s::int, prefetch => %s)",
                                     (ids, claims, me, args.concurrency + ahead, ahead > 0), binary=binary)
            rows = await cur.fetchall()
            ended(n)

    task = asyncio.create_task(loop())

    async def stop():
        stopping.set()
        await task
        await conn.close()
    return stop


async def procrastinate_worker():
    app, _ = procrastinate_app()
    await app.open_async()
    task = asyncio.create_task(app.run_worker_async(queues=["bench"], concurrency=args.concurrency, wait=True,
                                                    listen_notify=True, delete_jobs="always",
                                                    fetch_job_polling_interval=1,
                                                    install_signal_handlers=False))

    async def stop():
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await app.close_async()
    return stop


async def main():
    if args.enqueue is not None:
        if args.system == "procrastinate":
            await enqueue_procrastinate(args.enqueue)
        else:
            enqueue_pg_jobs(args.enqueue)
        return
    # library-prefetch and bare-prefetch: claiming 500 ahead (async def handlers).
    start = {"library-async": lambda: library("async"), "library-sync": lambda: library("sync"), "bare": bare,
             "library-prefetch": lambda: library("async", 500),
             "bare-prefetch": lambda: bare(ahead=500, library_columns=True),
             "bare-threads": lambda: bare(ThreadPoolExecutor(args.concurrency)),
             "procrastinate": procrastinate_worker}[args.system]
    stop = await start()
    print("ready", flush=True)
    done = asyncio.Event()
    loop = asyncio.get_running_loop()

    def reset():
        stats.update(completed=0, first_ms=None, last_ms=None)
        print("reset", flush=True)

    loop.add_signal_handler(signal.SIGUSR1, reset)
    loop.add_signal_handler(signal.SIGTERM, done.set)
    await done.wait()
    await stop()
    print(json.dumps(stats), flush=True)


asyncio.run(main())
sys.exit(0)
