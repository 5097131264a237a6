#!/usr/bin/env bash
# The admin's node levers with the real binaries on loopback: a coordinator,
# agents with one fake GPU each: x and y, z whose pre-flight program is
# missing, and (from step 5) w whose probe fails; the trainctl CLI.
#  1. `node drain` lets a running job finish while a new job goes to the
#     other node; `nodes` shows DRAINING with the reason, then DRAINED;
#  2. a drain with a deadline requeues what still runs there, its restart
#     budget intact (--max-restarts 0, and it still runs to the end), and
#     `describe` / `why` name the drain;
#  3. the drain survives an agent restart and a coordinator SIGKILL;
#  4. `node down` stops and requeues at once; `resume` puts it back;
#  5. every lever is in `trainctl audit`; `resume --verify` runs the node's pre-flight probe: a healthy node
#     resumes, one whose probe fails (w: TRAINCTL_FAKE_PROBE=fail) stays
#     drained with the verdict, one whose probe cannot run (z) is refused;
#     bad input is refused naming the field.
# Usage: drain_e2e.sh BUILD_BIN_DIR. Every wait is on a condition with a
# deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init drain "${1:-}"
T="$BIN/trainctl"

# start_agent NODE [ARGS...]: sets AGENT_<NODE>.
start_agent() {
  local node=$1
  shift
  "$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name "$node" \
    --fake-gpus 1 --cgroups off --container-runtime none "$@" \
    --log-dir "$WORK/logs-$node" >>"$WORK/agent-$node.log" 2>&1 &
  PIDS+=($!)
  printf -v "AGENT_$node" %s $!
  wait_until "agent $node registered" "[[ \$(grep -c 'registered with the coordinator' '$WORK/agent-$node.log') -ge ${REG_COUNT:-1} ]]"
}
# wait_until WHAT CONDITION: polls CONDITION (deadline 30 s).
node_of() { job "$1" 'j["tasks"][0]["node"]'; }
shown() { "$T" nodes | awk -v n="$1" '$1 == n || $1 == n"*" {print $2; exit}'; }

start_coordinator 0 --stop-grace 2s
start_agent x
start_agent y
start_agent z --preflight-probe "$WORK/no-such-probe"

# 1. A drain lets the running job finish; new work goes elsewhere.
"$T" node drain y --reason "keep y free" >/dev/null
"$T" node drain z --reason "keep z free" >/dev/null
a=$("$T" submit --gpus 1 -- sh -c "while [ ! -e '$WORK/go' ]; do sleep 0.1; done")
wait_state "$a" JOB_STATE_RUNNING
[[ $(node_of "$a") == x ]] || fail "job $a runs on $(node_of "$a"), not x"
"$T" node resume y >/dev/null
out=$("$T" node drain x --reason "swap PSU")
[[ $out == *"x: draining (1 job still running) - DRAIN by"*"swap PSU"* ]] || fail "drain x said: $out"
b=$("$T" submit --gpus 1 -- sleep 300)
wait_state "$b" JOB_STATE_RUNNING
[[ $(node_of "$b") == y ]] || fail "job $b went to $(node_of "$b") while x drains"
[[ $(shown x) == draining ]] || fail "nodes: x is $(shown x), not draining: $("$T" nodes)"
"$T" nodes | grep -q "^x: DRAIN by .* ago: swap PSU" || fail "nodes does not give x's reason: $("$T" nodes)"
[[ $(state "$a") == JOB_STATE_RUNNING ]] || fail "the drain stopped job $a"
touch "$WORK/go"
wait_state "$a" JOB_STATE_SUCCEEDED
wait_until "x drained" '[[ $(shown x) == drained ]]'
ok "drain x: job $a ran to the end on x, job $b went to y; x DRAINING, then DRAINED, with its reason"

# 2. A deadline requeues what still runs, with its restart budget intact.
"$T" node resume x >/dev/null
c=$("$T" submit --gpus 1 --max-restarts 0 -- sh -c '[ "$TRAINCTL_ATTEMPT" = 1 ] && exit 0; sleep 300')
wait_state "$c" JOB_STATE_RUNNING
[[ $(node_of "$c") == x ]] || fail "job $c runs on $(node_of "$c"), not x"
"$T" node drain x --reason "kernel update" --deadline 1s >/dev/null
wait_state "$c" JOB_STATE_PENDING
job "$c" 'j["attempts"][0]["reason"]' | grep -q "node x was drained by .*(kernel update) and its drain deadline passed" ||
  fail "describe $c does not name the drain: $("$T" describe "$c" -o json)"
"$T" describe "$c" | grep -q "2 of 3 nodes are drained or down" || fail "describe $c: $("$T" describe "$c")"
"$T" why "$c" | grep -q "x: out of service (DRAIN by" || fail "why $c: $("$T" why "$c")"
"$T" cancel "$b" >/dev/null
"$T" wait "$c" >/dev/null || fail "job $c did not succeed after the drain requeued it: $("$T" describe "$c")"
[[ $(job "$c" 'j["preemptions"]') == 1 && $(node_of "$c") == y ]] ||
  fail "job $c: $("$T" describe "$c" -o json)"
