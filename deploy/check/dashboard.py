"""Checks the Grafana dashboard against the metrics the binaries expose.

Usage: python dashboard.py DASHBOARD.json METRICS.txt REPO_ROOT RULES_OUT.yaml

- DASHBOARD.json must be valid JSON with the layout Grafana provisioning and import expect:
  a `DS_PROMETHEUS` datasource variable that every panel and query uses, a `queue` variable
  from label_values(mcpt_queue_length, queue_name), unique panel ids and refIds, panels
  inside the 24-column grid.
- Every query is parsed as PromQL (PyPI promql-parser) after Grafana's variables are
  replaced, and may use only the metrics of METRICS.txt (a histogram as _bucket, _sum or
  _count), only their labels (plus job, instance, and le on _bucket), only the values
  METRICS.txt lists for a label; counters and histograms only under rate()/increase(),
  gauges never; histogram_quantile() over _bucket series grouped by le; legends only with
  labels the query returns.
- METRICS.txt must name exactly the instruments of REPO_ROOT/shared/src/metrics.rs (as
  Prometheus names them), and each label (and listed value) must appear as a string in the
  Rust sources: a drift alarm, not a proof.
- RULES_OUT.yaml: every query as a Prometheus recording rule, for `promtool check rules`
  (Prometheus' own parser, a second opinion).

Prints one "dashboard: problem" line per problem; exits 1 if any.
"""

import json
import pathlib
import re
import sys

import promql_parser as pq

dash_path, metrics_path, repo, rules_out = sys.argv[1:5]
problems = []


def problem(msg):
    problems.append(f"dashboard: {msg}")


# --- metrics.txt ------------------------------------------------------------------------

KINDS = ("counter", "gauge", "histogram")
HIST_PARTS = ("_bucket", "_sum", "_count")
metrics = {}  # name -> (kind, {label: set of values or None})
for n, line in enumerate(open(metrics_path), 1):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, kind, *labels = line.split()
    if kind not in KINDS or not re.fullmatch(r"mcpt_[a-z_]+", name):
        problem(f"{metrics_path}:{n}: expected 'mcpt_NAME counter|gauge|histogram LABEL...'")
        continue
    metrics[name] = (kind, {})
    for label in labels:
        key, _, values = label.partition("=")
        metrics[name][1][key] = set(values.split("|")) if values else None

series = {}  # every series name a query may select -> (base metric, part)
for name, (kind, _) in metrics.items():
    if kind == "histogram":
        for part in HIST_PARTS:
            series[name + part] = (name, part)
    else:
        series[name] = (name, "")

# metrics.txt against the instruments in shared/src/metrics.rs.
src = pathlib.Path(repo) / "shared" / "src" / "metrics.rs"
if not src.exists():
    problem(f"{src} not found: cannot compare check/metrics.txt with the instruments")
else:
    text = src.read_text()
    derived = {}
    for m in re.finditer(r'(\w+)\(\s*"(mcpt\.[\w.]+)"', text):
        method, inst = m[1], m[2]
        # An OTel builder (`u64_counter("…")…build()`) carries its unit in its chain; a
        # helper of metrics.rs (`counter("…", "…")`) builds unitless instruments.
        raw = re.match(r"[uif]64_", method)
        builder = text[m.end():text.find(".build()", m.end())] if raw else ""
        unit = re.search(r'\.with_unit\("([^"]*)"\)', builder)
        unit = unit[1] if unit else ""
        base = inst.replace(".", "_") + {"": "", "s": "_seconds"}.get(unit, f"_UNIT({unit})")
        if "up_down" in method or "gauge" in method:
            derived[base] = "gauge"
        elif "histogram" in method:
            derived[base] = "histogram"
        elif "counter" in method:
            derived[base + "_total"] = "counter"
        else:
            problem(f"metrics.rs: cannot tell the kind of {inst} (built by {method})")
    if not derived:
        problem("metrics.rs: found no mcpt.* instruments; has the file changed shape?")
    for name in sorted(derived.keys() - metrics.keys()):
        problem(f"metrics.rs has {name} ({derived[name]}), check/metrics.txt does not")
    for name in sorted(metrics.keys() - derived.keys()):
        problem(f"check/metrics.txt has {name}, metrics.rs has no such instrument")
    for name in sorted(derived.keys() & metrics.keys()):
        if derived[name] != metrics[name][0]:
            problem(f"{name}: metrics.rs makes it a {derived[name]}, check/metrics.txt says {metrics[name][0]}")
    # Every product crate: shared/, shared/protocol/, shared/store/, gateway/, worker/.
    code = "".join(p.read_text() for d in ("shared", "gateway", "worker")
                   for p in (pathlib.Path(repo) / d).rglob("src/**/*.rs"))
    for label in sorted({lab for _, labels in metrics.values() for lab in labels}):
        if f'"{label.replace("_", ".")}"' not in code and f'"{label}"' not in code:
            problem(f"check/metrics.txt label {label}: no source file sets an attribute of that name")
    for value in sorted({v for _, labels in metrics.values() for vs in labels.values() if vs for v in vs}):
        if f'"{value}"' not in code:
            problem(f"check/metrics.txt label value {value!r}: appears in no source file as a string")

