#!/usr/bin/env bash
# End-to-end test of the real binaries on loopback: a coordinator, an agent
# with fake GPUs, and the trainctl CLI. Usage: e2e_cli.sh BUILD_BIN_DIR
# Every wait is on a condition (trainctl wait long-polls) with a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init e2e "${1:-}"
start_coordinator 0 --node-timeout 5s
"$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name e2e-node \
  --fake-gpus 2:H200-fake:141GiB --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"
T="$BIN/trainctl"

# 1. An experiment runs and its log comes back.
id=$("$T" submit --name hello -- sh -c 'echo hello from rank $RANK of $WORLD_SIZE')
[[ $id =~ ^[0-9]+$ ]] || fail "submit printed '$id', not a job id"
"$T" wait "$id" || fail "job $id did not succeed"
"$T" logs "$id" | grep -q "hello from rank 0 of 1" || fail "log of job $id"
ok "experiment $id ran and its log came back"

# 2. A 2-rank gang: distinct ranks, one MASTER_ADDR:PORT.
gid=$("$T" submit --gpus 2 -- sh -c 'echo rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT local=$LOCAL_RANK cvd=$CUDA_VISIBLE_DEVICES')
"$T" wait "$gid" || fail "gang $gid did not succeed"
r0=$("$T" logs "$gid" --rank 0); r1=$("$T" logs "$gid" --rank 1)
[[ $r0 == *"rank=0 world=2"* && $r1 == *"rank=1 world=2"* ]] || fail "gang ranks: '$r0' '$r1'"
m0=$(grep -o 'master=[^ ]*' <<<"$r0"); m1=$(grep -o 'master=[^ ]*' <<<"$r1")
[[ -n $m0 && $m0 == "$m1" ]] || fail "ranks disagree on MASTER_ADDR:PORT: '$r0' '$r1'"
[[ $r0 == *"cvd=GPU-fake-e2e-node-0,GPU-fake-e2e-node-1"* ]] || fail "CUDA_VISIBLE_DEVICES: '$r0'"
ok "gang $gid: $r0 | $r1"

# 3. describe -o json is JSON with the job's state and ranks.
"$T" describe "$gid" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
job = j.get("job", j)
assert job["state"] == "JOB_STATE_SUCCEEDED", job["state"]
assert len(job["tasks"]) == 2
' || fail "describe -o json"
ok "describe -o json"

# 4. A failing rank's exit code comes back through wait.
fid=$("$T" submit -- sh -c 'exit 7')
set +e; "$T" wait "$fid" 2>/dev/null; rc=$?; set -e
[[ $rc == 7 ]] || fail "wait of a job exiting 7 returned $rc"
ok "wait returns the rank's exit code (7)"

# 5. Cancel stops a running job.
cid=$("$T" submit -- sleep 1000)
"$T" wait "$cid" --timeout 1s >/dev/null 2>&1 || true
"$T" cancel "$cid" | grep -q "cancelled job $cid" || fail "cancel"
set +e; "$T" wait "$cid" 2>/dev/null; rc=$?; set -e
[[ $rc == 2 ]] || fail "wait of a cancelled job returned $rc, want 2"
ok "cancel"

# 6. Bad input: one clear line naming the field, non-zero exit.
set +e
out=$("$T" submit --gpu-fraction 1.5 -- true 2>&1); rc=$?
set -e
[[ $rc != 0 && $out == *"gpu-fraction"* ]] || fail "bad fraction: rc=$rc '$out'"
set +e; out=$("$T" submit --priority 5000 -- true 2>&1); rc=$?; set -e
[[ $rc != 0 && $out == *"spec.priority"* && $(wc -l <<<"$out") == 1 ]] || fail "server-side validation: rc=$rc '$out'"
set +e; out=$("$T" describe 999999 2>&1); rc=$?; set -e
[[ $rc != 0 && $out == *"999999"* ]] || fail "unknown job: rc=$rc '$out'"
set +e; out=$(TRAINCTL_COORDINATOR=127.0.0.1:1 "$T" list 2>&1); rc=$?; set -e
[[ $rc != 0 && $out == *"cannot reach the coordinator"* ]] || fail "unreachable: rc=$rc '$out'"
ok "bad input and errors: one line, non-zero exit"

# 7. nodes shows the fake GPUs.
"$T" nodes | grep -q "H200-fake" || fail "nodes"
"$T" nodes -o json | python3 -c 'import json,sys; n=json.load(sys.stdin)["nodes"]; assert len(n[0]["node"]["gpus"])==2' || fail "nodes -o json"
ok "nodes"

# 8. A 2x2 grid sweep: 4 trials sharing a sweep id, each with its values.
sw=$("$T" sweep --name grid --grid lr=1e-3,3e-4 --grid bs=64,128 -- sh -c 'echo lr={lr} bs={bs}' 2>/dev/null)
[[ $sw =~ ^sw-[0-9a-f]{8}$ ]] || fail "sweep printed '$sw', not a sweep id"
trials=$("$T" sweep describe "$sw" -o json | python3 -c 'import json,sys; print(" ".join(str(j["id"]) for j in json.load(sys.stdin)["jobs"]))')
for j in $trials; do "$T" wait "$j" 2>/dev/null || fail "trial $j of sweep $sw"; done
# Trials are submitted concurrently, so job ids need not follow trial order:
# find the last trial (grid-3) by its name.
last=$("$T" sweep describe "$sw" -o json | python3 -c 'import json,sys; print([j["id"] for j in json.load(sys.stdin)["jobs"] if j["spec"]["name"] == "grid-3"][0])')
"$T" logs "$last" | grep -q "lr=3e-4 bs=128" || fail "last trial's log: $("$T" logs "$last")"
out=$("$T" sweep describe "$sw")
[[ $(grep -c " succeeded " <<<"$out") == 4 && $out == *"bs"*"lr"*"EXIT"* ]] || fail "sweep describe: '$out'"
"$T" sweep list | grep -Eq "^$sw +4 +0 +0 +4 " || fail "sweep list: '$("$T" sweep list)'"
ok "sweep $sw: 4 trials succeeded"

# 9. The coordinator dies (SIGKILL) and comes back: every job is still there,
#    the agent reconnects and new work runs.
kill -9 "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
start_coordinator "$PORT" --node-timeout 5s
n=$("$T" list -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin).get("jobs", [])))')
[[ $n == 8 ]] || fail "after restart: $n jobs listed, want 8"
[[ $("$T" sweep describe "$sw" | grep -c " succeeded ") == 4 ]] || fail "sweep $sw after restart"
rid=$("$T" submit -- echo after-restart)
"$T" wait "$rid" || fail "job after restart"
"$T" logs "$rid" | grep -q after-restart || fail "log after restart"
ok "coordinator SIGKILL + restart: 8 jobs kept, agent reconnected, job $rid ran"

e2e_done
