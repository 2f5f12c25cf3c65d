"""Test helpers: run a worker until its queues have nothing left to do, and find the jobs a test
enqueued (inside the test's own transaction, whose rows only it sees). Both read jobs.jobs: run
them as a role that may (the database owner in tests, or jobs.grant_admin)."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

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