# --- dashboard layout -------------------------------------------------------------------

try:
    dash = json.load(open(dash_path))
except ValueError as e:
    print(f"dashboard: {dash_path} is not valid JSON: {e}")
    sys.exit(1)

for key in ("title", "uid", "schemaVersion", "panels", "templating"):
    if key not in dash:
        problem(f"no top-level {key}")
if not isinstance(dash.get("schemaVersion"), int) or not 36 <= dash["schemaVersion"] <= 41:
    problem(f"schemaVersion {dash.get('schemaVersion')!r}: expected 36..41 (Grafana 9.4..12)")

variables = {v.get("name"): v for v in (dash.get("templating") or {}).get("list", [])}
ds_var = variables.get("DS_PROMETHEUS") or {}
if ds_var.get("type") != "datasource" or ds_var.get("query") != "prometheus":
    problem("templating needs DS_PROMETHEUS: a variable of type datasource with query prometheus")
DS = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
queue = variables.get("queue") or {}
queue_query = queue.get("query")
if isinstance(queue_query, dict):
    queue_query = queue_query.get("query")
if (queue.get("type") != "query" or queue.get("datasource") != DS
        or re.sub(r"\s", "", queue_query or "") != "label_values(mcpt_queue_length,queue_name)"):
    problem("templating needs queue: a query variable label_values(mcpt_queue_length, queue_name) on ${DS_PROMETHEUS}")
if queue and not (queue.get("multi") and queue.get("includeAll")):
    problem("the queue variable should allow several values and All (queries match it with =~)")


def all_panels(panels):
    for p in panels:
        yield p
        yield from all_panels(p.get("panels") or [])


ids = {}
queries = []  # (panel title, target)
for p in all_panels(dash.get("panels") or []):
    title = p.get("title") or f"panel {p.get('id')}"
    if p.get("id") in ids:
        problem(f"{title}: id {p.get('id')} is also used by {ids[p['id']]}")
    ids[p.get("id")] = title
    g = p.get("gridPos") or {}
    if not all(isinstance(g.get(k), int) for k in "hwxy") or g["x"] < 0 or g["x"] + g["w"] > 24:
        problem(f"{title}: gridPos {g} is not inside the 24-column grid")
    if p.get("type") == "row":
        continue
    if p.get("datasource") != DS:
        problem(f"{title}: panel datasource must be {DS}")
    targets = p.get("targets") or []
    if not targets:
        problem(f"{title}: no queries")
    refs = [t.get("refId") for t in targets]
    if len(set(refs)) != len(refs) or None in refs:
        problem(f"{title}: refIds must be present and unique ({refs})")
    for t in targets:
        if t.get("datasource", DS) != DS:
            problem(f"{title} {t.get('refId')}: query datasource must be {DS}")
        queries.append((title, t))

# --- queries ----------------------------------------------------------------------------

EXTRA = {"job", "instance"}  # added by Prometheus when it scrapes
RANGE_FUNCS = {"rate", "increase", "irate"}


def substitute(expr, where):
    """Grafana's variables replaced by what PromQL can parse."""
    for m in re.finditer(r'(\w+)\s*(=~|!~|=|!=)\s*"[^"]*\$\{?queue\b', expr):
        if m[2] not in ("=~", "!~") or m[1] != "queue_name":
            problem(f"{where}: $queue (multi-value, All = .*) must be matched as queue_name=~\"$queue\"")
    out = re.sub(r"\$\{?__(rate_interval|interval|range)(_ms|_s)?\}?", "5m", expr)
    out = re.sub(r"\$\{queue(:\w+)?\}|\$queue\b", ".*", out)
    if "$" in out:
        problem(f"{where}: unknown Grafana variable in {expr!r}")
    return out


