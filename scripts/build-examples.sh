#!/usr/bin/env bash
# Builds the Node.js library (clients/node/dist, for its tests and the conformance suite) and
# the compiled example workers (Rust and Go) for tests/shipping/test_examples.py. The Go worker builds
# offline against Debian's lib/pq (GOPATH mode); the Rust one fetches its crates once.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

echo "build-examples: clients/node (the library, dist/cjs and dist/esm)"
(cd clients/node && node scripts/build.mjs)
echo "build-examples: examples/rust (tokio-postgres)"
cargo build --quiet --release --locked --manifest-path examples/rust/Cargo.toml
echo "build-examples: examples/go (lib/pq)"
(cd examples/go && GO111MODULE=off GOPATH=/usr/share/gocode go build -o pg_jobs_worker .)
