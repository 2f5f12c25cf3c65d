"""Fixtures of the conformance suite: a database per test, and the library's conformance
worker (README.md) started against it as a process of its own."""

import os
import shlex
import signal
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from clusters import cluster, database, own_cluster, pgbouncer  # noqa: E402 (the tests' throwaway clusters)

RESTART_PORT = int(os.environ.get("PG_JOBS_CONFORMANCE_RESTART_PORT", "54431"))
BOUNCER_PORT = int(os.environ.get("PG_JOBS_CONFORMANCE_PGBOUNCER_PORT", "54432"))
SHARD_PORT = int(os.environ.get("PG_JOBS_CONFORMANCE_SHARD_PORT", "54490"))  # and the next one
DEFAULT_WORKER = f"node {ROOT}/clients/node/conformance/worker.mjs"
TABLES = """
create table conformance_rows (job_id uuid not null, n int);
create table conformance_step_runs (job_id uuid not null, step text not null);
create table conformance_aborts (job_id uuid not null, reason text not null);
create table conformance_hooks (job_id uuid not null, hook text not null, outcome text);
"""


def pytest_report_header():
    return f"conformance worker: {worker_command()}"


def worker_command():
    return shlex.split(os.environ.get("PG_JOBS_CONFORMANCE_WORKER", DEFAULT_WORKER))


@pytest.fixture(scope="session")
def server_dsn():
    dsn = os.environ.get("PG_JOBS_DSN")
    if not dsn:
        pytest.fail("PG_JOBS_DSN is not set: run the suite through scripts/test.sh")
    return dsn


@pytest.fixture
def db(server_dsn):
    """A new database with pg_jobs and the tables the handlers write; its URL."""
    yield from make_db(server_dsn)


@pytest.fixture
def restartable():
    """A database on a server of its own, and a function that restarts that server (fast
    shutdown: every connection cut, open transactions rolled back)."""
    with own_cluster("pg_jobs-conformance.", RESTART_PORT, "") as server:
        for database in make_db(server["dsn"]):
            def restart():
                cluster("stop", server["dir"])
                cluster("start", server["dir"], str(RESTART_PORT))
            yield database, restart


@pytest.fixture
def shards():
    """Two shards: a database on each of two servers of their own, with `pg_jobs.shard` 0 and
    1, in shard order; and a function that stops or starts a shard's server (a fast stop: every
    connection cut, open transactions rolled back)."""
    with own_cluster("pg_jobs-conformance-shard0.", SHARD_PORT, "pg_jobs.shard = 0\n") as one, \
            own_cluster("pg_jobs-conformance-shard1.", SHARD_PORT + 1, "pg_jobs.shard = 1\n") as two:
        servers = [one, two]
        for first in make_db(one["dsn"]):
            for second in make_db(two["dsn"]):
                def server(shard, action):
                    if action == "stop":
                        cluster("stop", servers[shard]["dir"])
                    else:
                        cluster("start", servers[shard]["dir"], str(SHARD_PORT + shard))
                yield [first, second], server


@pytest.fixture
def bouncer(db):
    """Debian's PgBouncer in transaction pooling before the test's database, as
    docs/OPERATIONS.md sizes it: the workers' pool (`workers`, 10 server connections) apart
    from the producers' (`producers`, 2). Answers the two databases as seen through it."""
    with pgbouncer(db.dsn, {"workers": 10, "producers": 2}, BOUNCER_PORT) as through:
        yield {name: Database(dsn, f"postgresql://postgres@127.0.0.1:{BOUNCER_PORT}/{name}")
               for name, dsn in through.items()}


def make_db(server_dsn):
    with database(server_dsn, "conf_", TABLES) as (name, dsn):
        params = psycopg.conninfo.conninfo_to_dict(dsn)
        url = (f"postgresql://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:"
               f"{params.get('port', 5432)}/{name}")
        yield Database(dsn, url)


class Database:
    def __init__(self, dsn, url):
        self.dsn = dsn
        self.url = url

    def one(self, sql, args=None):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(sql, args).fetchone()

    def all(self, sql, args=None):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute(sql, args).fetchall()

    def execute(self, sql, args=None):
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql, args)

    def enqueue(self, name, payload=None, **options):
        spec = {"name": name, "payload": payload or {}, **options}
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return conn.execute("select id from jobs.enqueue_batch(%s)",
                                (psycopg.types.json.Jsonb([spec]),)).fetchone()[0]

    def eventually(self, sql, wanted, timeout=60, args=None):
        """Polls sql until its first column is `wanted`; fails with the last answer at the
        bound (a bound on a wait, not a timing assertion)."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.one(sql, args)
            got = got[0] if got else None
            if got == wanted:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"{sql!r} answered {got!r}, not {wanted!r}, within {timeout} s")
            time.sleep(0.05)


class Worker:
    """A conformance worker process."""

    def __init__(self, db, queues=("default",), concurrency=8, lease=30, grace=10, metrics_port=None, poll=None,
                 prepared=True, hooks=False, prefetch=0, shards=()):
        args = ["--dsn", db.url, "--concurrency", str(concurrency), "--lease", str(lease),
                "--shutdown-grace", str(grace), "--prefetch", str(prefetch)]
        for shard in shards:
            args += ["--shard", shard.url]
        if poll is not None:
            args += ["--poll", str(poll)]
        if not prepared:
            args += ["--no-prepared-statements"]
        if hooks:
            args += ["--hooks"]
        if metrics_port is not None:
            args += ["--metrics-port", str(metrics_port)]
        for queue in queues:
            args += ["--queue", queue]
        self.log = open(f"/tmp/pg_jobs-conformance-{uuid.uuid4().hex[:8]}.log", "w+")
        self.process = subprocess.Popen(worker_command() + args, stdout=self.log, stderr=subprocess.STDOUT)

    def terminate(self):
        self.process.send_signal(signal.SIGTERM)

    def kill(self):
        self.process.kill()
        self.process.wait()

    def wait(self, timeout):
        return self.process.wait(timeout)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()


@pytest.fixture
def start_worker():
    started = []

    def start(db, **options):
        worker = Worker(db, **options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        if worker.process.poll() is None:
            worker.kill()
        worker.log.close()
        os.unlink(worker.log.name)
