#!/usr/bin/env bash
# Instructions per unit of work of the gateway, a worker or Redis, under valgrind's
# callgrind: deterministic where wall CPU on a shared machine moves by ±15 % between
# identical rounds.
#
#   tests/callgrind/run.sh gateway|worker|redis [BIN_DIR] [N] [CLIENTS]
#
# Starts a private redis-server, a gateway and a worker (MCPT_TOOLS=demo) from BIN_DIR
# (default target/release), the measured one under callgrind with instrumentation off;
# warms up with 200 tasks; then switches instrumentation on for N units of work from
# CLIENTS concurrent keep-alive clients (default 1000 and 8): for the gateway a unit is
# one `tools/call sleep` plus one `tasks/get` of a completed task, for a worker one
# `sleep ms=0` job (its client polls `tasks/get` until it is completed), for Redis the
# gateway's unit with the worker's part of the task it creates (its read and finish,
# waited for by one more `tasks/get` of that task, rarely two; Redis runs under valgrind,
# so each call is slower, but instructions do not depend on that). Prints the
# instructions per unit, and leaves the profile in target/callgrind/ for
# `callgrind_annotate`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
if [ $# -lt 1 ]; then
  echo "usage: tests/callgrind/run.sh gateway|worker|redis [BIN_DIR] [N] [CLIENTS]" >&2
  exit 64
fi
which=$1
bin=${2:-target/release}
n=${3:-1000}
clients=${4:-8}
case "$which" in gateway | worker | redis) ;; *) echo "run.sh: measure gateway, worker or redis, not $which" >&2; exit 64 ;; esac
if ! [[ "$n" =~ ^[1-9][0-9]*$ && "$clients" =~ ^[1-9][0-9]*$ ]] || ((n % clients != 0)); then
  echo "run.sh: N ($n) must be a positive multiple of CLIENTS ($clients)" >&2
  exit 64
fi
for tool in valgrind callgrind_control redis-server python3; do
  command -v "$tool" >/dev/null || { echo "run.sh: $tool is not installed" >&2; exit 69; }
done
for b in mcp-tasks-gateway mcp-tasks-worker; do
  [ -x "$bin/$b" ] || { echo "run.sh: no $bin/$b (cargo build --release --bins first)" >&2; exit 66; }
done

out=target/callgrind
mkdir -p "$out"
work=$(mktemp -d)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
redis_port=$(free_port)
gateway_port=$(free_port)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

profile="$out/$which.$(date +%s).out"
vg=(valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$profile")
gw=() wk=() rd=()
case "$which" in gateway) gw=("${vg[@]}") ;; worker) wk=("${vg[@]}") ;; redis) rd=("${vg[@]}") ;; esac
"${rd[@]}" redis-server --port "$redis_port" --save "" --appendonly no \
  --logfile "$work/redis.log" >/dev/null 2>&1 &
redis_pid=$!
pids+=("$redis_pid")
for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
# The owner limits are off unless the caller sets them: one client creating 1,000 tasks is
# not the load they are for. `MCPT_LIMIT_TASKS_PER_MINUTE=6000 MCPT_LIMIT_ACTIVE_TASKS=1000`
# (the defaults) measures the default create path, with one prune of the owner's
# unfinished set per 1,000 tasks as in a steady load.
export MCPT_REDIS_URL="redis://127.0.0.1:$redis_port" \
  MCPT_LIMIT_TASKS_PER_MINUTE="${MCPT_LIMIT_TASKS_PER_MINUTE:-0}" \
  MCPT_LIMIT_ACTIVE_TASKS="${MCPT_LIMIT_ACTIVE_TASKS:-0}" MCPT_LIMIT_LISTENERS=0
MCPT_LISTEN_ADDR="127.0.0.1:$gateway_port" "${gw[@]}" "$bin/mcp-tasks-gateway" \
  >"$work/gateway.log" 2>&1 &
gateway_pid=$!
pids+=("$gateway_pid")
MCPT_TOOLS=demo MCPT_FAIR_SHARE=1 MCPT_ADMIN_ADDR=127.0.0.1:0 "${wk[@]}" "$bin/mcp-tasks-worker" \
  >"$work/worker.log" 2>&1 &
worker_pid=$!
pids+=("$worker_pid")
for _ in $(seq 200); do
  grep -q "listening on" "$work/gateway.log" && grep -q "listening on" "$work/worker.log" && break
  sleep 0.2
done
grep -q "listening on" "$work/gateway.log" || { echo "run.sh: the gateway did not start:" >&2; tail -5 "$work/gateway.log" >&2; exit 1; }
grep -q "listening on" "$work/worker.log" || { echo "run.sh: the worker did not start:" >&2; tail -5 "$work/worker.log" >&2; exit 1; }

echo "owner limits: $MCPT_LIMIT_TASKS_PER_MINUTE tasks a minute, $MCPT_LIMIT_ACTIVE_TASKS unfinished (0: off)" >&2
echo "warming up (200 tasks, one at a time)" >&2
python3 tests/callgrind/drive.py "$gateway_port" warm 200
measured=$gateway_pid
[ "$which" = worker ] && measured=$worker_pid
[ "$which" = redis ] && measured=$redis_pid
echo "measuring $which: $n units from $clients clients" >&2
python3 tests/callgrind/drive.py "$gateway_port" "$which" "$n" "$measured" "$clients"
# The last jobs' finish scripts may still be on their way.
sleep 0.5
kill "$measured"
wait "$measured" 2>/dev/null || true
total=$(awk '/^totals:/ {print $2}' "$profile")
echo "$which: $((total / n)) instructions per unit ($total for $n; profile $profile)"
