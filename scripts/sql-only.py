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
sql-only/pg_jobs.pg_tle.sql: made here beside it, not tracked (a release ships it,
scripts/release.sh).

  scripts/sql-only.py [--from INSTALL_SCRIPT]          write the edition, in both forms
  scripts/sql-only.py --check [--from INSTALL_SCRIPT]  fail if a tracked file is not what it would write
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


def edition_mark(release):
    """The comment on the schema jobs that says which release of the edition a database has."""
    return f"pg_jobs {release} (SQL-only edition)"


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


def prepare(install):
    """The install files' statements, the set of Rust functions, and the replacements (the
    prelude, and per replaced function or trigger its statements), checked."""
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
    return files, rust, prelude, groups


def kept_for(extension):
    """What of a statement the form keeps: only an extension's script may call
    pg_extension_config_dump or ALTER EXTENSION."""
    def kept(code):
        low = code.lower()
        return code if extension or ("pg_extension_config_dump" not in low
                                     and not low.startswith("alter extension")) else ""
    return kept


SETTINGS = (
    "-- (as CREATE EXTENSION runs an extension's script)\n"
    "set local search_path = jobs, pg_temp;\n"
    "set local check_function_bodies = off;\n"
    "set local client_min_messages = warning;\n"
)


def build(install, extension=False):
    """The edition's statements: schema.sql, then the prelude and the replacements of the Rust
    functions (where pgrx puts their declarations: before every other file, some of whose
    SQL-standard bodies name them), then the other files of sql/ in install order (the order of
    src/lib.rs, as scripts/upgrade-script.py reads it), each replaced function or trigger of
    theirs in its place."""
    files, rust, prelude, groups = prepare(install)
    kept = kept_for(extension)
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
    settings = SETTINGS + (
        "\n"
        "create schema jobs;\n"
        f"comment on schema jobs is {edition_mark(version())!r};\n"
    )
    script = settings + "\n" + "\n\n".join(code for code in out if code) + "\n"
    if extension:
        return for_pg_tle(
            f"-- pg_jobs {version()}, the SQL-only edition for pg_tle: CREATE EXTENSION pg_jobs where the\n"
            "-- server offers pg_tle (docs/EDITIONS.md). Generated by scripts/sql-only.py: never edit it.\n"
            "--\n"
            "-- Run once per database by a member of pgtle_admin; then CREATE EXTENSION pg_jobs.\n"
            "\n",
            f"select pgtle.install_extension('pg_jobs', '{version()}', {DESCRIPTION!r}", script)
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


def for_pg_tle(header, call, script, after=""):
    """`script` as the last argument of a pg_tle call (dollar-quoted by TAG), under `header`."""
    if TAG in script:
        sys.exit(f"sql-only: the script holds {TAG}, the dollar quote the pg_tle form wraps it in")
    return header + f"{call}, {TAG}\n" + script + f"{TAG});\n" + after


def or_replace(code):
    """A CREATE FUNCTION or CREATE TRIGGER as CREATE OR REPLACE (other statements as they are)."""
    return re.sub(r"\Acreate\s+(function|trigger)\b", r"create or replace \1", code, count=1, flags=re.I)


