"""Failover on PostgreSQL's own replication: a primary and a synchronous streaming standby on
this machine, workers against the primary, the primary killed and the standby promoted.

No acknowledged enqueue or settle is lost, no effect happens twice, and the background worker
does nothing on the standby during recovery but sweeps once it is promoted. This is also how
to run pg_jobs highly available: docs/GUARANTEES.md says so.
"""

import os
import subprocess
import threading
import time
import uuid

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")  # the release under test (scripts/lib.sh)
PRIMARY = int(os.environ.get("PG_JOBS_FAILOVER_PORT", "54396"))  # and the standby on the next port
STANDBY = PRIMARY + 1
PDIR, SDIR = f"/tmp/pg_jobs-failover-{PRIMARY}", f"/tmp/pg_jobs-failover-{STANDBY}"
JOBS = 600


def sh(*args):
    return subprocess.run(list(args), check=True, capture_output=True, text=True).stdout.strip()


def as_pg(*args):
    return sh("runuser", "-u", "postgres", "--", *args)


def dsn(port):
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres"


def one(port, sql, args=None):
    with psycopg.connect(dsn(port), autocommit=True, connect_timeout=2) as conn:
        return conn.execute(sql, args).fetchone()[0]


def eventually(port, sql, wanted, timeout=30):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = one(port, sql)
        except psycopg.OperationalError:
            got = None
        if got == wanted:
            return
        assert time.monotonic() < deadline, f"{sql!r} answered {got!r}, not {wanted!r}"
        time.sleep(0.05)


class Shared:
    def __init__(self):
        self.port = PRIMARY
        self.lock = threading.Lock()
        self.enqueued, self.completed = set(), set()
        self.stop = threading.Event()


def worker(shared, n):
    while not shared.stop.is_set():
        try:
            with psycopg.connect(dsn(shared.port), autocommit=True, connect_timeout=2) as conn:
                while not shared.stop.is_set():
                    batch = conn.execute("select id, claim from jobs.claim(%s, max_jobs => 5, lease => '5 seconds')",
                                         (f"w{n}",)).fetchall()
                    if not batch:
                        time.sleep(0.02)
                    for job_id, claim in batch:
                        with conn.transaction():
                            conn.execute("insert into effects (job_id) values (%s)", (job_id,))
                            landed = conn.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0]
                            if not landed:
                                raise psycopg.Rollback()
                        if landed:
                            with shared.lock:  # the commit returned: acknowledged
                                shared.completed.add(job_id)
        except (psycopg.Error, psycopg.Rollback):  # the primary died, or it is the standby
            time.sleep(0.1)


def producer(shared):
    n = 0
    while not shared.stop.is_set() and n < JOBS:
        try:
            with psycopg.connect(dsn(shared.port), autocommit=True, connect_timeout=2) as conn:
                while not shared.stop.is_set() and n < JOBS:
                    # A caller-allocated id, not an idempotency key: a retry after a lost
                    # acknowledgement must find the job even once it has completed (a finished
                    # job frees its key, but its id stays taken).
                    job_id = conn.execute("select id from jobs.enqueue('work', jsonb_build_object('n', %s::int), "
                                          "id => %s)", (n, uuid.uuid5(uuid.NAMESPACE_OID, f"work-{n}"))).fetchone()[0]
                    with shared.lock:
                        shared.enqueued.add(job_id)
                    n += 1
                    time.sleep(0.002)
        except psycopg.Error:
            time.sleep(0.1)  # the same id again after a failover: deduped if it had landed


def attach_standby():
    """A streaming standby of the primary, made synchronous once it is attached (before, every
    commit would wait for it)."""
    sh("mkdir", "-p", SDIR)
    sh("chown", "postgres:", SDIR)
    sh("chmod", "700", SDIR)
    as_pg(f"{BIN}/pg_basebackup", "-h", "127.0.0.1", "-p", str(PRIMARY), "-U", "postgres", "-D", SDIR,
          "-X", "stream", "-R", "--checkpoint=fast")  # a spread checkpoint would take minutes
    with open(f"{SDIR}/postgresql.conf", "a") as f:
        f.write(f"port = {STANDBY}\nunix_socket_directories = '{SDIR}'\n")
    with open(f"{SDIR}/postgresql.auto.conf", "a") as f:
        f.write(f"primary_conninfo = 'host=127.0.0.1 port={PRIMARY} user=postgres application_name=standby1'\n")
    as_pg(f"{BIN}/pg_ctl", "-D", SDIR, "-l", f"{SDIR}/log", "-w", "start")
    with psycopg.connect(dsn(PRIMARY), autocommit=True) as conn:
        conn.execute("alter system set synchronous_standby_names = 'standby1'")
        conn.execute("select pg_reload_conf()")
    eventually(PRIMARY, "select sync_state from pg_stat_replication where application_name = 'standby1'", "sync")


def stop_both():
    for d in (SDIR, PDIR):
        subprocess.run(["runuser", "-u", "postgres", "--", f"{BIN}/pg_ctl", "-D", d, "-m", "immediate",
                        "-w", "stop"], capture_output=True)
    sh("rm", "-rf", PDIR, SDIR)


def start_primary(conf):
    sh("rm", "-rf", PDIR, SDIR)
    path = f"{PDIR}.conf"
    with open(path, "w") as f:
        f.write(conf)
    sh("bash", os.path.join(ROOT, "scripts/cluster.sh"), "start", PDIR, str(PRIMARY), path)
    os.remove(path)


