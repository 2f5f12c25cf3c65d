#!/usr/bin/env python3
"""Writes sql-only/pg_jobs.sql, the SQL-only edition of the release in Cargo.toml, from the
SQL files of the extension (sql/, in the install order of src/lib.rs) and sql-only/src/ (the
functions the extension writes in Rust, in SQL and PL/pgSQL). Which functions are written in
Rust it reads from the extension's install script (what `cargo pgrx install` put in
PostgreSQL 15's extension directory): each must have its replacement.

Each statement of sql-only/src/*.sql that creates a function or a trigger replaces the
extension's of the same name, where the extension has it; the statements after it that
replace nothing (its comment, a second trigger) go with it. The statements of a file before its
first replacement (schemas, tables, types, helpers) go right after sql/schema.sql, before
the replacements of the functions in Rust.
A function in Rust that nothing replaces is an error, as is a replacement that replaces
nothing. The script makes the schema jobs itself (where CREATE EXTENSION would),
and leaves out what only an extension's script may run (pg_extension_config_dump). The same
script wrapped for pg_tle (pgtle.install_extension, the config dumps kept) is
sql-only/pg_jobs.pg_tle.sql.

  scripts/sql-only.py [--from INSTALL_SCRIPT]          write sql-only/pg_jobs.sql
  scripts/sql-only.py --check [--from INSTALL_SCRIPT]  fail if they are not what it would write
"""

import argparse
import importlib.util
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ROOT / "sql-only" / "src"
TARGET = ROOT / "sql-only" / "pg_jobs.sql"
TLE_TARGET = ROOT / "sql-only" / "pg_jobs.pg_tle.sql"
TAG = "$_pg_jobs_$"
DESCRIPTION = "pg_jobs: a durable job queue with fenced claims, retries, dead letters and durable steps"
PG_CONFIG = "/usr/lib/postgresql/15/bin/pg_config"

_spec = importlib.util.spec_from_file_location("upgrade_script", ROOT / "scripts" / "upgrade-script.py")
_upgrade = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_upgrade)
statements = _upgrade.statements


def body(stmt):
    """A statement without the comments above it (pgrx's /* ... */ blocks too)."""
    return LEADING_COMMENTS.sub("", stmt)

LEADING_COMMENTS = re.compile(r"\A(?:\s+|--[^\n]*(?:\n|\Z)|/\*.*?\*/)*", re.S)
CREATED = re.compile(
    r'create\s+(?:or\s+replace\s+)?(function|trigger)\s+(?:jobs\.)?"?([A-Za-z_][A-Za-z0-9_]*)"?', re.I)


def version():
    return re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "Cargo.toml").read_text(), re.M).group(1)


def created(code):
    """(kind, name) of a CREATE FUNCTION or CREATE TRIGGER, else None."""
    m = CREATED.match(code)
    return (m.group(1).lower(), m.group(2)) if m else None


def replacements(originals):
    """The prelude (statements that replace nothing, before each file's first replacement) and,
    per (kind, name) of the extension's, the statements that replace it."""
    prelude, groups = [], {}
    for path in sorted(SOURCES.glob("*.sql")):
        current = None
        for stmt in statements(path.read_text()):
            key = created(body(stmt))
            if key in originals:
                if key in groups:
                    sys.exit(f"sql-only: {path.name}: {key[0]} {key[1]} is defined twice in sql-only/src")
                current = key
                groups[key] = [stmt]
            elif current is None:
                prelude.append(stmt)
            else:
                groups[current].append(stmt)
    return prelude, groups


def rust_functions(install):
    """The names of the extension's functions written in Rust (LANGUAGE c), from its install
    script: a set, so the order pgrx writes them in (which varies between builds) does not
    matter."""
    names = set()
    for stmt in statements(install):
        code = body(stmt)
        if "module_pathname" in code.lower():
            names.add(created(code)[1])
    return names


