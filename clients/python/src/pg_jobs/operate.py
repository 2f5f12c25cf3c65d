"""What an application does to one job: ``jobs.cancel``, ``jobs.requeue``, ``jobs.promote`` and ``jobs.delete``,
which a role granted ``jobs.grant_admin`` (or a tenant admin, for its tenants' jobs) may call;
sync or asyncio. A refusal is the engine's, raised as its class (NotCancellable,
NotRequeueable, NotPromotable, NotDeletable, JobNotFound), and changes nothing."""

from __future__ import annotations

import uuid
from collections.abc import Coroutine
from typing import Any, overload

import psycopg

from .errors import from_driver

Conn = psycopg.Connection[Any] | psycopg.AsyncConnection[Any]


async def _async(conn: psycopg.AsyncConnection[Any], sql: str, args: tuple[Any, ...]) -> None:
    try:
        await conn.execute(sql, args)
    except psycopg.Error as err:
        raise from_driver(err) from None


def _call(conn: Conn, sql: str, args: tuple[Any, ...]) -> Coroutine[Any, Any, None] | None:
    if isinstance(conn, psycopg.AsyncConnection):
        return _async(conn, sql, args)
    try:
        conn.execute(sql, args)
    except psycopg.Error as err:
        raise from_driver(err) from None
    return None


@overload
def cancel(conn: psycopg.Connection[Any], id: uuid.UUID | str) -> None: ...
@overload
def cancel(conn: psycopg.AsyncConnection[Any], id: uuid.UUID | str) -> Coroutine[Any, Any, None]: ...
def cancel(conn: Conn, id: uuid.UUID | str) -> Coroutine[Any, Any, None] | None:
    """Cancels a live job (ready, delayed, running or suspended); a running job's worker loses
    its claim and its handler is cancelled. A finished job is refused (NotCancellable)."""
    return _call(conn, "select jobs.cancel(%s::uuid)", (str(id),))


@overload
def requeue(conn: psycopg.Connection[Any], id: uuid.UUID | str, from_step: str | None = None) -> None: ...
@overload
def requeue(conn: psycopg.AsyncConnection[Any], id: uuid.UUID | str,
            from_step: str | None = None) -> Coroutine[Any, Any, None]: ...
def requeue(conn: Conn, id: uuid.UUID | str, from_step: str | None = None) -> Coroutine[Any, Any, None] | None:
    """Runs a finished job (completed, failed, dead or cancelled) again: ready now, its attempts
    reset. Its steps are kept, or dropped from ``from_step`` on. A live job is refused
    (NotRequeueable)."""
    return _call(conn, "select jobs.requeue(%s::uuid, %s::text)", (str(id), from_step))


@overload
def promote(conn: psycopg.Connection[Any], id: uuid.UUID | str) -> None: ...
@overload
def promote(conn: psycopg.AsyncConnection[Any], id: uuid.UUID | str) -> Coroutine[Any, Any, None]: ...
def promote(conn: Conn, id: uuid.UUID | str) -> Coroutine[Any, Any, None] | None:
    """Makes a delayed or snoozed job claimable now. Any other state is refused (NotPromotable)."""
    return _call(conn, "select jobs.promote(%s::uuid)", (str(id),))


async def _async_count(conn: psycopg.AsyncConnection[Any], sql: str, args: tuple[Any, ...]) -> int:
    try:
        row = await (await conn.execute(sql, args)).fetchone()
    except psycopg.Error as err:
        raise from_driver(err) from None
    assert row is not None
    return int(row[0])


@overload
def delete_job(conn: psycopg.Connection[Any], id: uuid.UUID | str) -> int: ...
@overload
def delete_job(conn: psycopg.AsyncConnection[Any], id: uuid.UUID | str) -> Coroutine[Any, Any, int]: ...
def delete_job(conn: Conn, id: uuid.UUID | str) -> Coroutine[Any, Any, int] | int:
    """Deletes a finished job now with its family (every descendant), their attempts and steps,
    as retention would later, and answers how many jobs went. A live job, a child (it goes with
    the root of its family) and a family with a live job are refused (NotDeletable)."""
    sql, args = "select jobs.delete(%s::uuid)", (str(id),)
    if isinstance(conn, psycopg.AsyncConnection):
        return _async_count(conn, sql, args)
    try:
        row = conn.execute(sql, args).fetchone()
    except psycopg.Error as err:
        raise from_driver(err) from None
    assert row is not None
    return int(row[0])
