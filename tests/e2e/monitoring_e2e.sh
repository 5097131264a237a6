#!/usr/bin/env bash
# The monitoring files against a live coordinator (real binaries on loopback):
# a coordinator with --metrics-listen and its defaults, two agents with one
# fake GPU each, and jobs that leave a mark on every counter: a 2-node gang
# (pre-flight passes; succeeds), a job that fails twice (one restart), a job
# cancelled while it runs. Then, on a scrape of /metrics:
#   default:    no series has a per-job label (job_id, job_name); the new
#               counters and gauges hold what happened;
#               deploy/grafana/trainctl-dashboard.json is well-formed JSON
#               Grafana can import (deploy/monitoring_check.py dashboard);
#               every trainctl_* metric that the dashboard and
#               deploy/prometheus/trainctl-alerts.yml use is in the scrape;
#   --promtool: the scrape passes `promtool check metrics` (exposition format
#               and Prometheus' naming rules); exits 77 (skipped) at once
#               where promtool is not installed;
#   --prometheus: a real Prometheus (same Debian package) scrapes the
#               coordinator every second with the alert rules loaded: every
#               dashboard query returns series (no label or name that
#               matches nothing) and every rule evaluates without error;
#               exits 77 where prometheus is not installed.
# Usage: monitoring_e2e.sh BUILD_BIN_DIR [--promtool|--prometheus] (BUILD_BIN_DIR also
# holds trainctl-fake-preflight-probe, what fake-GPU agents probe with).
# Every wait is on a condition with a deadline; no fixed sleeps.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
MODE=${2:-}
case $MODE in
  "") ;;
  --promtool | --prometheus)
    if ! command -v "${MODE#--}" >/dev/null; then
      echo "SKIP: ${MODE#--} not found (Debian package prometheus; deploy/install-deps.sh installs it)"
      exit 77
    fi
    ;;
  *) echo "usage: $0 BUILD_BIN_DIR [--promtool|--prometheus]" >&2; exit 2 ;;
esac
e2e_init monitoring "${1:-}"

