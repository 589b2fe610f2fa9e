"""Project rules for deploy/compose.yaml and the files it mounts, which the Compose schema
(check/compose.mjs) cannot see.

Usage: python compose.py DEPLOY_DIR
Checks that the files parse (YAML), that the services fit together (entrypoints, ports,
addresses, depends_on conditions, mounted files), that the load balancer hashes on the
Mcp-Name header over exactly the gateways, that Prometheus scrapes every gateway and the
workers' admin port, that Grafana gets the dashboard and the Prometheus data source, and
that the OpenTelemetry Collector's pipelines are complete and listen where the binaries
send. Prints one "compose: problem" line per problem; exits 1 if any. Needs PyYAML.
"""

import pathlib
import re
import sys

import yaml

deploy = pathlib.Path(sys.argv[1])
problems = []


def problem(msg):
    problems.append(f"compose: {msg}")


def load(path):
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        problem(f"{path.relative_to(deploy)}: {e}")
        return None


def seconds(text):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(text or ""))
    return int(m[1] or 0) * 60 + int(m[2] or 0) if m and text else None


compose = load(deploy / "compose.yaml") or {}
services = compose.get("services") or {}
BINARIES = {"/usr/local/bin/mcp-tasks-gateway": "gateway", "/usr/local/bin/mcp-tasks-worker": "worker"}


def env_of(svc):
    env = svc.get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
    return {k: (None if v is None else str(v)) for k, v in env.items()}


def mounts(svc):
    """(host path relative to deploy/, container path) of the bind mounts."""
    out = []
    for v in svc.get("volumes") or []:
        if isinstance(v, str):
            src, _, rest = v.partition(":")
            target = rest.split(":")[0]
        else:
            src, target = v.get("source", ""), v.get("target", "")
        if src.startswith(("./", "../")):
            out.append((src, target))
    return out


def mounted_file(svc, target):
    """The host file mounted at container path target (directly or through a directory)."""
    for src, tgt in mounts(svc):
        if tgt == target:
            return deploy / src
        if target.startswith(tgt.rstrip("/") + "/"):
            return deploy / src / target[len(tgt.rstrip("/")) + 1:]
    return None


for want in ("redis", "gateway-1", "gateway-2", "lb", "worker", "otel-collector"):
    if want not in services:
        problem(f"no service {want}")

# --- every service ------------------------------------------------------------------------

ours = {}  # service name -> "gateway" | "worker"
for name, svc in services.items():
    image = svc.get("image", "")
    build = svc.get("build")
    if build is not None:
        ctx = build if isinstance(build, str) else build.get("context", ".")
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        if (deploy / ctx / dockerfile).resolve() != (deploy / "Dockerfile").resolve():
            problem(f"{name}: build must use deploy/Dockerfile (context {ctx!r}, dockerfile {dockerfile!r})")
        if not (deploy / ctx / "Cargo.toml").exists():
            problem(f"{name}: build context {ctx!r} is not the repository root")
    elif not re.fullmatch(r"[\w./-]+:[\w.-]+", image) or image.endswith((":latest", ":stable")):
        problem(f"{name}: image {image!r} needs an explicit version tag")
    for src, tgt in mounts(svc):
        if not (deploy / src).exists():
            problem(f"{name}: mounts {src}, which does not exist under deploy/")
    deps = svc.get("depends_on") or {}
    if isinstance(deps, list):
        deps = {d: {"condition": "service_started"} for d in deps}
    for dep, how in deps.items():
        if dep not in services:
            problem(f"{name}: depends_on {dep}, which is not a service")
        elif how.get("condition") == "service_healthy" and "healthcheck" not in services[dep]:
            problem(f"{name}: waits for {dep} to be healthy, but {dep} has no healthcheck")
    entry = svc.get("entrypoint")
    entry = entry if isinstance(entry, list) else (entry or "").split()
    if build is not None or image.startswith("mcp-tasks"):
        role = BINARIES.get(entry[0] if entry else "")
        if role is None:
            problem(f"{name}: the mcp-tasks image needs entrypoint [/usr/local/bin/mcp-tasks-gateway] or "
                    f"[/usr/local/bin/mcp-tasks-worker] (the image's ENTRYPOINT is the gateway; "
                    f"`command` only passes arguments to it)")
            continue
        if svc.get("command"):
            problem(f"{name}: no command: the binaries take no arguments, only MCPT_* variables")
        if "healthcheck" in svc:
            problem(f"{name}: the runtime image is distroless (no shell, no curl): a healthcheck cannot run")
        ours[name] = role

