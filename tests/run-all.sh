#!/usr/bin/env bash
# The whole test suite: unit and store tests, end-to-end tests against a private
# redis-server and the real binaries, the official TypeScript client interop test and the
# official MCP conformance suite.
#
#   bash tests/run-all.sh
#
# Needs: cargo, redis-server, node (>= 20) with npm. .ci/run installs what is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
command -v redis-server >/dev/null || missing+=("redis-server (apt-get install redis-server)")
command -v node >/dev/null || missing+=("node >= 20 with npm")
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests: missing ${missing[*]}" >&2
  exit 1
fi

echo "== installing the official MCP client and conformance suite (npm ci)"
npm ci --prefix tests/interop --no-audit --no-fund --loglevel=error
npm ci --prefix tests/conformance --no-audit --no-fund --loglevel=error
npm ci --prefix tests/upstream --no-audit --no-fund --loglevel=error
npm ci --prefix tests/legacy --no-audit --no-fund --loglevel=error

echo "== building"
cargo build --workspace --bins

echo "== testing"
cargo test --workspace -- --test-threads "${MCPT_TEST_THREADS:-4}"

echo "== benchmark at a small size (proves it runs; its figures mean little here)"
./target/debug/bench --clients 1,4 --duration 1s --tasks 200 --listeners 200 --out target/bench-ci
