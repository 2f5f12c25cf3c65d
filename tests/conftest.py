"""The tests from outside the server, in a folder per subject (claims, jobs, server, security,
properties, shipping, editions), beside their helpers (clusters.py, polling.py) and fixtures
(shared_fixtures.py). A test module may import another's helpers by its name: every subject
folder is on the import path."""

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
for folder in sorted(p for p in HERE.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
    if str(folder) not in sys.path:
        sys.path.append(str(folder))

from shared_fixtures import *  # noqa: E402,F401,F403
