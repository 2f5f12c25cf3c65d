"""Job ids: a job enqueued without an id gets a UUIDv7 (RFC 9562), so ids follow enqueue time."""

import uuid

import psycopg


def test_generated_ids_are_uuidv7_stamped_with_the_enqueue_time(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = conn.execute("select floor(extract(epoch from clock_timestamp()) * 1000)::bigint").fetchone()[0]
        ids = [r[0] for r in conn.execute(
            "select id from jobs.enqueue_batch((select jsonb_agg(jsonb_build_object('name', 'n'))"
            " from generate_series(1, 1000)))").fetchall()]
        ids.append(conn.execute("select (jobs.enqueue('one')).id").fetchone()[0])
        after = conn.execute("select floor(extract(epoch from clock_timestamp()) * 1000)::bigint").fetchone()[0]
        caller = uuid.uuid4()
        assert conn.execute("select (jobs.enqueue('mine', id => %s)).id", (caller,)).fetchone()[0] == caller

    assert len(set(ids)) == len(ids)
    for job_id in ids:
        assert isinstance(job_id, uuid.UUID) and job_id.version == 7 and job_id.variant == uuid.RFC_4122
        millis = int.from_bytes(job_id.bytes[:6], "big")
        assert before <= millis <= after
    # Jobs enqueued later never get an earlier millisecond (barring a step back of the system
    # clock): the primary key grows at its end.
    stamps = [int.from_bytes(i.bytes[:6], "big") for i in ids]
    assert stamps == sorted(stamps)
