"""jobs.complete_and_claim: a batch completed and the next one claimed in one call, so in one
transaction and one commit, with complete_many's fence on every job and claim's semantics for
the next batch; all or nothing when a claim is lost.

How the guards were checked: with the lease_lost raise taken out, the lost-claim tests failed
(the held job completed, the next job claimed); the one-transaction test compares the xmin of
the completed row with the claimed one's.
"""

import psycopg
import pytest

CLAIMED = "select id, claim from jobs.claim('w', array['cc'], %s)"
CHAIN = "select id, claim, name from jobs.complete_and_claim(%s::uuid[], %s::bigint[], 'w', array['cc'], %s)"


def enqueue(conn, *names):
    return [conn.execute("select id from jobs.enqueue(%s, queue => 'cc', priority => %s)", (name, -n)).fetchone()[0]
            for n, name in enumerate(names)]


def state(conn, job):
    return conn.execute("select state::text, claim from jobs.jobs where id = %s", (job,)).fetchone()


def test_the_batch_is_completed_and_the_next_claimed_in_one_transaction(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        a, b, c = enqueue(conn, "a", "b", "c")
        (held, token), = conn.execute(CLAIMED, (1,)).fetchall()
        assert held == a
        got = conn.execute(CHAIN, ([a], [token], 2)).fetchall()
        assert [name for _, _, name in got] == ["b", "c"]  # by priority, as claim hands them out
        assert state(conn, a)[0] == "completed"
        assert {state(conn, j)[0] for j in (b, c)} == {"running"}
        xmins = conn.execute("select count(distinct xmin::text) from jobs_data.jobs where id = any(%s)",
                             ([a, b, c],)).fetchone()[0]
        assert xmins == 1, "the completion and the claim committed apart"
        assert conn.execute(CHAIN, ([b, c], [got[0][1], got[1][1]], 2)).fetchall() == []  # nothing left


def test_a_lost_claim_refuses_the_call_and_changes_nothing(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        a, b, c = enqueue(conn, "a", "b", "c")
        (ja, ta), (jb, tb) = conn.execute(CLAIMED, (2,)).fetchall()
        conn.execute("select jobs.cancel(%s)", (jb,))  # b's claim is lost
        before = conn.execute("select id, state::text, claim, updated_at from jobs.jobs order by id").fetchall()
        with pytest.raises(psycopg.Error, match="1 of the 2 claims given are no longer held") as refused:
            conn.execute(CHAIN, ([ja, jb], [ta, tb], 1))
        assert refused.value.sqlstate == "PJ001"
        assert "complete the rest with jobs.complete_many" in refused.value.diag.message_hint
        assert conn.execute("select id, state::text, claim, updated_at from jobs.jobs order by id").fetchall() == before
        assert state(conn, c)[0] == "ready"


def test_inside_the_workers_transaction_the_jobs_writes_land_with_it_or_not_at_all(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table effects (job uuid)")
        a, b = enqueue(conn, "a", "b")
        (ja, ta), = conn.execute(CLAIMED, (1,)).fetchall()
    with psycopg.connect(dsn) as worker:  # the job's write, then the settle and the next claim
        worker.execute("insert into effects values (%s)", (ja,))
        (jb, tb, _), = worker.execute(CHAIN, ([ja], [ta], 1)).fetchall()
        worker.commit()
        assert jb == b
        with psycopg.connect(dsn, autocommit=True) as other:
            other.execute("select jobs.cancel(%s)", (jb,))  # b's claim is lost while it runs
        worker.execute("insert into effects values (%s)", (jb,))
        with pytest.raises(psycopg.Error) as refused:
            worker.execute(CHAIN, ([jb], [tb], 1))
        assert refused.value.sqlstate == "PJ001"
        worker.rollback()
        assert [r[0] for r in worker.execute("select job from effects").fetchall()] == [ja]


def test_the_next_batch_buries_a_final_attempt_lapse_as_claim_does(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("insert into jobs.job_types (name, max_attempts) values ('once', 1)")
        (job,) = conn.execute("select id from jobs.enqueue('once', queue => 'cc')").fetchone()
        conn.execute("select count(*) from jobs.claim('w', array['cc'], 1, '1 s')")
        conn.execute("set pg_jobs.clock_offset = '1min'")  # its lease lapses on its last attempt
        assert conn.execute(CHAIN, ([], [], 1)).fetchall() == []
        assert state(conn, job)[0] == "dead"


def test_bad_arguments_are_refused_as_complete_many_and_claim_refuse_them(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="equally long"):
            conn.execute(CHAIN, ([], [1], 1))
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="max_jobs"):
            conn.execute(CHAIN, ([], [], 0))
