"""The worker beyond the conformance suite (clients/conformance): its start and stop, plain
and async handlers' views of the connection, cancels, tracing, settles it batches or gives up."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
import uuid
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
import pytest

import pg_jobs
from pg_jobs import queries
from pg_jobs.dispatcher import Dispatcher
from pg_jobs.testing import drain


from shared import JOBS, count, myapp_jobs


def test_ctx_sleep_parks_the_job_once_without_an_attempt_sync_and_async(dsn: str) -> None:
    runs: list[str] = []

    @pg_jobs.job("napper")
    def napper(payload: Any, ctx: Any) -> dict[str, bool]:
        runs.append("sync")
        ctx.sleep("nap", 0.3)
        return {"woke": True}

    @pg_jobs.job("napper_async")
    async def napper_async(payload: Any, ctx: Any) -> dict[str, bool]:
        runs.append("async")
        await ctx.sleep("nap", dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=0.3))
        return {"woke": True}

    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = [pg_jobs.enqueue(conn, j, {}).id for j in (napper, napper_async)]
    drain(pg_jobs.Worker(dsn, jobs=[napper, napper_async], concurrency=2))
    with psycopg.connect(dsn) as conn:
        assert [s.state for s in pg_jobs.get_jobs(conn, ids)] == ["suspended", "suspended"]
    time.sleep(0.4)
    drain(pg_jobs.Worker(dsn, jobs=[napper, napper_async], concurrency=2))
    with psycopg.connect(dsn) as conn:
        done = pg_jobs.get_jobs(conn, ids)
    assert [(s.state, s.attempt, s.result) for s in done] == [("completed", 1, {"woke": True})] * 2
    assert sorted(runs) == ["async", "async", "sync", "sync"]


def test_opentelemetry_spans_one_per_attempt_with_its_outcome(dsn: str) -> None:
    """With a tracer (opentelemetry-sdk's, recording in memory): a span per attempt, named
    after the job, with its queue, id, attempt and outcome; an error status for an attempt
    that did not land."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with psycopg.connect(dsn, autocommit=True) as conn:
        pg_jobs.sync_policies(conn, JOBS)
        sent = pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": "t@example.com"})
        failing = pg_jobs.enqueue(conn, myapp_jobs.flaky)
    drain(pg_jobs.Worker(dsn, jobs=JOBS, concurrency=2, tracer=provider.get_tracer("test")))
    spans = {(s.attributes or {})["messaging.message.id"]: s for s in exporter.get_finished_spans()}
    ok, bad = spans[str(sent.id)], spans[str(failing.id)]
    assert ok.name == "send_email process" and bad.name == "flaky process"
    assert ok.attributes is not None and bad.attributes is not None
    assert (ok.attributes["messaging.destination.name"], ok.attributes["pg_jobs.attempt"],
            ok.attributes["pg_jobs.outcome"]) == ("default", 1, "completed")
    assert ok.status.status_code != StatusCode.ERROR
    assert bad.attributes["pg_jobs.outcome"] in ("dead", "failed") and bad.status.status_code == StatusCode.ERROR
    assert len(spans) == 2


def test_an_ordering_keys_jobs_run_one_at_a_time_in_enqueue_order(dsn: str) -> None:
    ran: list[int] = []

    @pg_jobs.job("ordered", queue="ordered")
    async def ordered(payload: Any, ctx: pg_jobs.AsyncContext) -> None:
        await asyncio.sleep(0.02)
        ran.append(payload["n"])

    with psycopg.connect(dsn, autocommit=True) as conn:
        pg_jobs.enqueue_many(conn, [{"job": ordered, "payload": {"n": n}, "ordering_key": "acct:1", "priority": n}
                                    for n in (1, 2, 3, 4)])
    drain(pg_jobs.Worker(dsn, queues=["ordered"], jobs=[ordered], concurrency=4))
    assert ran == [1, 2, 3, 4]


def test_a_trace_goes_from_the_enqueue_to_the_attempts_span(dsn: str) -> None:
    """With OpenTelemetry loaded, an enqueue inside a span carries its traceparent in the job's
    meta, and the attempt's span is a child of that trace; a meta with a traceparent of its own
    keeps it, and an enqueue outside any span adds none."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with psycopg.connect(dsn, autocommit=True) as conn:
        with tracer.start_as_current_span("request") as request:
            traced = pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": "trace@example.com"}, meta={"k": 1})
        untraced = pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": "none@example.com"})
        own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        with tracer.start_as_current_span("other"):
            kept = pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": "own@example.com"}, meta={"traceparent": own})
        metas = {s.id: s.meta for s in pg_jobs.get_jobs(conn, [traced.id, untraced.id, kept.id])}
    trace_id = format(request.get_span_context().trace_id, "032x")
    assert metas[traced.id] is not None and metas[traced.id]["k"] == 1
    assert metas[traced.id]["traceparent"].split("-")[1] == trace_id
    assert metas[untraced.id] is None and metas[kept.id] == {"traceparent": own}
    drain(pg_jobs.Worker(dsn, jobs=JOBS, concurrency=1, tracer=tracer))
    spans = {(s.attributes or {}).get("messaging.message.id"): s for s in exporter.get_finished_spans()}
    assert spans[str(traced.id)].context.trace_id == request.get_span_context().trace_id
    assert spans[str(traced.id)].parent is not None
    assert spans[str(traced.id)].parent.span_id == request.get_span_context().span_id
    assert format(spans[str(kept.id)].context.trace_id, "032x") == own.split("-")[1]
    assert spans[str(untraced.id)].parent is None


def test_jobs_ending_during_a_claim_answered_with_work_are_completed_together(dsn: str, monkeypatch: Any) -> None:
    """A claim that answers with work is not followed by one that sleeps in the server: while
    that one sleeps, an ending job completes with a commit of its own. Before the worker looked
    first (without waiting), its later drains completed many jobs so, one statement and commit
    each (9,786 of the 20,000 of two drains in the benchmark). Checked to fail without the look
    (145 and 9,838 of the third drain's jobs in two runs here; none with it)."""
    statements: list[str] = []
    execute = psycopg.AsyncConnection.execute

    async def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        statements.append(str(query))
        return await execute(self, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "execute", counting)

    @pg_jobs.job("noop_drain")
    async def noop(payload: Any, ctx: Any) -> None:
        return None

    def enqueue(n: int) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("delete from jobs.jobs where name = 'noop_drain'")
            conn.execute("select count(*) from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object("
                         "'name', 'noop_drain', 'payload', jsonb_build_object('n', g))) from generate_series(1, %s) g))",
                         (n,))

    async def main() -> int:
        worker = pg_jobs.Worker(dsn, jobs=[noop], concurrency=32)
        await worker.start()
        try:
            for _ in range(3):
                statements.clear()
                await asyncio.to_thread(enqueue, 10000)
                deadline = time.monotonic() + 60
                while count(dsn, "select count(*) from jobs.jobs where name = 'noop_drain' and state <> 'completed'"):
                    assert time.monotonic() < deadline, "the worker did not drain"
                    await asyncio.sleep(0.05)
            return sum(1 for s in statements if s.startswith("select jobs.complete(%s"))
        finally:
            await worker.stop()

    alone = asyncio.run(main())
    # (at most the jobs still running when the queue empties and the worker's claim sleeps)
    assert alone <= 32, f"{alone} of the third drain's 10,000 jobs were completed one statement each"


def test_each_kind_of_handler_gets_its_own_view_of_the_connection_with_its_notices(dsn: str) -> None:
    """Plain and ``async def``, in a transaction and not, one slot taking turns: each handler's
    ``ctx.conn`` is in a transaction exactly when its job is transactional, and the notices of
    its statements reach the notice handlers added to it (checked to fail with the notices left
    with the view made last)."""
    seen: list[tuple[str, bool, list[str]]] = []

    def listening(conn: Any) -> tuple[list[str], Any]:
        heard: list[str] = []

        def hear(diag: Any) -> None:
            heard.append(diag.message_primary or "")
        conn.add_notice_handler(hear)
        return heard, hear

    def ended(kind: str, conn: Any, heard: list[str], hear: Any) -> None:
        conn.remove_notice_handler(hear)
        seen.append((kind, conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE, heard))

    def make(kind: str, is_async: bool, transactional: bool) -> pg_jobs.JobDefinition[Any]:
        notice = f"do $$ begin raise notice 'from {kind}'; end $$"
        if is_async:
            async def handler(payload: Any, ctx: Any) -> None:
                heard, hear = listening(ctx.conn)
                await ctx.conn.execute(notice)
                ended(kind, ctx.conn, heard, hear)
            return pg_jobs.job(kind, transactional=transactional)(handler)

        def plain(payload: Any, ctx: Any) -> None:
            heard, hear = listening(ctx.conn)
            ctx.conn.execute(notice)
            ended(kind, ctx.conn, heard, hear)
        return pg_jobs.job(kind, transactional=transactional)(plain)

    kinds = [make("async_tx", True, True), make("async_auto", True, False), make("sync_tx", False, True),
             make("sync_auto", False, False)]
    with psycopg.connect(dsn, autocommit=True) as conn:
        for i in range(8):  # twice round, one at a time: each view used again after the others
            pg_jobs.enqueue(conn, kinds[i % 4], {}, priority=8 - i)
    drain(pg_jobs.Worker(dsn, jobs=kinds, concurrency=1))
    assert seen == [(k.name, k.transactional, [f"from {k.name}"]) for k in kinds] * 2
    assert count(dsn, "select count(*) from jobs.jobs where state = 'completed'") == 8


def test_a_plain_handler_reading_ctx_cancelled_after_its_cancel_finds_it_set(dsn: str) -> None:
    """``ctx.cancelled`` is made at its first read: one first read after the cancel reached the
    context is set already (checked to fail with the reason not looked at when it is made)."""
    started = threading.Event()
    seen: list[tuple[str | None, bool]] = []

    @pg_jobs.job("late_reader")
    def late_reader(payload: Any, ctx: pg_jobs.Context) -> None:
        started.set()
        deadline = time.monotonic() + 20
        while ctx.cancel_reason is None and time.monotonic() < deadline:
            time.sleep(0.02)  # (not ctx.cancelled: its first read comes after the cancel)
        seen.append((ctx.cancel_reason, ctx.cancelled.is_set()))

    async def run() -> None:
        worker = pg_jobs.Worker(dsn, jobs=[late_reader], concurrency=1)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            job_id = (await (await conn.execute("select id from jobs.enqueue('late_reader')")).fetchone() or [None])[0]
            await worker.start()
            try:
                while not started.is_set():
                    await asyncio.sleep(0.02)
                await conn.execute("select jobs.cancel(%s)", (job_id,))
                while not seen:
                    await asyncio.sleep(0.02)
            finally:
                await worker.stop(grace=5)

    asyncio.run(run())
    assert seen == [("cancelled", True)]


def test_a_plain_handler_failing_in_a_shutdowns_grace_has_its_failure_recorded(dsn: str) -> None:
    """A plain handler that fails within a shutdown's grace: its end, with the worker stopping,
    starts a task that records the failure (a plain handler runs without a task of its own),
    which the shutdown waits for: the attempt is used and its error kept, not handed back."""
    started, release = threading.Event(), threading.Event()

    @pg_jobs.job("fails_in_the_grace")
    def fails_in_the_grace(payload: Any, ctx: pg_jobs.Context) -> None:
        started.set()
        release.wait(20)
        raise RuntimeError("failed in the grace")

    async def run() -> None:
        worker = pg_jobs.Worker(dsn, jobs=[fails_in_the_grace], concurrency=1)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("select jobs.enqueue('fails_in_the_grace')")
        await worker.start()
        while not started.is_set():
            await asyncio.sleep(0.02)
        stopping = asyncio.ensure_future(worker.stop(grace=20))
        await asyncio.sleep(0.2)  # the shutdown waits for the handler
        release.set()
        await stopping

    asyncio.run(run())
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select attempt, last_error from jobs.jobs").fetchone()
    assert row is not None and row[0] == 1 and "failed in the grace" in (row[1] or ""), row


def test_a_stop_that_comes_while_held_jobs_start_starts_no_more_of_them(dsn: str, monkeypatch: Any) -> None:
    """A worker of concurrency 1 holding five jobs: the first job's handler stops the worker
    and returns, and its slot frees while the dispatcher is still in a settle (held there
    until the first job has ended): none of the four held starts; they are ready again, no
    attempt used. Checked: without the stopping test in Dispatcher._start_queued the second
    job runs too."""
    ran: list[int] = []
    first: list[int] = []
    stopping: list[asyncio.Future[None]] = []
    settle = Dispatcher._settle

    async def settle_then_wait_for_the_first_job(self: Dispatcher, slot: Any) -> Any:
        rows = await settle(self, slot)
        deadline = time.monotonic() + 10
        while first and first[0] in self.core.held and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return rows

    monkeypatch.setattr(Dispatcher, "_settle", settle_then_wait_for_the_first_job)

    @pg_jobs.job("stop_among_held", queue="held_stop")
    async def stop_among_held(payload: Any, ctx: Any) -> None:
        ran.append(payload["n"])
        if not stopping:
            first.append(ctx.job.id.int)
            stopping.append(asyncio.ensure_future(worker.stop(grace=5)))
        while not worker._stopping:
            await asyncio.sleep(0)

    worker = pg_jobs.Worker(dsn, jobs=[stop_among_held], queues=["held_stop"], concurrency=1, prefetch=10)

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for n in range(1, 6):
                await conn.execute("select jobs.enqueue('stop_among_held', %s, queue => 'held_stop', "
                                   "priority => %s)", (Jsonb({"n": n}), 10 - n))
        await worker.start()
        while not stopping:
            await asyncio.sleep(0.02)
        await stopping[0]

    asyncio.run(run())
    assert ran == [1]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select payload->>'n', state::text, attempt from jobs.jobs "
                            "where queue = 'held_stop' order by 1").fetchall()
    assert rows == [("1", "completed", 1)] + [(n, "ready", 0) for n in ("2", "3", "4", "5")]


def test_held_jobs_whose_handlers_never_wait_are_settled_as_they_end(dsn: str) -> None:
    """Held jobs of ``async def`` handlers run one after another in one task, but the event
    loop's other work still runs between them: a worker of concurrency 1 holding 20 jobs whose
    handlers block for 10 ms and never wait has settled some of them before its last starts.
    Checked to fail with the task running the next job without a turn of the loop: none had
    been settled."""
    seen: list[int] = []

    @pg_jobs.job("never_waits", queue="never_waits")
    async def never_waits(payload: Any, ctx: Any) -> None:
        time.sleep(0.01)  # noqa: ASYNC251 (a handler that never gives the loop a turn)
        if payload["n"] == 20:
            seen.append(count(dsn, "select count(*) from jobs.jobs where state = 'completed'"))

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            for n in range(1, 21):
                await conn.execute("select jobs.enqueue('never_waits', %s, queue => 'never_waits', "
                                   "priority => %s)", (Jsonb({"n": n}), 100 - n))
        worker = pg_jobs.Worker(dsn, jobs=[never_waits], queues=["never_waits"], concurrency=1, prefetch=20)
        await worker.start()
        try:
            deadline = time.monotonic() + 30
            while not seen and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        finally:
            await worker.stop(grace=5)

    asyncio.run(run())
    assert seen and seen[0] > 0, seen


def test_a_cancel_of_a_held_job_stops_it_alone_among_those_run_after_it(dsn: str) -> None:
    """Held jobs run one after another in one task, each cancelled by cancelling that task: a
    cancel of the second of three stops the second only; the third runs to its end after it."""
    ran: list[tuple[int, str]] = []
    second_started = asyncio.Event()

    @pg_jobs.job("one_of_three", queue="one_of_three")
    async def one_of_three(payload: Any, ctx: Any) -> None:
        n = payload["n"]
        if n == 2:
            second_started.set()
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                ran.append((n, "cancelled"))
                raise
        await asyncio.sleep(0.05)
        ran.append((n, "ran"))

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            ids = []
            for n in range(1, 4):
                cur = await conn.execute("select id from jobs.enqueue('one_of_three', %s, queue => 'one_of_three', "
                                         "priority => %s)", (Jsonb({"n": n}), 10 - n))
                ids.append((await cur.fetchone() or [None])[0])
            worker = pg_jobs.Worker(dsn, jobs=[one_of_three], queues=["one_of_three"], concurrency=1, prefetch=5)
            await worker.start()
            try:
                await asyncio.wait_for(second_started.wait(), 20)
                await conn.execute("select jobs.cancel(%s)", (ids[1],))
                deadline = time.monotonic() + 20
                while len(ran) < 3 and time.monotonic() < deadline:
                    await asyncio.sleep(0.02)
            finally:
                await worker.stop(grace=5)

    asyncio.run(run())
    assert ran == [(1, "ran"), (2, "cancelled"), (3, "ran")]
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("select payload->>'n', state::text from jobs.jobs where queue = 'one_of_three' "
                            "order by 1").fetchall()
    assert rows == [("1", "completed"), ("2", "cancelled"), ("3", "completed")]


@pytest.mark.parametrize("when", ["while_its_idle_connections_go_back", "before_its_claim_is_under_way"])
def test_a_stop_ends_the_claim_sleeping_in_the_server(dsn: str, when: str) -> None:
    """A worker whose claims sleep 600 s in the server stops at once however its stop meets its
    claim: a stop that begins while the idle connections go back, before the sleeping claim is
    sent, finds no claim to cancel (the claim must not be sent then); a cancel that reaches the
    server before the claim is under way cancels nothing (it is sent again, each second). Checked
    to fail with the cancel sent once only (both cases; the first passes then through the check
    after the release alone): stop() waited out the 600 s claim (the test's 30 s bound)."""

    async def run() -> None:
        # Claims sleep 1 s until the jobs are done, so that the idle connections go back
        # before the next one (the first case), and 600 s from then on.
        worker = pg_jobs.Worker(dsn, jobs=JOBS, concurrency=4, poll=1 if when.startswith("while") else 600)
        stopping: list[asyncio.Future[None]] = []
        release = worker._pool.release  # noqa: SLF001 (the races are inside the worker)
        query = worker._control.query  # noqa: SLF001

        async def release_then_stop(slot: Any, broken: bool = False) -> None:
            if not stopping and not worker._stopping:  # noqa: SLF001
                stopping.append(asyncio.ensure_future(worker.stop(grace=5)))
                await asyncio.sleep(0.3)  # the stop has begun, and found no claim to cancel
            await release(slot, broken)

        async def first_cancel_lost(sql: str, args: Any = None) -> Any:
            if sql == queries.CANCEL_WAITING_CLAIMS and not stopping:
                stopping.append(asyncio.get_running_loop().create_future())  # (marks the one lost)
                return []
            return await query(sql, args)

        with psycopg.connect(dsn, autocommit=True) as conn:
            for n in range(4):
                pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": f"stop{n}@example.com"})
        await worker.start()
        deadline = time.monotonic() + 20
        while count(dsn, "select count(*) from jobs.jobs where state = 'completed'") < 4:
            assert time.monotonic() < deadline, "the jobs did not complete"
            await asyncio.sleep(0.02)
        if when == "while_its_idle_connections_go_back":
            worker.poll = 600
            worker._pool.release = release_then_stop  # type: ignore[method-assign]  # noqa: SLF001
            while not stopping:
                assert time.monotonic() < deadline, "the stop did not meet the idle connections going back"
                await asyncio.sleep(0.02)
            await asyncio.wait_for(stopping[0], 30)
        else:
            worker._control.query = first_cancel_lost  # type: ignore[method-assign]  # noqa: SLF001
            await asyncio.wait_for(worker.stop(grace=5), 30)
            assert stopping, "no cancel was sent"

    asyncio.run(run())


def test_a_connection_lost_while_the_worker_starts_is_made_again_and_the_start_goes_on(dsn: str) -> None:
    """Each question the start asks before the first claim (the server, the owners of schema
    jobs, the largest payload) meets a lost connection once, as a pg_terminate_backend between
    them would. Checked to fail without its guard: with only the first question tried again,
    start() raised the OperationalError."""

    async def run() -> None:
        worker = pg_jobs.Worker(dsn, jobs=JOBS, queues=["starting"], concurrency=1)
        query = worker._control.query  # noqa: SLF001 (the cut goes between the start's questions)
        cut: set[str] = set()

        async def cut_once(sql: str, args: Any = ()) -> Any:
            if sql in cut:
                return await query(sql, args)
            cut.add(sql)
            raise psycopg.OperationalError("the connection is lost")

        worker._control.query = cut_once  # type: ignore[method-assign]  # noqa: SLF001
        await worker.start()
        await worker.stop()
        assert len(cut) == 3
        assert isinstance(worker._core.max_result, int)  # noqa: SLF001

    asyncio.run(run())


def test_a_stop_gives_up_a_settle_the_database_refuses_past_its_grace(dsn: str) -> None:
    """A handler completes, then the database takes no connections: the settle fails, and
    fails again. stop() returns once its grace is over, and the job is left to its lease
    (still running with its attempt used; it runs again once the lease lapses). Checked: with
    the give-up disabled (no deadline set in _shutdown) the worker retries the settle for
    ever and the test does not end."""
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    server = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")

    @pg_jobs.job("settled_never")
    async def settled_never(payload: Any, ctx: pg_jobs.Context) -> dict[str, int]:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"alter database {name} allow_connections false")
            conn.execute("select pg_terminate_backend(pid) from pg_stat_activity where datname = %s", (name,))
        return {"done": 1}

    async def run() -> None:
        worker = pg_jobs.Worker(dsn, jobs=[settled_never], concurrency=1, lease=60)
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("select jobs.enqueue('settled_never')")
        await worker.start()
        deadline = time.monotonic() + 20
        while not await refusing(dsn):
            assert time.monotonic() < deadline, "the handler never ran"
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)  # the settle fails at least once
        await worker.stop(grace=1)

    try:
        asyncio.run(run())
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f"alter database {name} allow_connections true")
    with psycopg.connect(dsn) as conn:
        row = conn.execute("select state::text, attempt, result from jobs.jobs").fetchone()
    assert row == ("running", 1, None), row


