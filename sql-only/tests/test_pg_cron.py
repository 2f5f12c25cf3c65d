"""The SQL-only edition swept by pg_cron (Debian's postgresql-15-cron), as docs/EDITIONS.md
says to set it up: a PostgreSQL 15 cluster of its own preloading pg_cron and not pg_jobs, the
edition installed into a database by a role that is not a superuser, and the sweep scheduled with the
documented line, in pg_cron's database, to run in the edition's as that role. Its passes run
jobs.sweep() in the edition's database: the schedules' pass enqueues a due schedule's job, and
the pass is noted (a claim then does not warn). pg_cron 1.4 runs a job each minute at most, so
this takes up to about two minutes."""

import datetime
import os
import pathlib
import re
import shutil
import subprocess
import tempfile
import time

import psycopg
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
BIN = "/usr/lib/postgresql/15/bin"
PORT = int(os.environ.get("PG_JOBS_PG_CRON_PORT", "54474"))
SERVER = f"host=127.0.0.1 port={PORT} user=postgres dbname=postgres"


def documented(kind, containing):
    """The one `kind manual` block of docs/EDITIONS.md that holds `containing`."""
    text = (ROOT / "docs" / "EDITIONS.md").read_text()
    (block,) = [b for b in re.findall(rf"```{kind} manual\n(.*?)```", text, re.S) if containing in b]
    return block


def as_postgres(*args):
    subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def cluster():
    if not os.path.exists("/usr/lib/postgresql/15/lib/pg_cron.so"):
        pytest.fail("pg_cron is missing: run scripts/setup.sh (postgresql-15-cron)")
    # (scripts/test-sql-only.sh names the directory, to stop the server if it stops this test)
    directory = os.environ.get("PG_JOBS_PG_CRON_DIR") or tempfile.mkdtemp(prefix="pg_jobs-pg_cron.")
    os.makedirs(directory, exist_ok=True)
    shutil.chown(directory, "postgres", "postgres")
    data = os.path.join(directory, "data")
    as_postgres(f"{BIN}/initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C.UTF-8")
    with open(os.path.join(data, "postgresql.conf"), "a") as conf:
        conf.write(f"port = {PORT}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{directory}'\n"
                   "shared_preload_libraries = 'pg_cron'\ncron.database_name = 'postgres'\n"
                   "cron.host = '127.0.0.1'\n")
    as_postgres(f"{BIN}/pg_ctl", "-D", data, "-l", os.path.join(directory, "log"), "-w", "start")
    try:
        yield SERVER
    finally:
        subprocess.run(["runuser", "-u", "postgres", "--", f"{BIN}/pg_ctl", "-D", data, "-m", "fast", "-w", "stop"],
                       check=False, capture_output=True)
        shutil.rmtree(directory, ignore_errors=True)


def test_pg_cron_runs_the_sweep_of_the_edition_installed_by_a_non_superuser(cluster):
    """docs/EDITIONS.md's blocks, run as written (its role app_owner and database app): the
    install, the sweep's schedule, a retention changed by the owner."""
    install = documented("sh", "psql")
    schedule = documented("sql", "cron.schedule_in_database")
    retention = documented("sql", "jobs_config.settings")
    with psycopg.connect(cluster, autocommit=True) as su:
        su.execute("create role app_owner login")
        su.execute("create database app owner app_owner")
        su.execute("create extension pg_cron")
        assert su.execute("select count(*) from pg_extension where extname = 'pg_jobs'").fetchone()[0] == 0
    subprocess.run(["bash", "-ec", install], cwd=ROOT, check=True, capture_output=True,
                   env={**os.environ, "PGHOST": "127.0.0.1", "PGPORT": str(PORT)})
    app = f"host=127.0.0.1 port={PORT} user=app_owner dbname=app"
    with psycopg.connect(app, autocommit=True) as owner:
        assert not owner.execute("select rolsuper from pg_roles where rolname = current_user").fetchone()[0]
        owner.execute("select jobs.schedule('tick', '* * * * *', '{\"name\": \"tock\"}')")
        owner.execute(retention)
        assert owner.execute("select jobs._retention('pg_jobs.completed_retention', null)").fetchone()[0] == \
            datetime.timedelta(days=3)
    # The sweep runs in app as app_owner, never as the superuser who scheduled it.
    with psycopg.connect(cluster, autocommit=True) as su:
        su.execute(schedule)
    deadline = time.monotonic() + 150
    with psycopg.connect(app, autocommit=True) as owner:
        while not owner.execute("select count(*) from jobs.jobs where name = 'tock'").fetchone()[0]:
            assert time.monotonic() < deadline, "pg_cron did not sweep within 150 s: " + str(
                psycopg.connect(cluster).execute("select status, return_message from cron.job_run_details").fetchall())
            time.sleep(1)
        assert owner.execute("select at > clock_timestamp() - interval '5 minutes' "
                             "from jobs_config.last_sweep").fetchone()[0]
        warnings = []
        owner.add_notice_handler(lambda d: warnings.append(d.message_primary))
        owner.execute("select count(*) from jobs.claim('w')")
        assert warnings == []
    with psycopg.connect(cluster) as su:
        runs = su.execute("select j.username, d.status, count(*) from cron.job_run_details as d join cron.job as j using (jobid) "
                          "group by j.username, d.status").fetchall()
    assert [(user, status) for user, status, _ in runs] == [("app_owner", "succeeded")], runs
