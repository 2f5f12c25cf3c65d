"""Load: a million jobs through 16 connections, with the background worker and retention on.

Four producers enqueue batches of 1000 (waiting while more than 50k jobs are ready) while
twelve workers claim batches of 100 and complete them; the background worker sweeps every
200 ms and deletes completed jobs after 5 seconds. Nothing is lost (every acknowledged job is
completed, exactly once), the table stops growing, and the server log has no ERROR that a
client did not cause. The test runs its own preloaded cluster, in about two minutes; set
PG_JOBS_LOAD_JOBS to run fewer jobs.

"Stops growing" compares the peak size of jobs.jobs (with its indexes) in the last third of
the run with its peak in the middle third (the first third is the ramp up to the working
set). A table that kept its completed rows, or whose dead rows were reclaimed more slowly than
they were made, grows steadily: its last peak is 1.5 times the middle one. A bounded one
levels off after the ramp, or steps up once under saturation (every process, autovacuum
included, gets its share of two cores, so a vacuum pass can take seconds and the heap swells
until it ends). With vacuum truncation on (jobs_data.jobs sets vacuum_truncate = false), each
vacuum waited seconds for its exclusive lock and the table stepped up at every pass: 1.27x and
1.6x in two runs of this test. Likewise when autovacuum did all the vacuuming (see the
settings below). The run prints the sizes over time.
"""

import os
import subprocess
import threading
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = int(os.environ.get("PG_JOBS_LOAD_PORT", "54399"))
DATA = f"/tmp/pg_jobs-load-{PORT}"
JOBS = int(os.environ.get("PG_JOBS_LOAD_JOBS", "1000000"))
BATCH_IN, BATCH_OUT, PRODUCERS, WORKERS = 1000, 100, 4, 12
BACKLOG = 50_000  # producers wait while more jobs than this are ready
# PG_JOBS_LOAD_PAYLOAD_KB=3 gives each job about 3 kB of incompressible payload, which
# PostgreSQL stores out of line in the TOAST table (docs/OPERATIONS.md, "Vacuum for busy queues").
PAYLOAD_KB = int(os.environ.get("PG_JOBS_LOAD_PAYLOAD_KB", "0"))
PAYLOAD = ("jsonb_build_object('n', g)" if PAYLOAD_KB == 0 else
           "jsonb_build_object('n', g, 'blob', (select string_agg(md5(random()::text || x || g), '') "
           f"from generate_series(1, {32 * PAYLOAD_KB}) as x where g > 0))")


