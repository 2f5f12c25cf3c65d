"""SQLAlchemy 2 on psycopg: an enqueue inside the ORM's transaction lands with its commit and not
at all when it rolls back; sync and asyncio, a Session and a Connection."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from sqlalchemy import create_engine, text  # an optional integration: scripts/setup.sh installs it
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from pg_jobs.contrib import sqlalchemy as pgj


class Rollback(Exception):
    pass


def url(dsn: str) -> str:
    parts = psycopg.conninfo.conninfo_to_dict(dsn)
    return f"postgresql+psycopg://{parts['user']}@{parts['host']}:{parts['port']}/{parts['dbname']}"


def jobs_named(dsn: str, name: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select count(*) from jobs.jobs where name = %s", (name,)).fetchone()
        assert row is not None
        return int(row[0])


def test_a_session_rolled_back_and_committed(dsn: str) -> None:
    engine = create_engine(url(dsn))
    with pytest.raises(Rollback), Session(engine) as session, session.begin():
        session.execute(text("insert into sent (address) values ('x')"))
        pgj.enqueue(session, "orm_job", {"n": 1})
        raise Rollback
    assert jobs_named(dsn, "orm_job") == 0
    with Session(engine) as session, session.begin():
        made = pgj.enqueue(session, "orm_job", {"n": 2}, idempotency_key="k")
        again = pgj.enqueue_many(session, [{"job": "orm_job", "payload": {"n": 3}, "idempotency_key": "k"}])
    assert again[0].id == made.id and again[0].deduped
    assert jobs_named(dsn, "orm_job") == 1
    with engine.begin() as conn:
        pgj.enqueue(conn, "orm_job", {"n": 4})
    assert jobs_named(dsn, "orm_job") == 2
    engine.dispose()


def test_an_async_session_rolled_back_and_committed(dsn: str) -> None:
    async def go() -> None:
        engine = create_async_engine(url(dsn))
        with pytest.raises(Rollback):
            async with AsyncSession(engine) as session, session.begin():
                await pgj.aenqueue(session, "async_orm_job", {"n": 1})
                raise Rollback
        assert jobs_named(dsn, "async_orm_job") == 0
        async with AsyncSession(engine) as session, session.begin():
            await pgj.aenqueue_many(session, [{"job": "async_orm_job", "payload": {"n": i}} for i in range(3)])
        async with engine.begin() as conn:
            await pgj.aenqueue(conn, "async_orm_job", {"n": 9})
        await engine.dispose()
    asyncio.run(go())
    assert jobs_named(dsn, "async_orm_job") == 4
