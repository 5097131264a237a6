#!/usr/bin/env bash
# End-to-end test of the coordinator's Prometheus endpoint: a coordinator with
# --metrics-listen and --metrics-job-series (per-job series, off by default;
# monitoring_e2e.sh checks the default), an agent with 2 fake GPUs, jobs run
# with the CLI, then scrapes of /metrics. Usage: metrics_e2e.sh BUILD_BIN_DIR
# Every wait is on a condition with a deadline; no fixed sleeps.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init metrics-e2e "${1:-}"
fail() {
  echo "FAIL: $*" >&2
  echo "--- coordinator log" >&2; tail -30 "$WORK/coord.log" >&2 || true
  echo "--- agent log" >&2; tail -30 "$WORK/agent.log" >&2 || true
  echo "--- last scrape" >&2; grep '^trainctl_' "$WORK/metrics.txt" >&2 || true
  exit 1
}


# Port 0 for both: the coordinator prints the ports it bound.
"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --metrics-job-series --state-dir "$WORK/state" --node-timeout 5s >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
line=$(wait_line "$WORK/coord.out" "metrics on port [1-9]") || fail "no metrics port line"
MPORT=${line##* }

# 1. Before any node or job: the state series exist at 0.
wait_metric '^trainctl_jobs\{state="pending"\} 0$' || fail "jobs gauge at start"
grep -qE '^trainctl_nodes\{state="ready"\} 0$' "$WORK/metrics.txt" || fail "nodes gauge at start"
grep -qE '^trainctl_queue_length\{queue="default"\} 0$' "$WORK/metrics.txt" || fail "queue gauge"
grep -q '^# TYPE trainctl_schedule_pass_seconds histogram' "$WORK/metrics.txt" || fail "histogram type"
grep -qE '^trainctl_jobs_submitted_total 0$' "$WORK/metrics.txt" || fail "submitted counter at start"
grep -qE '^trainctl_agent_registrations_total 0$' "$WORK/metrics.txt" || fail "registrations at start"
ok "endpoint up on 127.0.0.1:$MPORT with zeroed state series and counters"

"$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name metrics-node \
  --fake-gpus 2:H200-fake:141GiB --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"

# 2. The node and one series per GPU, labelled with node, gpu, uuid, model.
wait_metric '^trainctl_nodes\{state="ready"\} 1$' || fail "node not ready in metrics"
for i in 0 1; do
  grep -qE "^trainctl_gpu_memory_total_bytes\{gpu=\"$i\",model=\"H200-fake\",node=\"metrics-node\",uuid=\"GPU-fake-metrics-node-$i\"\} [0-9.e+]+$" \
    "$WORK/metrics.txt" || fail "memory total series of GPU $i"
  for m in trainctl_gpu_utilization_ratio trainctl_gpu_memory_used_bytes \
           trainctl_gpu_power_watts trainctl_gpu_temperature_celsius; do
    grep -qE "^$m\{gpu=\"$i\",[^}]*node=\"metrics-node\"[^}]*\} " "$WORK/metrics.txt" ||
      fail "$m of GPU $i"
  done
done
grep -qE '^trainctl_gpus_allocated\{node="metrics-node"\} 0$' "$WORK/metrics.txt" ||
  fail "metrics-node should have no GPU allocated"
grep -qE '^trainctl_agent_registrations_total 1$' "$WORK/metrics.txt" || fail "one registration"
ok "per-GPU series for metrics-node GPUs 0 and 1; none allocated; 1 registration"

# 3. A job runs: a per-job series while it runs, then succeeded=1, and one
#    scheduling pass recorded.
T="$BIN/trainctl"
id=$("$T" submit --name metrics-sleep -- sleep 1000)
[[ $id =~ ^[0-9]+$ ]] || fail "submit printed '$id'"
wait_metric "^trainctl_job_gpu_utilization_ratio\{job_id=\"$id\",job_name=\"metrics-sleep\"\} " ||
  fail "per-job GPU series of job $id"
grep -qE '^trainctl_jobs\{state="(scheduled|running)"\} 1$' "$WORK/metrics.txt" || fail "running job count"
wait_metric '^trainctl_gpus_allocated\{node="metrics-node"\} 1$' || fail "job $id's GPU not allocated"
"$T" cancel "$id" >/dev/null || fail "cancel $id"
did=$("$T" submit --name metrics-done -- true)
"$T" wait "$did" || fail "job $did did not succeed"
wait_metric '^trainctl_jobs\{state="succeeded"\} 1$' || fail "succeeded count"
grep -qE '^trainctl_jobs\{state="cancelled"\} 1$' "$WORK/metrics.txt" || fail "cancelled count"
grep -qE '^trainctl_schedule_pass_seconds_count [1-9][0-9]*$' "$WORK/metrics.txt" ||
  fail "no scheduling pass recorded"
wait_metric '^trainctl_jobs_finished_total\{state="cancelled"\} 1$' || fail "finished counter"
for l in 'trainctl_jobs_submitted_total 2' 'trainctl_job_placements_total 2' \
         'trainctl_jobs_finished_total{state="succeeded"} 1' \
         'trainctl_jobs_finished_total{state="failed"} 0' \
         'trainctl_job_queue_wait_seconds_count 2'; do
  grep -qxF "$l" "$WORK/metrics.txt" || fail "expected '$l'"
done
ok "job $id cancelled and $did succeeded: jobs gauges, counters, schedule and queue-wait histograms"

# 4. Once the jobs' tasks are gone, their series go too.
wait_metric '^trainctl_jobs\{state="succeeded"\} 1$' || fail "scrape"
end=$((SECONDS + 30))
while grep -q "trainctl_job_gpu_utilization_ratio{job_id=\"$id\"" "$WORK/metrics.txt"; do
  ((SECONDS < end)) || fail "series of job $id not removed"
  read -rt 0.2 <> <(:) || true
  wait_metric '^trainctl_jobs' || fail "scrape"
done
ok "per-job series removed after the job ended"

e2e_done
