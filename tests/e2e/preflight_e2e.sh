#!/usr/bin/env bash
# Pre-flight of gangs (docs/preflight.md), real binaries on loopback: three
# agents with one fake GPU each; the pre-flight probe
# (trainctl-fake-preflight-probe, what fake-GPU agents run) of n1 is told to
# fail and that of n3 to hang (TRAINCTL_FAKE_PROBE in their agents'
# environment, passed to tasks with --task-env).
#  1. a 2-node gang is probed; n1 errors at once, n3 gives no result by
#     --preflight-timeout: both are excluded for the job;
#  2. with only n2 left the gang waits (not failed) and `trainctl why` names
#     the exclusions; a good agent n4 joins: the gang passes its pre-flight
#     on n2 + n4 and SUCCEEDS there;
#  3. `trainctl describe` shows every pre-flight (verdict, communicator ready
#     ms, busbw) and why each node was excluded; `-o json` carries them and
#     no probe token.
# Usage: preflight_e2e.sh BUILD_BIN_DIR. Every wait polls a condition with a
# deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init preflight "${1:-}"

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  --preflight-timeout 4s --stop-grace 1s >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }

start_agent() {
  local n=$1 mode=$2
  TRAINCTL_FAKE_PROBE=$mode "$BIN/trainctl-agent" --node-name "$n" --task-env TRAINCTL_FAKE_PROBE \
    --fake-gpus 1:H100-fake:80GiB --log-dir "$WORK/logs-$n" \
    >"$WORK/agent-$n.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent-$n.log" "registered with the coordinator" >/dev/null ||
    fail "agent $n did not register"
}
start_agent n1 fail
start_agent n2 ok
start_agent n3 hang

JOB=$("$BIN/trainctl" submit --name gang --nodes 2 --gpus-per-node 1 -- \
  sh -c 'echo "rank $RANK of $WORLD_SIZE on attempt $TRAINCTL_ATTEMPT"')
[[ $JOB =~ ^[0-9]+$ ]] || fail "submit printed '$JOB', not a job id"

# excluded JOB: the nodes excluded for JOB, sorted, comma-separated.
excluded() {
  "$BIN/trainctl" describe "$1" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
job = j.get("job", j)
print(",".join(sorted(e["node"] for e in job.get("preflight", {}).get("excluded", []))))'
}
wait_excluded() {
  local want=$1 end=$((SECONDS + 30))
  while ((SECONDS < end)); do
    [[ $(excluded "$JOB") == "$want" ]] && return 0
    read -rt 0.1 <> <(:) || true
  done
  return 1
}
wait_excluded "n1,n3" || fail "n1 (failing probe) and n3 (hung probe) were not both excluded: '$(excluded "$JOB")'"
ok "the failing (n1) and the hung (n3) node were excluded for job $JOB"

state=$("$BIN/trainctl" describe "$JOB" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin); print(j.get("job", j)["state"])')
[[ $state == JOB_STATE_PENDING ]] || fail "with only n2 left the gang should wait, it is $state"
"$BIN/trainctl" why "$JOB" >"$WORK/why.txt"
grep -q "Excluded: *n1: pre-flight" "$WORK/why.txt" || fail "why does not name n1: $(cat "$WORK/why.txt")"
grep -q "n3: excluded for this job by a pre-flight" "$WORK/why.txt" ||
  fail "why does not say n3 is excluded: $(cat "$WORK/why.txt")"
ok "the gang waits and why names the excluded nodes"

start_agent n4 ok
timeout 60 "$BIN/trainctl" wait "$JOB" >/dev/null || fail "job $JOB did not succeed on n2 + n4"
ok "job $JOB SUCCEEDED"

"$BIN/trainctl" describe "$JOB" >"$WORK/describe.txt"
grep -q "Excluded: *n1: rank [01] errored: the fake probe was told to fail" "$WORK/describe.txt" ||
  fail "describe does not show why n1 was excluded: $(cat "$WORK/describe.txt")"
grep -q "Excluded: *n3: rank [01] did not finish" "$WORK/describe.txt" ||
  fail "describe does not show why n3 was excluded"
grep -qE "#[0-9]+ \(attempt [0-9]+\) PASSED on (n2, n4|n4, n2)" "$WORK/describe.txt" ||
  fail "describe shows no passed pre-flight on n2 and n4"
grep -qE "network busbw: median 100.00 GB/s" "$WORK/describe.txt" ||
  fail "describe shows no network bus bandwidth"
grep -qE "communicator ready: [0-9]+ ms" "$WORK/describe.txt" ||
  fail "describe shows no time to communicator ready"
ok "describe shows each pre-flight, its busbw and ready time, and the exclusions"

"$BIN/trainctl" describe "$JOB" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
job = j.get("job", j)
runs = job["preflight"]["runs"]
assert runs[-1]["verdict"] == "PREFLIGHT_VERDICT_PASSED", runs[-1]
assert all(not r.get("token") for r in runs), "a probe token leaked"
nodes = sorted(t["node"] for t in job["tasks"])
assert nodes == ["n2", "n4"], nodes
' || fail "describe -o json: no passed last run on the tasks' nodes, or a token leaked"
ok "-o json carries the pre-flights; the job ran on n2 and n4; no token leaked"
e2e_done
