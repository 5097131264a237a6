#!/usr/bin/env bash
# Agent loss without orphans, real binaries on loopback: three
# agents with one fake GPU each, a 2-rank gang over two of them. The agent of
# rank 0 is killed with SIGKILL:
#  1. rank 0's process dies at once with its agent (the agent's guard);
#  2. after --node-timeout the coordinator fails the attempt and rank 1, on a
#     healthy node, is stopped (no orphan waiting in NCCL forever);
#  3. the gang restarts as attempt 1 on the two healthy nodes with
#     TORCHELASTIC_RESTART_COUNT=1.
# Usage: agent_loss_e2e.sh BUILD_BIN_DIR. Every wait polls a condition with a
# deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/failure_lib.sh"
e2e_init agent-loss "${1:-}"

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  --node-timeout 3s --heartbeat 500ms --stop-grace 2s >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
declare -A AGENT_PID
for n in n1 n2 n3; do
  "$BIN/trainctl-agent" --node-name "$n" --fake-gpus 1:H100-fake:80GiB \
    --log-dir "$WORK/logs-$n" >"$WORK/agent-$n.log" 2>&1 &
  AGENT_PID[$n]=$!
  PIDS+=($!)
done
for n in n1 n2 n3; do
  wait_line "$WORK/agent-$n.log" "registered with the coordinator" >/dev/null ||
    fail "agent $n did not register"
done

submit_gang
wait_ranks 0 || fail "attempt 0 did not start both ranks"
read -r node0 node1 < <(rank_nodes "$JOB")
pid0=$(rank_pid 0 0); pid1=$(rank_pid 0 1)
ok "gang $JOB attempt 0: rank 0 on $node0 (pid $pid0), rank 1 on $node1 (pid $pid1)"

# $! is the agent's guard (worker/hw/agent_guard.h); SIGKILL the agent
# itself, its child, which then has no chance to stop its tasks.
agent0=$(pgrep -P "${AGENT_PID[$node0]}" || true)
[[ -n $agent0 ]] || fail "no agent process under the guard (pid ${AGENT_PID[$node0]})"
kill -9 "$agent0"
wait_dead "$pid0" 10 || fail "rank 0 (pid $pid0) outlived its SIGKILLed agent"
ok "rank 0 died with its agent ($node0 SIGKILLed, pid $agent0)"

wait_dead "$pid1" 30 || fail "rank 1 (pid $pid1) on healthy $node1 was not stopped"
ok "rank 1 on $node1 was stopped after the node timeout"

wait_ranks 1 || fail "the gang did not restart as attempt 1"
check_restart "$node0"
ok "attempt 1 runs on healthy nodes with TORCHELASTIC_RESTART_COUNT=1: $(rank_nodes "$JOB")"
"$BIN/trainctl" cancel "$JOB" >/dev/null
e2e_done
