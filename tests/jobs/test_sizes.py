"""Every size limit measures a value uncompressed (docs/SECURITY.md): a result, a step's output,
an event's payload and a job's payload read from a temporary table (TEMP is PUBLIC's) come
compressed, and pg_column_size() would measure them so. Each test acts as a worker role, not a
superuser, and checks that the refusal changed nothing.

How each was checked to fail without its guard is said in its docstring.
"""

import uuid

import psycopg
import pytest

#: 5 MB of one repeated letter: about 57 kB compressed, far under the 1 MB limit.
BIG = "create temp table big as select jsonb_build_object('x', repeat('a', 5000000)) as v"


@pytest.fixture
def worker(dsn):
    """A connection as a role granted jobs.grant_worker, with the compressed value in a
    temporary table of its own."""
    role = f"w_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"create role {role} login")
        admin.execute("select jobs.grant_worker(%s)", (role,))
        admin.execute(f"grant temporary on database {admin.info.dbname} to {role}")
    conn = psycopg.connect(f"{dsn} user={role}", autocommit=True)
    conn.execute(BIG)
    assert conn.execute("select pg_column_size(v) < 1048576 from big").fetchone()[0]
    yield conn
    conn.close()
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"drop owned by {role} cascade")
        admin.execute(f"drop role {role}")


def refused(conn, sql, args=()):
    with pytest.raises(psycopg.Error) as err:
        conn.execute(sql, args)
    assert err.value.sqlstate == "22023", err.value
    assert "5000017" in str(err.value) or "max_payload_size" in str(err.value)


def test_a_compressed_result_is_measured_uncompressed(worker):
    """complete and complete_many refuse 5 MB compressed to 57 kB, and the job stays running.
    Checked to fail without the guard: at d7d86e0 (pg_column_size) the result landed."""
    worker.execute("select jobs.enqueue('n')")
    job_id, claim = worker.execute("select id, claim from jobs.claim('w')").fetchone()
    refused(worker, "select jobs.complete(%s, %s, (select v from big))", (job_id, claim))
    refused(worker, "select jobs.complete_many(array[%s]::uuid[], array[%s]::bigint[], "
                    "array[(select v from big)])", (job_id, claim))
    assert worker.execute("select (jobs.get_job(%s)).state::text", (job_id,)).fetchone()[0] == "running"


def test_a_compressed_step_output_and_event_payload_are_measured_uncompressed(worker):
    """save_step and publish refuse the same value; no step and no event is stored. Checked to
    fail without the guard: at d7d86e0 both landed."""
    worker.execute("select jobs.enqueue('n')")
    job_id, claim = worker.execute("select id, claim from jobs.claim('w')").fetchone()
    refused(worker, "select jobs.save_step(%s, %s, 'one', (select v from big))", (job_id, claim))
    assert worker.execute("select done from jobs.get_step(%s, 'one')", (job_id,)).fetchone() in (None, (False,))
    refused(worker, "select jobs.publish('ev', (select v from big))")


def test_a_compressed_payload_is_measured_uncompressed(worker):
    """enqueue refuses it too, and enqueues nothing."""
    refused(worker, "select jobs.enqueue('n', (select v from big))")
    assert worker.execute("select count(*) from jobs.get_jobs(array[]::uuid[])").fetchone()[0] == 0


def test_the_limit_is_told_to_producers_and_workers(worker):
    """jobs.max_payload_size() answers the limit in bytes (the libraries check results
    against it before they settle them)."""
    assert worker.execute("select jobs.max_payload_size()").fetchone()[0] == 1024 * 1024
