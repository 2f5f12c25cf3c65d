"""Upgrades of the SQL-only edition (scripts/sql-only.py writes sql-only/pg_jobs--A--B.sql and
its pg_tle form for each release the edition had, kept in sql-only/released/).

Each upgrade is checked as scripts/upgrade-check.sh checks the extension's: a database on the
earlier release, filled with a job in every state (pg_test/upgrade/fill.sql), upgraded by the
role that owns it (no superuser): no row changed (digest.sql), everything defined as a fresh
install of this release defines it (fingerprint.sql), the jobs of before settle and the API
works (use.sql). Run on a server without the extension's library (scripts/test-sql-only.sh).

The edition's first release is the one in Cargo.toml, so no upgrade of it exists yet; the
generator's upgrade mode is checked on a next release made in a copy of the sources, with the
kinds of change a release brings (a column, a function of sql/ changed and one added, a
function in Rust redeclared, a replacement of sql-only/src changed, a change of the edition's
own tables), from this release's file as it would be kept. Checked to fail with the upgrade's
replacements left out (the fingerprint differs in jobs.error_codes) and with the edition's own
part left out (it differs in jobs_config.tenant_bindings).
"""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import uuid

import psycopg
import psycopg.errors
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DSN = os.environ.get("PG_JOBS_SQL_ONLY_DSN", "")
OWNER = "pgj_upgrade_owner"
INSTALL = pathlib.Path("/usr/share/postgresql/15/extension")


def version(root):
    return re.search(r'^version\s*=\s*"([^"]+)"', (root / "Cargo.toml").read_text(), re.M).group(1)


def psql(dsn, *args, user=None):
    """psql as the documented commands run it; its output."""
    cmd = ["psql", f"{dsn} user={user}" if user else dsn, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", *args]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(args)}: {out.stderr}")
    return out.stdout


@pytest.fixture(scope="module")
def server():
    if not DSN:
        pytest.fail("PG_JOBS_SQL_ONLY_DSN is not set: run these tests through scripts/test-sql-only.sh")
    with psycopg.connect(DSN, autocommit=True) as conn:
        if not conn.execute("select 1 from pg_roles where rolname = %s", (OWNER,)).fetchone():
            conn.execute(f"create role {OWNER} login nosuperuser nocreaterole nocreatedb")
    return DSN


class Database:
    """A database owned by OWNER, dropped afterwards."""

    def __init__(self, server):
        self.name = "up_" + uuid.uuid4().hex[:10]
        self.server = server
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"create database {self.name} owner {OWNER}")
        self.dsn = re.sub(r"dbname=\S+", "", server) + f" dbname={self.name}"

    def drop(self):
        with psycopg.connect(self.server, autocommit=True) as conn:
            conn.execute(f"drop database {self.name} with (force)")

    def run(self, *files, user=OWNER):
        return psql(self.dsn, *[a for f in files for a in ("-f", str(f))], user=user)

    def fingerprint(self):
        return self.run(ROOT / "pg_test/upgrade/fingerprint.sql", user="postgres")


def check_upgrade(server, root, old):
    """Upgrades a filled database of the edition's release `old` (root's sql-only/released/) with
    root's upgrade files to root's release, as the edition's owner."""
    new = version(root)
    upgrade = root / "sql-only" / f"pg_jobs--{old}--{new}.sql"
    assert upgrade.exists(), f"{upgrade} is missing: run scripts/sql-only.py"
    assert (root / "sql-only" / f"pg_jobs--{old}--{new}.pg_tle.sql").exists()
    fresh, db = Database(server), Database(server)
    try:
        fresh.run(root / "sql-only/pg_jobs.sql")
        db.run(root / "sql-only/released" / f"pg_jobs--{old}.sql", ROOT / "pg_test/upgrade/fill.sql")
        before = db.run(ROOT / "pg_test/upgrade/digest.sql", user="postgres")
        old_print = db.fingerprint()

        # Refused, changing nothing: run by another role (a superuser here), whose objects would
        # be its own and run with its privileges.
        with pytest.raises(AssertionError, match=f"upgraded by the role that owns it \\({OWNER}\\), not by postgres"):
            db.run(upgrade, user="postgres")
        assert db.fingerprint() == old_print

        db.run(upgrade)
        assert db.run(ROOT / "pg_test/upgrade/digest.sql", user="postgres") == before, "the upgrade changed rows"
        assert db.fingerprint() == fresh.fingerprint(), "the upgraded edition differs from a fresh install"
        assert psql(db.dsn, "-c", "select obj_description('jobs'::regnamespace)").strip() == \
            f"pg_jobs {new} (SQL-only edition)"
        db.run(ROOT / "pg_test/upgrade/use.sql")

        # Refused, changing nothing: the same upgrade again, and on a fresh install of this release.
        after = db.fingerprint()
        for target in (db, fresh):
            with pytest.raises(AssertionError, match=f"upgrades the SQL-only edition of pg_jobs {old} to {new}; "
                                                     f"this database has pg_jobs {new}"):
                target.run(upgrade)
        assert db.fingerprint() == after
    finally:
        fresh.drop()
        db.drop()