def build(install, extension=False):
    """The edition's statements: schema.sql, then the prelude and the replacements of the Rust
    functions (where pgrx puts their declarations: before every other file, some of whose
    SQL-standard bodies name them), then the other files of sql/ in install order (the order of
    src/lib.rs, as scripts/upgrade-script.py reads it), each replaced function or trigger of
    theirs in its place."""
    rust = rust_functions(install)
    files = [(path, statements(path.read_text())) for path in _upgrade.install_files()]
    originals = {("function", name): 1 for name in rust}
    for _, stmts in files:
        for stmt in stmts:
            key = created(body(stmt))
            if key:
                originals[key] = originals.get(key, 0) + 1
    prelude, groups = replacements(originals)
    for key in list(groups):
        if originals[key] > 1:
            sys.exit(f"sql-only: the extension has {originals[key]} {key[0]}s jobs.{key[1]}; "
                     "a replacement must name one")
    missing = sorted(name for name in rust if ("function", name) not in groups)
    if missing:
        sys.exit("sql-only: nothing in sql-only/src replaces the extension's functions in Rust: " + ", ".join(missing))

    def kept(code):
        # (only an extension's script may call pg_extension_config_dump)
        return code if extension or "pg_extension_config_dump" not in code else ""

    out = []
    for n, (_, stmts) in enumerate(files):
        for stmt in stmts:
            code = body(stmt)
            low = code.lower()
            if low.startswith("do ") and "the schema jobs exists and belongs to" in low:
                continue  # (the script makes the schema itself)
            key = created(code)
            out.append(kept(code) if key not in groups else "\n\n".join(kept(s) for s in groups.pop(key)))
        if n == 0:  # after schema.sql
            out.extend(kept(body(s)) for s in prelude)
            for name in sorted(rust, key=lambda name: list(groups).index(("function", name))):
                out.extend(kept(s) for s in groups.pop(("function", name)))
    if groups:
        sys.exit("sql-only: replaced nothing: " + ", ".join(f"{k} jobs.{n}" for k, n in groups))
    settings = (
        "-- (as CREATE EXTENSION runs an extension's script)\n"
        "set local search_path = jobs, pg_temp;\n"
        "set local check_function_bodies = off;\n"
        "set local client_min_messages = warning;\n"
        "\n"
        "create schema jobs;\n"
        f"comment on schema jobs is 'pg_jobs {version()} (SQL-only edition)';\n"
    )
    script = settings + "\n" + "\n\n".join(code for code in out if code) + "\n"
    if extension:
        if TAG in script:
            sys.exit(f"sql-only: the script holds {TAG}, the dollar quote the pg_tle form wraps it in")
        return (
            f"-- pg_jobs {version()}, the SQL-only edition for pg_tle: CREATE EXTENSION pg_jobs where the\n"
            "-- server offers pg_tle (docs/EDITIONS.md). Generated by scripts/sql-only.py: never edit it.\n"
            "--\n"
            "-- Run once per database by a member of pgtle_admin; then CREATE EXTENSION pg_jobs.\n"
            "\n"
            f"select pgtle.install_extension('pg_jobs', '{version()}', {DESCRIPTION!r}, {TAG}\n"
            + script + f"{TAG});\n"
        )
    header = (
        f"-- pg_jobs {version()}, the SQL-only edition: no shared library, for servers that load only\n"
        "-- the extensions they ship (docs/EDITIONS.md). Generated by scripts/sql-only.py from the\n"
        "-- extension's install script and sql-only/src/: edit those, never this file.\n"
        "--\n"
        "-- Installs pg_jobs into the current database, owned by the role that runs it (which may\n"
        "-- create schemas; it need not be a superuser):\n"
        "--   psql -v ON_ERROR_STOP=1 -d DATABASE -f sql-only/pg_jobs.sql\n"
        "\n"
        "begin;\n"
    )
    return header + script + "\ncommit;\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if sql-only/pg_jobs.sql is not current")
    parser.add_argument("--from", dest="source", help="the extension's install script "
                        "(default: PostgreSQL 15's extension directory)")
    args = parser.parse_args()
    source = args.source
    if source is None:
        share = subprocess.run([PG_CONFIG, "--sharedir"], capture_output=True, text=True, check=True).stdout.strip()
        source = f"{share}/extension/pg_jobs--{version()}.sql"
    install = pathlib.Path(source).read_text()
    for target, text in ((TARGET, build(install)), (TLE_TARGET, build(install, extension=True))):
        if args.check:
            if not target.exists() or target.read_text() != text:
                print(f"sql-only: {target.relative_to(ROOT)} is not current; run scripts/sql-only.py", file=sys.stderr)
                sys.exit(1)
        else:
            target.write_text(text)


if __name__ == "__main__":
    main()
