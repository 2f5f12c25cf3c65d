"""The conformance worker of the Python library (clients/conformance/README.md): the fixed set
of handlers every pg_jobs library registers, run until SIGTERM. ``--handlers sync`` registers
them as plain functions (run in threads), ``--handlers async`` (the default) as coroutines.

    python clients/python/conformance/worker.py --dsn DSN [--queue Q] [--concurrency N]
        [--lease S] [--shutdown-grace S] [--metrics-port P] [--poll S] [--handlers sync|async]
        [--no-prepared-statements] [--hooks] [--prefetch N] [--shard DSN ...]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import logging
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

import pg_jobs
from pg_jobs import AsyncContext, Context

p = argparse.ArgumentParser()
p.add_argument("--dsn", required=True)
p.add_argument("--queue", action="append", dest="queues")
p.add_argument("--concurrency", type=int, default=8)
p.add_argument("--lease", type=float, default=30)
p.add_argument("--shutdown-grace", type=float, default=10)
p.add_argument("--metrics-port", type=int)
p.add_argument("--poll", type=float, default=1)
p.add_argument("--handlers", choices=["sync", "async"], default="async")
p.add_argument("--no-prepared-statements", action="store_false", dest="prepared")
p.add_argument("--hooks", action="store_true")
p.add_argument("--prefetch", type=int, default=0)
p.add_argument("--shard", action="append", dest="shards", default=[])
args = p.parse_args()


def side(sql: str, params: tuple[Any, ...]) -> None:
    """A write that must outlive a rolled-back attempt: on a connection of its own."""
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(sql, params)


def record_abort(ctx: AsyncContext | Context) -> None:
    side("insert into conformance_aborts (job_id, reason) values (%s, %s)", (ctx.job.id, ctx.cancel_reason))


def backfill_pass(payload: Any, ctx: AsyncContext | Context, cursor: Any) -> tuple[int, int]:
    """A pass of the backfill handler: rows 1..total in passes of `batch`, attempt 1 failing
    the pass that starts at `fail_at`; answers the pass's (start, end)."""
    start = cursor or 0
    side("insert into conformance_step_runs (job_id, step) values (%s, %s)", (ctx.job.id, f"from {start}"))
    if start == payload.get("fail_at") and ctx.job.attempt == 1:
        raise RuntimeError("the pass failed on purpose")
    return start, min(start + payload["batch"], payload["total"])


# -- plain handlers (threads) ------------------------------------------------------------------

def pause_sync(seconds: float, ctx: Context) -> None:
    if ctx.cancelled.wait(seconds):
        record_abort(ctx)
        raise RuntimeError(f"stopped: {ctx.cancel_reason}")