def test_each_earlier_release_of_the_edition_upgrades(server):
    new = version(ROOT)
    olds = sorted(p.name[len("pg_jobs--"):-len(".sql")] for p in (ROOT / "sql-only/released").glob("pg_jobs--*.sql"))
    olds = [v for v in olds if v != new]
    for old in olds:
        check_upgrade(server, ROOT, old)
    print(f"upgrades of the edition checked to {new}: {', '.join(olds) or 'none (its first release)'}")


def next_release(tmp_path, new_rust_function=False):
    """A copy of the sources whose Cargo.toml is the next release after this one, with this
    release's edition kept as released, and a change of each kind; its generated files."""
    root = tmp_path / "next"
    for part in ("sql", "sql-only/src", "scripts", "src"):
        shutil.copytree(ROOT / part, root / part, ignore=shutil.ignore_patterns("released", "upgrade", "*.rs"))
    shutil.copy(ROOT / "src/lib.rs", root / "src/lib.rs")
    shutil.copytree(ROOT / "sql/released", root / "sql/released")
    (root / "sql/upgrade").mkdir()
    (root / "sql-only/upgrade").mkdir()
    (root / "sql-only/released").mkdir()
    current = version(ROOT)
    shutil.copy(ROOT / "sql-only/pg_jobs.sql", root / f"sql-only/released/pg_jobs--{current}.sql")
    major, minor, patch = current.split(".")
    new = f"{major}.{minor}.{int(patch) + 1}"
    cargo = (ROOT / "Cargo.toml").read_text()
    (root / "Cargo.toml").write_text(cargo.replace(f'version = "{current}"', f'version = "{new}"', 1))

    def edit(path, old, replacement):
        text = (root / path).read_text()
        assert old in text, f"{path} no longer has {old!r}: update this test's next release"
        (root / path).write_text(text.replace(old, replacement, 1))

    # A column (the extension's hand-written part, and the install).
    edit("sql/schema.sql", "check (fairness in ('none', 'tenant', 'concurrency_key'))\n);",
         "check (fairness in ('none', 'tenant', 'concurrency_key')),\n  note text\n);")
    hand = ["alter table jobs_data.queues add column note text;",
            # a function in Rust declared again (the edition keeps its replacement)
            "create or replace function jobs._uuid_v7() returns uuid volatile parallel safe language c "
            "as 'MODULE_PATHNAME', 'uuid_v7_wrapper';"]
    if new_rust_function:
        hand.append("create function jobs._brand_new() returns int language c as 'MODULE_PATHNAME', 'brand_new_wrapper';")
    (root / f"sql/upgrade/{current}--{new}.sql").write_text("\n".join(hand) + "\n")
    # A function of sql/ changed, its comment changed, and one added.
    edit("sql/claim.sql", "limit 1000) as ready", "limit 1001) as ready")
    edit("sql/claim.sql", "'Claim up to max_jobs jobs", "'Claims up to max_jobs jobs")
    (root / "sql/operate.sql").write_text((root / "sql/operate.sql").read_text() + (
        "\ncreate function jobs.release_note() returns text language sql immutable\n"
        f"begin atomic select 'pg_jobs {new}'; end;\n"))
    # A replacement of sql-only/src changed.
    edit("sql-only/src/errors.sql", "'no job has this id'", "'no job has this id (nor had)'")
    # The edition's own tables: its hand-written part, and the install.
    edit("sql-only/src/config.sql", "  primary key (role)\n);", "  primary key (role),\n  note text\n);")
    (root / f"sql-only/upgrade/{current}--{new}.sql").write_text(
        "alter table jobs_config.tenant_bindings add column note text;\n")

    subprocess.run([sys.executable, root / "scripts/upgrade-script.py"], check=True)
    out = subprocess.run([sys.executable, root / "scripts/sql-only.py", "--from", INSTALL / f"pg_jobs--{current}.sql"],
                         capture_output=True, text=True)
    return root, current, new, out


def test_the_next_release_upgrades_from_this_one(server, tmp_path):
    root, current, new, out = next_release(tmp_path)
    assert out.returncode == 0, out.stderr
    text = (root / f"sql-only/pg_jobs--{current}--{new}.sql").read_text()
    # No shared library in either form; the pg_tle form installs an update path.
    assert "module_pathname" not in text.lower()
    tle = (root / f"sql-only/pg_jobs--{current}--{new}.pg_tle.sql").read_text()
    assert "module_pathname" not in tle.lower()
    assert f"pgtle.install_update_path('pg_jobs', '{current}', '{new}'" in tle
    check_upgrade(server, root, current)


def test_a_function_in_rust_that_nothing_replaces_stops_the_upgrade(server, tmp_path):
    _, _, _, out = next_release(tmp_path, new_rust_function=True)
    assert out.returncode != 0
    assert "nothing in sql-only/src replaces the function in Rust _brand_new" in out.stderr
