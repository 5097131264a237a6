#!/usr/bin/env bash
# Real PyTorch across hosts: Debian's python3-torch (CPU, gloo),
# a coordinator and three agents (one fake GPU each) in network namespaces
# with addresses of their own (10.77.N.2, routed through the coordinator's
# namespace), as netns_partition_e2e.sh sets them up.
#  1. a 2-node DDP gang (tests/e2e/torch_ddp_resume.py: checkpoints every
#     step to TRAINCTL_CHECKPOINT_DIR) starts; once it has checkpointed a
#     few steps, rank 0's node is killed (every process of its namespace:
#     agent, shim, rank 0);
#  2. the gang restarts as attempt 1 on the two healthy nodes with
#     TORCHELASTIC_RESTART_COUNT=1 and a new MASTER_ADDR (the new rank 0's
#     host), resumes from the checkpoint (not from step 0) and SUCCEEDS;
#  3. its final parameters equal a one-process run on the same data.
# BREAK=restart (--max-restarts 0) or BREAK=resume (the program ignores its
# checkpoint) shows the test failing when either is broken.
# gloo picks its interface from the host name, which every namespace shares:
# GLOO_SOCKET_IFNAME=eth0 names each namespace's own (docs/frameworks.md).
# Needs root, `ip netns` and python3 with torch (CI installs python3-torch:
# deploy/install-deps.sh); otherwise it exits 77 (ctest: skipped).
# Usage: torch_netns_e2e.sh BUILD_BIN_DIR. Every wait has a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/failure_lib.sh"
SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/torch_ddp_resume.py

skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "needs root for ip netns (running as uid $(id -u))"
command -v ip >/dev/null || skip "no ip command (apt-get install iproute2)"
PY=
for p in /usr/bin/python3 python3; do
  if "$p" -c 'import torch.distributed' 2>/dev/null; then PY=$(command -v "$p"); break; fi
done
[[ -n $PY ]] || skip "no python3 with torch (apt-get install python3-torch)"
e2e_init torch-netns "${1:-}"