def sync_jobs() -> list[pg_jobs.JobDefinition[Any]]:
    @pg_jobs.job("noop")
    def noop(payload: Any, ctx: Context) -> Any:
        return {"ok": True}

    @pg_jobs.job("sleep")
    def sleep(payload: Any, ctx: Context) -> Any:
        pause_sync(payload.get("ms", 1000) / 1000, ctx)
        return {"slept": payload.get("ms", 1000)}

    @pg_jobs.job("fail")
    def fail(payload: Any, ctx: Context) -> Any:
        raise RuntimeError(payload.get("message", "failed on purpose"))

    @pg_jobs.job("write")
    def write(payload: Any, ctx: Context) -> Any:
        ctx.conn.execute("insert into conformance_rows (job_id, n) values (%s, %s)", (ctx.job.id, payload.get("n", 0)))
        if payload.get("ms"):
            pause_sync(payload["ms"] / 1000, ctx)
        return {"wrote": payload.get("n", 0)}

    @pg_jobs.job("two_steps")
    def two_steps(payload: Any, ctx: Context) -> Any:
        def step(name: str, key: str) -> Any:
            side("insert into conformance_step_runs (job_id, step) values (%s, %s)", (ctx.job.id, name))
            if name == "two" and payload.get("fail_in_second") and ctx.job.attempt == 1:
                raise RuntimeError("the step failed on purpose")
            return {key: ctx.job.attempt}
        one = ctx.step("one", lambda: step("one", "first"))
        if payload.get("fail_after_first") and ctx.job.attempt == 1:
            raise RuntimeError("failing after the first step")
        two = ctx.step("two", lambda: step("two", "second"))
        return {"one": one, "two": two}

    @pg_jobs.job("slow_step")
    def slow_step(payload: Any, ctx: Context) -> Any:
        # The step's function watches ctx.cancelled, set at the step's timeout.
        return ctx.step("slow", lambda: pause_sync(payload.get("ms", 60_000) / 1000, ctx),
                        timeout=payload["timeout_ms"] / 1000)

    @pg_jobs.job("backfill")
    def backfill(payload: Any, ctx: Context) -> Any:
        def run_pass(cursor: Any) -> dict[str, Any]:
            start, end = backfill_pass(payload, ctx, cursor)
            side("insert into conformance_rows (job_id, n) select %s, g from generate_series(%s::int, %s::int) as g",
                 (ctx.job.id, start + 1, end))
            return {"rows": end - start, "cursor": end}
        done = ctx.backfill(run_pass)
        return {"passes": done.passes, "rows": done.rows, "cursor": done.cursor}

    @pg_jobs.job("enqueue_one")
    def enqueue_one(payload: Any, ctx: Context) -> Any:
        made = pg_jobs.enqueue(ctx.conn, "noop", {}, **({"enqueued_by": payload["by"]} if payload.get("by") else {}))
        return {"id": str(made.id)}

    @pg_jobs.job("wait_event")
    def wait_event(payload: Any, ctx: Context) -> Any:
        got = ctx.wait_for_event(payload["event"], key=payload.get("key"))
        return {"status": got.status, "payload": got.payload}

    @pg_jobs.job("fan_out")
    def fan_out(payload: Any, ctx: Context) -> Any:
        for i in range(payload.get("children", 10)):
            ctx.spawn(f"child-{i}", "child", {"i": i})
            if payload.get("pause_ms"):
                pause_sync(payload["pause_ms"] / 1000, ctx)
        children = ctx.await_children()
        return {"sum": sum((c.result or {}).get("value", 0) for c in children), "children": len(children)}

    @pg_jobs.job("child")
    def child(payload: Any, ctx: Context) -> Any:
        return {"value": payload["i"], "parent": str(ctx.job.parent_id)}

    @pg_jobs.job("nap")
    def nap(payload: Any, ctx: Context) -> Any:
        # A durable sleep: a later attempt asks for ten minutes, and must not get them.
        ctx.sleep("nap", payload.get("ms", 1000) / 1000 if ctx.job.attempt == 1 else 600)
        side("insert into conformance_step_runs (job_id, step) values (%s, %s)", (ctx.job.id, "woke"))
        if payload.get("fail_once") and ctx.job.attempt == 1:
            raise RuntimeError("failing after the nap")
        return {"attempt": ctx.job.attempt}

    @pg_jobs.job("job_info")
    def job_info(payload: Any, ctx: Context) -> Any:
        return {"tags": ctx.job.tags, "meta": ctx.job.meta}

    return [noop, sleep, fail, write, two_steps, slow_step, backfill, enqueue_one, wait_event, fan_out, child, nap,
            job_info, *result_jobs(False)]


