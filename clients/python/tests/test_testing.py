"""The testing helpers: drain and adrain, perform_job, assert_enqueued and refute_enqueued."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

import pg_jobs
from pg_jobs.testing import adrain, drain, perform_job, refute_enqueued


from shared import JOBS, count, myapp_jobs


def test_drain_runs_sync_and_async_handlers_and_their_writes_commit_with_them(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        pg_jobs.sync_policies(conn, JOBS)
        for i in range(5):
            pg_jobs.enqueue(conn, myapp_jobs.send_email, {"to": f"s{i}@example.com"})
            pg_jobs.enqueue(conn, myapp_jobs.send_email_async, {"to": f"a{i}@example.com"})
        pg_jobs.enqueue(conn, myapp_jobs.flaky)
    metrics = pg_jobs.CountingMetrics()
    drain(pg_jobs.Worker(dsn, jobs=JOBS, concurrency=3, metrics=metrics))
    assert count(dsn, "select count(*) from sent") == 10
    assert count(dsn, "select count(*) from jobs.jobs where state = 'completed'") == 10
    assert count(dsn, "select count(*) from jobs.jobs where name = 'flaky' and state in ('failed', 'dead')") == 1
    assert metrics.count("completed") == 10
    assert "default/send_email/completed=5" in repr(metrics), repr(metrics)  # what it counted, printed


def test_perform_job_runs_one_job_with_a_real_context_and_refute_enqueued(dsn: str) -> None:
    done = perform_job(dsn, myapp_jobs.send_email_async, {"to": "p@example.com"})
    assert (done.state, done.result, done.attempt) == ("completed", {"sent": True}, 1)
    assert count(dsn, "select count(*) from sent where address = 'p@example.com'") == 1
    failed = perform_job(dsn, myapp_jobs.flaky)
    assert failed.state == "dead" and failed.last_error
    with psycopg.connect(dsn) as conn:
        refute_enqueued(conn, "never_enqueued")
        with pytest.raises(AssertionError, match="expected no job send_email_async"):
            refute_enqueued(conn, "send_email_async", {"to": "p@example.com"})


def test_adrain_in_an_event_loop_of_the_tests_own(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        pg_jobs.enqueue(conn, myapp_jobs.send_email_async, {"to": "x@example.com"})
    asyncio.run(adrain(pg_jobs.Worker(dsn, jobs=JOBS, concurrency=1)))
    assert count(dsn, "select count(*) from sent") == 1