async def refusing(dsn: str) -> bool:
    """Whether the database takes no connections."""
    try:
        conn = await psycopg.AsyncConnection.connect(dsn)
    except psycopg.OperationalError:
        return True
    await conn.close()
    return False


def test_a_cancel_notice_naming_no_held_job_changes_nothing_and_a_cancel_still_arrives(dsn: str) -> None:
    """Any role may NOTIFY pg_jobs_cancel: a notice whose payload is not an id, or names a job
    this worker does not hold, stops no handler and does not cost the listener its connection
    (its backend is the same after them; checked to fail when the id's parse is not guarded),
    and a cancel after them reaches the handler through it, well before a heartbeat would."""
    started = asyncio.Event()
    reasons: list[str | None] = []

    @pg_jobs.job("waits_for_its_cancel")
    async def waits(payload: Any, ctx: pg_jobs.AsyncContext) -> None:
        started.set()
        try:
            await asyncio.sleep(30)
        finally:
            reasons.append(ctx.cancel_reason)

    listener = ("select pid from pg_stat_activity where application_name like 'pg-jobs listener %' "
                "and query ilike 'listen%'")

    async def run() -> None:
        worker = pg_jobs.Worker(dsn, jobs=[waits], concurrency=1, lease=90)  # heartbeats every 30 s
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            job_id = (await (await conn.execute("select id from jobs.enqueue('waits_for_its_cancel')")).fetchone()
                      or [None])[0]
            await worker.start()
            try:
                await asyncio.wait_for(started.wait(), 20)
                before = await (await conn.execute(listener)).fetchall()
                for payload in ("not an id", str(uuid.uuid4()), "{" + "0" * 40 + "}"):
                    await conn.execute("select pg_notify('pg_jobs_cancel', %s)", (payload,))
                await asyncio.sleep(0.5)
                assert reasons == [], reasons
                assert await (await conn.execute(listener)).fetchall() == before != []
                await conn.execute("select jobs.cancel(%s)", (job_id,))
                for _ in range(250):
                    if reasons:
                        break
                    await asyncio.sleep(0.02)
            finally:
                await worker.stop(grace=5)

    asyncio.run(run())
    assert reasons == ["cancelled"]


