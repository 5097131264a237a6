#!/usr/bin/env python3
"""Checks of the monitoring files in deploy/ (Grafana dashboard, Prometheus
alert rules) that need no Prometheus or Grafana.

  monitoring_check.py dashboard DASHBOARD.json
      The dashboard is well-formed JSON with what Grafana needs to import it:
      a uid and title, unique panel ids, a grid position and at least one
      PromQL target on every panel but rows, every target on the
      ${datasource} variable. Prints the metric names it uses.
  monitoring_check.py names SCRAPE FILE...
      Every trainctl_* metric name used in FILEs (a dashboard, rule files) is
      one that SCRAPE (the text of a /metrics scrape) has, as a sample name
      or a family in a "# TYPE" line. Names with a suffix of a histogram's
      samples (_bucket, _sum, _count) must have their histogram in SCRAPE.
  monitoring_check.py exprs DASHBOARD.json
      Prints the dashboard's expressions as a Prometheus rule file (one
      recording rule each, Grafana's variables replaced by values), for
      `promtool check rules` to parse the PromQL.
  monitoring_check.py query PROMETHEUS_URL DASHBOARD.json
      Runs every expression of the dashboard (variables replaced as for
      `exprs`) on a Prometheus that scrapes a coordinator: each must return
      at least one series (a label or name that matches nothing returns
      none). Then every rule Prometheus has loaded must have evaluated
      without error.
Exit status 0 when the check passes, 1 with the reasons on stderr when not.
"""
import json
import re
import sys

# Metric names of ours: every series the coordinator exports starts with it.
NAME = re.compile(r"\btrainctl_[a-zA-Z0-9_]*[a-zA-Z0-9]")
# Grafana's variables as the dashboard uses them, and stand-ins PromQL parses.
VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "1m",
    "$__range": "1h",
    "$instance": ".*",
    "$node": ".*",
}


def fail(errors):
    for e in errors[:20]:
        print(f"FAIL: {e}", file=sys.stderr)
    if len(errors) > 20:
        print(f"... and {len(errors) - 20} more", file=sys.stderr)
    sys.exit(1)


