"""The demo: scripts/demo.sh tells its story. Run without its set-up (the
test command has run scripts/setup.sh already)."""

import os
import re
import socket
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


PORT = int(os.environ.get("PG_JOBS_DEMO_PORT", "54414"))


def demo(**env):
    env = {k: v for k, v in os.environ.items() if k not in ("PG_JOBS_DEMO_PORT", "PG_JOBS_RESERVE_PORTS")} | env
    return subprocess.run(["bash", os.path.join(ROOT, "scripts/demo.sh")], capture_output=True, text=True,
                          env=dict(env, PG_JOBS_DEMO_SKIP_SETUP="1"), timeout=300)


def listening(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_the_demo_tells_which_job_was_deduplicated_retried_and_dead_lettered():
    # Its default port taken: it takes the next free one, and says which.
    with listening(54393):
        done = demo()
    assert done.returncode == 0, done.stderr + done.stdout
    out = done.stdout
    assert re.search(r"cluster in /tmp/pg_jobs-demo\.\w+, on port (\d+)", out).group(1) != "54393"
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
    # Its closing lines say what it left.
    assert "== 6. What the demo leaves on this machine" in out and "/pg_jobs.so" in out
    assert "reserv" not in done.stderr  # the kernel's reserved ports are the test command's


def test_the_demo_on_a_port_in_use_says_which_variable_to_set_in_one_line():
    with listening(PORT):
        done = demo(PG_JOBS_DEMO_PORT=str(PORT))
    assert done.returncode == 1
    assert done.stderr == f"demo: port {PORT} (PG_JOBS_DEMO_PORT) is in use; set PG_JOBS_DEMO_PORT to a free one, or unset it\n"