class Unprintable(Exception):
    """An exception whose message cannot be made: its __str__ raises."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


def result_jobs(is_async: bool) -> list[pg_jobs.JobDefinition[Any]]:
    """Handlers whose outcome is odd to report: a result too large, one JSON cannot encode
    (a datetime), one the server refuses (a NUL character); and an exception that cannot be
    made text of."""
    answers: dict[str, Callable[[Any], Any]] = {
        "big_result": lambda payload: {"text": "x" * payload.get("bytes", 2_000_000)},
        "unencodable_result": lambda payload: {"at": datetime.datetime.now(datetime.timezone.utc)},
        "refused_result": lambda payload: {"text": "a\u0000b"},
    }

    def odd_failure(payload: Any) -> Any:
        raise Unprintable()

    answers["odd_failure"] = odd_failure

    def throw_named(payload: Any) -> Any:
        # An exception of a class named `name`, with a base named `base` (or Exception), and `code`.
        base = type(payload["base"], (Exception,), {}) if payload.get("base") else Exception
        err = type(payload["name"], (base,), {})("thrown on purpose")
        if payload.get("code"):
            err.code = payload["code"]  # type: ignore[attr-defined]
        raise err

    answers["throw_named"] = throw_named

    def define(name: str, answer: Callable[[Any], Any]) -> pg_jobs.JobDefinition[Any]:
        if is_async:
            async def answer_async(payload: Any, ctx: AsyncContext) -> Any:
                return answer(payload)
            return pg_jobs.job(name)(answer_async)

        def answer_sync(payload: Any, ctx: Context) -> Any:
            return answer(payload)
        return pg_jobs.job(name)(answer_sync)

    return [define(name, answer) for name, answer in answers.items()]


# -- async handlers (the event loop) -----------------------------------------------------------

async def pause_async(seconds: float, ctx: AsyncContext) -> None:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        await asyncio.to_thread(record_abort, ctx)
        raise


def async_jobs() -> list[pg_jobs.JobDefinition[Any]]:
    @pg_jobs.job("noop")
    async def noop(payload: Any, ctx: AsyncContext) -> Any:
        return {"ok": True}

    @pg_jobs.job("sleep")
    async def sleep(payload: Any, ctx: AsyncContext) -> Any:
        await pause_async(payload.get("ms", 1000) / 1000, ctx)
        return {"slept": payload.get("ms", 1000)}

    @pg_jobs.job("fail")
    async def fail(payload: Any, ctx: AsyncContext) -> Any:
        raise RuntimeError(payload.get("message", "failed on purpose"))

    @pg_jobs.job("write")
    async def write(payload: Any, ctx: AsyncContext) -> Any:
        await ctx.conn.execute("insert into conformance_rows (job_id, n) values (%s, %s)",
                               (ctx.job.id, payload.get("n", 0)))
        if payload.get("ms"):
            await pause_async(payload["ms"] / 1000, ctx)
        return {"wrote": payload.get("n", 0)}

    @pg_jobs.job("two_steps")
    async def two_steps(payload: Any, ctx: AsyncContext) -> Any:
        async def step(name: str, key: str) -> Any:
            await asyncio.to_thread(side, "insert into conformance_step_runs (job_id, step) values (%s, %s)",
                                    (ctx.job.id, name))
            if name == "two" and payload.get("fail_in_second") and ctx.job.attempt == 1:
                raise RuntimeError("the step failed on purpose")
            return {key: ctx.job.attempt}
        one = await ctx.step("one", lambda: step("one", "first"))
        if payload.get("fail_after_first") and ctx.job.attempt == 1:
            raise RuntimeError("failing after the first step")
        two = await ctx.step("two", lambda: step("two", "second"))
        return {"one": one, "two": two}

    @pg_jobs.job("slow_step")
    async def slow_step(payload: Any, ctx: AsyncContext) -> Any:
        async def slow() -> None:
            # Cancelled at the step's timeout (the attempt goes on): recorded as such.
            try:
                await asyncio.sleep(payload.get("ms", 60_000) / 1000)
            except asyncio.CancelledError:
                await asyncio.to_thread(side, "insert into conformance_aborts (job_id, reason) values (%s, %s)",
                                        (ctx.job.id, ctx.cancel_reason or "step_timeout"))
                raise
        return await ctx.step("slow", slow, timeout=payload["timeout_ms"] / 1000)

    @pg_jobs.job("backfill")
    async def backfill(payload: Any, ctx: AsyncContext) -> Any:
        async def run_pass(cursor: Any) -> dict[str, Any]:
            start, end = await asyncio.to_thread(backfill_pass, payload, ctx, cursor)
            await asyncio.to_thread(
                side, "insert into conformance_rows (job_id, n) select %s, g from generate_series(%s::int, %s::int) as g",
                (ctx.job.id, start + 1, end))
            return {"rows": end - start, "cursor": end}
        done = await ctx.backfill(run_pass)
        return {"passes": done.passes, "rows": done.rows, "cursor": done.cursor}

    @pg_jobs.job("enqueue_one")
    async def enqueue_one(payload: Any, ctx: AsyncContext) -> Any:
        made = await pg_jobs.enqueue(ctx.conn, "noop", {},
                                     **({"enqueued_by": payload["by"]} if payload.get("by") else {}))
        return {"id": str(made.id)}

    @pg_jobs.job("wait_event")
    async def wait_event(payload: Any, ctx: AsyncContext) -> Any:
        got = await ctx.wait_for_event(payload["event"], key=payload.get("key"))
        return {"status": got.status, "payload": got.payload}

    @pg_jobs.job("fan_out")
    async def fan_out(payload: Any, ctx: AsyncContext) -> Any:
        for i in range(payload.get("children", 10)):
            await ctx.spawn(f"child-{i}", "child", {"i": i})
            if payload.get("pause_ms"):
                await pause_async(payload["pause_ms"] / 1000, ctx)
        children = await ctx.await_children()
        return {"sum": sum((c.result or {}).get("value", 0) for c in children), "children": len(children)}

    @pg_jobs.job("child")
    async def child(payload: Any, ctx: AsyncContext) -> Any:
        return {"value": payload["i"], "parent": str(ctx.job.parent_id)}

    @pg_jobs.job("nap")
    async def nap(payload: Any, ctx: AsyncContext) -> Any:
        # A durable sleep: a later attempt asks for ten minutes, and must not get them.
        await ctx.sleep("nap", payload.get("ms", 1000) / 1000 if ctx.job.attempt == 1 else 600)
        await asyncio.to_thread(side, "insert into conformance_step_runs (job_id, step) values (%s, %s)",
                                (ctx.job.id, "woke"))
        if payload.get("fail_once") and ctx.job.attempt == 1:
            raise RuntimeError("failing after the nap")
        return {"attempt": ctx.job.attempt}

    @pg_jobs.job("job_info")
    async def job_info(payload: Any, ctx: AsyncContext) -> Any:
        return {"tags": ctx.job.tags, "meta": ctx.job.meta}

    return [noop, sleep, fail, write, two_steps, slow_step, backfill, enqueue_one, wait_event, fan_out, child, nap,
            job_info, *result_jobs(True)]




async def on_settled(job: pg_jobs.Job, outcome: pg_jobs.SettledOutcome) -> None:
    """--hooks: each settle recorded; a job whose payload has hook_throws makes it raise after."""
    await asyncio.to_thread(side, "insert into conformance_hooks (job_id, hook, outcome) values (%s, 'settled', %s)",
                            (job.id, outcome))
    if isinstance(job.payload, dict) and job.payload.get("hook_throws"):
        raise RuntimeError("the hook failed on purpose")


async def on_exhausted(jobs: Sequence[pg_jobs.Job]) -> None:
    for job in jobs:
        await asyncio.to_thread(side, "insert into conformance_hooks (job_id, hook) values (%s, 'exhausted')",
                                (job.id,))


hooks: dict[str, Any] = {"on_settled": on_settled, "on_exhausted": on_exhausted} if args.hooks else {}
logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
options: dict[str, Any] = dict(
    jobs=sync_jobs() if args.handlers == "sync" else async_jobs(), queues=args.queues or ["default"],
    concurrency=args.concurrency, lease=args.lease, shutdown_grace=args.shutdown_grace, poll=args.poll,
    metrics_port=args.metrics_port, prepared_statements=args.prepared, prefetch=args.prefetch, **hooks)
# With --shard: the library's sharded worker over those shards (--dsn then serves side()).
if args.shards:
    pg_jobs.ShardedWorker(args.shards, **options).run()
else:
    pg_jobs.Worker(args.dsn, **options).run()
