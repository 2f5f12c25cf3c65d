"""pgjobs's tests (the command and the dashboard) run as the tests from outside the server do,
with their fixtures and helpers (tests/shared_fixtures.py, tests/clusters.py)."""

import pathlib
import sys

TESTS = pathlib.Path(__file__).resolve().parents[2] / "tests"
for folder in [TESTS, *sorted(p for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))]:
    if str(folder) not in sys.path:
        sys.path.append(str(folder))

from shared_fixtures import *  # noqa: E402,F401,F403
