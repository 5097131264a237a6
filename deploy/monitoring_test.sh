#!/usr/bin/env bash
# Checks the monitoring files in deploy/ with promtool (Debian's `prometheus`
# package, deploy/install-deps.sh):
#   1. promtool check rules deploy/prometheus/trainctl-alerts.yml;
#   2. promtool test rules: the alerts' unit tests
#      (deploy/prometheus/trainctl-alerts_test.yml) fire and stay quiet when
#      they should, annotations rendered;
#   3. promtool check config deploy/prometheus/prometheus.yml (the example
#      that loads the rules);
#   4. every PromQL expression of deploy/grafana/trainctl-dashboard.json
#      parses (as recording rules through promtool check rules).
# The dashboard's JSON and the metric names of both files are checked against
# a live coordinator by tests/e2e/monitoring_e2e.sh, which needs no promtool.
# Exits 77 (skipped) where promtool is not installed.
# Usage: deploy/monitoring_test.sh
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PROMTOOL=${PROMTOOL:-$(command -v promtool || true)}
if [[ -z $PROMTOOL ]]; then
  echo "SKIP: promtool not found (Debian package prometheus; deploy/install-deps.sh installs it)"
  exit 77
fi
WORK=$(mktemp -d /tmp/trainctl-monitoring.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
pass=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
fail() { echo "FAIL: $*" >&2; exit 1; }
D=$SRC/deploy

out=$("$PROMTOOL" check rules "$D/prometheus/trainctl-alerts.yml" 2>&1) ||
  fail "promtool check rules trainctl-alerts.yml: $out"
ok "promtool check rules: $(grep -o '[0-9]* rules found' <<<"$out")"

out=$(cd "$D/prometheus" && "$PROMTOOL" test rules trainctl-alerts_test.yml 2>&1) ||
  fail "promtool test rules trainctl-alerts_test.yml:
$out"
ok "promtool test rules: every alert fires and stays quiet as its unit tests say"

out=$("$PROMTOOL" check config "$D/prometheus/prometheus.yml" 2>&1) ||
  fail "promtool check config prometheus.yml: $out"
ok "promtool check config: the example prometheus.yml loads the rules"

"$D/monitoring_check.py" exprs "$D/grafana/trainctl-dashboard.json" >"$WORK/exprs.yml" ||
  fail "cannot read the dashboard's expressions"
out=$("$PROMTOOL" check rules "$WORK/exprs.yml" 2>&1) ||
  fail "a dashboard expression does not parse as PromQL:
$out"
ok "every dashboard expression parses as PromQL ($(grep -o '[0-9]* rules found' <<<"$out"))"

echo "$pass passed, 0 failed"
