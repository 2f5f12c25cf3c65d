"""Run-time limits end to end: a handler that hangs forever, with its heartbeat running as a
worker's heartbeat thread runs it, loses its job at the timeout; the job is failed as timed
out and run again by another worker, and nothing the hung worker writes lands.

Guard checked: with the cap taken out of jobs.heartbeat (lease_expires_at = now + lease, no
least(..., deadline)), the heartbeat thread keeps the job for ever, the second worker claims
nothing and the test fails at its deadline.
"""

import threading
import time

import psycopg

TIMEOUT_S = 2
DEADLINE_S = 30  # the whole test; every wait polls against it


def test_a_hung_handler_with_its_heartbeat_running_loses_its_job_at_the_timeout(dsn):
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "insert into jobs.job_types (name, timeout, backoff_base, jitter) values (%s, %s, '0', 0)",
            ("hangs", f"{TIMEOUT_S} seconds"),
        )
        conn.execute("select jobs.enqueue('hangs')")

    stop = threading.Event()
    beats = []  # what each heartbeat answered

    with psycopg.connect(dsn, autocommit=True) as hung:
        job_id, claim, deadline = hung.execute(
            "select id, claim, deadline from jobs.claim('hung-worker', lease => '1 second')"
        ).fetchone()
        assert deadline is not None

        def heartbeat():
            with psycopg.connect(dsn, autocommit=True) as conn:
                while not stop.is_set():
                    beats.append(conn.execute("select jobs.heartbeat(%s, %s)", (job_id, claim)).fetchone()[0])
                    time.sleep(0.2)

        beating = threading.Thread(target=heartbeat, daemon=True)
        beating.start()
        try:
            # The handler hangs; another worker claims until the job comes back to it.
            started = time.monotonic()
            with psycopg.connect(dsn, autocommit=True) as other:
                while True:
                    assert time.monotonic() - started < DEADLINE_S, "the hung worker kept its job"
                    row = other.execute("select id, attempt, claim, last_error from jobs.claim('other-worker')").fetchone()
                    if row is not None:
                        break
                    time.sleep(0.1)
                # A beat sent before this claim may still be on its way; wait for one sent after.
                beats_at_claim = len(beats)
                other_id, attempt, other_claim, last_error = row
                assert other_id == job_id and attempt == 2
                assert last_error.startswith(f"timed out after 00:00:0{TIMEOUT_S} on attempt 1 of 25")
                # The hung worker can change nothing now, however its heartbeat tries.
                assert hung.execute("select jobs.complete(%s, %s)", (job_id, claim)).fetchone()[0] is False
                assert other.execute("select jobs.complete(%s, %s)", (job_id, other_claim)).fetchone()[0] is True
                while len(beats) < beats_at_claim + 2:
                    assert time.monotonic() - started < DEADLINE_S, "the heartbeat thread stopped beating"
                    time.sleep(0.05)
        finally:
            stop.set()
            beating.join(timeout=5)

    # Every beat answered the capped expiry, never past the deadline, then NULL.
    answered = [b for b in beats if b is not None]
    assert answered and all(b <= deadline for b in answered)
    assert beats[-1] is None
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("select state::text, attempt from jobs.jobs").fetchone() == ("completed", 2)