S=$$
CNS=tcc-$S
NS=()
netns_cleanup() {
  local n p
  for n in "${NS[@]}"; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  done
  e2e_cleanup
  for n in "$CNS" "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap netns_cleanup EXIT
ip netns add "$CNS" 2>/dev/null || skip "ip netns add failed (no CAP_SYS_ADMIN or no netns support)"
ip -n "$CNS" link set lo up
# The coordinator's namespace routes between the agents' (rank 1 reaches
# rank 0's host).
ip netns exec "$CNS" sysctl -qw net.ipv4.ip_forward=1
for i in 1 2 3; do
  ns=tca$i-$S
  NS+=("$ns")
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "v$i" netns "$CNS" type veth peer name eth0 netns "$ns"
  ip -n "$CNS" addr add "10.77.$i.1/24" dev "v$i"
  ip -n "$ns" addr add "10.77.$i.2/24" dev eth0
  ip -n "$CNS" link set "v$i" up
  ip -n "$ns" link set eth0 up
  ip -n "$ns" route add default via "10.77.$i.1"
done

mkdir -p "$WORK/ckpt"
ip netns exec "$CNS" "$BIN/trainctl-coordinator" --listen 0.0.0.0:0 --state-dir "$WORK/state" \
  --node-timeout 3s --heartbeat 500ms --stop-grace 2s --no-preflight-auto \
  --checkpoint-root "$WORK/ckpt" >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
PORT=${line##* }
export TRAINCTL_COORDINATOR=127.0.0.1:$PORT
TC="ip netns exec $CNS $BIN/trainctl"
for i in 1 2 3; do
  ip netns exec "tca$i-$S" "$BIN/trainctl-agent" --coordinator "10.77.$i.1:$PORT" \
    --address "10.77.$i.2" --node-name "n$i" --fake-gpus 1:H100-fake:80GiB \
    --log-dir "$WORK/logs-n$i" >"$WORK/agent-n$i.log" 2>&1 &
  PIDS+=($!)
done
for i in 1 2 3; do
  wait_line "$WORK/agent-n$i.log" "registered with the coordinator" >/dev/null ||
    fail "agent n$i did not register"
done
ok "coordinator in netns $CNS, agents n1-n3 at 10.77.{1,2,3}.2"

STEPS=60
"$PY" "$SCRIPT" --single --steps $STEPS --out "$WORK/reference.json"
: >"$WORK/ranks"
FLAGS=(--max-restarts 1)
[[ ${BREAK:-} == restart ]] && FLAGS=(--max-restarts 0)
[[ ${BREAK:-} == resume ]] && FLAGS+=(--env E2E_NO_RESUME=1)
JOB=$(tc submit --name torch-ddp --nodes 2 --gpus-per-node 1 "${FLAGS[@]}" \
  --env GLOO_SOCKET_IFNAME=eth0 --env "E2E_RANKS_FILE=$WORK/ranks" \
  -- "$PY" "$SCRIPT" --steps $STEPS --step-sleep 0.2)
[[ $JOB =~ ^[0-9]+$ ]] || fail "submit printed '$JOB', not a job id"
wait_ranks 0 || fail "attempt 0 did not start both ranks"
read -r node0 node1 < <(rank_nodes "$JOB")
addr0=$(awk '$1 == 0 && $2 == 0 { print $5 }' "$WORK/ranks")
ok "gang $JOB attempt 0: rank 0 on $node0 ($addr0), rank 1 on $node1"

# step: the step of the last checkpoint (0 before the first).
step() { cat "$WORK/ckpt/$JOB/step" 2>/dev/null || echo 0; }
end=$((SECONDS + 60))
until (($(step) >= 8)); do
  ((SECONDS < end)) || fail "attempt 0 did not checkpoint 8 steps (at $(step))"
  read -rt 0.1 <> <(:) || true
done
killed_at=$(step)
ns0=tca${node0#n}-$S
for p in $(ip netns pids "$ns0"); do kill -9 "$p" 2>/dev/null || true; done
ok "killed rank 0's node $node0 (every process in $ns0) at checkpoint step $killed_at"

wait_ranks 1 || fail "the gang did not restart as attempt 1: $(cat "$WORK/ranks")"
check_restart "$node0"
addr1=$(awk '$1 == 1 && $2 == 0 { print $5 }' "$WORK/ranks")
[[ -n $addr1 && $addr1 != "$addr0" ]] || fail "attempt 1 kept MASTER_ADDR $addr0 (got '$addr1')"
ok "attempt 1 on healthy nodes $(rank_nodes "$JOB"), TORCHELASTIC_RESTART_COUNT=1, MASTER_ADDR $addr0 -> $addr1"

timeout 120 $TC wait "$JOB" >/dev/null || fail "job $JOB did not succeed after the restart"
"$PY" - "$WORK/ckpt/$JOB/result.json" "$WORK/reference.json" "$killed_at" <<'EOF' ||
import json, sys
got = json.load(open(sys.argv[1]))
ref = json.load(open(sys.argv[2]))["params"]
killed_at = int(sys.argv[3])
assert got["attempt"] == 1 and got["restart_count"] == 1, got
assert got["resumed_from"] >= killed_at, \
    f"attempt 1 started at step {got['resumed_from']}, not from the checkpoint ({killed_at})"
diff = max(abs(a - b) for a, b in zip(got["params"], ref))
assert len(got["params"]) == len(ref) and diff < 1e-9, f"parameters differ by {diff}"
print(f"resumed from step {got['resumed_from']}; parameters match the one-process run "
      f"(max difference {diff:.1e})")
EOF
  fail "the resumed run's result is wrong: $(cat "$WORK/ckpt/$JOB/result.json" 2>/dev/null)"
ok "job $JOB SUCCEEDED: resumed from its checkpoint, same parameters as one process"
e2e_done