def test_failover_to_a_synchronous_standby_loses_nothing_and_runs_nothing_twice():
    start_primary("pg_jobs.sweep_interval = '100ms'\n")
    try:
        with psycopg.connect(dsn(PRIMARY), autocommit=True) as conn:
            conn.execute("create extension pg_jobs")
            conn.execute("create table effects (job_id uuid not null)")
            # A final attempt whose lease lapses after the failover: only a sweep on the new
            # primary buries it (no claimer asks for its queue).
            conn.execute("select jobs.enqueue('poison', max_attempts => 1, queue => 'side')")
            conn.execute("select count(*) from jobs.claim('doomed', array['side'], 1, '4 seconds')")

        attach_standby()

        # During recovery neither the launcher nor a sweeper runs on the standby; on the
        # primary both do (checked first, so the standby's zero is not a launcher that never
        # starts anywhere).
        assert one(PRIMARY, "select count(*) from pg_stat_activity where backend_type = 'pg_jobs launcher'") == 1
        eventually(PRIMARY, "select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper'", 1)
        assert one(STANDBY, "select pg_is_in_recovery()") is True
        assert one(STANDBY, "select count(*) from pg_stat_activity where backend_type like 'pg_jobs %'") == 0

        shared = Shared()
        threads = [threading.Thread(target=worker, args=(shared, n)) for n in range(4)]
        threads.append(threading.Thread(target=producer, args=(shared,)))
        for t in threads:
            t.start()
        eventually(PRIMARY, "select count(*) >= 200 from jobs.jobs where state = 'completed'", True)

        as_pg(f"{BIN}/pg_ctl", "-D", PDIR, "-m", "immediate", "-w", "stop")  # the primary dies
        as_pg(f"{BIN}/pg_ctl", "-D", SDIR, "-w", "promote")
        shared.port = STANDBY
        eventually(STANDBY, "select count(*) from pg_stat_activity where backend_type = 'pg_jobs launcher'", 1)
        eventually(STANDBY, "select count(*) from pg_stat_activity where backend_type = 'pg_jobs sweeper'", 1)

        eventually(STANDBY, "select count(*) from jobs.jobs where name = 'work' and state = 'completed'", JOBS, 120)
        shared.stop.set()
        for t in threads:
            t.join(timeout=30)

        with psycopg.connect(dsn(STANDBY), autocommit=True) as conn:
            ids = {r[0] for r in conn.execute("select id from jobs.jobs where name = 'work'")}
            done = {r[0] for r in conn.execute("select id from jobs.jobs where name = 'work' and state = 'completed'")}
            effects, distinct = conn.execute("select count(*), count(distinct job_id) from effects").fetchone()
        assert shared.enqueued <= ids, "an acknowledged enqueue was lost"
        assert shared.completed <= done, "an acknowledged completion was lost"
        assert len(ids) == JOBS, "a job was enqueued twice"
        assert (effects, distinct) == (JOBS, JOBS), "an effect was lost or happened twice"
        # Promoted, the background worker sweeps: the lapsed final attempt is buried.
        eventually(STANDBY, "select state::text from jobs.jobs where name = 'poison'", "dead")
    finally:
        stop_both()


def test_a_claim_lost_with_the_old_primary_is_claimed_again_on_the_new_one_and_its_holder_fenced():
    """A claim on its own commits without waiting for its WAL flush (pg_jobs.async_claims), so
    it is not yet sent to the standby, synchronous or not, when the primary dies (its WAL
    writer flushes every 10 s here, and nothing else writes). On the promoted standby the job is
    claimable again, with a greater token, and every write with the lost one is refused.
    Checked to fail with pg_jobs.async_claims = off: the claim reached the standby, and the
    job came back running under it."""
    start_primary("wal_writer_delay = '10s'\nautovacuum = off\npg_jobs.database_name = 'postgres'\n")
    try:
        with psycopg.connect(dsn(PRIMARY), autocommit=True) as conn:
            conn.execute("create database fenced")
        fenced = dsn(PRIMARY).replace("dbname=postgres", "dbname=fenced")
        with psycopg.connect(fenced, autocommit=True) as conn:  # no sweeper here: nothing else writes
            conn.execute("create extension pg_jobs")
        attach_standby()
        with psycopg.connect(fenced, autocommit=True) as conn:
            job = conn.execute("select id from jobs.enqueue('failover')").fetchone()[0]  # replicated
            lost = conn.execute("select claim from jobs.claim('old')").fetchone()[0]
        as_pg(f"{BIN}/pg_ctl", "-D", PDIR, "-m", "immediate", "-w", "stop")
        as_pg(f"{BIN}/pg_ctl", "-D", SDIR, "-w", "promote")
        new = dsn(STANDBY).replace("dbname=postgres", "dbname=fenced")
        eventually(STANDBY, "select pg_is_in_recovery()", False)
        with psycopg.connect(new, autocommit=True) as conn:
            assert conn.execute("select state::text, attempt from jobs.jobs where id = %s", (job,)).fetchone() == ("ready", 0)
            again = conn.execute("select claim from jobs.claim('new')").fetchone()[0]
            assert again > lost
            assert conn.execute("select jobs.complete(%s, %s)", (job, lost)).fetchone()[0] is False
            assert conn.execute("select jobs.heartbeat(%s, %s)", (job, lost)).fetchone()[0] is None
            for sql in ("select jobs.save_step(%s, %s, 'step', '{}')", "select jobs.assert_claim(%s, %s)"):
                try:
                    conn.execute(sql, (job, lost))
                    raise AssertionError(f"{sql} with the lost token was not refused")
                except psycopg.Error as refused:
                    assert refused.sqlstate == "PJ001"
            assert conn.execute("select state::text, claim from jobs.jobs where id = %s", (job,)).fetchone() == ("running", again)
    finally:
        stop_both()
