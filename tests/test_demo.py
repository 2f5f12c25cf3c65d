"""The README's first command: scripts/demo.sh tells its story. Run without its set-up (the
test command has run scripts/setup.sh already), on a port of its own."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_demo_tells_which_job_was_deduplicated_retried_and_dead_lettered():
    env = dict(os.environ, PG_JOBS_DEMO_SKIP_SETUP="1", PG_JOBS_DEMO_PORT=os.environ.get("PG_JOBS_DEMO_PORT", "54414"))
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts/demo.sh")], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr + done.stdout
    out = done.stdout
    assert "send_email to ada again, key welcome-ada   -> deduplicated: job" in out
    assert "7 jobs queued from 8 enqueues" in out
    # The worker is the Python library's: a line per attempt (pg_jobs.observe.log_outcome).
    assert out.count("job retried: ") == 3 and out.count("error=RuntimeError: smtp timeout") == 2
    assert "name=charge_card queue=default attempt=2" in out
    dead = [line for line in out.splitlines() if line.strip().startswith("job dead: ")]
    assert len(dead) == 1 and "attempt=2" in dead[0] and "error=ValueError: card 4000-0000-0000-0002 declined" in dead[0]
    assert "6 completed (2 of them after a failed attempt" in out
    assert "1 dead-lettered after its 2 attempts ran out" in out
    assert "bash scripts/dev-server.sh start" in out