def upgrade(install, hand, old, extension=False):
    """The edition's upgrade from release `old` to this one, from the extension's hand-written
    part sql/upgrade/OLD--NEW.sql and the edition's own, sql-only/upgrade/OLD--NEW.sql (what
    changes in jobs_config's tables and in the statements of sql-only/src that CREATE OR
    REPLACE cannot redo), in the order of the extension's upgrade (scripts/upgrade-script.py):
    the extension's first part (each function it makes that the edition replaces made as the
    edition has it, there), the edition's part, every other replacement of sql-only/src (CREATE OR
    REPLACE), every function and view of the install files (CREATE OR REPLACE, the replaced ones
    as the edition has them) and the privileges, the extension's last part; then the release
    noted on the schema jobs. A function the upgrade writes in Rust that nothing replaces is an
    error."""
    _, _, _, groups = prepare(install)
    kept = kept_for(extension)
    new = version()

    made = set()

    def group(key):
        made.add(key)
        return [kept(or_replace(body(st))) for st in groups[key]]

    def swap(stmts):
        out = []
        for stmt in stmts:
            code = body(stmt)
            key = created(code)
            if key in groups:
                out.extend(group(key) if key not in made else [])  # (the edition's, once)
                continue
            if "module_pathname" in code.lower():
                sys.exit(f"sql-only: {hand.name}: nothing in sql-only/src replaces the function in Rust "
                         f"{key[1] if key else code.splitlines()[0]}")
            out.append(kept(code))
        return out

    first, last = _upgrade.hand_parts(hand)
    own = ROOT / "sql-only" / "upgrade" / hand.name
    parts = swap(statements(first))
    parts += [kept(body(st)) for st in statements(own.read_text())] if own.exists() else []
    parts += [code for key in groups if key not in made for code in group(key)]
    parts += (swap(_upgrade.functions())
             + swap(statements(last))
             + [f"comment on schema jobs is {edition_mark(new)!r};"])
    script = SETTINGS + "\n" + "\n\n".join(code for code in parts if code) + "\n"
    if extension:
        return for_pg_tle(
            f"-- pg_jobs's SQL-only edition for pg_tle, from {old} to {new}: then ALTER EXTENSION pg_jobs\n"
            "-- UPDATE. Generated by scripts/sql-only.py: never edit it. Run by a member of pgtle_admin.\n"
            "\n",
            f"select pgtle.install_update_path('pg_jobs', '{old}', '{new}'", script,
            f"select pgtle.set_default_version('pg_jobs', '{new}');\n")
    check = f"""do $check$
declare
  v_has text := obj_description(to_regnamespace('jobs'), 'pg_namespace');
  v_owner regrole := (select n.nspowner::regrole from pg_catalog.pg_namespace as n where n.nspname = 'jobs');
begin
  if v_has is distinct from '{edition_mark(old)}' then
    raise exception 'pg_jobs: this file upgrades the SQL-only edition of pg_jobs {old} to {new}; this database has %',
      coalesce(v_has, 'no SQL-only edition of pg_jobs')
      using errcode = '55000',
            hint = 'run the upgrade files from its release to {new} in order, one per release '
                   '(sql-only/pg_jobs--A--B.sql); a database without pg_jobs takes sql-only/pg_jobs.sql';
  end if;
  if v_owner <> current_user::regrole then
    raise exception 'pg_jobs: the SQL-only edition is upgraded by the role that owns it (%), not by %', v_owner, current_user
      using errcode = '42501',
            hint = format('what another role made would be its own and run with its privileges; '
                          'connect as %s (or SET ROLE %s), then run this file again', v_owner, v_owner);
  end if;
end
$check$;
"""
    return (
        f"-- pg_jobs's SQL-only edition, from {old} to {new}. Generated by scripts/sql-only.py from the\n"
        f"-- extension's sql/upgrade/{hand.name}, sql-only/upgrade/ and sql-only/src/: never edit it.\n"
        "-- Run by the role that owns the edition:\n"
        f"--   psql -v ON_ERROR_STOP=1 -d DATABASE -f sql-only/pg_jobs--{old}--{new}.sql\n"
        "\n"
        "begin;\n" + check + "\n" + script + "\ncommit;\n"
    )


def upgrades():
    """(hand, old) for each extension upgrade to this release from a release the edition had
    (kept in sql-only/released/, as sql/released/ keeps the extension's)."""
    new = version()
    out = []
    for hand in sorted((ROOT / "sql" / "upgrade").glob(f"*--{new}.sql")):
        old = hand.name.split("--")[0]
        if (ROOT / "sql-only" / "released" / f"pg_jobs--{old}.sql").exists():
            out.append((hand, old))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if a tracked file (sql-only/pg_jobs.sql, "
                        "an upgrade) is not current")
    parser.add_argument("--from", dest="source", help="the extension's install script "
                        "(default: PostgreSQL 15's extension directory)")
    args = parser.parse_args()
    source = args.source
    if source is None:
        share = subprocess.run([PG_CONFIG, "--sharedir"], capture_output=True, text=True, check=True).stdout.strip()
        source = f"{share}/extension/pg_jobs--{version()}.sql"
    install = pathlib.Path(source).read_text()
    # The pg_tle form of the install is made from the same script, not tracked (--check skips it).
    targets = [(TARGET, build(install))]
    if not args.check:
        targets.append((TLE_TARGET, build(install, extension=True)))
    for hand, old in upgrades():
        targets.append((ROOT / "sql-only" / f"pg_jobs--{old}--{version()}.sql", upgrade(install, hand, old)))
        targets.append((ROOT / "sql-only" / f"pg_jobs--{old}--{version()}.pg_tle.sql",
                        upgrade(install, hand, old, extension=True)))
    for target, text in targets:
        if args.check:
            if not target.exists() or target.read_text() != text:
                print(f"sql-only: {target.relative_to(ROOT)} is not current; run scripts/sql-only.py", file=sys.stderr)
                sys.exit(1)
        else:
            target.write_text(text)


if __name__ == "__main__":
    main()
