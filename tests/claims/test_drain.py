"""Eight concurrent workers drain 10k jobs; each job's effect lands exactly once.

Each worker claims a batch, writes the job's effect and calls jobs.complete in ONE
transaction, and rolls back when complete answers false: the exactly-once pattern the
README recommends. Some claims are left to lapse and some jobs fail once, so the drain
also crosses re-claims and retries.
"""

import threading
import time

import psycopg

JOBS = 10_000
WORKERS = 8


def worker(dsn, worker_id, stats, errors):
    try:
        with psycopg.connect(dsn) as conn:
            idle_rounds = 0
            while idle_rounds < 3:
                with conn.transaction():
                    batch = conn.execute(
                        "select id, claim, attempt, payload from jobs.claim(%s, array['drain'], 10)",
                        (worker_id,),
                    ).fetchall()
                if not batch:
                    idle_rounds += 1
                    left = conn.execute(
                        "select count(*) from jobs.jobs where state <> 'completed'"
                    ).fetchone()[0]
                    conn.commit()
                    if left == 0:
                        return
                    time.sleep(0.01)  # the rest are held by other workers, or retrying
                    idle_rounds = 0
                    continue
                for job_id, claim, attempt, payload in batch:
                    n = payload["n"]
                    if n % 97 == 0 and attempt == 1:
                        # Fails once: retried with the backoff.
                        with conn.transaction():
                            conn.execute(
                                "select jobs.fail(%s, %s, 'transient')", (job_id, claim)
                            )
                        stats["failed"] += 1
                        continue
                    try:
                        with conn.transaction():
                            conn.execute(
                                "insert into effects (job_id, worker) values (%s, %s)",
                                (job_id, worker_id),
                            )
                            landed = conn.execute(
                                "select jobs.complete(%s, %s)", (job_id, claim)
                            ).fetchone()[0]
                            if not landed:
                                raise RuntimeError("claim lost")
                        stats["completed"] += 1
                    except RuntimeError:
                        stats["refused"] += 1
    except Exception as exc:  # reported by the test
        errors.append(exc)


def test_eight_workers_drain_ten_thousand_jobs_each_exactly_once(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table effects (job_id uuid not null, worker text not null)")
        # Retries are due at once, so the drain needs no waiting on backoffs.
        conn.execute("insert into jobs.job_types (name, backoff_base, jitter) values ('work', '0 seconds', 0)")
        conn.execute(
            """select count(*) from jobs.enqueue_batch(
                 (select jsonb_agg(jsonb_build_object('name', 'work', 'queue', 'drain',
                                                      'payload', jsonb_build_object('n', g)))
                  from generate_series(1, %s) g))""",
            (JOBS,),
        )
    stats = [{"completed": 0, "failed": 0, "refused": 0} for _ in range(WORKERS)]
    errors = []
    threads = [
        threading.Thread(target=worker, args=(dsn, f"w{i}", stats[i], errors))
        for i in range(WORKERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)

    with psycopg.connect(dsn) as conn:
        effects, distinct = conn.execute(
            "select count(*), count(distinct job_id) from effects"
        ).fetchone()
        states = dict(conn.execute("select state::text, count(*) from jobs.jobs group by 1"))
        workers_used = conn.execute("select count(distinct worker) from effects").fetchone()[0]
    assert states == {"completed": JOBS}
    assert effects == JOBS and distinct == JOBS
    assert sum(s["completed"] for s in stats) == JOBS
    assert sum(s["failed"] for s in stats) == JOBS // 97
    assert workers_used > 1