# --- Redis --------------------------------------------------------------------------------

redis = services.get("redis") or {}
if not str(redis.get("image", "")).startswith("redis:7"):
    problem(f"redis: image {redis.get('image')!r}: Redis 7 is needed (consumer-group lag)")
cmd = redis.get("command")
cmd = " ".join(map(str, cmd)) if isinstance(cmd, list) else str(cmd or "")
for want in ("--appendonly yes", "--appendfsync everysec", "--maxmemory-policy noeviction"):
    if want not in cmd:
        problem(f"redis: command needs {want}")
test = (redis.get("healthcheck") or {}).get("test") or []
if "redis-cli" not in " ".join(test if isinstance(test, list) else [test]):
    problem("redis: healthcheck should be redis-cli ping")
if not any(str(v).split(":")[1:2] == ["/data"] for v in redis.get("volumes") or []):
    problem("redis: /data should be a volume (the AOF)")

# --- OpenTelemetry Collector --------------------------------------------------------------

otel = services.get("otel-collector") or {}
otel_cfg_path = None
for arg in otel.get("command") or []:
    if str(arg).startswith("--config="):
        otel_cfg_path = mounted_file(otel, str(arg).split("=", 1)[1])
if otel_cfg_path is None:
    problem("otel-collector: command must be --config=PATH with deploy/otel-collector.yaml mounted at PATH")
    otel_cfg_path = deploy / "otel-collector.yaml"
elif otel_cfg_path.resolve() != (deploy / "otel-collector.yaml").resolve():
    problem(f"otel-collector: --config names {otel_cfg_path}, not deploy/otel-collector.yaml")
if not str(otel.get("image", "")).startswith("otel/opentelemetry-collector-contrib:"):
    problem("otel-collector: image should be otel/opentelemetry-collector-contrib:VERSION")
cfg = load(otel_cfg_path) or {}
KNOWN = {"receivers": {"otlp"}, "processors": {"batch", "memory_limiter"},
         "exporters": {"debug", "prometheus", "otlp", "otlphttp"}}
for section, known in KNOWN.items():
    for comp in cfg.get(section) or {}:
        ctype = comp.split("/")[0]
        if ctype == "logging":
            problem(f"otel-collector.yaml: the logging exporter was removed (collector 0.111); use debug")
        elif ctype not in known:
            problem(f"otel-collector.yaml: {section}.{comp}: not a component this check knows")
debug = (cfg.get("exporters") or {}).get("debug")
if debug and debug.get("verbosity", "basic") not in ("basic", "normal", "detailed"):
    problem("otel-collector.yaml: debug.verbosity must be basic, normal or detailed")
pipelines = ((cfg.get("service") or {}).get("pipelines") or {})
for signal in ("traces", "metrics"):
    if signal not in pipelines:
        problem(f"otel-collector.yaml: no {signal} pipeline")
for pname, p in pipelines.items():
    if pname.split("/")[0] not in ("traces", "metrics", "logs"):
        problem(f"otel-collector.yaml: pipeline {pname}: not traces, metrics or logs")
    for section in ("receivers", "processors", "exporters"):
        for comp in p.get(section) or []:
            if comp not in (cfg.get(section) or {}):
                problem(f"otel-collector.yaml: pipeline {pname} uses {section[:-1]} {comp}, which is not defined")
    if not p.get("receivers") or not p.get("exporters"):
        problem(f"otel-collector.yaml: pipeline {pname} needs receivers and exporters")
otlp_ports = {}  # protocol -> port
for proto, conf in (((cfg.get("receivers") or {}).get("otlp") or {}).get("protocols") or {}).items():
    endpoint = str((conf or {}).get("endpoint", ""))
    if not endpoint.startswith("0.0.0.0:"):
        problem(f"otel-collector.yaml: otlp {proto} endpoint {endpoint or '(default: localhost)'} "
                f"is unreachable from other containers; use 0.0.0.0:PORT")
    otlp_ports[proto] = endpoint.rpartition(":")[2]
