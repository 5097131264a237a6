#!/usr/bin/env bash
# Job dependencies (`trainctl submit --dependency`, Slurm's syntax) with the
# real binaries on loopback: a coordinator, two agents with two fake GPUs
# each (room for every job at once, so only the dependencies order them).
#  1. a pipeline prep -> train (afterok) -> eval (afterok) runs in order:
#     each step starts after the one before ended (describe -o json times);
#     while it waits, `list` and `why` name the job it waits for;
#  2. afterok on a job that fails ends the dependent at once, CANCELLED
#     with the reason; a dependency that already can never be met is
#     refused at submit;
#  3. singleton: two jobs of one name and user run one after the other;
#  4. an unknown job id, bad syntax (before any call) and a job's
#     dependency surviving a coordinator restart.
# Usage: deps_e2e.sh BUILD_BIN_DIR. Every wait is on a condition with a
# deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init deps "${1:-}"
T="$BIN/trainctl"

start_agent() {
  local node=$1
  "$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name "$node" \
    --fake-gpus 2 --cgroups off --container-runtime none \
    --log-dir "$WORK/logs-$node" >>"$WORK/agent-$node.log" 2>&1 &
  PIDS+=($!)
  wait_until "agent $node registered" "grep -q 'registered with the coordinator' '$WORK/agent-$node.log'"
}
# wait_until WHAT CONDITION: polls CONDITION (deadline 30 s).
reason() { job "$1" 'j["reason"]'; }

start_coordinator 0
start_agent x
start_agent y

# 1. A pipeline: each step waits for the one before to succeed.
prep=$("$T" submit --name prep -- sh -c "while [ ! -e '$WORK/prep-go' ]; do sleep 0.1; done")
train=$("$T" submit --name train -d "afterok:$prep" -- sh -c 'sleep 0.5')
eval_=$("$T" submit --name eval --dependency "afterok:$train" -- true)
wait_state "$prep" JOB_STATE_RUNNING
[[ $(state "$train") == JOB_STATE_PENDING ]] || fail "train is $(state "$train") while prep runs"
[[ $(reason "$train") == "waiting for dependency afterok:$prep (job $prep running)" ]] ||
  fail "train's reason: $(reason "$train")"
"$T" list -o wide | grep -E "^$train .*waiting for dependency afterok:$prep" >/dev/null ||
  fail "list does not show why train waits: $("$T" list)"
"$T" why "$train" | grep -q "waiting for dependency afterok:$prep (job $prep running)" ||
  fail "why $train: $("$T" why "$train")"
[[ $(reason "$eval_") == "waiting for dependency afterok:$train (job $train pending)" ]] ||
  fail "eval's reason: $(reason "$eval_")"
touch "$WORK/prep-go"
"$T" wait "$eval_" >/dev/null || fail "eval did not succeed: $(state "$eval_") $(reason "$eval_")"
for pair in "$prep:$train" "$train:$eval_"; do
  up=${pair%%:*} down=${pair##*:}
  up_end=$(job "$up" 'j["end_time_ms"]')
  down_start=$(job "$down" 'j["start_time_ms"]')
  ((down_start >= up_end)) || fail "job $down started at $down_start, before job $up ended at $up_end"
done
ok "pipeline prep $prep -> train $train -> eval $eval_ ran in order; list and why named the job waited for"

# 2. afterok on a job that fails: the dependent ends at once, with the reason.
bad=$("$T" submit --name bad -- sh -c "while [ ! -e '$WORK/bad-go' ]; do sleep 0.1; done; exit 3")
after_bad=$("$T" submit --name after-bad -d "afterok:$bad" -- true)
chained=$("$T" submit --name chained -d "afterany:$after_bad" -- true)
wait_state "$bad" JOB_STATE_RUNNING
touch "$WORK/bad-go"
wait_state "$after_bad" JOB_STATE_CANCELLED
[[ $(reason "$after_bad") == "dependency can never be met: afterok:$bad (job $bad failed)" ]] ||
  fail "reason of $after_bad: $(reason "$after_bad")"
[[ $(state "$bad") == JOB_STATE_FAILED ]] || fail "job $bad is $(state "$bad")"
# afterany on the cancelled one is met: that job runs.
"$T" wait "$chained" >/dev/null || fail "chained $chained: $(state "$chained") $(reason "$chained")"
if out=$("$T" submit -d "afterok:$bad" -- true 2>&1); then
  fail "afterok on failed job $bad was accepted: $out"
fi
[[ $out == *"spec.dependency"*"can never be met: afterok:$bad (job $bad failed)"* ]] ||
  fail "refusal said: $out"
ok "afterok on failed job $bad: job $after_bad CANCELLED at once with the reason; afterany on it ran; a new afterok on it is refused"

# 3. singleton: one job of this name and user at a time.
s1=$("$T" submit --name nightly -d singleton -- sh -c 'sleep 1')
s2=$("$T" submit --name nightly -d singleton -- sh -c 'sleep 0.2')
"$T" wait "$s2" >/dev/null || fail "singleton $s2: $(state "$s2") $(reason "$s2")"
s1_end=$(job "$s1" 'j["end_time_ms"]')
s2_start=$(job "$s2" 'j["start_time_ms"]')
((s2_start >= s1_end)) || fail "singleton $s2 started at $s2_start, before $s1 ended at $s1_end"
ok "singleton: job $s2 started after job $s1 (same name and user) ended"

# 4. Refusals, and a dependency kept across a coordinator restart.
if out=$("$T" submit -d afterok:999999 -- true 2>&1); then fail "unknown id accepted: $out"; fi
[[ $out == *"spec.dependency: afterok:999999: job 999999 does not exist"* ]] || fail "unknown id: $out"
if out=$("$T" submit -d "afterok:1,afterany:2?afterok:3" -- true 2>&1); then
  fail "mixed separators accepted: $out"
fi
[[ $out == *"--dependency"*"mixes ','"* ]] || fail "bad syntax: $out"
gate=$("$T" submit --name gate -- sh -c "while [ ! -e '$WORK/gate-go' ]; do sleep 0.1; done")
held=$("$T" submit --name held -d "afterok:$gate" -- true)
wait_state "$gate" JOB_STATE_RUNNING
kill -9 "$COORD_PID"
wait "$COORD_PID" 2>/dev/null || true
start_coordinator "$PORT"
wait_until "held $held waits again" "[[ \$(reason $held) == 'waiting for dependency afterok:$gate (job $gate running)' ]]"
touch "$WORK/gate-go"
"$T" wait "$held" >/dev/null || fail "held $held after the restart: $(state "$held") $(reason "$held")"
ok "unknown id and mixed separators refused naming the field/flag; a dependency survives a coordinator restart"

e2e_done
