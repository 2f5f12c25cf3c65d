"""docs/SCALING.md's `sh run` blocks run as written, from the repository's root (where the
document says to run them), each output compared with the `text` block after it; on clusters
of their own (scripts/shards.sh, in a directory and from a port of this test's)."""

import os
import subprocess
import tempfile

from test_docs import blocks, normalise

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = os.environ.get("PG_JOBS_SCALING_DOC_PORT", "54454")  # and the next three


def test_the_scaling_guides_blocks_run_as_written():
    found = blocks("docs/SCALING.md")
    runs = [(n, b) for n, b in enumerate(found) if b[1] == "sh" and b[2][:1] == ["run"]]
    assert runs, "docs/SCALING.md has no block to run"
    with tempfile.TemporaryDirectory(prefix="pg_jobs-scaling-doc-") as directory:
        env = {**os.environ, "PG_JOBS_SHARDS_DIR": directory, "PG_JOBS_SHARDS_PORT": PORT}
        try:
            for n, (line, _, _, body) in runs:
                run = subprocess.run(["bash", "-e", "-"], input=body, cwd=ROOT, env=env,
                                     capture_output=True, text=True, timeout=300)
                assert run.returncode == 0, f"docs/SCALING.md:{line}: {run.stderr}"
                if n + 1 < len(found) and found[n + 1][1] == "text":
                    assert normalise(run.stdout) == normalise(found[n + 1][3]), f"docs/SCALING.md:{line}"
        finally:
            subprocess.run(["bash", os.path.join(ROOT, "scripts/shards.sh"), "stop"], env=env, check=False)
