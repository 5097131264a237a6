#!/usr/bin/env bash
# End-to-end test of experiment records through the real binaries: a job that
# reports metrics with `trainctl report` from inside its task, fails its first
# attempt after writing a checkpoint and resumes from it in the second;
# `trainctl metrics`, `describe` and `sweep compare` show the records, and the
# metrics survive a coordinator restart. Usage: experiments_e2e.sh BUILD_BIN_DIR
# Every wait is on a condition (trainctl wait long-polls) with a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init experiments-e2e "${1:-}"
T="$BIN/trainctl"

start_coordinator() {
  "$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
    --checkpoint-root "$WORK/ckpt" --node-timeout 5s \
    >"$WORK/coord.out" 2>>"$WORK/coord.log" &
  COORD_PID=$!
  PIDS+=("$COORD_PID")
  local line
  line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
  export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
}

start_coordinator
"$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name exp-node \
  --fake-gpus 2:H200-fake:141GiB --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"

# 1. Attempt 0 reports two steps, writes a checkpoint and fails (exit 3);
#    attempt 1 finds the checkpoint in the same TRAINCTL_CHECKPOINT_DIR,
#    reports, and succeeds.
script='
set -e
"$0" report loss=2.5 --step 1
"$0" report loss=1.5 acc=0.5 --step 2
echo "attempt=$TRAINCTL_ATTEMPT ckpt=$TRAINCTL_CHECKPOINT_DIR"
if [ "$TRAINCTL_ATTEMPT" = 0 ]; then echo step2 > "$TRAINCTL_CHECKPOINT_DIR/last"; exit 3; fi
grep -q step2 "$TRAINCTL_CHECKPOINT_DIR/last"
"$0" report loss=0.5 --step 3'
id=$("$T" submit --name resumer --max-restarts 1 -- bash -c "$script" "$T")
"$T" wait "$id" || fail "job $id did not succeed on its second attempt"
[[ -f $WORK/ckpt/$id/last ]] || fail "no checkpoint file in $WORK/ckpt/$id"
"$T" logs "$id" | grep -q "attempt=1 ckpt=$WORK/ckpt/$id" || fail "attempt 1's TRAINCTL_CHECKPOINT_DIR"
ok "job $id resumed from $WORK/ckpt/$id in attempt 1"

# 2. trainctl metrics: both attempts' points; loss 2.5 1.5 | 2.5 1.5 0.5.
out=$("$T" metrics "$id")
echo "$out"
grep -qE '^acc +2 +0\.5 +2 +0\.5 +0\.5$' <<<"$out" || fail "acc row"
grep -qE '^loss +5 +0\.5 +3 +0\.5 +2\.5$' <<<"$out" || fail "loss row"
"$T" metrics "$id" --key loss -o json | python3 -c '
import json, sys
m = json.load(sys.stdin)
(s,) = m["series"]
assert [p["value"] for p in s["points"]] == [2.5, 1.5, 2.5, 1.5, 0.5], s
assert [p["attempt"] for p in s["points"]] == [0, 0, 1, 1, 1], s
assert all(int(p["time_ms"]) > 0 for p in s["points"])
' || fail "metrics -o json history"
ok "trainctl metrics: last/min/max table and plot-ready JSON"

# 3. describe: checkpoint dir, GPU-hours, both attempts with their exits.
out=$("$T" describe "$id")
grep -q "Checkpoint:  $WORK/ckpt/$id" <<<"$out" || fail "describe: checkpoint dir"
grep -qE '^GPU-hours: ' <<<"$out" || fail "describe: GPU-hours"
grep -qE '^0 +restarted .* 0:3 +exp-node:' <<<"$out" || fail "describe: attempt 0"
grep -qE '^1 +succeeded .* 0:0 +exp-node:' <<<"$out" || fail "describe: attempt 1"
ok "describe lists attempts, exit codes, logs, GPU-hours and the checkpoint dir"

# 4. A report with a wrong token, or none, is refused.
set +e
msg=$(TRAINCTL_JOB_ID=$id TRAINCTL_ATTEMPT=1 TRAINCTL_TOKEN=0123 "$T" report loss=9 2>&1); rc=$?
set -e
[[ $rc == 1 && $msg == *"not the token of job $id"* ]] || fail "wrong token: rc=$rc '$msg'"
set +e; msg=$(env -u TRAINCTL_JOB_ID "$T" report loss=9 2>&1); rc=$?; set -e
[[ $rc == 2 && $msg == *"TRAINCTL_JOB_ID is not set"* ]] || fail "outside a task: rc=$rc '$msg'"
ok "reports without the attempt's token are refused"

# 5. A sweep whose trials report val_loss = lr; compare ranks them.
sw=$("$T" sweep --sweep-id sw-e2e --gpu-fraction 0.25 --grid lr=0.3,0.1,0.2 -- \
     bash -c "\"\$0\" report val_loss={lr} --step 10" "$T" 2>/dev/null)
for j in $("$T" sweep describe "$sw" -o json | python3 -c '
import json, sys
print(" ".join(str(j["id"]) for j in json.load(sys.stdin)["jobs"]))'); do
  "$T" wait "$j" || fail "trial $j"
done
out=$("$T" sweep compare "$sw" --metric val_loss)
echo "$out"
[[ $(sed -n 2p <<<"$out") =~ ^1\ +[0-9]+\ +succeeded\ +0\.1\ +0\.1\ +10 ]] || fail "best trial first"
[[ $(sed -n 4p <<<"$out") =~ ^3\ +[0-9]+\ +succeeded\ +0\.3\ +0\.3\ +10 ]] || fail "worst trial last"
"$T" sweep describe "$sw" --metric val_loss | grep -q "Best trials by val_loss" || fail "sweep describe --metric"
ok "sweep compare ranks the trials by val_loss"

# 6. From Python through the C ABI (libtrainctl_nccl.so, built where NCCL
#    is): 100 steps batched by the library, the tail flushed at exit.
SO=$(cd "$BIN/.." && pwd)/lib/libtrainctl_nccl.so
PYDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../worker/nccl/python" && pwd)
if [[ -f $SO ]]; then
  pid=$("$T" submit --gpu-fraction 0.25 -- python3 -c '
import os, sys
os.environ["TRAINCTL_NCCL_LIB"] = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from trainctl_metrics import report
for step in range(100):
    report(loss=1.0 / (step + 1), step=step)
' "$SO" "$PYDIR")
  "$T" wait "$pid" || { "$T" logs "$pid" >&2; fail "python reporter job $pid"; }
  "$T" metrics "$pid" | grep -qE '^loss +100 +0\.01 +99 +0\.01 +1$' ||
    fail "python reporter: $("$T" metrics "$pid")"
  ok "python via the C ABI: 100 batched points, the last flushed at exit"
else
  echo "skip: $SO not built (no NCCL here)"
fi

# 7. Metrics are durable: a restarted coordinator still has them.
kill "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
: >"$WORK/coord.out"
start_coordinator
"$T" metrics "$id" | grep -qE '^loss +5 ' || fail "metrics after a coordinator restart"
ok "metrics survive a coordinator restart"
e2e_done
