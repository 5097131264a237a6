#!/usr/bin/env bash
# A network partition with real processes and network namespaces:
# the coordinator in one namespace, three agents (one fake GPU each) in three
# others, each joined to the coordinator's by its own veth pair. A 2-rank gang
# runs over two agents; the link of rank 0's agent is cut (its host is alive,
# only unreachable):
#  1. the cut agent's lease ends unrenewed and it fences: rank 0 is killed;
#  2. after --node-timeout the coordinator fails the attempt: rank 1, on a
#     healthy node, is stopped;
#  3. the gang restarts as attempt 1 on the two healthy nodes with
#     TORCHELASTIC_RESTART_COUNT=1;
#  4. the link comes back: the cut agent re-registers and runs nothing of the
#     old attempt.
# Needs root and `ip netns` (iproute2); otherwise it exits 77, which ctest
# reports as skipped. Usage: netns_partition_e2e.sh BUILD_BIN_DIR. Every wait
# polls a condition with a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/failure_lib.sh"

skip() { echo "SKIP: $*"; exit 77; }
[[ $(id -u) == 0 ]] || skip "needs root for ip netns (running as uid $(id -u))"
command -v ip >/dev/null || skip "no ip command (apt-get install iproute2)"
e2e_init netns "${1:-}"

# Names are per run: network namespaces are global on the host.
S=$$
CNS=tcc-$S
NS=()
netns_cleanup() {
  e2e_cleanup
  local n
  for n in "$CNS" "${NS[@]}"; do ip netns del "$n" 2>/dev/null || true; done
}
trap netns_cleanup EXIT
ip netns add "$CNS" 2>/dev/null || skip "ip netns add failed (no CAP_SYS_ADMIN or no netns support)"
ip -n "$CNS" link set lo up
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
done

# --no-preflight-auto: the ranks here never reach the rendezvous (each
# namespace sees the coordinator at its own 10.77.N.1, tasks are told its
# loopback address), which a gang's pre-flight needs (docs/preflight.md).
ip netns exec "$CNS" "$BIN/trainctl-coordinator" --listen 0.0.0.0:0 --state-dir "$WORK/state" \
  --node-timeout 3s --heartbeat 500ms --stop-grace 2s --no-preflight-auto \
  >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
PORT=${line##* }
export TRAINCTL_COORDINATOR=127.0.0.1:$PORT
TC="ip netns exec $CNS $BIN/trainctl"
declare -A LINK
for i in 1 2 3; do
  ip netns exec "tca$i-$S" "$BIN/trainctl-agent" --coordinator "10.77.$i.1:$PORT" \
    --address "10.77.$i.2" --node-name "n$i" --fake-gpus 1:H100-fake:80GiB \
    --log-dir "$WORK/logs-n$i" >"$WORK/agent-n$i.log" 2>&1 &
  PIDS+=($!)
  LINK[n$i]=v$i
done
for i in 1 2 3; do
  wait_line "$WORK/agent-n$i.log" "registered with the coordinator.*fencing" >/dev/null ||
    fail "agent n$i did not register (with fencing)"
done
ok "coordinator in netns $CNS, agents n1-n3 in ${NS[*]}"

submit_gang
wait_ranks 0 || fail "attempt 0 did not start both ranks"
read -r node0 node1 < <(rank_nodes "$JOB")
pid0=$(rank_pid 0 0); pid1=$(rank_pid 0 1)
ok "gang $JOB attempt 0: rank 0 on $node0 (pid $pid0), rank 1 on $node1 (pid $pid1)"

ip -n "$CNS" link set "${LINK[$node0]}" down
ok "cut $node0's link (${LINK[$node0]} down)"

wait_line "$WORK/agent-$node0.log" "FENCING" >/dev/null || fail "$node0 did not fence"
wait_dead "$pid0" 10 || fail "rank 0 (pid $pid0) on the cut $node0 still runs"
alive "${PIDS[$(( ${node0#n} ))]}" || fail "the cut agent $node0 itself died"
ok "the cut agent $node0 fenced its rank 0"

wait_dead "$pid1" 30 || fail "rank 1 (pid $pid1) on healthy $node1 was not stopped"
ok "rank 1 on $node1 was stopped after the node timeout"

wait_ranks 1 || fail "the gang did not restart as attempt 1"
check_restart "$node0"
ok "attempt 1 runs on healthy nodes with TORCHELASTIC_RESTART_COUNT=1: $(rank_nodes "$JOB")"

ip -n "$CNS" link set "${LINK[$node0]}" up
end=$((SECONDS + 30))
until (($(grep -c "registered with the coordinator" "$WORK/agent-$node0.log") >= 2)); do
  ((SECONDS < end)) || fail "$node0 did not re-register after the link came back"
  read -rt 0.05 <> <(:) || true
done
[[ $(awk '$1 == 0' "$WORK/ranks" | wc -l) == 2 ]] || fail "attempt 0 started again: $(cat "$WORK/ranks")"
ok "$node0 re-registered when its link came back; attempt 0 did not start again"
tc cancel "$JOB" >/dev/null
e2e_done
