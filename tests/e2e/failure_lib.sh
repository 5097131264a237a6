# Helpers of the failure-handling end-to-end tests (sourced after lib.sh):
# agent_loss_e2e.sh and netns_partition_e2e.sh. TC holds the trainctl command
# (set it to run the CLI elsewhere, e.g. inside a network namespace).
#   submit_gang            submits a 2-node x 1-GPU gang (max 1 restart) whose
#                          ranks append "ATTEMPT RANK RESTART_COUNT PID" to
#                          $WORK/ranks and sleep; sets JOB
#   wait_ranks ATTEMPT     waits (30 s) until both ranks of ATTEMPT started
#   rank_pid ATTEMPT RANK  the pid a rank wrote
#   rank_nodes JOB         "NODE_OF_RANK0 NODE_OF_RANK1" of the current attempt
#   alive PID              true while PID runs (not gone, not a zombie)
#   wait_dead PID SECS     waits until PID no longer runs
#   check_restart NODE     fails unless the job is on attempt 1, off NODE, and
#                          its ranks saw TORCHELASTIC_RESTART_COUNT=1
TC=${TC:-}

tc() { if [[ -n $TC ]]; then $TC "$@"; else "$BIN/trainctl" "$@"; fi; }

submit_gang() {
  : >"$WORK/ranks"
  JOB=$(tc submit --name gang --nodes 2 --gpus-per-node 1 --max-restarts 1 -- \
    sh -c "echo \$TRAINCTL_ATTEMPT \$RANK \$TORCHELASTIC_RESTART_COUNT \$\$ >> $WORK/ranks; exec sleep 1000")
  [[ $JOB =~ ^[0-9]+$ ]] || fail "submit printed '$JOB', not a job id"
}

wait_ranks() {
  local end=$((SECONDS + 30))
  while ((SECONDS < end)); do
    (($(awk -v a="$1" '$1 == a' "$WORK/ranks" | wc -l) >= 2)) && return 0
    read -rt 0.05 <> <(:) || true
  done
  return 1
}

rank_pid() { awk -v a="$1" -v r="$2" '$1 == a && $2 == r { print $4; exit }' "$WORK/ranks"; }

rank_nodes() {
  tc describe "$1" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
job = j.get("job", j)
nodes = {t.get("rank", 0): t["node"] for t in job["tasks"]}
print(nodes.get(0, "?"), nodes.get(1, "?"))'
}

alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != Z ]]
}

wait_dead() {
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    alive "$1" || return 0
    read -rt 0.05 <> <(:) || true
  done
  ! alive "$1"
}

check_restart() {
  local bad=$1 attempt nodes
  attempt=$(tc describe "$JOB" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
print(j.get("job", j).get("attempt", 0))')
  [[ $attempt == 1 ]] || fail "job $JOB is on attempt $attempt, want 1"
  nodes=$(rank_nodes "$JOB")
  [[ " $nodes " != *" $bad "* ]] || fail "attempt 1 placed on lost node $bad: $nodes"
  [[ $(awk '$1 == 1 && $3 == 1' "$WORK/ranks" | wc -l) == 2 ]] ||
    fail "attempt 1 ranks did not see TORCHELASTIC_RESTART_COUNT=1: $(cat "$WORK/ranks")"
}
