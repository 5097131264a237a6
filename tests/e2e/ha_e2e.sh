#!/usr/bin/env bash
# High availability on etcd, with the real binaries: a one-member etcd, two
# coordinators (a leader and a standby) and a fake-GPU agent given both
# addresses. Kills the leader with SIGKILL while a job runs and checks that
# the standby takes over within 5 s, that no acknowledged job is lost, and
# that the running task keeps running (same attempt, same pid) and finishes.
# Usage: ha_e2e.sh BUILD_BIN_DIR. Skips (exit 77) without /usr/bin/etcd.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init ha "${1:-}"
command -v etcd >/dev/null || { echo "SKIP: etcd not installed (etcd-server)"; exit 77; }
T="$BIN/trainctl"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now() { date +%s.%N; }

EC=$(free_port); EP=$(free_port); PA=$(free_port); PB=$(free_port)
etcd --name n1 --data-dir "$WORK/etcd" \
  --listen-client-urls "http://127.0.0.1:$EC" --advertise-client-urls "http://127.0.0.1:$EC" \
  --listen-peer-urls "http://127.0.0.1:$EP" --initial-advertise-peer-urls "http://127.0.0.1:$EP" \
  --initial-cluster "n1=http://127.0.0.1:$EP" >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)

# start_coordinator NAME PORT: a coordinator of the HA pair; sets PID_<NAME>.
start_coordinator() {
  "$BIN/trainctl-coordinator" --listen "127.0.0.1:$2" --etcd-endpoints "127.0.0.1:$EC" \
    --leader-lease 2s --node-timeout 10s >"$WORK/coord-$1.out" 2>"$WORK/coord-$1.log" &
  local pid=$!
  PIDS+=("$pid")
  printf -v "PID_$1" '%s' "$pid"
}
start_coordinator a "$PA"
wait_line "$WORK/coord-a.out" "listening on port" >/dev/null || fail "coordinator a did not lead"
start_coordinator b "$PB"
wait_line "$WORK/coord-b.log" "standby" >/dev/null || fail "coordinator b is not a standby"
grep -q "listening" "$WORK/coord-b.out" && fail "the standby listens"
ok "a leads, b waits as a standby without listening"

export TRAINCTL_COORDINATOR="127.0.0.1:$PA,127.0.0.1:$PB"
"$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name ha-node \
  --fake-gpus 2:H200-fake:141GiB --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"

# A job that runs until released, and a batch of quick ones.
long=$("$T" submit --name long -- sh -c "echo started; while [ ! -e $WORK/release ]; do sleep 0.05; done; echo released")
job_field() {  # job_field ID EXPR (python over the job dict)
  "$T" describe "$1" -o json | python3 -c "import json,sys; j=json.load(sys.stdin); j=j.get('job', j); print($2)"
}
end=$((SECONDS + 30))
until [[ $(job_field "$long" "j['state']") == JOB_STATE_RUNNING ]]; do
  ((SECONDS < end)) || fail "job $long never ran"
  read -rt 0.05 <> <(:) || true
done
pid_before=$(job_field "$long" "j['tasks'][0]['pid']")
acked=("$long")
for i in $(seq 1 20); do acked+=("$("$T" submit --name quick-$i -- true)"); done
ok "job $long running (pid $pid_before); ${#acked[@]} jobs acknowledged"

# The leader dies.
t0=$(now)
kill -9 "$PID_a"; wait "$PID_a" 2>/dev/null || true
end=$((SECONDS + 15))
until "$T" list >/dev/null 2>&1; do
  ((SECONDS < end)) || fail "no coordinator answered 15 s after the leader died"
  read -rt 0.05 <> <(:) || true
done
t1=$(now)
takeover=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
python3 -c "import sys; sys.exit(0 if $t1 - $t0 <= 5 else 1)" || fail "takeover took ${takeover}s, want <= 5s"
grep -q "elected leader" "$WORK/coord-b.log" || fail "b did not log its election"
ok "standby b took over ${takeover}s after the leader's SIGKILL"

# Nothing acknowledged is lost, nothing is duplicated.
listed=$("$T" list -o json | python3 -c 'import json,sys; print(" ".join(str(j["id"]) for j in json.load(sys.stdin).get("jobs", [])))')
for id in "${acked[@]}"; do
  [[ $(tr ' ' '\n' <<<"$listed" | grep -cx "$id") == 1 ]] || fail "job $id listed $(tr ' ' '\n' <<<"$listed" | grep -cx "$id") times"
done
[[ $(wc -w <<<"$listed") == "${#acked[@]}" ]] || fail "listed $(wc -w <<<"$listed") jobs, acked ${#acked[@]}"
ok "all ${#acked[@]} acknowledged jobs present exactly once"

# The agent follows the new leader; the running task kept running.
end=$((SECONDS + 30))
until (($(grep -c "registered with the coordinator" "$WORK/agent.log") >= 2)); do
  ((SECONDS < end)) || fail "agent did not re-register with b"
  read -rt 0.05 <> <(:) || true
done
[[ $(job_field "$long" "j['state']") == JOB_STATE_RUNNING ]] || fail "job $long: $(job_field "$long" "j['state']")"
[[ $(job_field "$long" "j['tasks'][0]['pid']") == "$pid_before" ]] || fail "job $long restarted"
touch "$WORK/release"
"$T" wait "$long" || fail "job $long did not succeed after the failover"
[[ $(job_field "$long" "j.get('attempt', 0)") == 0 ]] || fail "job $long ran again"
[[ $("$T" logs "$long" | grep -c started) == 1 ]] || fail "job $long started twice"
for id in "${acked[@]:1}"; do "$T" wait "$id" || fail "quick job $id"; done
ok "task of job $long kept running across the failover (pid $pid_before, attempt 0) and succeeded; quick jobs succeeded"

# The old leader comes back as a standby; a clean shutdown of b hands over
# at once (resign), without waiting for the lease.
start_coordinator a "$PA"
wait_line "$WORK/coord-a.log" "standby" >/dev/null || fail "restarted a is not a standby"
t0=$(now)
kill -TERM "$PID_b"
wait_line "$WORK/coord-a.out" "listening on port" >/dev/null || fail "a did not take over from b"
t1=$(now)
wait "$PID_b" 2>/dev/null || true
handover=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
id=$("$T" submit -- echo after-handover)
"$T" wait "$id" || fail "job after the handover"
ok "clean shutdown of b handed over to a in ${handover}s; job $id ran"
echo "{\"takeover_after_sigkill_s\": $takeover, \"handover_after_sigterm_s\": $handover, \"acked_jobs\": ${#acked[@]}}" >"$WORK/ha.json"
[[ -n ${HA_RESULT:-} ]] && cp "$WORK/ha.json" "$HA_RESULT"
e2e_done
