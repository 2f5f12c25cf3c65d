"""Test helpers, the same in the Node.js library (pg-jobs/testing): ``drain`` runs a worker until
its queues have nothing left to do; ``perform_job`` runs one job's handler through a real worker
and answers how it ended; ``assert_enqueued`` and ``refute_enqueued`` find the jobs a test
enqueued (inside the test's own transaction, whose rows only it sees). They read jobs.jobs: run
them as a role that may (the database owner in tests, or jobs.grant_admin)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from .enqueue import enqueue
from .jobs import JobDefinition
from .status import JobStatus, get_job
from .worker import Worker

_LEFT = ("select count(*) from jobs.jobs where queue = any(%s) and (state = 'running' "
         "or state in ('ready', 'delayed', 'suspended') and (run_at <= now() or %s and state = 'delayed'))")


async def adrain(worker: Worker, timeout: float = 30.0, *, delayed: bool = False) -> None:
    """Starts ``worker``, runs it until no job of its queues is ready, due or running (with
    ``delayed``, none delayed either: retries and scheduled jobs are waited for), and stops it.
    Raises TimeoutError after ``timeout`` seconds."""
    queues = sorted({q for g in worker._groups for q in g.queues})  # noqa: SLF001 (its own package)
    deadline = time.monotonic() + timeout
    await worker.start()
    try:
        async with await psycopg.AsyncConnection.connect(worker.dsn, autocommit=True) as conn:
            while True:
                cur = await conn.execute(_LEFT, (queues, delayed))
                row = await cur.fetchone()
                if row is not None and row[0] == 0 and worker.running == 0:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"drain: jobs still left after {timeout} s")
                await asyncio.sleep(0.05)
    finally:
        await worker.stop(grace=0)


def drain(worker: Worker, timeout: float = 30.0, *, delayed: bool = False) -> None:
    """``adrain`` for a test without an event loop of its own."""
    asyncio.run(adrain(worker, timeout, delayed=delayed))


@dataclass(frozen=True)
class EnqueuedJob:
    id: uuid.UUID
    name: str
    queue: str
    payload: Any
    state: str


def enqueued_jobs(conn: psycopg.Connection[Any], name: str, payload: Any = None) -> list[EnqueuedJob]:
    """The jobs of this name whose payload contains ``payload`` (jsonb @>), as ``conn`` sees
    them: in a test's transaction, the jobs it enqueued and has not committed too."""
    rows = conn.execute("select id, name, queue, payload, state::text from jobs.jobs "
                        "where name = %s and payload @> %s order by id", (name, Jsonb(payload or {}))).fetchall()
    return [EnqueuedJob(*r) for r in rows]


def assert_enqueued(conn: psycopg.Connection[Any], name: str, payload: Any = None) -> EnqueuedJob:
    """Fails unless exactly one job of this name whose payload contains ``payload`` was enqueued."""
    found = enqueued_jobs(conn, name, payload)
    if len(found) != 1:
        raise AssertionError(f"expected one job {name} with payload containing {payload!r}, found {len(found)}")
    return found[0]


def refute_enqueued(conn: psycopg.Connection[Any], name: str, payload: Any = None) -> None:
    """Fails if a job of this name whose payload contains ``payload`` was enqueued."""
    found = enqueued_jobs(conn, name, payload)
    if found:
        raise AssertionError(f"expected no job {name} with payload containing {payload!r}, found {len(found)}")


def perform_job(dsn: str, job: JobDefinition[Any], payload: Any = None, *, timeout: float = 30.0,
                **options: Any) -> JobStatus:
    """Enqueues ``job`` with ``payload`` (and enqueue's ``options``) on a queue of its own, runs
    it through a worker with a real context (its transaction, steps, spawns, cancellation)
    until it is done or parked, and answers its state, result and last error (as Oban's
    perform_job and River's rivertest do). Retries are not waited for: a failed first attempt
    answers the state of its retry, ``delayed``."""
    queue = f"perform_job_{uuid.uuid4()}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        made = enqueue(conn, job, payload, queue=queue, **options)
    drain(Worker(dsn, jobs=[job], queues=[queue], concurrency=1), timeout)
    with psycopg.connect(dsn, autocommit=True) as conn:
        status = get_job(conn, made.id)
    assert status is not None, "perform_job: the job is gone (its retention is 0?)"
    return status
