"""pg_jobs kept available by pg_auto_failover (Debian's postgresql-15-auto-failover): a monitor
and two nodes on this machine, pg_jobs preloaded on both, the monitor's and keepers' timeouts
tuned as docs/OPERATIONS.md says. Producers and workers use one multi-host connection string
(target_session_attrs=read-write). During a drain, a planned switchover, then the primary
killed with its keeper (as a machine lost): every acknowledged enqueue is there after both,
every job is completed, each job's effect (a row written in the transaction that completes
it) happens exactly once, and the background worker sweeps on the primary only. The longest
write gap of each is printed (run with -s to see it); no timing is asserted.
"""

import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid

import psycopg
import pytest

BIN = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")  # the release under test
MONITOR = int(os.environ.get("PG_JOBS_AUTO_FAILOVER_PORT", "54441"))  # and the two nodes after it
NODES = (MONITOR + 1, MONITOR + 2)
DSN = (f"host=127.0.0.1,127.0.0.1 port={NODES[0]},{NODES[1]} user=postgres dbname=postgres "
       "target_session_attrs=read-write connect_timeout=2")

# Failover within seconds: the monitor checks each node every second and calls one that
# failed its checks for 3 s unhealthy; a keeper that reaches neither the monitor nor its
# standby for 3 s demotes its primary itself, so the monitor may promote the standby 5 s after
# the primary went silent without two primaries ever taking writes (docs/OPERATIONS.md).
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "3000",
    "pgautofailover.primary_demote_timeout": "5000",
}
NODE_CONF = """
shared_preload_libraries = 'pg_stat_statements,pg_jobs'
shared_buffers = '128MB'
"""

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/bin/pg_autoctl"),
                                reason="pg_auto_failover is not installed (scripts/setup.sh installs it)")


class Formation:
    def __init__(self, directory):
        self.dir = directory
        self.env = {**os.environ, "XDG_CONFIG_HOME": f"{directory}/config", "XDG_DATA_HOME": f"{directory}/data",
                    "PG_CONFIG": f"{BIN}/pg_config"}
        self.keepers = {}

    def autoctl(self, *args, timeout=120):
        run = subprocess.run(["runuser", "-u", "postgres", "--", "pg_autoctl", *args], env=self.env,
                             capture_output=True, text=True, timeout=timeout)
        assert run.returncode == 0, f"pg_autoctl {' '.join(args)}: {run.stderr[-2000:]}"
        return run.stdout

    def run(self, name):
        """`pg_autoctl run` for this node, in a process group of its own (to kill it whole)."""
        log = open(f"{self.dir}/{name}.log", "w")
        self.keepers[name] = subprocess.Popen(
            ["runuser", "-u", "postgres", "--", "pg_autoctl", "run", "--pgdata", f"{self.dir}/{name}"],
            env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, name):
        os.killpg(self.keepers[name].pid, signal.SIGKILL)
        self.keepers[name].wait()

    def create(self, name, port, *extra):
        self.autoctl("create", *extra, "--pgdata", f"{self.dir}/{name}", "--pgport", str(port),
                     "--hostname", "127.0.0.1", "--listen", "127.0.0.1", "--auth", "trust", "--no-ssl",
                     "--pgctl", f"{BIN}/pg_ctl")

    def states(self):
        """{node name: (reported state, assigned state)}."""
        with psycopg.connect(f"host=127.0.0.1 port={MONITOR} user=postgres dbname=pg_auto_failover",
                             autocommit=True) as conn:
            return {name: (reported, goal) for name, reported, goal in conn.execute(
                "select nodename, reportedstate::text, goalstate::text from pgautofailover.node")}

    def wait_for(self, wanted, timeout=120):
        deadline = time.monotonic() + timeout
        while self.states() != wanted:
            assert time.monotonic() < deadline, f"the formation is {self.states()}, not {wanted}"
            time.sleep(0.2)


