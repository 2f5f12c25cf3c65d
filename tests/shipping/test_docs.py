"""The documentation runs as written: every SQL, shell and Python block of README.md and
docs/*.md that a reader is meant to run is run here, in order, on a fresh cluster set up as
the docs say (pg_jobs preloaded, every database swept), and its output compared with the
output shown after it. The cluster has Debian's default `pg_hba.conf`: SQL blocks run as
`postgres` through the local socket as the operating system's postgres (`sudo -u postgres
psql`, peer); those of another role over TCP, with the password the guide's ~/.pgpass holds
(HOME is the block's scratch directory).

How a block is marked, in its info string (GitHub shows the first word as the language):

    ```sql run                 psql as postgres in database postgres
    ```sql run db=app user=web psql as that role in that database, over TCP
    ```python run              .venv's python, PGHOST (127.0.0.1) and PGPORT set to the cluster
    ```python run timeout=5    a worker that runs until stopped: stopped after 5 s
    ```sh run                  bash -e, in a scratch directory, PG* set
    ```text                    right after a run block: its output (psql's, or stdout)
    ```sql fragment            syntax shown, not a step to run (signatures, pieces)
    ```sh setup                installing: the README's set-up commands (CI runs the
                               test command, and the test command the demo: test_demo.py),
                               building for a release (scripts/test-releases.sh does),
                               and installing the .deb (scripts/package.sh --check does)
    ```sh manual               run by hand, not by the tests: the benchmarks (an hour), the
                               steps on managed services (docs/managed/); those of
                               docs/EDITIONS.md are run by sql-only/tests/test_pg_cron.py
    ```python program asyncpg  a whole program of docs/LANGUAGES.md, run by
                               tests/shipping/test_languages.py (as are its other languages' blocks)

docs/SCALING.md's blocks start clusters of their own and run from the repository's root:
tests/shards/test_scaling_doc.py runs them. The libraries' READMEs are checked for marks here;
their quick starts (`python run`, and the Node.js one's `js` blocks) are run by the libraries'
own tests.

Every sql, python, sh and bash block is marked one of these ways, so a new block cannot
go untested by being forgotten. Each document starts on a cluster of its own. A failure names
the file and line of the block.
"""

import difflib
import os
import re
import shlex
import subprocess
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PORT = int(os.environ.get("PG_JOBS_DOCS_PORT", "54417"))
PSQL = os.path.join(os.environ.get("PG_JOBS_PG_BIN", "/usr/lib/postgresql/15/bin"), "psql")
PYTHON = os.path.join(ROOT, ".venv/bin/python")
LANGUAGES = {"sql", "python", "sh", "bash"}
MARKS = ("run", "fragment", "setup", "manual", "program")
DOCS = ["README.md", "docs/GETTING_STARTED.md", "docs/FEATURES.md", "docs/REFERENCE.md", "docs/OPERATIONS.md",
        "docs/SECURITY.md"]


def blocks(path):
    """(line, language, options, body) for each fenced block of the file."""
    found, lines = [], open(os.path.join(ROOT, path)).read().split("\n")
    i = 0
    while i < len(lines):
        m = re.match(r"^```(\S*)\s*(.*)$", lines[i])
        if not m:
            i += 1
            continue
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        found.append((start, m.group(1), m.group(2).split(), "\n".join(body) + "\n"))
        i += 1
    return found


def steps(path):
    """The blocks to run, each with the output shown after it (or None)."""
    out, found = [], blocks(path)
    for n, (line, lang, opts, body) in enumerate(found):
        if lang not in LANGUAGES:
            continue
        if not opts or opts[0] not in MARKS:
            raise AssertionError(f"{path}:{line}: a ```{lang} block must say run, fragment, setup, manual or program")
        if opts[0] != "run":
            continue
        shown = None
        if n + 1 < len(found) and found[n + 1][1] == "text":
            shown = found[n + 1][3]
        out.append((line, lang, dict(o.split("=", 1) for o in opts[1:] if "=" in o), body, shown))
    return out


