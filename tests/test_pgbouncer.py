"""Workers through PgBouncer in transaction pooling (Debian's pgbouncer, started here) drain a
queue with the blocking claim: no LISTEN, which transaction pooling cannot carry, and no
polling loop of their own. Jobs enqueued while the workers wait reach them at their commit.

The workers' connections disable psycopg's server-side prepared statements, as any client of
a transaction-pooling PgBouncer 1.18 must (a prepared statement lives in one server session).
"""

import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import time

import psycopg
import pytest

PORT = int(os.environ.get("PG_JOBS_PGBOUNCER_PORT", "54426"))
DEADLINE = 60


@pytest.fixture
def bouncer(dsn):
    if not shutil.which("pgbouncer") and not os.path.exists("/usr/sbin/pgbouncer"):
        pytest.fail("pgbouncer is missing: run scripts/setup.sh")
    params = dict(part.split("=", 1) for part in dsn.split())
    tmp_path = pathlib.Path(tempfile.mkdtemp(prefix="pg_jobs-pgbouncer."))  # postgres reads it
    os.chmod(tmp_path, 0o777)
    (tmp_path / "users.txt").write_text('"postgres" ""\n')
    (tmp_path / "pgbouncer.ini").write_text(f"""[databases]
{params['dbname']} = host={params['host']} port={params['port']} dbname={params['dbname']}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {PORT}
unix_socket_dir =
auth_type = trust
auth_file = {tmp_path}/users.txt
pool_mode = transaction
default_pool_size = 3
max_client_conn = 50
logfile = {tmp_path}/pgbouncer.log
pidfile = {tmp_path}/pgbouncer.pid
""")
    for f in tmp_path.iterdir():
        os.chmod(f, 0o644)
    subprocess.run(["runuser", "-u", "postgres", "--", "/usr/sbin/pgbouncer", "-d", str(tmp_path / "pgbouncer.ini")],
                   check=True)
    through = f"host=127.0.0.1 port={PORT} user=postgres dbname={params['dbname']}"
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            psycopg.connect(through, prepare_threshold=None).close()
            break
        except psycopg.OperationalError:
            assert time.monotonic() < deadline, "pgbouncer did not start"
            time.sleep(0.1)
    try:
        yield through
    finally:
        pid = (tmp_path / "pgbouncer.pid").read_text().strip()
        subprocess.run(["kill", pid], check=False)
        shutil.rmtree(tmp_path, ignore_errors=True)


def test_workers_through_pgbouncer_drain_a_queue_with_the_blocking_claim(dsn, bouncer):
    done = []
    stop = threading.Event()

    def worker(n):
        with psycopg.connect(bouncer, autocommit=True, prepare_threshold=None) as conn:
            while not stop.is_set():
                rows = conn.execute("select id, claim from jobs.claim(%s, max_jobs => 5, wait => '1 s')",
                                    (f"bounced-{n}",)).fetchall()
                for job_id, claim in rows:
                    if conn.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0]:
                        done.append(job_id)

    workers = [threading.Thread(target=worker, args=(n,), daemon=True) for n in range(4)]
    for w in workers:
        w.start()
    time.sleep(1)  # the workers are asleep in their claims: the queue is empty
    with psycopg.connect(dsn, autocommit=True) as conn:
        for _ in range(10):
            conn.execute("""select count(*) from jobs.enqueue_batch(
                (select jsonb_agg(jsonb_build_object('name', 'bounced')) from generate_series(1, 20)))""")
            time.sleep(0.05)
    deadline = time.monotonic() + DEADLINE
    while len(done) < 200:
        assert time.monotonic() < deadline, f"{len(done)} of 200 jobs done through pgbouncer"
        time.sleep(0.05)
    stop.set()
    for w in workers:
        w.join(DEADLINE)
    assert len(done) == len(set(done)) == 200
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select count(*) from jobs.jobs where state = 'completed'").fetchone()[0] == 200
