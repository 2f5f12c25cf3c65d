"""SQLAlchemy 2 (``pip install pg-jobs[sqlalchemy]``), on its psycopg dialect
(``postgresql+psycopg://``): enqueue inside the ORM's transaction, a ``Session`` or a
``Connection``, sync or asyncio. Rolled back: no job.

    with Session(engine) as session, session.begin():
        session.add(Order(total=42))
        pg_jobs.contrib.sqlalchemy.enqueue(session, "charge", {"order": 1})

The job goes through the psycopg connection under the session's, in its transaction, so the
JSON and interval arguments are bound as psycopg binds them (``text(":payload::jsonb")`` and
``func.jobs.enqueue(...)`` do not: the first is a syntax error, the second casts to VARCHAR)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import psycopg
from sqlalchemy import Connection
from sqlalchemy.orm import Session

if TYPE_CHECKING:  # sqlalchemy.ext.asyncio needs greenlet: loaded only by the async functions
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from ..enqueue import Enqueued
from ..enqueue import enqueue as _enqueue_one
from ..enqueue import enqueue_many as _enqueue_many
from ..jobs import JobDefinition


def _psycopg(bind: Session | Connection) -> psycopg.Connection[Any]:
    conn = bind.connection() if isinstance(bind, Session) else bind
    driver = conn.connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError("pg_jobs.contrib.sqlalchemy: the engine must use the psycopg driver (postgresql+psycopg://)")
    return driver


async def _apsycopg(bind: AsyncSession | AsyncConnection) -> psycopg.AsyncConnection[Any]:
    from sqlalchemy.ext.asyncio import AsyncSession

    conn = await bind.connection() if isinstance(bind, AsyncSession) else bind
    raw = await conn.get_raw_connection()
    driver = raw.driver_connection
    if not isinstance(driver, psycopg.AsyncConnection):
        raise TypeError("pg_jobs.contrib.sqlalchemy: the engine must use the psycopg driver "
                        "(postgresql+psycopg:// with create_async_engine)")
    return driver


def enqueue(bind: Session | Connection, job: JobDefinition[Any] | str, payload: Any = None,
            **options: Any) -> Enqueued:
    """pg_jobs.enqueue in this Session's or Connection's transaction."""
    return _enqueue_one(_psycopg(bind), job, payload, **options)


def enqueue_many(bind: Session | Connection, items: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
    """pg_jobs.enqueue_many in this Session's or Connection's transaction."""
    return _enqueue_many(_psycopg(bind), items)


async def aenqueue(bind: AsyncSession | AsyncConnection, job: JobDefinition[Any] | str, payload: Any = None,
                   **options: Any) -> Enqueued:
    """pg_jobs.enqueue in this AsyncSession's or AsyncConnection's transaction."""
    return await _enqueue_one(await _apsycopg(bind), job, payload, **options)


async def aenqueue_many(bind: AsyncSession | AsyncConnection, items: Iterable[Mapping[str, Any]]) -> list[Enqueued]:
    """pg_jobs.enqueue_many in this AsyncSession's or AsyncConnection's transaction."""
    return await _enqueue_many(await _apsycopg(bind), items)
