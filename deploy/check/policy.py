"""Project rules for rendered manifests that schema validation cannot see.

Usage: python policy.py LABEL RENDERED.yaml SCALEDOBJECTS_OUT.json [--managed-redis]
--managed-redis: the render must not contain the development Redis and must take
MCPT_REDIS_URL from a Secret. Prints one "LABEL: problem" line per problem and exits 1 if any; writes the rendered
ScaledObjects as a JSON array for scaledobject.mjs. Needs PyYAML (kubernetes-validate
depends on it).
"""

import json
import re
import sys

import yaml

label, rendered, so_out = sys.argv[1:4]
managed_redis = "--managed-redis" in sys.argv[4:]
docs = [d for d in yaml.safe_load_all(open(rendered)) if d]
problems = []


def problem(msg):
    problems.append(f"{label}: {msg}")


kinds = {d.get("kind") for d in docs}
required = {"ServiceAccount", "ConfigMap", "Deployment", "Service", "HorizontalPodAutoscaler",
            "PodDisruptionBudget", "ScaledObject", "NetworkPolicy"}
required |= set() if managed_redis else {"StatefulSet"}
for kind in sorted(required - kinds):
    problem(f"no {kind} rendered")
if managed_redis and "StatefulSet" in kinds:
    problem("the development Redis StatefulSet is still rendered")


def seconds(text):
    m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", text or "")
    if not m:
        return None
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[m[2]]


def by_kind(kind):
    return [d for d in docs if d.get("kind") == kind]


config = {}
for cm in by_kind("ConfigMap"):
    if cm["metadata"]["name"] == "mcp-tasks":
        config = cm.get("data") or {}


def env_of(container):
    """MCPT_* the container sees: ConfigMap via envFrom, then env (which wins)."""
    env = {}
    for src in container.get("envFrom", []):
        if src.get("configMapRef", {}).get("name") == "mcp-tasks":
            env.update(config)
    for e in container.get("env", []):
        env[e["name"]] = e.get("value", e.get("valueFrom"))
    return env


workloads = by_kind("Deployment") + by_kind("StatefulSet")
http_ports = {}  # Deployment name -> (workload, container, port its HTTP listener uses)
deployments = {d["metadata"]["name"]: d for d in by_kind("Deployment")}
for w in workloads:
    name = f'{w["kind"]} {w["metadata"]["name"]}'
    pod = w["spec"]["template"]["spec"]
    if not (pod.get("securityContext") or {}).get("runAsNonRoot"):
        problem(f"{name}: pod securityContext.runAsNonRoot is not true")
    for c in pod["containers"]:
        where = f'{name} container {c["name"]}'
        sc = c.get("securityContext") or {}
        if sc.get("readOnlyRootFilesystem") is not True:
            problem(f"{where}: readOnlyRootFilesystem is not true")
        if sc.get("allowPrivilegeEscalation") is not False:
            problem(f"{where}: allowPrivilegeEscalation is not false")
        if "ALL" not in (sc.get("capabilities") or {}).get("drop", []):
            problem(f"{where}: capabilities.drop lacks ALL")
        res = c.get("resources") or {}
        for kind in ("requests", "limits"):
            for r in ("cpu", "memory"):
                if r not in (res.get(kind) or {}):
                    problem(f"{where}: no resources.{kind}.{r}")
        image = c.get("image", "")
        if not image.startswith(("mcp-tasks:", "mcp-tasks@")) and "/mcp-tasks:" not in image:
            if w["kind"] == "Deployment":
                problem(f"{where}: image {image!r} is not the mcp-tasks image with a tag")
            continue
        env = env_of(c)
        binary = (c.get("command") or [""])[0].rsplit("/", 1)[-1]
        if binary not in ("mcp-tasks-gateway", "mcp-tasks-worker"):
            problem(f"{where}: command must select mcp-tasks-gateway or mcp-tasks-worker")
        if "MCPT_REDIS_URL" not in env:
            problem(f"{where}: MCPT_REDIS_URL is not set")
        elif managed_redis and not isinstance(env["MCPT_REDIS_URL"], dict):
            problem(f"{where}: MCPT_REDIS_URL must come from a Secret (valueFrom.secretKeyRef)")
        elif managed_redis and "secretKeyRef" not in env["MCPT_REDIS_URL"]:
            problem(f"{where}: MCPT_REDIS_URL must come from a Secret (valueFrom.secretKeyRef)")
        grace = seconds(env.get("MCPT_SHUTDOWN_GRACE", "30s"))
        drain = seconds(env.get("MCPT_DRAIN_DELAY", "2s")) if binary == "mcp-tasks-gateway" else 0
        if grace is None or drain is None:
            problem(f"{where}: MCPT_SHUTDOWN_GRACE / MCPT_DRAIN_DELAY is not a duration")
        elif pod.get("terminationGracePeriodSeconds", 30) <= grace + drain:
            problem(f"{where}: terminationGracePeriodSeconds must exceed {grace + drain:g}s (shutdown grace + drain delay)")
        if binary not in ("mcp-tasks-gateway", "mcp-tasks-worker"):
            continue
        # Both binaries serve /healthz, /readyz and /metrics over HTTP: the gateway on
        # MCPT_LISTEN_ADDR, the worker on its admin listener MCPT_ADMIN_ADDR.
        addr_var = "MCPT_LISTEN_ADDR" if binary == "mcp-tasks-gateway" else "MCPT_ADMIN_ADDR"
        addr = env.get(addr_var) or ""
        if not isinstance(addr, str) or not addr.startswith("0.0.0.0:"):
            problem(f"{where}: {addr_var} must listen on 0.0.0.0:PORT inside a pod (got {addr!r})")
            continue
        port = addr.rpartition(":")[2]
        named = {p.get("name"): str(p["containerPort"]) for p in c.get("ports", [])}
        if port not in named.values():
            problem(f"{where}: no containerPort matches {addr_var} port {port}")
        paths = {}
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            get = (c.get(probe) or {}).get("httpGet") or {}
            paths[probe] = get.get("path")
            if get.get("path") != path:
                problem(f"{where}: {probe} must GET {path} (got {get.get('path')})")
            probe_port = str(get.get("port"))
            if named.get(probe_port, probe_port) != port:
                problem(f"{where}: {probe} port {get.get('port')!r} is not the {addr_var} port {port}")
        if paths["livenessProbe"] and paths["livenessProbe"] == paths["readinessProbe"]:
            problem(f"{where}: liveness and readiness probes must use different paths")
        scrape = (w["spec"]["template"]["metadata"].get("annotations") or {})
        if scrape.get("prometheus.io/scrape") != "true":
            problem(f'{name}: pod template lacks annotation prometheus.io/scrape: "true"')
        elif scrape.get("prometheus.io/port") != port or scrape.get("prometheus.io/path") != "/metrics":
            problem(f"{name}: prometheus.io/port and prometheus.io/path must be {port!r} and '/metrics' "
                    f"(got {scrape.get('prometheus.io/port')!r}, {scrape.get('prometheus.io/path')!r})")
        http_ports[w["metadata"]["name"]] = (w, c, port)



