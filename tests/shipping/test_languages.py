"""docs/LANGUAGES.md runs as written: each driver's program (a block whose info string is
`<language> program <driver>`) is run against a database of its own, and prints exactly the
output the document shows (its ```text expected block); the jobs it left are checked. Then it
runs twice through Debian's PgBouncer 1.18 in transaction pooling with a pool of one server
connection, so the second run's client gets the first one's server session: a named prepared
statement the first left there makes the second fail (checked: asyncpg without
`statement_cache_size=0` fails so).

Toolchains: the Python programs run in the test venv (psycopg, asyncpg, SQLAlchemy); node with
the Node.js library's node_modules (pg); Debian's Java 17 with its pgjdbc, Go 1.19 with its
pgx v4 (GOPATH=/usr/share/gocode), Ruby's pg and Perl's DBD::Pg; the Rust ones in the crate
tests/shipping/languages/rust (tokio-postgres, sqlx), built once into target/languages.
"""

import os
import re
import shutil
import subprocess
import tempfile

import psycopg
import pytest
from clusters import database, pgbouncer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs/LANGUAGES.md")
PORT = int(os.environ.get("PG_JOBS_LANGUAGES_PGBOUNCER_PORT", "54428"))
RUST = os.path.join(ROOT, "tests/shipping/languages/rust")
RUST_TARGET = os.path.join(ROOT, "target/languages")


def programs():
    """{driver: (language, body)} and the expected output, from the document."""
    text = open(DOC).read()
    found = {m.group(2): (m.group(1), m.group(3))
             for m in re.finditer(r"^```(\w+) program (\S+)\n(.*?)^```$", text, re.M | re.S)}
    expected = re.search(r"^```text expected\n(.*?)^```$", text, re.M | re.S).group(1)
    return found, expected


PROGRAMS, EXPECTED = programs()


@pytest.fixture(scope="module")
def rust_binaries():
    """The document's Rust programs built in a copy of tests/shipping/languages/rust: {driver: path}."""
    rust = {d: body for d, (lang, body) in PROGRAMS.items() if lang == "rust"}
    crate = tempfile.mkdtemp(prefix="pg_jobs-languages-rust.")
    try:
        shutil.copy(os.path.join(RUST, "Cargo.toml"), crate)
        shutil.copy(os.path.join(RUST, "Cargo.lock"), crate)
        os.makedirs(os.path.join(crate, "src/bin"))
        for driver, body in rust.items():
            with open(os.path.join(crate, "src/bin", driver.replace("-", "_") + ".rs"), "w") as f:
                f.write(body)
        subprocess.run(["cargo", "build", "--quiet", "--locked"], cwd=crate, check=True,
                       env=dict(os.environ, CARGO_TARGET_DIR=RUST_TARGET))
    finally:
        shutil.rmtree(crate, ignore_errors=True)
    return {d: os.path.join(RUST_TARGET, "debug", d.replace("-", "_")) for d in rust}


def command(driver, language, body, scratch, rust_binaries):
    """How to run one program, written into `scratch`."""
    if language == "rust":
        return [rust_binaries[driver]]
    name = {"python": "program.py", "javascript": "program.js", "java": "Jobs.java", "go": "main.go",
            "ruby": "program.rb", "perl": "program.pl"}[language]
    with open(os.path.join(scratch, name), "w") as f:
        f.write(body)
    return {"python": [os.path.join(ROOT, ".venv/bin/python"), name],
            "javascript": ["node", name],
            "java": ["java", "-cp", "/usr/share/java/postgresql.jar", name],
            "go": ["go", "run", name],
            "ruby": ["ruby", name],
            "perl": ["perl", name]}[language]


def run(cmd, scratch, host, port, db):
    env = dict(os.environ,
               DATABASE_URL=f"postgres://postgres@{host}:{port}/{db}",
               JDBC_URL=f"jdbc:postgresql://{host}:{port}/{db}?user=postgres",
               DBI_DSN=f"dbi:Pg:host={host};port={port};dbname={db};user=postgres",
               NODE_PATH=os.path.join(ROOT, "clients/node/node_modules"),
               GO111MODULE="off", GOPATH="/usr/share/gocode")
    done = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{cmd} failed (exit {done.returncode}):\n{done.stderr}{done.stdout}"
    assert done.stdout == EXPECTED, f"{cmd} printed:\n{done.stdout}"


def what_was_left(dsn):
    with psycopg.connect(dsn) as conn:
        return conn.execute("select name, state::text, attempt, result, last_error from jobs.jobs "
                            "order by name").fetchall()


def test_the_document_has_every_driver():
    assert sorted(PROGRAMS) == sorted(["psycopg", "asyncpg", "sqlalchemy", "node-postgres", "jdbc", "pgx",
                                       "tokio-postgres", "sqlx", "ruby-pg", "dbd-pg"])


@pytest.mark.parametrize("driver", sorted(PROGRAMS))
def test_each_program_runs_as_written_directly_and_through_pgbouncer(server_dsn, driver, rust_binaries):
    language, body = PROGRAMS[driver]
    params = dict(part.split("=", 1) for part in server_dsn.split())
    scratch = tempfile.mkdtemp(prefix="pg_jobs-languages.")
    try:
        cmd = command(driver, language, body, scratch, rust_binaries)
        with database(server_dsn, "lang_") as (name, dsn):
            run(cmd, scratch, params["host"], params["port"], name)
            left = what_was_left(dsn)
            assert [row[:3] for row in left] == [("flaky", "delayed", 1), ("resize", "completed", 1)]
            assert left[0][4] == "boom" and left[1][3] == {"resized": True}

            with pgbouncer(dsn, {name: 1}, PORT):
                for _ in range(2):
                    with psycopg.connect(dsn, autocommit=True) as conn:
                        conn.execute("delete from jobs.jobs")
                    run(cmd, scratch, "127.0.0.1", PORT, name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