def node_dsn(port):
    return f"host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=2"


def pg_jobs_workers(port):
    with psycopg.connect(node_dsn(port), autocommit=True) as conn:
        return sorted(t for (t,) in conn.execute(
            "select backend_type from pg_stat_activity where backend_type like 'pg_jobs%'"))


def pg_jobs_workers_or_none(port):
    """The background workers of pg_jobs on the node (its launcher once preloaded), or None
    while it does not take connections."""
    try:
        return pg_jobs_workers(port)
    except psycopg.OperationalError:
        return None


@pytest.fixture(scope="module")
def formation():
    directory = tempfile.mkdtemp(prefix="pg_jobs-auto-failover-")
    os.chmod(directory, 0o755)
    subprocess.run(["chown", "postgres:", directory], check=True)
    f = Formation(directory)
    try:
        f.create("monitor", MONITOR, "monitor")
        f.run("monitor")
        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(f"host=127.0.0.1 port={MONITOR} user=postgres dbname=pg_auto_failover",
                                     autocommit=True) as conn:
                    for name, value in MONITOR_SETTINGS.items():
                        conn.execute(f"alter system set {name} = {value}")
                    conn.execute("select pg_reload_conf()")
                break
            except psycopg.OperationalError:
                assert time.monotonic() < deadline, "the monitor did not start"
                time.sleep(0.2)
        monitor_uri = f"postgres://autoctl_node@127.0.0.1:{MONITOR}/pg_auto_failover?sslmode=disable"
        for i, (name, port) in enumerate(zip(("node1", "node2"), NODES, strict=True)):
            f.create(name, port, "postgres", "--monitor", monitor_uri, "--name", name)
            with open(f"{directory}/{name}/postgresql.conf", "a") as conf:
                conf.write(NODE_CONF)
            f.autoctl("config", "set", "--pgdata", f"{directory}/{name}", "timeout.network_partition_timeout", "3")
            f.run(name)
            if i == 0:  # the first node, once its keeper runs it: pg_jobs, and a table of effects
                deadline = time.monotonic() + 60
                while not pg_jobs_workers_or_none(port):
                    assert time.monotonic() < deadline, "node1 did not start with pg_jobs preloaded"
                    time.sleep(0.2)
                with psycopg.connect(node_dsn(port), autocommit=True) as conn:
                    conn.execute("create extension pg_jobs")
                    conn.execute("create table effects (job_id uuid primary key)")
        f.wait_for({"node1": ("primary", "primary"), "node2": ("secondary", "secondary")})
        yield f
    finally:
        for name in list(f.keepers):
            try:
                f.kill(name)
            except ProcessLookupError:
                pass
        subprocess.run(["pkill", "-9", "-f", f"postgres -D {directory}/"], check=False)
        subprocess.run(["rm", "-rf", directory], check=False)