def load_dashboard(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        fail([f"{path} is not well-formed JSON: {e}"])


def panels_of(dash):
    """Every panel, those inside collapsed rows included."""
    for p in dash.get("panels", []):
        yield p
        for inner in p.get("panels", []) or []:
            yield inner


def exprs_of(dash):
    """(where, PromQL) of every target and every query variable."""
    for p in panels_of(dash):
        for t in p.get("targets", []) or []:
            if "expr" in t:
                yield f"panel {p.get('id')} '{p.get('title')}' {t.get('refId')}", t["expr"]
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else q
            yield f"variable ${v.get('name')}", q


def check_dashboard(path):
    dash = load_dashboard(path)
    errors = []
    for key in ("uid", "title", "panels", "schemaVersion"):
        if not dash.get(key):
            errors.append(f"no '{key}' at the top level")
    variables = {v.get("name") for v in dash.get("templating", {}).get("list", [])}
    if "datasource" not in variables:
        errors.append("no 'datasource' variable: panels would be bound to one data source uid")
    ids = set()
    for p in panels_of(dash):
        title = p.get("title", "?")
        if not isinstance(p.get("id"), int) or p["id"] in ids:
            errors.append(f"panel '{title}': id {p.get('id')!r} missing or not unique")
        ids.add(p.get("id"))
        grid = p.get("gridPos", {})
        if not all(isinstance(grid.get(k), int) for k in ("h", "w", "x", "y")):
            errors.append(f"panel '{title}': gridPos needs integer h, w, x, y")
        elif grid["x"] + grid["w"] > 24:
            errors.append(f"panel '{title}': wider than Grafana's 24 columns")
        if p.get("type") == "row":
            continue
        if not p.get("type") or not p.get("title"):
            errors.append(f"panel {p.get('id')}: needs a type and a title")
        targets = p.get("targets") or []
        if not targets:
            errors.append(f"panel '{title}': no query")
        for t in targets:
            if not t.get("expr"):
                errors.append(f"panel '{title}' target {t.get('refId')}: no expr")
            ds = t.get("datasource") or p.get("datasource") or {}
            if ds.get("uid") != "${datasource}":
                errors.append(f"panel '{title}': data source {ds!r}, not the ${{datasource}} variable")
        if len({t.get("refId") for t in targets}) != len(targets):
            errors.append(f"panel '{title}': refIds not unique")
    for where, expr in exprs_of(dash):
        for var in re.findall(r"\$\{?[A-Za-z_]+\}?", expr):
            if var not in VARIABLES and var.strip("${}") not in variables:
                errors.append(f"{where}: unknown variable {var}")
    if errors:
        fail([f"{path}: {e}" for e in errors])
    names = sorted({n for _, e in exprs_of(dash) for n in NAME.findall(e)})
    print("\n".join(names))


def exported(scrape_path):
    names = set()
    histograms = set()
    with open(scrape_path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("# TYPE "):
                _, _, family, kind = line.split(maxsplit=3)
                names.add(family)
                if kind.strip() == "histogram":
                    histograms.add(family)
            elif line and not line.startswith("#"):
                m = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line)
                if m:
                    names.add(m.group(0))
    return names, histograms


def used_names(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if path.endswith(".json"):
        dash = json.loads(text)
        text = "\n".join(e for _, e in exprs_of(dash))
    return set(NAME.findall(text))


def check_names(scrape_path, files):
    names, histograms = exported(scrape_path)
    if not any(n.startswith("trainctl_") for n in names):
        fail([f"{scrape_path} has no trainctl_ series: not a coordinator's scrape?"])
    errors = []
    for path in files:
        used = used_names(path)
        if not used:
            errors.append(f"{path} uses no trainctl_ metric at all")
        missing = []
        for n in sorted(used):
            base = re.sub(r"_(bucket|sum|count)$", "", n)
            if n not in names and not (base != n and base in histograms):
                missing.append(n)
        errors += [f"{path} uses {n}, which the coordinator does not export" for n in missing]
        if used and not missing:
            print(f"{path}: {len(used)} metric names, all exported")
    if errors:
        fail(errors)


def print_exprs(path):
    dash = load_dashboard(path)
    print("groups:\n  - name: dashboard-exprs\n    rules:")
    for i, (where, expr) in enumerate(exprs_of(dash)):
        expr = substituted(expr)
        print(f"      # {where}")
        print(f"      - record: dashboard:expr_{i}")
        print(f"        expr: {json.dumps(expr)}")


def substituted(expr):
    if expr.startswith("label_values("):
        # A Grafana function, not PromQL: the selector inside.
        m = re.match(r"label_values\((.*),\s*[a-zA-Z_]+\)$", expr)
        expr = m.group(1) if m else expr
    for var, value in VARIABLES.items():
        expr = expr.replace(var, value)
    return expr


def api(url, path, **params):
    import urllib.parse
    import urllib.request
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}{path}?{query}", timeout=10) as r:
        body = json.load(r)
    if body.get("status") != "success":
        raise RuntimeError(f"{path}: {body.get('error', body)}")
    return body["data"]


def run_queries(url, path):
    dash = load_dashboard(path)
    errors = []
    n = 0
    for where, expr in exprs_of(dash):
        q = substituted(expr)
        n += 1
        try:
            data = api(url, "/api/v1/query", query=q)
        except Exception as e:  # HTTP 400 carries the parse error
            errors.append(f"{where}: {q}: {e}")
            continue
        if not data.get("result"):
            errors.append(f"{where}: no series for {q}")
    rules = 0
    for g in api(url, "/api/v1/rules")["groups"]:
        for r in g["rules"]:
            rules += 1
            if r.get("health") != "ok":
                errors.append(f"rule {r.get('name')}: health {r.get('health')}: {r.get('lastError')}")
    if rules == 0:
        errors.append("Prometheus has loaded no rules")
    if errors:
        fail(errors)
    print(f"{n} dashboard queries returned series; {rules} rules evaluated without error")


def main(argv):
    if len(argv) >= 3 and argv[1] == "dashboard":
        check_dashboard(argv[2])
    elif len(argv) >= 4 and argv[1] == "names":
        check_names(argv[2], argv[3:])
    elif len(argv) == 3 and argv[1] == "exprs":
        print_exprs(argv[2])
    elif len(argv) == 4 and argv[1] == "query":
        run_queries(argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
