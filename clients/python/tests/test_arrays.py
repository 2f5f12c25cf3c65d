"""A settle's ids and claims in PostgreSQL's binary array form (pg_jobs.arrays): the server
reads them as the arrays psycopg would have sent."""

from __future__ import annotations

import uuid

import psycopg

from pg_jobs import arrays


def test_the_server_reads_the_arrays_as_sent(dsn: str) -> None:
    ids = [uuid.uuid4() for _ in range(33)]
    claims = [0, 1, -1, 2**63 - 1, -(2**63), 1_800_000_000_000 << 10 | 12345]
    with psycopg.connect(dsn, autocommit=True) as conn:
        arrays.register(conn)
        row = conn.execute("select %b, %b, pg_typeof(%b)::text, pg_typeof(%b)::text, cardinality(%b)",
                           (arrays.uuid_array(ids), arrays.int8_array(claims), arrays.uuid_array(ids[:1]),
                            arrays.int8_array(claims[:1]), arrays.uuid_array([]))).fetchone()
    assert row == (ids, claims, "uuid[]", "bigint[]", 0)


def test_a_settle_of_claimed_jobs_lands_through_them(dsn: str) -> None:
    """The worker's fallback settle (jobs.complete_many: a claim of the batch lost, or the worker
    stopping) with the arrays: the job still held lands, the one whose claim is stale does not."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        arrays.register(conn)
        for _ in range(2):
            conn.execute("select jobs.enqueue('arrays')")
        claimed = conn.execute("select id, claim from jobs.claim('w', array['default'], 2)").fetchall()
        ids = [i for i, _ in claimed]
        claims = [claimed[0][1], claimed[1][1] - 1]  # the second one's claim is not its own
        rows = conn.execute("select id, landed from jobs.complete_many(%b, %b, %s::jsonb[])",
                            (arrays.uuid_array(ids), arrays.int8_array(claims), None)).fetchall()
        assert sorted(rows) == sorted([(ids[0], True), (ids[1], False)])


def test_queue_names_go_as_a_text_array_made_once_or_as_the_list(dsn: str) -> None:
    """A claim's queues: ASCII names as a text[] made once, others as the list itself (written
    in the connection's encoding by psycopg); the server reads both as given."""
    ascii_names, other = ["default", "q-1", ""], ["émails", "default"]
    assert isinstance(arrays.text_array(ascii_names), arrays.TextArray)
    assert arrays.text_array(other) == other
    with psycopg.connect(dsn, autocommit=True) as conn:
        arrays.register(conn)
        row = conn.execute("select %b, pg_typeof(%b)::text, %b",
                           (arrays.text_array(ascii_names), arrays.text_array(["x"]), arrays.text_array(other))).fetchone()
    assert row == (ascii_names, "text[]", other)
