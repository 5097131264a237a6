#!/usr/bin/env bash
# The NCCL bootstrap through the node relays, real binaries on loopback, fake
# GPUs: two agents with one fake GPU each run a 2-rank gang whose ranks do
# the id exchange of the real bootstrap (trainctl-fake-preflight-probe run as
# the job's command: rank 0 publishes a random 128-byte id, rank 1 fetches
# it). Then:
#  1. each rank's log says its rendezvous went to its agent's unix socket
#     (TRAINCTL_RENDEZVOUS_SOCKET), and the job SUCCEEDED;
#  2. the coordinator's counters: the fetch it served came from a relay
#     (via="relay"), none from a rank directly;
#  3. the socket sits in the agent's state directory, and a call with a
#     wrong token is refused by the relay (PERMISSION_DENIED);
#  4. with --rendezvous-socket none the same gang still runs, the ranks
#     asking the coordinator directly (the fallback of older agents).
# Usage: relay_e2e.sh BUILD_BIN_DIR. Every wait polls a condition with a
# deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init relay "${1:-}"

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 \
  --state-dir "$WORK/state" --stop-grace 1s >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
line=$(wait_line "$WORK/coord.out" "metrics on port [1-9]") || fail "no metrics port line"
MPORT=${line##* }

start_agent() {
  local n=$1
  shift
  mkdir -p "$WORK/agent-$n"
  "$BIN/trainctl-agent" --node-name "$n" --fake-gpus 1:H100-fake:80GiB \
    --log-dir "$WORK/agent-$n/logs" "$@" >"$WORK/agent-$n.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent-$n.log" "registered with the coordinator" >/dev/null ||
    fail "agent $n did not register"
}
start_agent n1
start_agent n2
grep -q "rendezvous relay for this node's ranks on $WORK/agent-n1/rendezvous-n1.sock" \
  "$WORK/agent-n1.log" || fail "agent n1 did not serve its relay in its state directory"
[[ -S "$WORK/agent-n1/rendezvous-n1.sock" ]] || fail "no socket at $WORK/agent-n1/rendezvous-n1.sock"
ok "each agent serves a relay on rendezvous-NODE.sock in its state directory"

# wait_state JOB REGEX: waits (30 s) until the job's state matches.
wait_state() {
  local end=$((SECONDS + 30)) s=""
  while ((SECONDS < end)); do
    s=$("$BIN/trainctl" describe "$1" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j.get("job", j).get("state", ""))')
    [[ $s =~ $2 ]] && return 0
    read -rt 0.2 <> <(:) || true
  done
  echo "job $1 is $s" >&2
  return 1
}

PROBE=$BIN/trainctl-fake-preflight-probe
JOB=$("$BIN/trainctl" submit --name relay --nodes 2 --gpus-per-node 1 --no-preflight -- "$PROBE" --timeout-ms 20000)
[[ $JOB =~ ^[0-9]+$ ]] || fail "submit printed '$JOB', not a job id"
wait_state "$JOB" SUCCEEDED || fail "the 2-rank gang did not succeed"
for r in 0 1; do
  "$BIN/trainctl" logs "$JOB" --rank "$r" >"$WORK/rank$r.log" 2>&1
  grep -q "rendezvous via unix:$WORK/agent-n[12]/rendezvous-n[12].sock" "$WORK/rank$r.log" ||
    fail "rank $r did not use its node's relay: $(cat "$WORK/rank$r.log")"
  grep -q '"comm_ready_ms"' "$WORK/rank$r.log" || fail "rank $r has no result line"
done
ok "job $JOB: both ranks exchanged the id through their nodes' relays and it SUCCEEDED"

# Rank 1's relay fetched once; rank 0 published through its relay.
wait_metric '^trainctl_rendezvous_fetches_total\{via="relay"\} [1-9]' ||
  fail "the coordinator counted no relayed fetch: $(grep rendezvous "$WORK/metrics.txt")"
grep -qE '^trainctl_rendezvous_fetches_total\{via="direct"\} 0$' "$WORK/metrics.txt" ||
  fail "a rank fetched from the coordinator directly: $(grep rendezvous "$WORK/metrics.txt")"
grep -qE '^trainctl_rendezvous_relayed_ranks_total 1$' "$WORK/metrics.txt" ||
  fail "the relayed ranks: $(grep rendezvous "$WORK/metrics.txt")"
ok "the coordinator served the gang's fetch through a relay (via=relay), none directly"

# A caller with another attempt's token: refused by the relay itself. The
# agent registered job 2's ranks with its token; this process claims job 2
# with a made-up one.
JOB2=$("$BIN/trainctl" submit --name hold --nodes 2 --gpus-per-node 1 --no-preflight -- sleep 30)
wait_state "$JOB2" RUNNING || fail "job $JOB2 did not start"
ATTEMPT2=$("$BIN/trainctl" describe "$JOB2" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j.get("job", j).get("attempt", 0))')
set +e
out=$(TRAINCTL_JOB_ID=$JOB2 TRAINCTL_ATTEMPT=$ATTEMPT2 TRAINCTL_TOKEN=not-the-token RANK=1 \
  WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
  TRAINCTL_RENDEZVOUS_SOCKET="$WORK/agent-n1/rendezvous-n1.sock" "$PROBE" --timeout-ms 3000 2>&1)
rc=$?
set -e
((rc != 0)) || fail "a wrong token got through the relay"
[[ $out == *"wrong TRAINCTL_TOKEN"*"relay"* ]] || fail "not refused by the relay: $out"
ok "a wrong token is refused by the relay (PERMISSION_DENIED), never reaching the coordinator"
"$BIN/trainctl" cancel "$JOB2" >/dev/null

# An agent without a relay: its ranks ask the coordinator directly.
for p in "${PIDS[@]:1}"; do kill "$p" 2>/dev/null || true; done
PIDS=("${PIDS[0]}")
wait_line "$WORK/coord.out" "listening on port" >/dev/null
start_agent n3 --rendezvous-socket none
start_agent n4 --rendezvous-socket none
JOB3=$("$BIN/trainctl" submit --name direct --nodes 2 --gpus-per-node 1 --no-preflight -- "$PROBE" --timeout-ms 20000)
wait_state "$JOB3" SUCCEEDED || fail "the gang on relay-less agents did not succeed"
"$BIN/trainctl" logs "$JOB3" --rank 1 >"$WORK/direct1.log" 2>&1
grep -q "rendezvous via $TRAINCTL_COORDINATOR" "$WORK/direct1.log" ||
  fail "rank 1 did not ask the coordinator: $(cat "$WORK/direct1.log")"
wait_metric '^trainctl_rendezvous_fetches_total\{via="direct"\} 1$' ||
  fail "no direct fetch counted: $(grep rendezvous "$WORK/metrics.txt")"
ok "with --rendezvous-socket none the ranks ask the coordinator directly"

e2e_done
