"""Chaos: exactly-once effects through killed connections, vanished workers, lapsed leases
and a server crash.

Eight workers drain jobs whose effect (a row in `effects`) is written in the same
transaction as jobs.complete, rolled back when complete answers false. Meanwhile:
- some handlers outlive their lease (no heartbeat), so the job is claimed again elsewhere;
- a chaos thread kills worker connections mid-transaction (pg_terminate_backend);
- some workers vanish holding claims (they disconnect without settling);
- the server is crashed (pg_ctl stop -m immediate) and restarted mid-run.
At the end every job is completed and every effect exists exactly once. The test runs its
own cluster, since it crashes it.
"""

import os
import random
import subprocess
import threading
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
JOBS = 3000
WORKERS = 8
LEASE = 0.5  # seconds
PORT = int(os.environ.get("PG_JOBS_CHAOS_PORT", "54394"))
PG_BIN = os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin")  # the release under test (scripts/lib.sh)


def cluster(*args):
    return subprocess.run(["bash", os.path.join(ROOT, "scripts/cluster.sh"), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {"completed": 0, "refused": 0, "killed": 0, "vanished": 0, "outlived": 0, "crashed": 0}

    def add(self, key):
        with self.lock:
            self.counts[key] += 1


def worker(dsn, n, stop, stats):
    rng = random.Random(n)
    while not stop.is_set():
        try:
            with psycopg.connect(dsn, autocommit=True, application_name="chaos-worker",
                                 connect_timeout=2) as conn:
                while not stop.is_set():
                    batch = conn.execute(
                        "select id, claim from jobs.claim(%s, max_jobs => 5, lease => make_interval(secs => %s))",
                        (f"w{n}", LEASE)).fetchall()
                    if not batch:
                        time.sleep(0.02)
                        continue
                    if rng.random() < 0.01:
                        stats.add("vanished")
                        break  # disconnect holding the claims: their leases lapse
                    for job_id, claim in batch:
                        with conn.transaction():
                            conn.execute("insert into effects (job_id) values (%s)", (job_id,))
                            if rng.random() < 0.02:
                                stats.add("outlived")
                                time.sleep(LEASE * 2)  # the lease lapses under us
                            landed = conn.execute("select jobs.complete(%s, %s)",
                                                  (job_id, claim)).fetchone()[0]
                            if not landed:
                                stats.add("refused")
                                raise psycopg.Rollback()
                        if landed:
                            stats.add("completed")
        except (psycopg.Error, psycopg.Rollback):
            stats.add("killed")  # our connection was killed (even mid-rollback), or the server is down
            time.sleep(0.1)


def chaos(dsn, stop, stats, crash_after):
    rng = random.Random(99)
    started, crashed = time.monotonic(), False
    while not stop.is_set():
        time.sleep(rng.uniform(0.05, 0.3))
        if not crashed and time.monotonic() - started > crash_after:
            crashed = True
            subprocess.run(["runuser", "-u", "postgres", "--", f"{PG_BIN}/pg_ctl",
                            "-D", DATA, "-m", "immediate", "-w", "stop"], check=True, capture_output=True)
            time.sleep(0.5)
            cluster("start", DATA, str(PORT))
            stats.add("crashed")
            continue
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                conn.execute("""select pg_terminate_backend(pid) from pg_stat_activity
                                where application_name = 'chaos-worker'
                                order by random() limit 1""")
        except psycopg.OperationalError:
            pass


DATA = f"/tmp/pg_jobs-chaos-{PORT}"


def test_exactly_once_effects_through_kills_vanishings_lapses_and_a_crash():
    subprocess.run(["rm", "-rf", DATA], check=True)
    dsn = cluster("start", DATA, str(PORT))
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create extension pg_jobs")
            conn.execute("create table effects (job_id uuid not null)")
            conn.execute(
                """select count(*) from jobs.enqueue_batch(
                     (select jsonb_agg(jsonb_build_object('name', 'effect', 'max_attempts', 1000))
                      from generate_series(1, %s)))""", (JOBS,))
        stats, stop = Stats(), threading.Event()
        threads = [threading.Thread(target=worker, args=(dsn, n, stop, stats)) for n in range(WORKERS)]
        threads.append(threading.Thread(target=chaos, args=(dsn, stop, stats, 2.0)))
        for t in threads:
            t.start()
        deadline = time.monotonic() + 240
        left = None
        while time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                    left = conn.execute("select count(*) from jobs.jobs where state <> 'completed'").fetchone()[0]
            except psycopg.OperationalError:
                continue
            if left == 0:
                break
        stop.set()
        for t in threads:
            t.join(timeout=60)
        with psycopg.connect(dsn, autocommit=True) as conn:
            states = dict(conn.execute("select state::text, count(*) from jobs.jobs group by 1"))
            effects, distinct = conn.execute("select count(*), count(distinct job_id) from effects").fetchone()
            orphans = conn.execute(
                "select count(*) from effects e where not exists (select from jobs.jobs j where j.id = e.job_id)"
            ).fetchone()[0]
        print(f"\nchaos: {stats.counts}; stale settles refused by the fence: {stats.counts['refused']}")
        assert states == {"completed": JOBS}, states
        assert (effects, distinct, orphans) == (JOBS, JOBS, 0)
        assert stats.counts["killed"] > 0 and stats.counts["outlived"] > 0 and stats.counts["crashed"] == 1
    finally:
        cluster("stop", DATA)
        subprocess.run(["rm", "-rf", DATA])