# has LINE: the last scrape has exactly this line.
has() { grep -qxF "$1" "$WORK/metrics.txt"; }

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --state-dir "$WORK/state" --stop-grace 1s >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
line=$(wait_line "$WORK/coord.out" "metrics on port [1-9]") || fail "no metrics port line"
MPORT=${line##* }
for n in mon-1 mon-2; do
  "$BIN/trainctl-agent" --node-name "$n" \
    --fake-gpus 1:H100-fake:80GiB --log-dir "$WORK/logs-$n" >"$WORK/agent-$n.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent-$n.log" "registered with the coordinator" >/dev/null ||
    fail "agent $n did not register"
done
T="$BIN/trainctl"

# 1. A 2-node gang: pre-flight (fake probes pass), then it succeeds.
gang=$("$T" submit --name mon-gang --nodes 2 --gpus-per-node 1 -- true)
"$T" wait "$gang" --timeout 60s >/dev/null || fail "gang $gang did not succeed"
# 2. Fails, restarts once, fails again: FAILED.
bad=$("$T" submit --name mon-bad --max-restarts 1 -- false)
rc=0
"$T" wait "$bad" --timeout 60s >/dev/null || rc=$?
((rc == 1)) || fail "job $bad should have failed with its rank's exit code 1, got $rc"
# 3. Holds one GPU while it runs, then is cancelled.
slow=$("$T" submit --name mon-slow -- sleep 1000)
wait_metric '^trainctl_jobs\{state="running"\} 1$' || fail "job $slow not running in metrics"
wait_metric '^trainctl_gpus_allocated\{node="mon-[12]"\} 1$' || fail "no GPU allocated to job $slow"
[[ $(grep -c '^trainctl_gpus_allocated{node="mon-[12]"} 0$' "$WORK/metrics.txt") == 1 ]] ||
  fail "the other node's GPU should be free"
ok "trainctl_gpus_allocated: 1 GPU held on one node, 0 on the other"
"$T" cancel "$slow" >/dev/null || fail "cancel $slow"

wait_metric '^trainctl_jobs_finished_total\{state="cancelled"\} 1$' || fail "cancelled count"
for l in 'trainctl_jobs_submitted_total 3' \
         'trainctl_jobs_finished_total{state="succeeded"} 1' \
         'trainctl_jobs_finished_total{state="failed"} 1' \
         'trainctl_job_placements_total 4' \
         'trainctl_job_restarts_total{reason="failure"} 1' \
         'trainctl_job_restarts_total{reason="out_of_memory"} 0' \
         'trainctl_preemptions_total 0' \
         'trainctl_preflight_runs_total{verdict="passed"} 1' \
         'trainctl_preflight_runs_total{verdict="failed"} 0' \
         'trainctl_agent_registrations_total 2'; do
  has "$l" || fail "expected '$l' in the scrape"
done
grep -qE '^trainctl_job_queue_wait_seconds_count 4$' "$WORK/metrics.txt" ||
  fail "4 placements, 4 queue waits expected"
ok "counters: 3 submitted, 1 succeeded/failed/cancelled each, 4 placements, 1 restart, 1 pre-flight passed, 2 registrations"

if grep -E '^trainctl_' "$WORK/metrics.txt" | grep -qE 'job_id=|job_name='; then
  fail "a series has a per-job label without --metrics-job-series: $(grep -E 'job_id=|job_name=' "$WORK/metrics.txt" | head -3)"
fi
ok "no per-job label on any series by default"

if [[ $MODE == --promtool ]]; then
  out=$(promtool check metrics <"$WORK/metrics.txt" 2>&1) ||
    fail "promtool check metrics:
$out"
  ok "promtool check metrics: the scrape of a live coordinator passes"
  e2e_done
  exit 0
fi

D=$SRC/deploy
if [[ $MODE == --prometheus ]]; then
  PPORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  cat >"$WORK/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: ["$D/prometheus/trainctl-alerts.yml"]
scrape_configs:
  - job_name: trainctl
    static_configs: [{targets: ["127.0.0.1:$MPORT"]}]
YML
  prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
    --web.listen-address="127.0.0.1:$PPORT" --log.level=warn >"$WORK/prometheus.log" 2>&1 &
  PIDS+=($!)
  # Three scrapes in, so rate() over the dashboard's windows has samples.
  end=$((SECONDS + 60))
  until curl -sfG --max-time 5 "http://127.0.0.1:$PPORT/api/v1/query" \
      --data-urlencode 'query=count_over_time(trainctl_jobs_submitted_total[1m]) >= 3' 2>/dev/null |
      grep -q '"result":\[{'; do
    ((SECONDS < end)) || fail "Prometheus on port $PPORT did not scrape the coordinator 3 times in 60 s"
    read -rt 0.2 <> <(:) || true
  done
  out=$("$D/monitoring_check.py" query "http://127.0.0.1:$PPORT" \
    "$D/grafana/trainctl-dashboard.json" 2>&1) ||
    fail "dashboard queries or rules on a live Prometheus:
$out"
  ok "Prometheus scraping the coordinator: $out"
  e2e_done
  exit 0
fi

names=$("$D/monitoring_check.py" dashboard "$D/grafana/trainctl-dashboard.json") ||
  fail "deploy/grafana/trainctl-dashboard.json failed its checks"
ok "trainctl-dashboard.json: well-formed, $(wc -l <<<"$names") metric names"
out=$("$D/monitoring_check.py" names "$WORK/metrics.txt" \
  "$D/grafana/trainctl-dashboard.json" "$D/prometheus/trainctl-alerts.yml" 2>&1) ||
  fail "a metric of the dashboard or the rules is not exported:
$out"
ok "every metric the dashboard and the alert rules use is in the live scrape"

e2e_done
