"""What a producer may know of its jobs: jobs.get_job and jobs.get_jobs, which a role granted
jobs.grant_producer or jobs.grant_worker may call (jobs.jobs is for admins); sync or asyncio."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass
from typing import Any, overload

import psycopg

from .errors import from_driver

_SQL = ("select id, name, queue, state, attempt, max_attempts, result, last_error, run_at, enqueued_at, "
        "finished_at, tenant_id, tags, meta from jobs.get_jobs(%s::uuid[])")


@dataclass(frozen=True)
class JobStatus:
    """A job's state (ready, delayed, running, suspended, completed, failed, dead or
    cancelled), attempts and outcome."""

    id: uuid.UUID
    name: str
    queue: str
    state: str
    attempt: int
    max_attempts: int
    result: Any
    last_error: str | None
    run_at: dt.datetime | None
    enqueued_at: dt.datetime
    finished_at: dt.datetime | None
    tenant_id: str | None
    #: The labels and metadata it was enqueued with; None for none.
    tags: list[str] | None = None
    meta: dict[str, Any] | None = None


def _ids(ids: Iterable[uuid.UUID | str]) -> list[str]:
    return [str(i) for i in ids]


def _sync(conn: psycopg.Connection[Any], ids: list[str]) -> list[JobStatus]:
    try:
        return [JobStatus(*row) for row in conn.execute(_SQL, (ids,)).fetchall()]
    except psycopg.Error as err:
        raise from_driver(err) from None


async def _async(conn: psycopg.AsyncConnection[Any], ids: list[str]) -> list[JobStatus]:
    try:
        cur = await conn.execute(_SQL, (ids,))
        return [JobStatus(*row) for row in await cur.fetchall()]
    except psycopg.Error as err:
        raise from_driver(err) from None


async def _first(many: Coroutine[Any, Any, list[JobStatus]]) -> JobStatus | None:
    found = await many
    return found[0] if found else None


@overload
def get_jobs(conn: psycopg.Connection[Any], ids: Iterable[uuid.UUID | str]) -> list[JobStatus]: ...
@overload
def get_jobs(conn: psycopg.AsyncConnection[Any],
             ids: Iterable[uuid.UUID | str]) -> Coroutine[Any, Any, list[JobStatus]]: ...
def get_jobs(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
             ids: Iterable[uuid.UUID | str]) -> list[JobStatus] | Coroutine[Any, Any, list[JobStatus]]:
    """These jobs' states, in the order of ``ids`` (at most 10,000; a repeated id once;
    awaitable on an AsyncConnection). A job that does not exist, or no longer does (past its
    retention), or that belongs to a tenant the role is not bound to, has no entry."""
    if isinstance(conn, psycopg.AsyncConnection):
        return _async(conn, _ids(ids))
    return _sync(conn, _ids(ids))


@overload
def get_job(conn: psycopg.Connection[Any], id: uuid.UUID | str) -> JobStatus | None: ...
@overload
def get_job(conn: psycopg.AsyncConnection[Any], id: uuid.UUID | str) -> Coroutine[Any, Any, JobStatus | None]: ...
def get_job(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
            id: uuid.UUID | str) -> JobStatus | None | Coroutine[Any, Any, JobStatus | None]:
    """The job's state, or None where get_jobs would give it no entry."""
    if isinstance(conn, psycopg.AsyncConnection):
        return _first(_async(conn, [str(id)]))
    found = _sync(conn, [str(id)])
    return found[0] if found else None


_WAIT = ("select id, name, queue, state, attempt, max_attempts, result, last_error, run_at, enqueued_at, "
         "finished_at, tenant_id, tags, meta from jobs.wait_for_job(%s::uuid, %s)")


async def _await_async(conn: psycopg.AsyncConnection[Any], id: str, timeout: float) -> JobStatus | None:
    try:
        cur = await conn.execute(_WAIT, (id, dt.timedelta(seconds=timeout)))
        row = await cur.fetchone()
    except psycopg.Error as err:
        raise from_driver(err) from None
    return JobStatus(*row) if row else None


@overload
def wait_for_job(conn: psycopg.Connection[Any], id: uuid.UUID | str, timeout: float) -> JobStatus | None: ...
@overload
def wait_for_job(conn: psycopg.AsyncConnection[Any], id: uuid.UUID | str,
                 timeout: float) -> Coroutine[Any, Any, JobStatus | None]: ...
def wait_for_job(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], id: uuid.UUID | str,
                 timeout: float) -> JobStatus | None | Coroutine[Any, Any, JobStatus | None]:
    """Waits up to ``timeout`` seconds (at most an hour) for the job to end (completed, failed,
    dead or cancelled) and answers its state then: ended, or as it is at the deadline
    (``jobs.wait_for_job``, woken by the commit that ends it). None where get_job would answer
    None. Needs READ COMMITTED (an autocommit connection, or a transaction of that level)."""
    if isinstance(conn, psycopg.AsyncConnection):
        return _await_async(conn, str(id), timeout)
    try:
        row = conn.execute(_WAIT, (str(id), dt.timedelta(seconds=timeout))).fetchone()
    except psycopg.Error as err:
        raise from_driver(err) from None
    return JobStatus(*row) if row else None
