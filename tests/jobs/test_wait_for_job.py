"""jobs.wait_for_job: a producer waits for its job to end, woken from shared memory by the
commit that ends it (the test cluster preloads pg_jobs), and sees it as jobs.get_job shows it.

Each waiter waits up to a minute and its thread is joined with a 30 s bound: a wait nothing
wakes fails the bound (checked by removing the wake-up from src/commit/outcomes.rs's end of
transaction: the first test failed at the bound, the waiter still asleep).
"""

import threading
import uuid

import psycopg
import pytest

from polling import ASLEEP, eventually


@pytest.fixture
def producer(dsn):
    role = f"t_producer_{uuid.uuid4().hex[:8]}"
    bound = f"t_bound_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"create role {role} login")
        conn.execute("select jobs.grant_producer(%s)", (role,))
        conn.execute(f"create role {bound} login")
        conn.execute("select jobs.grant_producer(%s, 'acme')", (bound,))
    yield {"plain": f"{dsn} user={role}", "acme": f"{dsn} user={bound}"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for r in (role, bound):
            conn.execute(f"drop owned by {r} cascade")
            conn.execute(f"drop role {r}")


def waiting(dsn, conninfo, job, wait="1 minute"):
    """Starts a wait in a thread: (thread, answer list, the waiter's backend pid)."""
    conn = psycopg.connect(conninfo, autocommit=True)
    pid = conn.info.backend_pid
    answer = []

    def run():
        with conn:
            answer.append(conn.execute("select state, result, attempt from jobs.wait_for_job(%s, %s)",
                                       (job, wait)).fetchall())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    # Asleep in the wait, not merely started.
    eventually(dsn, f"select {ASLEEP} from pg_stat_activity where pid = {pid}", True, 30)
    return thread, answer


def test_a_waiting_producer_is_woken_by_the_completion(dsn, producer):
    with psycopg.connect(producer["plain"], autocommit=True) as conn:
        job = conn.execute("select id from jobs.enqueue('render', queue => 'wait')").fetchone()[0]
    thread, answer = waiting(dsn, producer["plain"], job)
    with psycopg.connect(dsn, autocommit=True) as worker:
        # A commit that ends another queue's job, and one that ends nothing of this one, wake
        # it for nothing: it keeps waiting.
        worker.execute("select jobs.enqueue('other', queue => 'elsewhere')")
        worker.execute("select jobs.complete(id, claim) from jobs.claim('w', array['elsewhere'])")
        claimed = worker.execute("select id, claim from jobs.claim('w', array['wait'])").fetchone()
        assert thread.is_alive() and not answer
        worker.execute("select jobs.complete(%s, %s, '{\"pages\": 3}')", claimed)
    thread.join(30)
    assert not thread.is_alive(), "the completion did not wake the wait"
    assert answer == [[("completed", {"pages": 3}, 1)]]


def test_a_job_that_dies_or_is_cancelled_ends_the_wait_too(dsn, producer):
    with psycopg.connect(producer["plain"], autocommit=True) as conn:
        doomed = conn.execute("select id from jobs.enqueue('x', queue => 'wait', max_attempts => 1)").fetchone()[0]
        dropped = conn.execute("select id from jobs.enqueue('y', queue => 'wait2')").fetchone()[0]
    first, first_answer = waiting(dsn, producer["plain"], doomed)
    second, second_answer = waiting(dsn, producer["plain"], dropped)
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("select jobs.fail(id, claim, 'boom') from jobs.claim('w', array['wait'])")
        admin.execute("select jobs.cancel(%s)", (dropped,))
    for thread in (first, second):
        thread.join(30)
        assert not thread.is_alive()
    assert first_answer == [[("dead", None, 1)]] and second_answer == [[("cancelled", None, 0)]]


def test_a_wait_ends_at_its_deadline_with_the_job_as_it_is(producer):
    with psycopg.connect(producer["plain"], autocommit=True) as conn:
        job = conn.execute("select id from jobs.enqueue('slow', queue => 'wait')").fetchone()[0]
        assert conn.execute("select state from jobs.wait_for_job(%s, '200 ms')", (job,)).fetchall() == [("ready",)]
        assert conn.execute("select state from jobs.wait_for_job(%s, '0')", (job,)).fetchall() == [("ready",)]


def test_another_tenants_job_is_no_job_and_bad_input_is_refused(dsn, producer):
    with psycopg.connect(dsn, autocommit=True) as admin:
        globex = admin.execute("select id from jobs.enqueue('x', tenant_id => 'globex')").fetchone()[0]
    with psycopg.connect(producer["acme"], autocommit=True) as conn:
        # Answered at once (no row), not at the end of the minute.
        assert conn.execute("select * from jobs.wait_for_job(%s, '1 minute')", (globex,)).fetchall() == []
        for args, code in [((None, "1 s"), "22004"), ((globex, None), "22004"), ((globex, "2 hours"), "22023"),
                           ((globex, "-1 s"), "22023")]:
            with pytest.raises(psycopg.Error) as refused:
                conn.execute("select * from jobs.wait_for_job(%s, %s)", args)
            assert refused.value.sqlstate == code, args
    with psycopg.connect(producer["plain"]) as conn:
        conn.execute("begin isolation level repeatable read")
        with pytest.raises(psycopg.Error) as refused:
            conn.execute("select * from jobs.wait_for_job(%s, '1 s')", (globex,))
        assert refused.value.sqlstate == "PJ008"
