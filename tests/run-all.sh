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

tmp="${TMPDIR:-/tmp}"
# What the tests leave in the temp dir is a failure too: snapshot our prefixes first.
leftovers() { find "$tmp" -maxdepth 1 \( -name 'mcpt-*' -o -name 'mcp-tasks-*' \) 2>/dev/null | sort; }
before=$(leftovers)
log=$(mktemp "$tmp/run-all-XXXXXX")
trap 'rm -f "$log"' EXIT

echo "== testing"
status=0
cargo test --workspace -- --test-threads "${MCPT_TEST_THREADS:-4}" 2>&1 | tee "$log" || status=$?

if [ "$status" -eq 0 ]; then
  echo "== benchmark at a small size (proves it runs; its figures mean little here)"
  ./target/debug/bench --clients 1,4 --duration 1s --tasks 200 --listeners 200 --out target/bench-ci || status=$?
fi

# One verdict: the sums of cargo's `test result: … N passed; M failed; …` lines.
count() { awk -v what="$1;" '/^test result:/ { for (i = 2; i <= NF; i++) if ($i == what) n += $(i - 1) } END { print n + 0 }' "$log"; }
passed=$(count passed)
failed=$(count failed)
left=$(comm -13 <(printf '%s\n' "$before") <(leftovers) | sed '/^$/d')
verdict="$passed passed, $failed failed"
if [ -n "$left" ]; then
  verdict="$verdict, $(printf '%s\n' "$left" | wc -l) left in $tmp: $(printf '%s ' $left)"
  [ "$status" -ne 0 ] || status=1
fi
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  verdict="$verdict (exit $status: a build or the benchmark failed; see above)"
fi
echo "== tests: $verdict"
exit "$status"
