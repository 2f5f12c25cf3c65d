"""A handler that ignores its cancellation is abandoned a second after it (its outcome reported,
its slot given to the next job) instead of holding its slot until it ends, for ``async def``
and plain handlers.

Guards checked: with the worker's abandon taken out (Worker._abandon returning at
once), the next job waits for the stubborn handler and the first test fails at its deadline for
both kinds (the shutdown's own hand-back still passes the second); with
plain handlers run by a pool of ``concurrency`` threads (a ThreadPoolExecutor, as before
pg_jobs.threads), the next plain job waits for the stubborn one's thread and the first test
fails for plain handlers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import pg_jobs

DEADLINE = 20.0  # the whole wait; the handler ignores its cancellation for longer


def stubborn_job(kind: str, started: threading.Event, release: threading.Event,
                 ended: threading.Event) -> pg_jobs.JobDefinition[Any]:
    if kind == "async":
        @pg_jobs.job("stubborn")
        async def stubborn_async(payload: Any, ctx: pg_jobs.AsyncContext) -> None:
            started.set()
            while not release.is_set():
                try:
                    await asyncio.sleep(0.05)
                except asyncio.CancelledError:
                    pass  # ignores it
            ended.set()
        return stubborn_async

    @pg_jobs.job("stubborn")
    def stubborn_sync(payload: Any, ctx: pg_jobs.Context) -> None:
        started.set()
        release.wait(DEADLINE * 2)  # not ctx.cancelled
        ended.set()
    return stubborn_sync


async def until(done: Callable[[], bool], began: float, failure: str) -> None:
    while not done():
        assert time.monotonic() - began < DEADLINE, failure
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_handler_ignoring_its_cancellation_is_abandoned_and_frees_its_slot(dsn: str, kind: str) -> None:
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    @pg_jobs.job("quick")
    async def quick_async(payload: Any, ctx: pg_jobs.AsyncContext) -> None:
        pass

    @pg_jobs.job("quick")
    def quick_sync(payload: Any, ctx: pg_jobs.Context) -> None:
        pass

    # Of the stubborn one's kind: a plain one needs a thread while the stubborn one holds its own.
    quick = quick_async if kind == "async" else quick_sync

    async def run() -> None:
        metrics = pg_jobs.CountingMetrics()
        worker = pg_jobs.Worker(dsn, jobs=[stubborn_job(kind, started, release, ended), quick], concurrency=1,
                                metrics=metrics, poll=0.2)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            stubborn_id = (await (await conn.execute("select id from jobs.enqueue('stubborn')")).fetchone() or [None])[0]
            await worker.start()
            try:
                began = time.monotonic()
                await until(started.is_set, began, "the stubborn job never started")
                await conn.execute("select jobs.enqueue('quick')")
                await conn.execute("select jobs.cancel(%s)", (stubborn_id,))
                # The quick job runs in the only slot while the stubborn handler still runs.
                await until(lambda: metrics.count("completed", name="quick") > 0, began,
                            "the stubborn handler kept its slot")
                assert not ended.is_set()
                assert metrics.count("cancelled", name="stubborn") == 1
            finally:
                release.set()
                await worker.stop(grace=0)

    asyncio.run(run())
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select name, state::text from jobs.jobs order by name").fetchall()
    assert rows == [("quick", "completed"), ("stubborn", "cancelled")]


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_a_handler_ignoring_a_shutdown_is_abandoned_and_its_job_handed_back(dsn: str, kind: str) -> None:
    """Its job is handed back as a shutdown hands back a job that stops (claimable again at once,
    no attempt used), not left running until its lease lapses (checked: without the snooze in
    the worker's abandon path, the job stays running)."""
    started, release, ended = threading.Event(), threading.Event(), threading.Event()

    async def run() -> None:
        metrics = pg_jobs.CountingMetrics()
        worker = pg_jobs.Worker(dsn, jobs=[stubborn_job(kind, started, release, ended)], concurrency=1,
                                metrics=metrics)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("select jobs.enqueue('stubborn')")
        await worker.start()
        try:
            await until(started.is_set, time.monotonic(), "the stubborn job never started")
            await worker.stop(grace=0)
            assert not ended.is_set()
            assert metrics.count("handed_back", name="stubborn") == 1
        finally:
            release.set()

    asyncio.run(run())
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select state::text, attempt, run_at <= now() from jobs.jobs").fetchall() == [
            ("suspended", 0, True)]
