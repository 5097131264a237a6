#!/usr/bin/env bash
# One GPU, one job on a cluster of unlike GPUs, with the real binaries on
# loopback: a coordinator and two agents with fake GPUs of different sizes
# (2 x H100 80 GiB, 2 x A100 40 GiB), the trainctl CLI.
#  1. a whole-GPU gang over both nodes (--allow-mixed-gpu-types: by default
#     a gang keeps to one GPU type) holds every GPU whole: a
#     --gpu-fraction 0.5 job waits while it runs (it ran on an H100 the gang
#     held, the gang having reserved 40 GiB of each GPU), and runs after;
#  2. the gang's attempt counts 4 GPUs (it was billed as 3);
#  3. sizes of 0, negative or NaN are refused by the CLI naming the flag;
#     requests no node can serve (--cpus without task cgroups anywhere,
#     --image without a container runtime anywhere) are refused at submit
#     with the reason.
# Usage: unlike_gpus_e2e.sh BUILD_BIN_DIR. Every wait is on a condition with
# a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init unlike "${1:-}"
"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  >"$WORK/coord.out" 2>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
for spec in big:2:H100:80GiB small:2:A100:40GiB; do
  node=${spec%%:*}
  "$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name "$node" \
    --fake-gpus "${spec#*:}" --cgroups off --container-runtime none \
    --log-dir "$WORK/logs-$node" >"$WORK/agent-$node.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent-$node.log" "registered with the coordinator" >/dev/null ||
    fail "agent $node did not register"
done
T="$BIN/trainctl"

# 1. The gang holds every GPU whole; the share waits for it.
gid=$("$T" submit --nodes 2 --gpus-per-node 2 --allow-mixed-gpu-types --no-preflight -- sleep 300)
wait_state "$gid" JOB_STATE_RUNNING
fid=$("$T" submit --gpu-fraction 0.5 -- true)
[[ $(state "$fid") == JOB_STATE_PENDING ]] || fail "the 0.5 share is $(state "$fid") while the gang holds every GPU: $("$T" nodes)"
"$T" nodes -o json | python3 -c '
import json, sys
for n in json.load(sys.stdin)["nodes"]:
    for gpu, tasks in zip(n["node"]["gpus"], n.get("gpuTasks", n.get("gpu_tasks", []))):
        held = sum(int(t.get("reservedBytes", t.get("reserved_bytes", 0))) for t in tasks.get("tasks", []))
        assert held == int(gpu.get("memoryTotalBytes", gpu.get("memory_total_bytes"))), (n["node"]["name"], gpu, tasks)
' || fail "trainctl nodes does not show each GPU held whole: $("$T" nodes -o json)"
ok "the 2 x 2 gang $gid holds its 80 GiB and 40 GiB GPUs whole; the 0.5 share $fid waits"

# 2. Its attempt counts 4 GPUs.
"$T" cancel "$gid" >/dev/null
wait_state "$gid" JOB_STATE_CANCELLED
"$T" describe "$gid" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin); job = j.get("job", j)
gpus = job["attempts"][0]["gpus"]
assert gpus == 4, gpus
' || fail "gang $gid's attempt: $("$T" describe "$gid" -o json)"
ok "gang $gid's attempt counts 4 GPUs"
"$T" wait "$fid" >/dev/null || fail "the share $fid did not run once the GPUs were free"
ok "the share $fid ran once the gang was gone"

# 3. Bad sizes: refused, never changed.
for bad in "--gpu-fraction 0" "--gpu-fraction -0.5" "--gpu-fraction nan" "--gpu-fraction 1.5" \
           "--gpu-mem 0" "--cpus 0" "--cpus nan" "--mem 0" "--gpus 0" "--gpus -1" \
           "--nodes 0 --gpus-per-node 1" "--nodes 1 --gpus-per-node 0"; do
  rc=0
  # shellcheck disable=SC2086
  out=$("$T" submit $bad -- true 2>&1) || rc=$?
  ((rc != 0)) || fail "submit $bad was accepted (job $out)"
  flag=${bad%% *}
  [[ $bad == "--nodes 1 --gpus-per-node 0" ]] && flag=--gpus-per-node
  grep -qF -- "$flag" <<<"$out" || fail "submit $bad: the error does not name $flag: $out"
done
ok "sizes of 0, negative, NaN or past their range are refused naming the flag"
rc=0
out=$("$T" submit --cpus 2 -- true 2>&1) || rc=$?
((rc != 0)) && grep -q "no node gives tasks cgroups" <<<"$out" ||
  fail "--cpus on a cluster without task cgroups: rc $rc: $out"
rc=0
out=$("$T" submit --image localhost/x -- true 2>&1) || rc=$?
((rc != 0)) && grep -q "no node has a container runtime" <<<"$out" ||
  fail "--image on a cluster without a container runtime: rc $rc: $out"
ok "--cpus without task cgroups and --image without a runtime are refused at submit, saying why"
e2e_done
