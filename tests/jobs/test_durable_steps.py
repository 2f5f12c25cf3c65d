"""A three-step job whose worker is killed between steps resumes without redoing them.

Each step writes its effect and saves itself (jobs.save_step) in one transaction, so a step
is either done and memoised or not done at all. The first worker is a real process, killed
with SIGKILL after step 2; the second claims the job once the first lease lapses (polled with
a deadline, no bare sleep), replays steps 1 and 2 from jobs.get_step and runs only step 3.
"""

import multiprocessing
import time

import psycopg
from psycopg.types.json import Jsonb

STEPS = ["fetch", "transform", "load"]


def run_step(conn, job, step):
    done, output = conn.execute(
        "select done, output from jobs.get_step(%s, %s)", (job["run_id"], step)
    ).fetchone()
    if done:
        return output
    with conn.transaction():
        conn.execute(
            "insert into effects (step, attempt) values (%s, %s)", (step, job["attempt"])
        )
        output = {"step": step, "attempt": job["attempt"]}
        conn.execute(
            "select jobs.save_step(%s, %s, %s, %s)", (job["id"], job["claim"], step, Jsonb(output))
        )
    return output


def claim(conn, worker):
    cur = conn.execute(
        "select id, run_id, claim, attempt from jobs.claim(%s, lease => '1 second')", (worker,)
    )
    row = cur.fetchone()
    return None if row is None else dict(zip([c.name for c in cur.description], row, strict=True))


def doomed_worker(dsn, after_two):
    with psycopg.connect(dsn, autocommit=True) as conn:
        job = claim(conn, "doomed")
        for step in STEPS[:2]:
            run_step(conn, job, step)
        after_two.set()
        time.sleep(3600)  # killed here, between step 2 and step 3, holding the claim


def test_a_three_step_job_resumes_after_its_worker_is_killed_between_steps(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("create table effects (step text not null, attempt int not null)")
        conn.execute("select jobs.enqueue('pipeline', max_attempts => 3)")

    after_two = multiprocessing.Event()
    proc = multiprocessing.Process(target=doomed_worker, args=(dsn, after_two))
    proc.start()
    assert after_two.wait(timeout=30), "the first worker never finished step 2"
    proc.kill()
    proc.join(timeout=10)

    with psycopg.connect(dsn, autocommit=True) as conn:
        deadline = time.monotonic() + 30
        job = None
        while job is None and time.monotonic() < deadline:
            job = claim(conn, "survivor")  # claimable once the killed worker's lease lapses
            if job is None:
                time.sleep(0.05)
        assert job is not None, "the job was never claimable again"
        assert job["attempt"] == 2
        outputs = [run_step(conn, job, step) for step in STEPS]
        assert conn.execute("select jobs.complete(%s, %s)", (job["id"], job["claim"])).fetchone()[0]

        effects = conn.execute(
            "select step, attempt from effects order by step"
        ).fetchall()
        state = conn.execute("select state::text from jobs.jobs").fetchone()[0]
    assert sorted(effects) == [("fetch", 1), ("load", 2), ("transform", 1)]
    assert outputs == [
        {"step": "fetch", "attempt": 1},
        {"step": "transform", "attempt": 1},
        {"step": "load", "attempt": 2},
    ]
    assert state == "completed"
