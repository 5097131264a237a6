#!/usr/bin/env bash
# The SIGKILL durability test: trainctl-loadgen submits no-op
# experiment jobs at RATE/s for DURATION s to a coordinator with AGENTS
# fake-GPU agents, while this script kills the coordinator with SIGKILL KILLS
# times and restarts it on the same state dir and port. Afterwards every
# acknowledged request id must exist as exactly one job (the acknowledged one)
# and no (job, attempt) may have started twice (each job appends
# "start <job> <attempt>" to a file when its task starts).
#
#   bench/durability_sigkill.sh BUILD_BIN_DIR [OUT_JSON]
#
# Knobs (environment): RATE (1000), DURATION (20 s), KILLS (4), AGENTS (4),
# THREADS (16), SYNC (full: the coordinator's --sync; normal survives kill -9
# too, without an fsync per write). With OUT_JSON the counts are written there (the full run:
# bench/results/durability_sigkill.json); ctest runs a small version
# (durability_sigkill_smoke). Exit status 1 on any violation.
#
# The kills are on a schedule (every DURATION/(KILLS+1) s): the sleeps below
# time the kills, they never stand in for a condition; every wait on state
# (coordinator listening, agents registered, jobs finished) polls the
# condition with a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../tests/e2e/lib.sh"
e2e_init durability "${1:-}"
OUT_JSON=${2:-}
RATE=${RATE:-1000}
DURATION=${DURATION:-20}
KILLS=${KILLS:-4}
AGENTS=${AGENTS:-4}
THREADS=${THREADS:-16}
SYNC=${SYNC:-full}
[[ -x $BIN/trainctl-loadgen ]] || fail "no $BIN/trainctl-loadgen (build the target)"

# Starts the coordinator on 127.0.0.1:$1 (0: any free port); sets PORT.
start_coordinator() {
  : >"$WORK/coord.out"
  "$BIN/trainctl-coordinator" --listen "127.0.0.1:$1" --state-dir "$WORK/state" \
    --node-timeout 10s --sync "$SYNC" >"$WORK/coord.out" 2>>"$WORK/coord.log" &
  COORD_PID=$!
  PIDS+=("$COORD_PID")
  local line
  line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
  PORT=${line##* }
}

start_coordinator 0
ADDR=127.0.0.1:$PORT
for i in $(seq 1 "$AGENTS"); do
  "$BIN/trainctl-agent" --coordinator "$ADDR" --node-name "dur-$i" \
    --fake-gpus 4:H100-fake:80GiB --log-dir "$WORK/logs-$i" --log-level warn \
    >"$WORK/agent-$i.log" 2>&1 &
  PIDS+=($!)
done
# Agents log at warn: wait for them through the coordinator's log instead.
for i in $(seq 1 "$AGENTS"); do
  wait_line "$WORK/coord.log" "node dur-$i registered" >/dev/null ||
    fail "agent dur-$i did not register"
done

STARTS=$WORK/starts
ACKS=$WORK/acks
: >"$STARTS"
echo "load: $RATE submits/s for $DURATION s from $THREADS threads, $AGENTS agents x 4 fake GPUs, $KILLS coordinator SIGKILLs, --sync $SYNC"
"$BIN/trainctl-loadgen" submit --coordinator "$ADDR" --rate "$RATE" \
  --duration "${DURATION}s" --threads "$THREADS" --acks "$ACKS" --starts "$STARTS" \
  --run-id run >"$WORK/loadgen.out" 2>"$WORK/loadgen.log" &
LOADGEN=$!
PIDS+=("$LOADGEN")

downtime_ms=0
interval=$(python3 -c "print($DURATION / ($KILLS + 1))")
for k in $(seq 1 "$KILLS"); do
  sleep "$interval"
  kill -9 "$COORD_PID"
  wait "$COORD_PID" 2>/dev/null || true
  t0=$(date +%s%N)
  start_coordinator "$PORT"
  t1=$(date +%s%N)
  downtime_ms=$((downtime_ms + (t1 - t0) / 1000000))
  echo "kill $k: coordinator SIGKILLed and restarted on port $PORT in $(((t1 - t0) / 1000000)) ms"
done

set +e
wait "$LOADGEN"
submit_rc=$?
set -e
cat "$WORK/loadgen.out"
[[ $submit_rc == 0 ]] || { tail -5 "$WORK/loadgen.log" >&2; fail "loadgen submit failed ($submit_rc)"; }

set +e
"$BIN/trainctl-loadgen" verify --coordinator "$ADDR" --acks "$ACKS" --starts "$STARTS" \
  --run-id run --drain-timeout 120s --json "$WORK/result.json" \
  --extra "rate_target=$RATE" --extra "duration_s=$DURATION" --extra "kills=$KILLS" \
  --extra "agents=$AGENTS" --extra "threads=$THREADS" --extra "sync=$SYNC" \
  --extra "restart_downtime_ms_total=$downtime_ms" \
  --extra "submit_summary=$(tr -d '\n' <"$WORK/loadgen.out")"
verify_rc=$?
set -e
[[ -z $OUT_JSON ]] || cp "$WORK/result.json" "$OUT_JSON"
[[ $verify_rc == 0 ]] || fail "verify found violations or unfinished jobs"
ok "SIGKILL x$KILLS under load: every acknowledged job exists exactly once, no task started twice"
e2e_done
