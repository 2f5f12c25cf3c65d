"""Claims that do not wait for their WAL flush (pg_jobs.async_claims, src/commit/async_claims.rs), and
the tokens that keep them safe (src/functions/tokens.rs), on a cluster of its own that a test crashes.

The cluster's WAL writer flushes every 10 s (wal_writer_delay), so a commit that does not wait
for its flush stays in the server's WAL buffers for seconds, and `pg_ctl stop -m immediate`
loses it; a commit that waits is on disk when it returns. Autovacuum is off and the tests'
database has no sweeper, so no other commit flushes the lost claim's WAL by the way.

How the guards were checked: with jobs._async_if_alone made a no-op, the lost claims survived
the crash (the job came back running under the first token) and these tests failed; with the
token's high bits the per-job counter of before (previous + 1), the token after the crash was
the lost one's high bits again, and the test that compares them failed.
"""

import os
import subprocess
import time

import psycopg
import pytest

from clusters import cluster, own_cluster
from polling import one

PORT = int(os.environ.get("PG_JOBS_CRASH_PORT", "54427"))
ROUNDS = int(os.environ.get("PG_JOBS_CRASH_ROUNDS", "100"))
PG_BIN = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")


@pytest.fixture(scope="module")
def server():
    # The database the tests use has no sweeper (it would settle for them what they check).
    conf = ("wal_writer_delay = '10s'\nautovacuum = off\nsynchronous_commit = on\n"
            "pg_jobs.database_name = 'postgres'\n")
    with own_cluster("pg_jobs-crash.", PORT, conf) as s:
        one(s["dsn"], "create database crash")
        s["dsn"] += " dbname=crash"
        one(s["dsn"], "create extension pg_jobs")
        yield s


def crash(server):
    """Kills the server without a flush (as a power cut would, for what is not yet written),
    and starts it again."""
    subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(PG_BIN, "pg_ctl"), "-D", server["dir"],
                    "stop", "-m", "immediate"], check=True, capture_output=True)
    cluster("start", server["dir"], str(PORT))
    deadline = time.monotonic() + 30
    while True:
        try:
            one(server["dsn"], "select 1")
            return
        except psycopg.OperationalError:
            assert time.monotonic() < deadline, "the server did not come back"
            time.sleep(0.1)


def fresh(dsn, n=1, max_attempts=25):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("delete from jobs_data.jobs")
        conn.execute("delete from jobs_data.job_types")
        conn.execute("insert into jobs.job_types (name, max_attempts) values ('crash', %s)", (max_attempts,))
        return [conn.execute("select id from jobs.enqueue('crash')").fetchone()[0] for _ in range(n)]