if otlp_ports.get("http") != "4318" or otlp_ports.get("grpc") != "4317":
    problem(f"otel-collector.yaml: otlp should listen on http 4318 and grpc 4317 (got {otlp_ports})")

# --- gateways and workers -----------------------------------------------------------------

listen = {}  # service -> port of its HTTP listener
for name, role in ours.items():
    svc, env = services[name], env_of(services[name])
    host = re.fullmatch(r"redis://([\w.-]+):(\d+)(/\d+)?", env.get("MCPT_REDIS_URL") or "")
    if not host or host[1] not in services:
        problem(f"{name}: MCPT_REDIS_URL {env.get('MCPT_REDIS_URL')!r} must name a service (redis://redis:6379)")
    var = "MCPT_LISTEN_ADDR" if role == "gateway" else "MCPT_ADMIN_ADDR"
    addr = env.get(var) or ""
    if not re.fullmatch(r"0\.0\.0\.0:\d+", addr):
        problem(f"{name}: {var} must be 0.0.0.0:PORT (got {addr!r}): others reach it over the network")
    else:
        listen[name] = addr.rpartition(":")[2]
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or ""
    proto = "grpc" if env.get("OTEL_EXPORTER_OTLP_PROTOCOL") == "grpc" else "http"
    if endpoint != f"http://otel-collector:{otlp_ports.get(proto)}":
        problem(f"{name}: OTEL_EXPORTER_OTLP_ENDPOINT {endpoint!r}: the collector's otlp {proto} receiver "
                f"is http://otel-collector:{otlp_ports.get(proto)}")
    grace = seconds(env.get("MCPT_SHUTDOWN_GRACE", "30s"))
    drain = seconds(env.get("MCPT_DRAIN_DELAY", "2s")) if role == "gateway" else 0
    stop = seconds(svc.get("stop_grace_period", "10s"))
    if None in (grace, drain, stop) or stop <= grace + drain:
        problem(f"{name}: stop_grace_period must exceed MCPT_SHUTDOWN_GRACE + MCPT_DRAIN_DELAY "
                f"({grace}s + {drain}s), or Docker SIGKILLs it mid-shutdown")
    if role == "worker":
        if "demo" not in (env.get("MCPT_TOOLS") or "demo").split(","):
            problem(f"{name}: MCPT_TOOLS should include demo")
        replicas = (svc.get("deploy") or {}).get("replicas", 1)
        if int(replicas) < 2:
            problem(f"{name}: run several workers (deploy.replicas), got {replicas}")
    if svc.get("ports"):
        problem(f"{name}: publishes ports; only the load balancer (and Grafana, Prometheus) should")
gateways = sorted(n for n, r in ours.items() if r == "gateway")
workers = sorted(n for n, r in ours.items() if r == "worker")
if len(gateways) < 2 or not workers:
    problem(f"need at least two gateways and a worker service (gateways {gateways}, workers {workers})")

# --- load balancer: HAProxy hashing on Mcp-Name --------------------------------------------

lb = services.get("lb") or {}
if not str(lb.get("image", "")).startswith("haproxy:"):
    problem("lb: image should be haproxy:VERSION")
cfg_path = mounted_file(lb, "/usr/local/etc/haproxy/haproxy.cfg")
if cfg_path is None or not cfg_path.exists():
    problem("lb: mount deploy/compose/haproxy.cfg at /usr/local/etc/haproxy/haproxy.cfg")
