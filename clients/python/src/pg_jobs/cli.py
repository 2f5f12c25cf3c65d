"""The ``pg-jobs`` command: ``pg-jobs worker`` runs the jobs a module defines; ``pg-jobs
enqueue`` enqueues one job, for scripts and cron."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from typing import Any, NoReturn

import psycopg

from .enqueue import enqueue
from .jobs import JobDefinition, jobs_in
from .worker import Worker


def _fail(message: str) -> NoReturn:
    print(f"pg-jobs: {message}", file=sys.stderr)
    raise SystemExit(2)


def _dsn(value: str | None) -> str:
    dsn = value or os.environ.get("PG_JOBS_DSN") or os.environ.get("DATABASE_URL") or ""
    try:
        psycopg.conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as err:
        _fail(f"--dsn is not a connection string: {str(err).splitlines()[0]}")
    return dsn


def _load(module_name: str) -> list[JobDefinition[Any]]:
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        _fail(f"cannot import {module_name!r}: {err} (run from the directory it is importable from)")
    found = jobs_in(vars(module).values())
    exported = getattr(module, "jobs", None)
    if isinstance(exported, (list, tuple)):
        found += [j for j in jobs_in(exported) if j not in found]
    if not found:
        _fail(f"{module_name!r} defines no jobs (functions decorated with @pg_jobs.job)")
    return found


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pg-jobs", description="Workers and producers for pg_jobs.")
    sub = p.add_subparsers(dest="command", required=True)
    w = sub.add_parser("worker", help="run the jobs a module defines until SIGTERM or SIGINT",
                       description="Runs the jobs MODULE defines (its @pg_jobs.job functions, and a list named "
                                   "`jobs`) until SIGTERM or SIGINT; then stops claiming, lets running jobs "
                                   "finish for the shutdown grace, hands back the rest, and exits 0.")
    w.add_argument("module", metavar="MODULE", help="an importable module, e.g. myapp.jobs (from the current directory)")
    w.add_argument("--dsn", help="a libpq connection string or URL (default: $PG_JOBS_DSN, $DATABASE_URL, "
                                 "else libpq's PG* variables)")
    w.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                   help="a queue to work; repeat for more (default: default)")
    w.add_argument("--concurrency", type=int, default=10, help="jobs run at once (default: 10)")
    w.add_argument("--prefetch", type=int, default=0,
                   help="jobs claimed ahead and held beyond the running ones (default: 0)")
    w.add_argument("--lease", type=float, default=30.0, help="seconds a claim holds a job, renewed every third (30)")
    w.add_argument("--shutdown-grace", type=float, default=10.0,
                   help="seconds a stop lets running jobs finish before cancelling them (10)")
    w.add_argument("--poll", type=float, default=5.0, help="seconds a waiting claim sleeps in the server (5)")
    w.add_argument("--metrics-port", type=int, help="serve Prometheus metrics on 127.0.0.1:PORT/metrics")
    w.add_argument("--quiet", action="store_true", help="log warnings only, not each job")
    w.add_argument("--no-prepared-statements", action="store_false", dest="prepared",
                   help="claim and settle without prepared statements (behind a transaction-pooling PgBouncer "
                        "before 1.21)")
    w.add_argument("--trust-owner", action="store_true",
                   help="work as a superuser even where a role that is not one owns schema jobs or its functions")
    e = sub.add_parser("enqueue", help="enqueue one job", description="Enqueues one job and prints its id.")
    e.add_argument("name", metavar="NAME")
    e.add_argument("payload", metavar="PAYLOAD", nargs="?", default="{}", help="a JSON value (default: {})")
    e.add_argument("--dsn", help="as for worker")
    e.add_argument("--queue")
    e.add_argument("--priority", type=int)
    e.add_argument("--delay", type=float, help="seconds from now")
    e.add_argument("--idempotency-key")
    e.add_argument("--max-attempts", type=int)
    return p


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    if args.command == "enqueue":
        try:
            payload = json.loads(args.payload)
        except json.JSONDecodeError as err:
            _fail(f"PAYLOAD is not JSON: {err}")
        try:
            with psycopg.connect(_dsn(args.dsn), autocommit=True) as conn:
                made = enqueue(conn, args.name, payload, queue=args.queue, priority=args.priority, delay=args.delay,
                               idempotency_key=args.idempotency_key, max_attempts=args.max_attempts)
        except psycopg.Error as err:
            _fail(str(err).splitlines()[0])
        print(f"{made.id}{' (an existing job: its key was taken)' if made.deduped else ''}")
        return
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(asctime)s %(message)s")
    dsn = _dsn(args.dsn)
    jobs = _load(args.module)
    if args.concurrency < 1:
        _fail("--concurrency must be at least 1")
    if not 0 <= args.prefetch <= 1000:
        _fail("--prefetch must be 0 to 1000")
    worker = Worker(dsn, jobs=jobs, queues=args.queues or ["default"], concurrency=args.concurrency, lease=args.lease,
                    prefetch=args.prefetch, shutdown_grace=args.shutdown_grace, poll=args.poll, metrics_port=args.metrics_port,
                    prepared_statements=args.prepared, trust_owner=args.trust_owner or None)
    try:
        worker.run()
    except RuntimeError as err:
        _fail(str(err))


if __name__ == "__main__":
    main()