def cluster(*args):
    return subprocess.run(["bash", os.path.join(ROOT, "scripts/cluster.sh"), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def normalise(text):
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n"))


@pytest.mark.parametrize("path", [d for d in DOCS if os.path.exists(os.path.join(ROOT, d))])
def test_the_blocks_of_a_document_run_as_written(path):
    if not steps(path):
        pytest.skip(f"{path} has no block to run")
    run_document(path)


def run_document(path, show=False):
    """Runs the blocks of one document on a cluster of its own; with show, prints each block's
    output instead of comparing it (to write the outputs a document shows)."""
    todo = steps(path)
    directory = tempfile.mkdtemp(prefix="pg_jobs-docs.")
    scratch = tempfile.mkdtemp(prefix="pg_jobs-docs-scratch.")
    os.chmod(scratch, 0o777)
    cluster("start", directory, str(PORT))
    # Debian's own pg_hba.conf (postgresql-common's createcluster), not the trusting one of
    # scripts/cluster.sh: the superuser logs in through the socket as the operating system's
    # postgres (peer), every other role over TCP with a password.
    with open(os.path.join(directory, "pg_hba.conf"), "w") as f:
        f.write(DEBIAN_HBA)
    subprocess.run(["runuser", "-u", "postgres", "--", os.path.join(os.path.dirname(PSQL), "pg_ctl"),
                    "-D", directory, "reload"], check=True, capture_output=True)
    # pgjobs (cli/) as a reader who ran cargo install --path cli has it (scripts/test.sh builds it).
    bin_path = os.path.join(ROOT, "target/debug") + os.pathsep + os.environ["PATH"]
    env = dict(os.environ, PATH=bin_path, PGHOST="127.0.0.1", PGPORT=str(PORT), PGUSER="postgres",
               PGDATABASE="postgres", PYTHONPATH=scratch, HOME=scratch, SOCKET_DIR=directory)
    variables = {}  # psql variables (\gset) carried from one SQL block to the next
    try:
        for line, lang, opts, body, shown in todo:
            output = run_block(f"{path}:{line}", lang, opts, body, env, scratch, variables)
            if show:
                print(f"===== {path}:{line}\n{output}")
            elif shown is not None and normalise(output) != normalise(shown):
                diff = "\n".join(difflib.unified_diff(normalise(shown).split("\n"), normalise(output).split("\n"),
                                                      "shown", "got", lineterm=""))
                raise AssertionError(f"{path}:{line}: the output differs from the one shown:\n{diff}")
    finally:
        cluster("stop", directory)
        subprocess.run(["rm", "-rf", directory, scratch], check=False)


VARIABLES = "__pg_jobs_docs_variables__"
DEBIAN_HBA = """\
local   all             postgres                                peer
local   all             all                                     peer
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     peer
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
"""


def run_block(where, lang, opts, body, env, scratch, variables):
    """Runs one block; its standard output. Fails the test when the block fails. An SQL block
    starts with the lower-case psql variables the blocks before it set, as if one psql session
    ran them all, and leaves its own in `variables`."""
    if lang == "sql":
        prelude = "".join(f"\\set {name} '{value}'\n" for name, value in variables.items())
        body = prelude + body + f"\\echo {VARIABLES}\n\\set\n"
    step_env = dict(env, PGUSER=opts.get("user", "postgres"), PGDATABASE=opts.get("db", "postgres"))
    timeout = float(opts["timeout"]) if "timeout" in opts else None
    if lang == "sql" and step_env["PGUSER"] == "postgres":
        # sudo -u postgres psql: the local socket, peer
        step_env["PGHOST"] = step_env.pop("SOCKET_DIR")
        cmd = ["runuser", "-u", "postgres", "--", PSQL, "-X", "-v", "ON_ERROR_STOP=1", "-f", "-"]
    elif lang == "sql":
        # another role: psql "host=localhost ...", its password from ~/.pgpass
        cmd = [PSQL, "-X", "-v", "ON_ERROR_STOP=1", "-f", "-"]
    elif lang == "python":
        cmd = [PYTHON, "-"]
    else:
        cmd = ["bash", "-e", "-"]
    try:
        done = subprocess.run(cmd, input=body, capture_output=True, text=True, env=step_env,
                              cwd=scratch, timeout=timeout or 120)
    except subprocess.TimeoutExpired as stopped:
        if timeout is None:
            raise AssertionError(f"{where}: did not finish in 120 s") from None
        output = stopped.stdout or ""
        return output.decode() if isinstance(output, bytes) else output
    assert done.returncode == 0, (
        f"{where}: the {lang} block failed (exit {done.returncode}):\n{done.stderr}{done.stdout}")
    if lang != "sql":
        return done.stdout
    output, _, listed = done.stdout.partition(VARIABLES + "\n")
    for m in re.finditer(r"^([a-z_][a-z0-9_]*) = '(.*)'$", listed, re.M):
        variables[m.group(1)] = m.group(2)
    return output


def test_every_runnable_block_is_marked():
    """A sql, python, sh or bash block that says neither `run` nor `fragment` fails here, in
    every Markdown file of the repository's docs."""
    paths = ["README.md"] + [os.path.join("docs", f) for f in sorted(os.listdir(os.path.join(ROOT, "docs")))
                             if f.endswith(".md")] + ["examples/README.md", "CONTRIBUTING.md", "cli/README.md",
                                                      "clients/node/README.md", "clients/python/README.md"]
    problems = []
    for path in paths:
        for line, lang, opts, _ in blocks(path):
            if lang in LANGUAGES and (not opts or opts[0] not in MARKS):
                problems.append(f"{path}:{line}: ```{lang} {' '.join(map(shlex.quote, opts))}")
    assert not problems, "blocks marked neither run, fragment, setup, manual nor program:\n" + "\n".join(problems)


if __name__ == "__main__":
    # python tests/shipping/test_docs.py FILE: runs FILE's blocks and prints each one's output.
    import sys

    run_document(sys.argv[1], show=True)