def selects(selector, labels):
    """Whether a LabelSelector matches labels (matchLabels, matchExpressions)."""
    if not (selector.get("matchLabels") or {}).items() <= labels.items():
        return False
    for e in selector.get("matchExpressions") or []:
        have = e["key"] in labels
        value = labels.get(e["key"])
        ok = {"In": have and value in e.get("values", []),
              "NotIn": not have or value not in e.get("values", []),
              "Exists": have, "DoesNotExist": not have}[e["operator"]]
        if not ok:
            return False
    return True


# A pod that some NetworkPolicy isolates for ingress must still let Prometheus reach its
# HTTP port (the kubelet's probes are exempt in most CNIs; a scraper is not).
for dname, (w, c, port) in http_ports.items():
    labels = w["spec"]["template"]["metadata"].get("labels") or {}
    policies = [np for np in by_kind("NetworkPolicy")
                if "Ingress" in np["spec"].get("policyTypes", ["Ingress"])
                and selects(np["spec"].get("podSelector") or {}, labels)]
    if not policies:
        continue
    names = {p.get("name"): str(p["containerPort"]) for p in c.get("ports", [])}
    allowed = False
    for np in policies:
        for rule in np["spec"].get("ingress") or []:
            if not rule.get("ports"):
                allowed = True
            for p in rule.get("ports") or []:
                if "port" not in p or names.get(str(p["port"]), str(p["port"])) == port:
                    allowed = True
    if not allowed:
        problem(f"Deployment {dname}: no NetworkPolicy admits ingress to its HTTP port {port} "
                f"(metrics scraping) though {', '.join(np['metadata']['name'] for np in policies)} isolate(s) it")

for sts in by_kind("StatefulSet"):
    for c in sts["spec"]["template"]["spec"]["containers"]:
        if c["name"] != "redis":
            continue
        args = " ".join(c.get("command", []) + c.get("args", []))
        for want in ("--appendonly yes", "--appendfsync everysec", "--maxmemory-policy noeviction"):
            if want not in args:
                problem(f'StatefulSet {sts["metadata"]["name"]}: redis needs {want}')

scaled = by_kind("ScaledObject")
for so in scaled:
    name = f'ScaledObject {so["metadata"]["name"]}'
    target = deployments.get(so["spec"]["scaleTargetRef"]["name"])
    if target is None:
        problem(f"{name}: scaleTargetRef names no Deployment in this render")
        continue
    container = target["spec"]["template"]["spec"]["containers"][0]
    env = env_of(container)
    queues = (env.get("MCPT_QUEUES") or "default").split(",")
    for t in so["spec"]["triggers"]:
        md = t.get("metadata") or {}
        want = [f"mcpt:queue:{{{q.strip()}}}" for q in queues]
        if md.get("stream") not in want:
            problem(f"{name}: stream {md.get('stream')!r} is not a queue of its target ({', '.join(want)})")
        if md.get("consumerGroup") != "workers":
            problem(f"{name}: consumerGroup must be 'workers'")
        for key in ("addressFromEnv", "hostFromEnv", "passwordFromEnv", "usernameFromEnv"):
            if key in md and md[key] not in env:
                problem(f"{name}: {key} names {md[key]}, which its target container does not set")

for pdb in by_kind("PodDisruptionBudget"):
    sel = pdb["spec"]["selector"]["matchLabels"]
    if not any(sel.items() <= w["spec"]["template"]["metadata"]["labels"].items() for w in workloads):
        problem(f'PodDisruptionBudget {pdb["metadata"]["name"]}: selector matches no workload')

for hpa in by_kind("HorizontalPodAutoscaler"):
    if hpa["spec"]["scaleTargetRef"]["name"] not in deployments:
        problem(f'HorizontalPodAutoscaler {hpa["metadata"]["name"]}: target is not a Deployment in this render')

json.dump(scaled, open(so_out, "w"))
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