ok "drain --deadline: job $c was requeued (1 preemption, no restart used) and succeeded on y"

# 3. The drain survives an agent restart and a coordinator SIGKILL.
kill "$AGENT_x"; wait "$AGENT_x" 2>/dev/null || true
REG_COUNT=2 start_agent x
[[ $(shown x) == drained ]] || fail "after x's agent restarted: $("$T" nodes)"
kill -9 "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
start_coordinator "$PORT" --stop-grace 2s
wait_until "x back" '[[ $(shown x) == drained ]]'
"$T" nodes | grep -q "^x: DRAIN by .*kernel update" || fail "after a coordinator restart: $("$T" nodes)"
ok "x stays drained, with its reason, across an agent restart and a coordinator SIGKILL"

# 4. down: stop and requeue now; resume: back in service.
d=$("$T" submit --gpus 1 -- sh -c '[ "$TRAINCTL_ATTEMPT" = 1 ] && exit 0; sleep 300')
wait_state "$d" JOB_STATE_RUNNING
[[ $(node_of "$d") == y ]] || fail "job $d runs on $(node_of "$d"), not y"
"$T" node down y --reason "GPU 0 fell off the bus" >/dev/null
wait_state "$d" JOB_STATE_PENDING
[[ $(shown y) == down ]] || fail "nodes: y is $(shown y): $("$T" nodes)"
"$T" node resume x -o json | python3 -c '
import json, sys
v = json.load(sys.stdin)["nodes"][0]
assert v.get("serviceState", v.get("service_state")) == "NODE_SERVICE_STATE_IN_SERVICE", v
' || fail "resume x -o json"
"$T" wait "$d" >/dev/null || fail "job $d after down + resume: $("$T" describe "$d")"
[[ $(node_of "$d") == x ]] || fail "job $d restarted on $(node_of "$d")"
ok "down y requeued job $d at once; it ran on x once x was resumed"

# 5. resume --verify and bad input.
"$T" node drain x --reason "after repair" >/dev/null
wait_until "x drained" '[[ $(shown x) == drained ]]'
out=$("$T" node resume x --verify 2>&1) || fail "resume --verify x: $out"
[[ $out == *"x: verifying with job "* && $out == *"x: ready"* ]] || fail "resume --verify x said: $out"
TRAINCTL_FAKE_PROBE=fail start_agent w --task-env TRAINCTL_FAKE_PROBE
"$T" node drain w --reason "flaky NVLink" >/dev/null
rc=0
out=$("$T" node resume w --verify 2>&1) || rc=$?
((rc != 0)) && [[ $out == *"w: drained - DRAIN by "*"flaky NVLink; resume --verify failed (job "*"told to fail"* ]] ||
  fail "resume --verify w (its probe fails): rc $rc: $out"
[[ $(shown w) == drained ]] || fail "w was resumed although its probe failed: $("$T" nodes)"
rc=0
out=$("$T" node resume z --verify 2>&1) || rc=$?
((rc != 0)) && [[ $out == *"cannot run its pre-flight probe"* ]] || fail "resume --verify z: rc $rc: $out"
[[ $(shown z) == drained ]] || fail "z was resumed although --verify failed"
rc=0
out=$("$T" node drain x 2>&1) || rc=$?
((rc != 0)) && [[ $out == *"--reason"* ]] || fail "drain without --reason: rc $rc: $out"
rc=0
out=$("$T" node drain nosuch --reason r 2>&1) || rc=$?
((rc != 0)) && [[ $out == *"no node nosuch"* ]] || fail "drain of an unknown node: rc $rc: $out"
rc=0
out=$("$T" node drain x --reason r --deadline soon 2>&1) || rc=$?
((rc != 0)) && [[ $out == *"--deadline"* ]] || fail "--deadline soon: rc $rc: $out"
# Every lever is in the audit trail, with the reason and the verify job.
"$T" audit >"$WORK/audit.txt" || fail "trainctl audit"
grep -E "node\.drain +x +reason: swap PSU" "$WORK/audit.txt" >/dev/null &&
  grep -E "node\.drain +x +reason: kernel update; deadline 1 s" "$WORK/audit.txt" >/dev/null &&
  grep -E "node\.down +y +reason: GPU 0 fell off the bus" "$WORK/audit.txt" >/dev/null &&
  grep -E "node\.resume +w +verify w with job [0-9]+" "$WORK/audit.txt" >/dev/null ||
  fail "audit: $(cat "$WORK/audit.txt")"
ok "resume --verify: x passed its probe and resumed, w failed it and stays drained with the verdict, z (no probe program) is refused; bad drains are refused naming the field"
e2e_done