class Drain:
    """Producers and workers on the multi-host connection string, through whatever happens."""

    def __init__(self):
        self.queue = "failover-" + uuid.uuid4().hex[:8]
        self.enqueued, self.completed, self.duplicates = set(), set(), []
        self.last_write, self.gap = time.monotonic(), 0.0
        self.lock, self.producing, self.stop = threading.Lock(), threading.Event(), threading.Event()
        self.producing.set()
        self.threads = [threading.Thread(target=self.produce)] + [threading.Thread(target=self.work) for _ in range(3)]

    def wrote(self):
        with self.lock:
            now = time.monotonic()
            self.gap, self.last_write = max(self.gap, now - self.last_write), now

    def take_gap(self):
        with self.lock:
            gap, self.gap = self.gap, 0.0
            return gap

    def produce(self):
        conn = None
        while self.producing.is_set():
            try:
                conn = conn or psycopg.connect(DSN, autocommit=True)
                job_id = conn.execute("select id from jobs.enqueue('effect', queue => %s)", (self.queue,)).fetchone()[0]
                with self.lock:
                    self.enqueued.add(job_id)
                self.wrote()
                time.sleep(0.005)
            except psycopg.Error:
                conn = None
                time.sleep(0.05)

    def work(self):
        conn = None
        while not self.stop.is_set():
            try:
                conn = conn or psycopg.connect(DSN, autocommit=True)
                claimed = conn.execute("select id, claim from jobs.claim('w', array[%s], 10, '5 seconds')",
                                       (self.queue,)).fetchall()
                if not claimed:
                    time.sleep(0.05)
                for job_id, claim in claimed:
                    try:
                        with conn.transaction():
                            conn.execute("insert into effects (job_id) values (%s)", (job_id,))
                            if not conn.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0]:
                                raise psycopg.Rollback()  # fenced out: the effect is taken back
                            done = True
                    except psycopg.errors.UniqueViolation:
                        self.duplicates.append(job_id)
                        done = False
                    if done:
                        with self.lock:
                            self.completed.add(job_id)
                        self.wrote()
                    done = False
            except psycopg.Error:
                conn = None
                time.sleep(0.05)


def unfinished(queue):
    """The queue's jobs not completed, on the primary (a completion whose answer a failover
    took is done all the same)."""
    try:
        with psycopg.connect(DSN, autocommit=True) as conn:
            return conn.execute("select count(*) from jobs.jobs where queue = %s and state <> 'completed'",
                                (queue,)).fetchone()[0]
    except psycopg.OperationalError:
        return -1


def test_a_switchover_and_a_killed_primary_lose_nothing_and_run_nothing_twice(formation):
    drain = Drain()
    for t in drain.threads:
        t.start()
    try:
        time.sleep(3)
        assert pg_jobs_workers(NODES[0]) == ["pg_jobs launcher", "pg_jobs sweeper"]
        assert pg_jobs_workers(NODES[1]) == []  # a standby never sweeps
        drain.take_gap()
        formation.autoctl("perform", "switchover", "--pgdata", f"{formation.dir}/node1")
        formation.wait_for({"node1": ("secondary", "secondary"), "node2": ("primary", "primary")})
        time.sleep(3)
        switchover_gap = drain.take_gap()
        deadline = time.monotonic() + 30
        while pg_jobs_workers(NODES[1]) != ["pg_jobs launcher", "pg_jobs sweeper"]:
            assert time.monotonic() < deadline, "the new primary does not sweep"
            time.sleep(0.2)
        assert pg_jobs_workers(NODES[0]) == []  # the old primary, a standby now, stopped sweeping

        formation.kill("node2")
        killed = time.monotonic()
        deadline = killed + 90
        while formation.states().get("node1", ("",))[0] not in ("wait_primary", "primary"):
            assert time.monotonic() < deadline, f"node1 was not promoted: {formation.states()}"
            time.sleep(0.2)
        time.sleep(3)
        failover_gap = drain.take_gap()
        print(f"\nlongest write gap: switchover {switchover_gap:.2f} s, killed primary {failover_gap:.2f} s")
        drain.producing.clear()
        drain.threads[0].join()
        deadline = time.monotonic() + 90
        while unfinished(drain.queue) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        drain.producing.clear()
        drain.stop.set()
        for t in drain.threads:
            t.join()
    assert drain.duplicates == []
    with psycopg.connect(node_dsn(NODES[0]), autocommit=True) as conn:
        states = dict(conn.execute("select id, state::text from jobs.jobs where queue = %s", (drain.queue,)).fetchall())
        effects = {j for (j,) in conn.execute("select job_id from effects")}
        assert "pg_jobs sweeper" in pg_jobs_workers(NODES[0])
    assert drain.enqueued <= set(states)  # every acknowledged enqueue survived both
    assert set(states.values()) == {"completed"}
    assert effects == set(states)  # each job's effect exactly once (a second is a unique violation)
    assert drain.completed <= effects
