#!/usr/bin/env bash
# Node identity and per-cluster task files, real binaries on loopback:
#  1. a second agent started under a node name whose agent is connected is
#     refused: it exits non-zero naming the holder's address, and the job
#     running on that node is untouched;
#  2. task logs are mode 0600;
#  3. a new cluster (a fresh state dir, so job ids start at 1 again) whose
#     agent keeps the same --log-dir never shows the old cluster's job 1 log
#     under its own job 1.
# Usage: identity_e2e.sh BUILD_BIN_DIR. Every wait polls with a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init identity "${1:-}"

start_coordinator() {  # STATE_DIR LOG
  "$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$1" \
    --heartbeat 200ms >"$WORK/$2.out" 2>>"$WORK/$2.log" &
  COORD=$!
  PIDS+=($!)
  local line
  line=$(wait_line "$WORK/$2.out" "listening on port") || fail "coordinator did not start"
  export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
}
start_agent() {  # NAME LOG_DIR LOG
  "$BIN/trainctl-agent" --node-name "$1" --fake-gpus 1:H100-fake:80GiB \
    --log-dir "$2" >"$WORK/$3.log" 2>&1 &
  AGENT=$!
  PIDS+=($!)
}

start_coordinator "$WORK/state-a" coord-a
start_agent n1 "$WORK/logs" agent-a
wait_line "$WORK/agent-a.log" "registered with the coordinator" >/dev/null ||
  fail "agent n1 did not register"
first_agent=$AGENT

job=$("$BIN/trainctl" submit --name secret -- sh -c 'echo secret-of-cluster-a; sleep 2' |
  grep -oE '[0-9]+' | head -1)
[[ $job == 1 ]] || fail "expected job 1 in a new cluster, got '$job'"

# A second agent under the same name, as two agents on one host without
# --node-name would be.
start_agent n1 "$WORK/logs-intruder" intruder
end=$((SECONDS + 30))
while kill -0 "$AGENT" 2>/dev/null && ((SECONDS < end)); do read -rt 0.1 <> <(:) || true; done
kill -0 "$AGENT" 2>/dev/null && fail "the second agent named n1 is still running"
set +e; wait "$AGENT"; rc=$?; set -e
((rc != 0)) || fail "the second agent exited 0"
grep -q "held by the connected agent at" "$WORK/intruder.log" ||
  fail "the second agent did not say who holds n1"
ok "a second agent named n1 was refused (exit $rc): $(grep -o 'node name n1 is held[^:]*' "$WORK/intruder.log" | head -1)"

"$BIN/trainctl" wait "$job" >/dev/null || fail "job $job did not succeed after the intruder"
ok "job $job on n1 ran to success, untouched"

log=$(find "$WORK/logs" -name "job-1.attempt-0.rank-0.log")
[[ -n $log ]] || fail "no log file for job 1 under $WORK/logs"
mode=$(stat -c %a "$log")
[[ $mode == 600 ]] || fail "log $log has mode $mode, want 600"
ok "task log is owner-only ($mode): ${log#"$WORK"/}"

# A new cluster: new state dir, the same agent log dir.
kill "$first_agent" "$COORD"
wait "$first_agent" "$COORD" 2>/dev/null || true
start_coordinator "$WORK/state-b" coord-b
start_agent n1 "$WORK/logs" agent-b
wait_line "$WORK/agent-b.log" "registered with the coordinator" >/dev/null ||
  fail "agent n1 did not register with the new cluster"
job=$("$BIN/trainctl" submit -- echo output-of-cluster-b | grep -oE '[0-9]+' | head -1)
[[ $job == 1 ]] || fail "expected job 1 in the new cluster, got '$job'"
"$BIN/trainctl" wait "$job" >/dev/null || fail "job 1 of the new cluster failed"
out=$("$BIN/trainctl" logs 1)
[[ $out == *output-of-cluster-b* ]] || fail "new job 1's log lacks its output: $out"
[[ $out != *secret-of-cluster-a* ]] || fail "new job 1's log shows the old cluster's job 1: $out"
ok "the new cluster's job 1 shows only its own output"
e2e_done