else:
    sections, current = {}, None
    for raw in cfg_path.read_text().splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        if not line[0].isspace():
            current = tuple(line.split())
            sections[current] = []
        elif current:
            sections[current].append(line.split())
    backends = {k[1]: v for k, v in sections.items() if k[0] == "backend"}
    frontends = {k[1]: v for k, v in sections.items() if k[0] == "frontend"}
    used = {ln[1] for v in frontends.values() for ln in v if ln[0] in ("default_backend", "use_backend")}
    if not used:
        problem("haproxy.cfg: no frontend has a default_backend")
    for bname in used:
        lines = backends.get(bname)
        if lines is None:
            problem(f"haproxy.cfg: backend {bname} is not defined")
            continue
        balance = [ln for ln in lines if ln[0] == "balance"]
        if len(balance) != 1 or balance[0][1].lower() != "hdr(mcp-name)":
            problem(f"haproxy.cfg: backend {bname} must `balance hdr(Mcp-Name)` (got {balance})")
        if ["hash-type", "consistent"] != next((ln[:2] for ln in lines if ln[0] == "hash-type"), None):
            problem(f"haproxy.cfg: backend {bname} needs `hash-type consistent` (a gateway leaving moves only its names)")
        servers = {}
        for ln in lines:
            if ln[0] == "server":
                host, _, port = ln[2].rpartition(":")
                servers[host] = port
        if sorted(servers) != gateways:
            problem(f"haproxy.cfg: backend {bname} servers {sorted(servers)} are not the gateway services {gateways}")
        for host, port in servers.items():
            if host in listen and port != listen[host]:
                problem(f"haproxy.cfg: server {host}:{port}, but {host} listens on {listen[host]}")
        check = " ".join(" ".join(ln) for ln in lines if ln[0] in ("http-check", "option"))
        if "uri /readyz" not in check:
            problem(f"haproxy.cfg: backend {bname} should check GET /readyz (drain on SIGTERM, Redis away)")
    binds = {ln[1].rpartition(":")[2] for v in frontends.values() for ln in v if ln[0] == "bind"}
    published = {}  # host port -> container port
    for p in lb.get("ports") or []:
        parts = str(p).split(":")
        published[parts[-2] if len(parts) > 1 else parts[-1]] = parts[-1]
    if published.get("8080") not in binds or not set(published.values()) <= binds:
        problem(f"lb: must publish host port 8080 to the port HAProxy binds ({sorted(binds)}), and no other "
                f"(publishes {published})")

# --- Prometheus and Grafana ---------------------------------------------------------------

prom = services.get("prometheus")
if prom:
    conf = next((a.split("=", 1)[1] for a in prom.get("command") or [] if str(a).startswith("--config.file=")),
                "/etc/prometheus/prometheus.yml")
    path = mounted_file(prom, conf)
    pcfg = load(path) if path and path.exists() else None
    if pcfg is None:
        problem(f"prometheus: no config mounted at {conf}")
        pcfg = {}
    static, dns = set(), {}
    for job in pcfg.get("scrape_configs") or []:
        if job.get("metrics_path", "/metrics") != "/metrics":
            problem(f"prometheus.yml: job {job.get('job_name')}: the binaries serve /metrics")
        for sc in job.get("static_configs") or []:
            static |= set(sc.get("targets") or [])
        for sd in job.get("dns_sd_configs") or []:
            for n in sd.get("names") or []:
                dns[n] = str(sd.get("port"))
    for g in gateways:
        if g in listen and f"{g}:{listen[g]}" not in static:
            problem(f"prometheus.yml: does not scrape {g}:{listen[g]}")
    for w in workers:
        if w in listen and dns.get(w) != listen[w]:
            problem(f"prometheus.yml: scrape the workers with dns_sd_configs names [{w}], port {listen[w]} "
                    f"(every replica answers the service name)")
graf = services.get("grafana")
if graf:
    dash_target = None
    for src, tgt in mounts(graf):
        if (deploy / src).resolve() == (deploy / "grafana").resolve():
            dash_target = tgt
    ds = mounted_file(graf, next((t for s, t in mounts(graf) if "datasources" in t), ""))
    dsc = (load(ds) if ds and ds.exists() else None) or {}
    urls = [d.get("url") for d in dsc.get("datasources") or [] if d.get("type") == "prometheus"]
    if not prom or urls != ["http://prometheus:9090"] or not all(d.get("isDefault") for d in dsc["datasources"]):
        problem(f"grafana: provision one default prometheus data source at http://prometheus:9090 (got {urls})")
    dp = mounted_file(graf, next((t for s, t in mounts(graf) if "provisioning/dashboards" in t), ""))
    dpc = (load(dp) if dp and dp.exists() else None) or {}
    paths = [(p.get("options") or {}).get("path") for p in dpc.get("providers") or []]
    if dash_target is None or paths != [dash_target]:
        problem(f"grafana: mount deploy/grafana and provision it as a dashboards provider path "
                f"(mounted at {dash_target}, providers {paths})")
    home = env_of(graf).get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home and not (mounted_file(graf, home) or deploy / "-").exists():
        problem(f"grafana: GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH {home} is not a mounted file")

for p in problems:
    print(p)
sys.exit(1 if problems else 0)
