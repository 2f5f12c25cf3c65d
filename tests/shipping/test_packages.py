"""The libraries as their ecosystems install them: the Node.js package that npm pack makes from a
clean copy of clients/node (nothing built), installed into an empty project, and the Python sdist
and wheel that python -m build makes, each installed into a fresh venv. No database is needed;
the registries are (pg and psycopg are fetched as a user's project would)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE = ROOT / "clients" / "node"
PYTHON = ROOT / "clients" / "python"


def run(*args: str | Path, cwd: Path, ok: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "npm_config_update_notifier": "false"})
    if ok:
        assert done.returncode == 0, f"{args}: {done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


def tracked(directory: Path, into: Path) -> None:
    """Copies what git tracks under directory (as a fresh clone has it: no dist, no build)."""
    files = run("git", "ls-files", "-z", ".", cwd=directory).stdout.split("\0")
    for name in filter(None, files):
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(directory / name, target)


def test_npm_pack_builds_a_package_that_installs_with_its_types_and_command(tmp_path: Path) -> None:
    """npm pack in a copy with nothing built runs the build (prepack): the tarball holds the
    code; installed into an empty project with pg, require and import give the API, a type
    error in the project's TypeScript is caught through the package's declarations, and
    npx pg-jobs worker --help runs. Checked to fail without prepack: the tarball held
    package.json and README.md only."""
    source = tmp_path / "source"
    tracked(NODE, source)
    # The build's tools, as npm ci would install them in the copy.
    (source / "node_modules").symlink_to(NODE / "node_modules")
    packed = run("npm", "pack", "--silent", "--pack-destination", tmp_path, cwd=source).stdout.strip().splitlines()[-1]
    with tarfile.open(tmp_path / packed) as tar:
        names = tar.getnames()
    assert {"package/dist/cjs/index.js", "package/dist/esm/index.d.ts", "package/LICENSE"} <= set(names), names

    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(json.dumps({"name": "app", "private": True, "version": "1.0.0"}))
    pg = json.loads((NODE / "package.json").read_text())["devDependencies"]["pg"]
    run("npm", "install", "--no-audit", "--no-fund", "--silent", tmp_path / packed, f"pg@{pg}", cwd=app)
    cjs = run("node", "-e", "console.log(typeof require('pg-jobs').createWorker)", cwd=app).stdout.strip()
    esm = run("node", "--input-type=module", "-e",
              "import { enqueue, cancel } from 'pg-jobs'; console.log(typeof enqueue, typeof cancel)", cwd=app)
    assert (cjs, esm.stdout.strip()) == ("function", "function function")

    tsc = NODE / "node_modules" / "typescript" / "bin" / "tsc"
    flags = ["--noEmit", "--strict", "--module", "nodenext", "--moduleResolution", "nodenext", "--skipLibCheck"]
    (app / "good.mts").write_text("import { defineJob } from 'pg-jobs';\n"
                                  "export const j = defineJob({ name: 'x', handler: (p: { n: number }) => p.n });\n")
    run("node", tsc, *flags, "good.mts", cwd=app)
    (app / "bad.mts").write_text("import { defineJob } from 'pg-jobs';\n"
                                 "export const j = defineJob({ name: 42, handler: () => 1 });\n")
    bad = run("node", tsc, *flags, "bad.mts", cwd=app, ok=False)
    assert bad.returncode != 0 and "bad.mts" in bad.stdout and "number" in bad.stdout, bad.stdout

    assert "--concurrency" in run("npx", "--no-install", "pg-jobs", "worker", "--help", cwd=app).stdout


def test_python_sdist_and_wheel_install_into_a_fresh_venv(tmp_path: Path) -> None:
    """python -m build makes an sdist and a wheel of clients/python; each, installed into a new
    venv (psycopg fetched as its one dependency), imports with its version and types marker,
    and its pg-jobs command answers --help."""
    run(sys.executable, "-m", "build", "--outdir", tmp_path / "dist", PYTHON, cwd=tmp_path)
    built = sorted(p.name for p in (tmp_path / "dist").iterdir())
    version = next(line.split('"')[1] for line in (PYTHON / "pyproject.toml").read_text().splitlines()
                   if line.startswith("version = "))
    assert built == [f"pg_jobs-{version}-py3-none-any.whl", f"pg_jobs-{version}.tar.gz"], built
    with zipfile.ZipFile(tmp_path / "dist" / built[0]) as wheel:
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in wheel.namelist()), wheel.namelist()
    for artifact in built:
        venv = tmp_path / f"venv-{artifact}"
        run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
        run(venv / "bin" / "pip", "install", "--quiet", "--disable-pip-version-check", tmp_path / "dist" / artifact,
            cwd=tmp_path)
        check = ("import importlib.resources, pg_jobs; "
                 "print(pg_jobs.__version__, importlib.resources.files('pg_jobs').joinpath('py.typed').is_file())")
        assert run(venv / "bin" / "python", "-c", check, cwd=tmp_path).stdout.split() == [version, "True"]
        assert "worker" in run(venv / "bin" / "pg-jobs", "--help", cwd=tmp_path).stdout