@pytest.mark.parametrize("concurrency", [2, 4])
def test_the_running_count_is_told_after_a_claim_and_after_the_jobs_end(dsn: str, concurrency: int) -> None:
    """``metrics.running``: the jobs held, told after the claim that took them and again once
    they ended: with no slot free the two are completed by the dispatcher's settle, with two
    free (its claim asleep in the server) each completes itself. Checked to fail without the
    settle's report and without a self-completing job's."""
    metrics = pg_jobs.CountingMetrics()
    started, release = asyncio.Event(), asyncio.Event()
    seen: list[int] = []

    @pg_jobs.job("counted")
    async def counted(payload: Any, ctx: pg_jobs.AsyncContext) -> None:
        started.set()
        await release.wait()

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute("select jobs.enqueue('counted') from generate_series(1, 2)")
        worker = pg_jobs.Worker(dsn, jobs=[counted], concurrency=concurrency, metrics=metrics)
        await worker.start()
        try:
            await asyncio.wait_for(started.wait(), 20)
            seen.append(metrics.running_now)
            release.set()
            for _ in range(500):
                if metrics.count("completed") == 2:
                    break
                await asyncio.sleep(0.02)
            seen.append(metrics.running_now)
        finally:
            await worker.stop(grace=5)

    asyncio.run(run())
    assert seen == [2, 0] and metrics.count("completed") == 2, (seen, metrics.outcomes)
