#!/usr/bin/env bash
# End-to-end test of job arrays through the real binaries: `trainctl submit
# --array 0-9%3` on an agent with 8 fake GPUs submits 10 jobs in one
# SubmitJobArray call (the spec and the exported environment sent and
# stored once); every task sees its TRAINCTL_ARRAY_TASK_ID (and Slurm's
# SLURM_ARRAY_TASK_ID) and the submitting shell's environment, all 10 succeed, and never more than 3 run at once
# (each task counts the tasks running beside it through marker files). Then
# `list --array`, `describe`, `cancel --array` and a bad --array.
# Usage: array_e2e.sh BUILD_BIN_DIR. Every wait is on a condition (trainctl
# wait long-polls) with a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init array-e2e "${1:-}"
T="$BIN/trainctl"

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
"$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name arr-node \
  --fake-gpus 8:H100-fake:80GiB --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"

# 1. Ten tasks, at most 3 at once, on 8 GPUs (the GPUs would allow 8).
mkdir -p "$WORK/run"
script='
touch "$1/running.$TRAINCTL_ARRAY_TASK_ID"
n=$(ls "$1" | grep -c "^running\.")
echo "task=$TRAINCTL_ARRAY_TASK_ID slurm=$SLURM_ARRAY_TASK_ID array=$TRAINCTL_ARRAY_JOB_ID count=$TRAINCTL_ARRAY_TASK_COUNT venv=$ARRAY_E2E_VENV running=$n"
sleep 0.4
rm "$1/running.$TRAINCTL_ARRAY_TASK_ID"'
export ARRAY_E2E_VENV=/opt/venv-$$
aid=$("$T" submit --name arr --gpus 1 --array 0-9%3 -- bash -c "$script" arr "$WORK/run" \
  2>"$WORK/submit.err") || fail "submit --array: $(cat "$WORK/submit.err")"
[[ $aid =~ ^[0-9]+$ ]] || fail "submit --array printed '$aid', not an array id"
grep "array $aid: 10 job(s) submitted" "$WORK/submit.err" >/dev/null || fail "submit summary: $(cat "$WORK/submit.err")"
for ((k = 0; k < 10; k++)); do
  "$T" wait "$((aid + k))" --timeout 120s >/dev/null || fail "job $((aid + k)) (task $k) did not succeed"
done
ok "array $aid: all 10 tasks succeeded"

max=0
for ((k = 0; k < 10; k++)); do
  out=$("$T" logs "$((aid + k))")
  grep -E "^task=$k slurm=$k array=$aid count=10 venv=/opt/venv-$$ running=[0-9]+$" <<<"$out" >/dev/null ||
    fail "job $((aid + k)): log lacks task=$k with the exported ARRAY_E2E_VENV: $out"
  n=${out##*running=}
  ((n > max)) && max=$n
done
((max <= 3)) || fail "$max array tasks ran at once; the limit is 3"
((max >= 2)) || fail "at most $max task ran at once: the array did not run in parallel"
ok "every task saw its TRAINCTL_ARRAY_TASK_ID / SLURM_ARRAY_TASK_ID and the exported environment; at most $max ran at once (limit 3)"

# 2. list --array shows the 10 tasks; describe names the array.
rows=$("$T" list --array "$aid" | tail -n +2 | grep -c "succeeded")
[[ $rows == 10 ]] || fail "list --array $aid: $rows succeeded rows, expected 10"
"$T" list --array "$aid" | grep -F "arr[${aid}_9]" >/dev/null || fail "list shows no arr[${aid}_9]"
"$T" describe "$((aid + 4))" | grep -E "^Array: +${aid}_4 \(task 4 of array $aid, 10 task\(s\), at most 3 running\)" >/dev/null ||
  fail "describe: no Array line: $("$T" describe "$((aid + 4))")"
ok "list --array and describe show the array"

# 3. cancel --array cancels every unfinished task (one runs, four wait).
bid=$("$T" submit --array 0-4%1 -- sleep 300 2>/dev/null) || fail "second array"
"$T" cancel --array "$bid" >"$WORK/cancel.out" || fail "cancel --array: $(cat "$WORK/cancel.out")"
[[ $(grep -c "^cancelled job" "$WORK/cancel.out") == 5 ]] || fail "cancel --array: $(cat "$WORK/cancel.out")"
for ((k = 0; k < 5; k++)); do
  set +e
  "$T" wait "$((bid + k))" --timeout 60s >/dev/null 2>&1
  rc=$?
  set -e
  state=$("$T" describe "$((bid + k))" | awk '/^State:/ {print $2}')
  [[ $state == cancelled ]] || fail "job $((bid + k)) is $state after cancel --array (wait exit $rc)"
done
ok "cancel --array $bid cancelled all 5 tasks"

# 4. Bad syntax: a usage error naming the flag, nothing submitted.
set +e
err=$("$T" submit --array 9-2 -- true 2>&1)
rc=$?
set -e
[[ $rc == 2 ]] || fail "submit --array 9-2 exited $rc"
grep -F -- '--array 9-2: "9-2": the range ends before it starts' <<<"$err" >/dev/null || fail "bad --array message: $err"
ok "a bad --array is a usage error naming the flag"

e2e_done
