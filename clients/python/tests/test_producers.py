"""Producing and reading jobs, sync and asyncio: enqueue in and out of a transaction, refusals
as exceptions, cancel, requeue and promote, get_job and wait_for_job, job types' policies."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import psycopg
import pytest

import pg_jobs
from pg_jobs.testing import assert_enqueued, drain, perform_job


from shared import JOBS, count, myapp_jobs


def test_enqueue_in_a_transaction_rolled_back_and_committed(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": "a@example.com"})
        assert_enqueued(conn, "send_email", {"to": "a@example.com"})
        conn.rollback()
    assert count(dsn, "select count(*) from jobs.jobs") == 0
    with psycopg.connect(dsn) as conn:
        first = pg_jobs.enqueue(conn, "send_email", {"to": "b@example.com"}, idempotency_key="b", delay=60)
        again = pg_jobs.enqueue(conn, "send_email", {"to": "b@example.com"}, idempotency_key="b")
    assert (first.deduped, again.deduped, again.id) == (False, True, first.id)
    assert count(dsn, "select count(*) from jobs.jobs where state = 'delayed'") == 1
    # Debounce: the repeat takes the new payload and puts the waiting job off (the engine decides).
    with psycopg.connect(dsn) as conn:
        made = pg_jobs.enqueue(conn, "digest", {"n": 1}, idempotency_key="u", on_conflict="debounce",
                               debounce=30, debounce_max=dt.timedelta(minutes=5))
        repeat = pg_jobs.enqueue(conn, "digest", {"n": 2}, idempotency_key="u", on_conflict="debounce", debounce=60)
    assert (made.action, repeat.action, repeat.id) == ("inserted", "debounced", made.id)
    assert count(dsn, "select count(*) from jobs.jobs where name = 'digest' and payload = '{\"n\": 2}' "
                      "and run_at > now() + interval '50 seconds'") == 1


def test_enqueue_on_an_async_connection(dsn: str) -> None:
    async def go() -> list[pg_jobs.Enqueued]:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            one = await pg_jobs.enqueue(conn, myapp_jobs.send_email_async, {"to": "c@example.com"})
            many = await pg_jobs.enqueue_many(conn, [{"job": "send_email", "payload": {"to": f"{i}@example.com"},
                                                      "priority": i} for i in range(3)])
            return [one, *many]
    made = asyncio.run(go())
    assert len({m.id for m in made}) == 4
    assert count(dsn, "select count(*) from jobs.jobs") == 4


def test_a_refusal_is_its_exception_and_changes_nothing(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        pg_jobs.enqueue(conn, "send_email", {}, idempotency_key="k")
        with pytest.raises(pg_jobs.DuplicateJob) as refused:
            pg_jobs.enqueue(conn, "send_email", {}, idempotency_key="k", on_conflict="error")
    assert refused.value.code == "PJ002" and refused.value.hint
    with pytest.raises(TypeError, match="unknown option"):
        pg_jobs.enqueue(psycopg.connect(dsn), "send_email", {}, queue_name="q")
    assert count(dsn, "select count(*) from jobs.jobs") == 1


def test_error_names_are_the_class_its_bases_and_its_code() -> None:
    class Invalid(ValueError):
        code = "E_INVALID"

    assert pg_jobs.errors.error_names(Invalid("bad")) == ["Invalid", "ValueError", "Exception", "E_INVALID"]


def test_non_retryable_errors_reach_job_types_and_a_sync_hook_that_raises_changes_nothing(
        dsn: str, caplog: pytest.LogCaptureFixture) -> None:
    @pg_jobs.job("picky", queue="picky", non_retryable_errors=["ValueError"],
                 policy=pg_jobs.Policy(key_concurrency=3, when_busy="replace"))
    def picky(payload: Any, ctx: pg_jobs.Context) -> None:
        raise ValueError("bad input")

    told: list[Any] = []

    def on_settled(job: pg_jobs.Job, outcome: pg_jobs.SettledOutcome) -> None:
        told.append(outcome)
        raise RuntimeError("the hook failed on purpose")

    with psycopg.connect(dsn, autocommit=True) as conn:
        assert pg_jobs.sync_policies(conn, [picky]) == 1
        assert conn.execute("select non_retryable_errors, key_concurrency, when_busy from jobs.job_types "
                            "where name = 'picky'").fetchone() == (["ValueError"], 3, "replace")
        job = pg_jobs.enqueue(conn, picky, {}, max_attempts=5)
    drain(pg_jobs.Worker(dsn, jobs=[picky], queues=["picky"], on_settled=on_settled,
                         on_exhausted=lambda jobs: told.extend(j.id for j in jobs)))
    assert told == ["dead", job.id]
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select state::text, attempt from jobs.jobs where id = %s", (job.id,)).fetchone() == (
            "dead", 1)
    assert "PGJOBS_ON_SETTLED_FAILED" in caplog.text


def test_get_job_and_get_jobs_answer_state_result_and_error_sync_and_async(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        pg_jobs.sync_policies(conn, JOBS)
        sent = pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": "g@example.com"})
        failing = pg_jobs.enqueue(conn, myapp_jobs.flaky, max_attempts=1)
        before = pg_jobs.get_job(conn, sent.id)
        assert before is not None and (before.state, before.attempt, before.finished_at) == ("ready", 0, None)
    drain(pg_jobs.Worker(dsn, jobs=JOBS, concurrency=1))
    unknown = uuid.UUID(int=0xFFFF)
    with psycopg.connect(dsn) as conn:
        after = pg_jobs.get_jobs(conn, [failing.id, unknown, sent.id])
        assert [(s.name, s.attempt, s.last_error is None) for s in after] == [("flaky", 1, False),
                                                                              ("send_email", 1, True)]
        assert after[0].state in ("failed", "dead") and after[1].state == "completed"
        assert pg_jobs.get_job(conn, unknown) is None

    async def read() -> pg_jobs.JobStatus | None:
        async with await psycopg.AsyncConnection.connect(dsn) as aconn:
            return await pg_jobs.get_job(aconn, sent.id)

    status = asyncio.run(read())
    assert status is not None and status.state == "completed" and status.finished_at is not None


def test_wait_for_job_answers_once_the_job_has_ended_sync_and_async(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        made = pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": "w@example.com"})
        waited = pg_jobs.wait_for_job(conn, made.id, 0.1)
        assert waited is not None and waited.state == "ready"
    drain(pg_jobs.Worker(dsn, jobs=JOBS, concurrency=1))

    async def wait() -> pg_jobs.JobStatus | None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            return await pg_jobs.wait_for_job(aconn, made.id, 60)

    done = asyncio.run(wait())
    assert done is not None and (done.state, done.result) == ("completed", {"sent": True})
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert pg_jobs.wait_for_job(conn, uuid.UUID(int=0), 60) is None


def test_a_bad_step_timeout_is_refused_before_the_step_starts_and_enqueued_by_is_kept(dsn: str) -> None:
    @pg_jobs.job("bad_step_timeout")
    async def bad(payload: Any, ctx: pg_jobs.AsyncContext) -> Any:
        return await ctx.step("never", lambda: 1, timeout=float("nan"))

    done = perform_job(dsn, bad, max_attempts=1)
    assert done.state == "dead" and "step never: timeout must be a positive number" in (done.last_error or "")
    assert count(dsn, f"select count(*) from jobs.steps where run_id = '{done.id}'") == 0
    with psycopg.connect(dsn, autocommit=True) as conn:
        made = pg_jobs.enqueue(conn, "provenance", enqueued_by="billing-api")
        row = conn.execute("select enqueued_by from jobs.jobs where id = %s", (made.id,)).fetchone()
    assert row is not None and row[0].endswith(" (billing-api)")


def test_cancel_requeue_promote_and_delete_move_a_job_and_a_refusal_changes_nothing(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        made = pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": "o@example.com"},
                               run_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))

        def refused(call: Any, error: type[pg_jobs.PgJobsError]) -> None:
            before = pg_jobs.get_job(conn, made.id)
            with pytest.raises(error) as raised:
                call()
            assert raised.value.hint and pg_jobs.get_job(conn, made.id) == before

        refused(lambda: pg_jobs.requeue(conn, made.id), pg_jobs.NotRequeueable)
        refused(lambda: pg_jobs.delete_job(conn, made.id), pg_jobs.NotDeletable)
        pg_jobs.promote(conn, made.id)
        refused(lambda: pg_jobs.promote(conn, made.id), pg_jobs.NotPromotable)
        pg_jobs.cancel(conn, made.id)
        refused(lambda: pg_jobs.cancel(conn, made.id), pg_jobs.NotCancellable)
        with pytest.raises(pg_jobs.JobNotFound):
            pg_jobs.cancel(conn, uuid.UUID(int=0))

    async def again() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            await pg_jobs.requeue(aconn, made.id)

    asyncio.run(again())
    drain(pg_jobs.Worker(dsn, jobs=JOBS, concurrency=1))
    with psycopg.connect(dsn) as conn:
        done = pg_jobs.get_job(conn, made.id)
        assert done is not None and (done.state, done.attempt) == ("completed", 1)

    async def delete() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as aconn:
            return await pg_jobs.delete_job(aconn, made.id)

    assert asyncio.run(delete()) == 1
    with psycopg.connect(dsn) as conn:
        assert pg_jobs.get_job(conn, made.id) is None


def test_tags_meta_and_run_timeout_reach_the_job_the_handler_and_get_job(dsn: str) -> None:
    seen: list[pg_jobs.Job] = []

    @pg_jobs.job("labelled", queue="labelled")
    def labelled(payload: Any, ctx: pg_jobs.Context) -> None:
        seen.append(ctx.job)

    with psycopg.connect(dsn, autocommit=True) as conn:
        made = pg_jobs.enqueue(conn, labelled, {}, tags=["customer:42", "import"], meta={"source": "test"},
                               run_timeout=dt.timedelta(minutes=1))
        other = pg_jobs.enqueue_many(conn, [{"job": "labelled_too", "tags": ["x"], "meta": {"k": 1}}])[0]
        rows = conn.execute("select extract(epoch from run_timeout)::int, tags from jobs.jobs"
                            " where id = any(%s) order by name", ([made.id, other.id],)).fetchall()
        assert rows == [(60, ["customer:42", "import"]), (None, ["x"])]
        with pytest.raises(psycopg.errors.InvalidParameterValue):
            pg_jobs.enqueue(conn, labelled, {}, tags=[""])
    drain(pg_jobs.Worker(dsn, queues=["labelled"], jobs=[labelled], concurrency=1))
    (job,) = seen
    assert (job.tags, job.meta) == (["customer:42", "import"], {"source": "test"})
    # The attempt's deadline was capped at the run's: enqueue + 60 s.
    assert job.deadline is not None and job.deadline - dt.datetime.now(dt.timezone.utc) < dt.timedelta(seconds=61)
    with psycopg.connect(dsn, autocommit=True) as conn:
        status = pg_jobs.get_job(conn, made.id)
        assert status is not None and (status.tags, status.meta) == (["customer:42", "import"], {"source": "test"})
