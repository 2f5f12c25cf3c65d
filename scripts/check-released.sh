#!/usr/bin/env bash
# Released scripts never change. Each file a release committed (its install script in
# sql/released/, its upgrade script in sql/) is listed with its SHA-256 in
# sql/released/SHA256SUMS; this fails if one was edited, renamed or removed since. A release
# adds its files to the list (CONTRIBUTING.md, "Releasing").
set -euo pipefail
cd "$(dirname "$0")/.."
if ! sha256sum --check --quiet --strict sql/released/SHA256SUMS; then
  echo "check-released: a released script changed (above): a release is never edited; put the" \
       "change in the next release's sql/upgrade/ part and the install files" >&2
  exit 1
fi