def refused_everywhere(dsn, job, token):
    """Every write with a lost token is refused, and changes nothing."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        before = conn.execute("select state::text, claim, attempt, updated_at from jobs.jobs where id = %s", (job,)).fetchone()
        assert conn.execute("select jobs.complete(%s, %s)", (job, token)).fetchone()[0] is False
        assert conn.execute("select jobs.heartbeat(%s, %s)", (job, token)).fetchone()[0] is None
        for sql in ("select jobs.save_step(%s, %s, 'step', '{}')", "select jobs.assert_claim(%s, %s)"):
            with pytest.raises(psycopg.Error) as refused:
                conn.execute(sql, (job, token))
            assert refused.value.sqlstate == "PJ001"
        assert conn.execute("select state::text, claim, attempt, updated_at from jobs.jobs where id = %s",
                            (job,)).fetchone() == before


def test_a_lost_claim_is_claimed_again_and_its_worker_fenced_out(server):
    dsn = server["dsn"]
    (job,) = fresh(dsn)
    lost = one(dsn, "select claim from jobs.claim('first')")  # autocommit: its only work
    crash(server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select state::text, attempt from jobs.jobs where id = %s", (job,)).fetchone() == ("ready", 0)
        again = conn.execute("select claim from jobs.claim('second')").fetchone()[0]
    assert again > lost and (again >> 23) > (lost >> 23)  # later milliseconds: never the same
    refused_everywhere(dsn, job, lost)


def test_a_claim_inside_a_transaction_with_other_writes_keeps_its_durability(server):
    dsn = server["dsn"]
    (job,) = fresh(dsn)
    with psycopg.connect(dsn) as conn:
        conn.execute("create table if not exists app_rows (n int)")
        conn.execute("insert into app_rows values (1)")
        token = conn.execute("select claim from jobs.claim('inside')").fetchone()[0]
        conn.commit()
    crash(server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select state::text, claim from jobs.jobs where id = %s", (job,)).fetchone() == ("running", token)
        assert conn.execute("select count(*) from app_rows").fetchone()[0] >= 1


@pytest.mark.parametrize("statement", [
    "with w as (insert into app_rows values (2) returning n) select c.claim from jobs.claim('s') as c, w",
    "select claim from wrapped_claim()",
])
def test_a_claim_in_a_statement_that_does_more_keeps_its_durability(server, statement):
    """A claim beside a write in the same statement, or inside a function of the application's,
    is not the statement's only work: it waits for its flush. Checked: with
    statement::is_a_bare_call answering true for any plan, the claim inside a function was
    lost; the statement with an INSERT is caught by the other guard as well (the INSERT, run
    first, gave the transaction an id before the claim looked)."""
    dsn = server["dsn"]
    (job,) = fresh(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table if not exists app_rows (n int)")
        conn.execute("create or replace function wrapped_claim() returns setof jobs.claimed_job"
                     " language sql as $$ select * from jobs.claim('s') $$")
        token = conn.execute(statement).fetchone()[0]
    crash(server)
    assert one(dsn, f"select claim from jobs.jobs where id = '{job}' and state = 'running'") == token


def test_an_aggregate_over_a_claim_is_still_its_only_work(server):
    """`select array_agg(id) ... from jobs.claim(...)`, as a pgbench script or a driver
    collecting a batch might: no table read, nothing written besides the claim."""
    dsn = server["dsn"]
    (job,) = fresh(dsn)
    lost = one(dsn, "select max(claim) from jobs.claim('agg', max_jobs => 5)")
    crash(server)
    assert one(dsn, f"select state::text from jobs.jobs where id = '{job}'") == "ready"
    refused_everywhere(dsn, job, lost)


def test_with_async_claims_off_a_claim_survives_the_crash(server):
    dsn = server["dsn"]
    (job,) = fresh(dsn)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("set pg_jobs.async_claims = off")
        token = conn.execute("select claim from jobs.claim('durable')").fetchone()[0]
    crash(server)
    assert one(dsn, f"select claim from jobs.jobs where id = '{job}' and state = 'running'") == token


def test_a_lost_burial_of_a_final_attempt_is_made_again_and_the_job_never_handed_out(server):
    dsn = server["dsn"]
    (job,) = fresh(dsn, max_attempts=1)
    with psycopg.connect(dsn) as conn:  # a durable claim, whose lease then lapses
        conn.execute("select count(*) from jobs.claim('w', lease => '1 s')")
        conn.commit()
    time.sleep(1.2)
    assert one(dsn, "select id from jobs.claim('w')") is None  # buries it, and is lost in the crash
    crash(server)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select state::text from jobs.jobs where id = %s", (job,)).fetchone()[0] == "running"
        assert conn.execute("select count(*) from jobs.claim('w')").fetchone()[0] == 0
        assert conn.execute("select state::text from jobs.jobs where id = %s", (job,)).fetchone()[0] == "dead"


def test_crash_rounds_keep_every_effect_exactly_once(server):
    """ROUNDS times: claim a batch in autocommit, crash, then claim again and complete each job
    with its effect in one transaction; every lost token is refused. At the end each job's
    effect landed once.

    A claim the WAL writer happened to flush before the crash (its 10 s tick falls between the
    claim and the crash only on a loaded machine, where a round takes that long) is not lost:
    its token is the job's, and settles it, with its effect, as a worker's would. What the
    fence must do is refuse each token whose claim the crash did lose; most are."""
    dsn = server["dsn"]
    jobs = fresh(dsn, n=ROUNDS)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table if not exists effects (job uuid)")
        conn.execute("truncate effects")
    refused = 0
    for _ in range(ROUNDS):
        with psycopg.connect(dsn, autocommit=True) as conn:  # a bare claim: asynchronous
            lost = conn.execute("select id, claim from jobs.claim('a', max_jobs => 3)").fetchall()
        crash(server)
        with psycopg.connect(dsn) as worker:
            rows = worker.execute("select id, claim from jobs.claim('b')").fetchall()
            worker.commit()
            for job, token in rows:
                worker.execute("insert into effects values (%s)", (job,))
                assert worker.execute("select jobs.complete(%s, %s)", (job, token)).fetchone()[0]
                worker.commit()
        with psycopg.connect(dsn) as conn:
            for job, token in lost:
                survived = conn.execute("select state = 'running' and claim = %s from jobs.jobs where id = %s",
                                        (token, job)).fetchone()[0]
                if survived:
                    conn.execute("insert into effects values (%s)", (job,))
                assert conn.execute("select jobs.complete(%s, %s)", (job, token)).fetchone()[0] is survived
                conn.commit()
                refused += not survived
    with psycopg.connect(dsn, autocommit=True) as conn:
        counts = dict(conn.execute("select job, count(*) from effects group by job").fetchall())
        attempts = dict(conn.execute("select id, attempt from jobs.jobs where state = 'completed'").fetchall())
    assert counts == dict.fromkeys(jobs, 1)
    assert set(attempts.values()) == {1}  # no lost claim charged an attempt
    assert refused > 0  # the crash lost claims, and the fence refused their tokens
