#!/usr/bin/env bash
# End-to-end test of telemetry and auto-packing with the real binaries: a
# coordinator sampling usage every 200 ms with a 1 s packing settle time, an
# agent with one fake GPU, a 3-trial `sweep --auto-pack`; the packer admits
# the trials one at a time onto the one GPU, `trainctl top --once` (table and
# JSON) shows them, `describe` prints the utilization section.
# Usage: top_e2e.sh BUILD_BIN_DIR. Every wait is on a condition with a
# deadline; no fixed sleeps.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init top-e2e "${1:-}"

# wait_cmd REGEX CMD...: runs CMD until its output matches REGEX (30 s).
wait_cmd() {
  local regex=$1 end=$((SECONDS + 30))
  shift
  while ((SECONDS < end)); do
    if "$@" >"$WORK/out.txt" 2>&1 && grep -qE "$regex" "$WORK/out.txt"; then return 0; fi
    read -rt 0.2 <> <(:) || true
  done
  return 1
}

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  --usage-sample 200ms --auto-pack-settle 1s >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
"$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name top-node \
  --fake-gpus 1:H100-fake:80GiB --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"

"$BIN/trainctl" sweep --auto-pack --sweep-id sw-top --grid i=1,2,3 -- sleep 60 \
  >"$WORK/sweep.log" 2>&1 || fail "sweep submit"
ok "3-trial --auto-pack sweep submitted"

# All three end up on GPU 0, admitted one settle period apart.
wait_cmd '^top-node +0 .* 1,2,3$' "$BIN/trainctl" top --once || fail "top never showed 3 trials on GPU 0"
grep -q 'nodes 1/1 ready  GPUs 1' "$WORK/out.txt" || fail "top header"
ok "top --once: GPU 0 of top-node runs jobs 1,2,3"
for k in 1 2 3; do
  grep -q "goes to GPU 0 on top-node as trial $k there" "$WORK/coord.log" ||
    fail "no packer admission of trial $k in the coordinator log"
done
ok "the packer admitted the trials one at a time (trial 1 took the empty GPU)"

# The JSON frame parses and has the jobs' histories.
wait_cmd '"job_name": "sw-top-2"' "$BIN/trainctl" top --once -o json || fail "top -o json"
python3 -c 'import json,sys; f=json.load(open(sys.argv[1])); assert len(f["nodes"][0]["gpu_tasks"][0]["tasks"]) == 3; assert any(j["samples"] for j in f["jobs"])' \
  "$WORK/out.txt" || fail "top JSON frame"
ok "top --once -o json: a TopFrame with 3 tasks on the GPU and usage samples"

wait_cmd 'Utilization over the last' "$BIN/trainctl" describe 1 || fail "describe utilization"
grep -q 'Auto-pack:   on' "$WORK/out.txt" || fail "describe auto-pack line"
ok "describe: auto-pack and the utilization section"

"$BIN/trainctl" sweep cancel sw-top >/dev/null 2>&1 || fail "sweep cancel"
e2e_done
