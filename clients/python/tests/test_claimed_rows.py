"""A claimed row as the worker reads it (pg_jobs.context.claimed_row): the job a claim answers,
field for field, from the server; a claim whose columns do not begin with Job's fields in its
order is refused before any row is read."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest

from pg_jobs import queries as q
from pg_jobs.context import Job, claimed_row


def test_a_claimed_row_is_the_job_the_server_answers(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("select jobs.enqueue('rows', '{\"n\": 1}', queue => 'rows', priority => 3,"
                     " tags => array['a'], meta => '{\"m\": 2}')")
        cur = conn.cursor(row_factory=claimed_row, binary=True)
        [(job, time_left, buried)] = cur.execute(
            f"select {q.CLAIMED_COLUMNS} from jobs.claim('w', array['rows'], 1, null, null, false)").fetchall()
        expected = conn.execute(
            "select id, run_id, name, queue, payload, attempt, max_attempts, claim, deadline, tenant_id,"
            " parent_id, priority, enqueued_at, last_error, tags, meta from jobs.jobs where queue = 'rows'"
        ).fetchone()
    assert isinstance(job, Job) and expected is not None
    assert dataclasses.astuple(job) == tuple(expected)
    assert (job.name, job.payload, job.priority, job.tags, job.meta) == ("rows", {"n": 1}, 3, ["a"], {"m": 2})
    assert (time_left, buried) == (None, False)  # no deadline; handed out, not buried
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.name = "other"  # type: ignore[misc]


def test_columns_in_another_order_are_refused(dsn: str) -> None:
    swapped = q.CLAIMED_COLUMNS.replace("id, run_id, ", "run_id, id, ", 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.cursor(row_factory=claimed_row)
        with pytest.raises(RuntimeError, match="must begin with Job's fields"):
            cur.execute(f"select {swapped} from jobs.claim('w', array['rows'], 1, null, null, false)").fetchall()