def check_selector(vs, where, in_range):
    """A vector selector; returns its output labels."""
    name = vs.name
    if not name:
        problem(f"{where}: selector without a metric name: {vs}")
        return set()
    if name not in series:
        hint = " (a histogram: use _bucket, _sum or _count)" if name in metrics else ""
        problem(f"{where}: metric {name} is not in check/metrics.txt{hint}")
        return set()
    base, part = series[name]
    kind, labels = metrics[base]
    allowed = set(labels) | EXTRA | ({"le"} if part == "_bucket" else set())
    for m in vs.matchers.matchers:
        if m.name == "__name__":
            continue
        if m.name not in allowed:
            problem(f"{where}: {name} has no label {m.name} (it has {', '.join(sorted(allowed))})")
            continue
        values = labels.get(m.name)
        if values is None:
            continue
        op = str(m.op).rsplit(".", 1)[-1]
        if op in ("Equal", "NotEqual"):
            wanted = {m.value}
        elif re.fullmatch(r"[\w/]+(\|[\w/]+)*", m.value):
            wanted = set(m.value.split("|"))
        else:
            wanted = set()  # a real regex: nothing to check
        for v in sorted(wanted - values):
            problem(f"{where}: {name}{{{m.name}}} is never {v!r} (values: {', '.join(sorted(values))})")
    counting = kind == "counter" or kind == "histogram"
    if counting and not in_range:
        problem(f"{where}: {name} is a {kind}{' part' if part else ''}: use it under rate() or increase()")
    if kind == "gauge" and in_range:
        problem(f"{where}: {name} is a gauge: rate()/increase() of it means nothing")
    return allowed


def labels_of(node, where, in_range=False):
    """Check node; return the labels its result series carry."""
    if isinstance(node, pq.VectorSelector):
        return check_selector(node, where, in_range)
    if isinstance(node, pq.MatrixSelector):
        return check_selector(node.vector_selector, where, in_range)
    if isinstance(node, (pq.ParenExpr, pq.UnaryExpr)):
        return labels_of(node.expr, where, in_range)
    if isinstance(node, pq.SubqueryExpr):
        return labels_of(node.expr, where, in_range)
    if isinstance(node, (pq.NumberLiteral, pq.StringLiteral)):
        return set()
    if isinstance(node, pq.Call):
        fn = node.func.name
        args = list(node.args)
        if fn in RANGE_FUNCS:
            return labels_of(args[0], where, True)
        if fn == "histogram_quantile":
            inner = labels_of(args[1], where, in_range)
            buckets = []
            pq.walk(args[1], lambda n: buckets.append(n.name) if isinstance(n, pq.VectorSelector) else None)
            if not buckets or not all(b.endswith("_bucket") for b in buckets):
                problem(f"{where}: histogram_quantile() needs _bucket series (got {buckets})")
            if "le" not in inner:
                problem(f"{where}: histogram_quantile() over series without le: keep le in the by () clause")
            return inner - {"le"}
        if fn == "vector":
            return set()
        out = set()
        for a in args:
            out |= labels_of(a, where, in_range)
        return out
    if isinstance(node, pq.AggregateExpr):
        inner = labels_of(node.expr, where, in_range)
        mod = node.modifier
        if mod is None:
            return set()
        wanted = set(mod.labels)
        for lab in sorted(wanted - inner):
            problem(f"{where}: {node.op} by ({lab}): no series under it has that label")
        if mod.type == pq.AggModifierType.By:
            return wanted
        return inner - wanted
    if isinstance(node, pq.BinaryExpr):
        lhs = labels_of(node.lhs, where, in_range)
        rhs = labels_of(node.rhs, where, in_range)
        matching = node.modifier.matching if node.modifier else None
        if str(node.op) in ("or", "and", "unless"):
            return lhs | rhs if str(node.op) == "or" else lhs
        if matching is None and lhs and rhs and lhs != rhs:
            problem(f"{where}: {node.op} between series with different labels ({sorted(lhs)} vs {sorted(rhs)}) matches nothing")
        return lhs or rhs
    problem(f"{where}: cannot check a {type(node).__name__}")
    return set()


rules = []
for title, t in queries:
    where = f"{title} {t.get('refId')}"
    expr = t.get("expr")
    if not expr:
        problem(f"{where}: no expr")
        continue
    promql = substitute(expr, where)
    try:
        ast = pq.parse(promql)
    except ValueError as e:
        problem(f"{where}: PromQL does not parse: {e}: {expr}")
        continue
    out = labels_of(ast, where)
    for lab in re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat") or ""):
        if lab not in out:
            problem(f"{where}: legend uses {{{{{lab}}}}}, the query returns only {sorted(out) or 'no labels'}")
    rules.append(promql)

with open(rules_out, "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for i, promql in enumerate(rules):
        f.write(f"      - record: dashboard:query_{i}\n        expr: {json.dumps(promql)}\n")

if not queries:
    problem("no queries found")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