def cluster(*args):
    return subprocess.run(["bash", os.path.join(ROOT, "scripts/cluster.sh"), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_a_million_jobs_through_sixteen_connections_with_retention_on():
    subprocess.run(["rm", "-rf", DATA], check=True)
    conf = f"{DATA}.conf"
    with open(conf, "w") as f:
        f.write("pg_jobs.sweep_interval = '200ms'\npg_jobs.completed_retention = '5s'\n"
                "synchronous_commit = off\nmax_wal_size = '4GB'\n")
    # autovacuum_naptime is left at its default (1 min): between autovacuum's visits the
    # background worker vacuums the table (pg_jobs.vacuum_interval, README "Vacuum for busy
    # queues"). With autovacuum_naptime = 5s instead, autovacuum held the table most of the
    # time, its passes waited on WAL flushes for tens of seconds, and the table kept growing
    # in 4 of 6 runs at about 24k jobs/s.
    dsn = cluster("start", DATA, str(PORT), conf)
    os.remove(conf)
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("create extension pg_jobs")
        lock, stop = threading.Lock(), threading.Event()
        counts = {"enqueued": 0, "completed": 0, "calls": 0}
        sizes, parts, errors = [], [], []

        def producer():
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    while True:
                        # Backpressure: a backlog is not what retention can bound.
                        while conn.execute("select ready from jobs.queue_stats where queue = 'default'").fetchone()[0] > BACKLOG:
                            time.sleep(0.05)
                        with lock:
                            if counts["calls"] * BATCH_IN >= JOBS:
                                return
                            counts["calls"] += 1
                        n = conn.execute(
                            """select count(*) from jobs.enqueue_batch(
                                 (select jsonb_agg(jsonb_build_object('name', 'load', 'payload', """ + PAYLOAD + """))
                                  from generate_series(1, %s) g))""", (BATCH_IN,)).fetchone()[0]
                        with lock:
                            counts["enqueued"] += n
            except Exception as exc:
                errors.append(exc)

        def worker(n):
            try:
                with psycopg.connect(dsn, autocommit=True) as conn:
                    while not stop.is_set():
                        rows = conn.execute("select id, claim from jobs.claim(%s, max_jobs => %s)",
                                            (f"w{n}", BATCH_OUT)).fetchall()
                        if not rows:
                            time.sleep(0.01)
                            continue
                        landed = conn.execute(
                            "select count(*) filter (where landed) from jobs.complete_many(%s, %s)",
                            ([r[0] for r in rows], [r[1] for r in rows])).fetchone()[0]
                        with lock:
                            counts["completed"] += landed
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=producer) for _ in range(PRODUCERS)]
        threads += [threading.Thread(target=worker, args=(n,)) for n in range(WORKERS)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 900
        with psycopg.connect(dsn, autocommit=True) as conn:
            while time.monotonic() < deadline:
                time.sleep(1)
                sizes.append(conn.execute("select pg_total_relation_size('jobs_data.jobs')").fetchone()[0])
                parts.append(conn.execute(
                    "select pg_relation_size('jobs_data.jobs'), pg_indexes_size('jobs_data.jobs'), "
                    "pg_total_relation_size(c.reltoastrelid) "
                    "from pg_class as c where c.oid = 'jobs_data.jobs'::regclass").fetchone())
                with lock:
                    if counts["completed"] >= JOBS:
                        break
        stop.set()
        for t in threads:
            t.join(timeout=60)

        assert not errors, errors
        assert counts["enqueued"] == JOBS
        assert counts["completed"] == JOBS, counts
        with psycopg.connect(dsn, autocommit=True) as conn:
            live = conn.execute("select count(*) from jobs.jobs where state <> 'completed'").fetchone()[0]
        assert live == 0
        third = len(sizes) // 3
        middle, last = max(sizes[third:2 * third]), max(sizes[2 * third:])
        print(f"\nload: {JOBS} jobs in {len(sizes)} s; jobs.jobs with indexes peaked at {middle >> 20} MiB "
              f"in the middle third of the run and at {last >> 20} MiB in the last")
        print("heap, index and TOAST MiB over time:", [(h >> 20, i >> 20, t >> 20) for h, i, t in parts[::10]])
        assert last <= 1.25 * middle, "the table kept growing"
        with open(f"{DATA}/log") as log:
            server_errors = [line for line in log if "ERROR:" in line or "FATAL:" in line or "PANIC:" in line]
        assert server_errors == [], server_errors[:5]
    finally:
        subprocess.run(["runuser", "-u", "postgres", "--", "/usr/lib/postgresql/15/bin/pg_ctl", "-D", DATA,
                        "-m", "immediate", "-w", "stop"], capture_output=True)
        subprocess.run(["rm", "-rf", DATA])


def test_vacuum_leaves_an_emptied_queue_its_pages(dsn):
    """The table's empty tail is kept for the next jobs: vacuum does not wait for an ACCESS
    EXCLUSIVE lock to cut it off (what made the load test's table step up at every pass).
    VACUUM (TRUNCATE true), as docs/OPERATIONS.md says, still gives the space back."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("""select count(*) from jobs.enqueue_batch(
                          (select jsonb_agg(jsonb_build_object('name', 'load', 'payload', '{}'::jsonb))
                           from generate_series(1, 5000)))""")
        before = conn.execute("select pg_relation_size('jobs_data.jobs')").fetchone()[0]
        conn.execute("delete from jobs.jobs")
        conn.execute("vacuum jobs_data.jobs")
        after = conn.execute("select pg_relation_size('jobs_data.jobs')").fetchone()[0]
        conn.execute("vacuum (truncate true) jobs_data.jobs")
        shrunk = conn.execute("select pg_relation_size('jobs_data.jobs')").fetchone()[0]
    assert before > 8192 * 10
    assert after == before
    assert shrunk == 0  # so the rows were dead to every snapshot: the first vacuum could have cut
