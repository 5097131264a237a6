#!/usr/bin/env bash
# GPU proof of trainctl on one host with 2 GPUs (written for 2 x H200, Ubuntu
# 24.04, no gRPC installed: every trainctl binary and library comes from a
# bundle made by deploy/make_bundle.sh; Python with torch for (c) and (d)).
#
#   (a) two agents, one GPU each ("node-a" --gpus 0, "node-b" --gpus 1): the
#       NCCL example as a 2-rank gang over both (--nodes 2 --gpus-per-node 1);
#   (b) a fresh cluster with ONE agent offering both GPUs: the NCCL example as
#       --gpus 2, alternating with the same binary launched by hand
#       (--mode hand) for the bandwidth comparison;
#   (c) ddp_train.py as a 2-rank gang through trainctl vs
#       `torchrun --standalone --nproc-per-node 2`, alternating, 3 runs each;
#   (d) four --gpu-fraction 0.25 experiments at once: all on the same GPU?
#   (e) `trainctl nodes`.
# Submit -> running of every job comes from `trainctl describe -o json`
# (submit_time_ms, start_time_ms).
#
# Writes OUT_DIR/gpu_proof.json (everything measured, one file) and
# OUT_DIR/gpu_proof.log (raw logs). Budget: under 8 minutes; every wait has a
# timeout; every process started here is stopped on exit.
#
# Usage: gpu_proof.sh BUNDLE_DIR OUT_DIR
set -uo pipefail

# bundle_args, log, append_file, free_port, tc, kill_tree, use_host_nccl.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundle_args "$0" "$@"
LOG=$OUT/gpu_proof.log
WORK=$(mktemp -d /tmp/gpu_proof.XXXXXX)
REC=$WORK/records.jsonl
PY=$(command -v python3 || true)
: >"$LOG"
: >"$REC"

# NVLink SHARP (multicast) stays off on these machines.
export NCCL_NVLS_ENABLE=0
export CUDA_DEVICE_ORDER=PCI_BUS_ID

T0=$SECONDS
BUDGET_S=440   # leaves ~40 s for cleanup and the report within 8 minutes

ADDR=""
CLUSTER=""       # tag of the current cluster; job ids restart with each
PIDS=()          # coordinator and agents of the current cluster
OTHER_PIDS=()    # hand-launched ranks, torchrun
CUR_PID=""       # the bounded command run_bounded waits on
JOBS=()          # every job id submitted
SUMMARIZED=0

left_s() { echo $((BUDGET_S - (SECONDS - T0))); }
# cap_s WANT: WANT seconds, or what is left of the budget (at least 5).
cap_s() {
  local l
  l=$(left_s)
  ((l < 5)) && l=5
  echo $(($1 < l ? $1 : l))
}
# rec KEY=VALUE...: one record (a JSON object of strings) for the report.
rec() { "$PY" -c 'import json,sys; print(json.dumps(dict(a.split("=",1) for a in sys.argv[1:])))' "$@" >>"$REC"; }
now_s() { date +%s.%N; }
elapsed_s() { "$PY" -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 3))" "$1" "$2"; }
# run_bounded CMD...: runs CMD in the background and waits for it, so that a
# SIGINT/SIGTERM to this script is handled at once rather than after CMD.
run_bounded() {
  local rc
  "$@" &
  CUR_PID=$!
  wait "$CUR_PID"
  rc=$?
  CUR_PID=""
  return "$rc"
}
# append_file TITLE FILE: copies a raw log into gpu_proof.log.

# kill_tree PID...: SIGTERM each process group (started with setsid), then
# SIGKILL what is left after up to 10 s.

# Task processes started by agents from this bundle (their command lines name
# $BUNDLE), in case an agent died without stopping them.
kill_bundle_leftovers() {
  local p cmd pids=()
  for p in $(pgrep -f -- "$BUNDLE/"); do
    [[ "$p" == "$$" ]] && continue
    cmd=$(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null) || continue
    # Not this script (nor its subshells).
    [[ "$cmd" == *gpu_proof.sh* ]] && continue
    pids+=("$p")
  done
  if ((${#pids[@]} > 0)); then
    log "killing leftover processes: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
}

stop_cluster() {
  if ((${#PIDS[@]} > 0)); then
    log "stopping coordinator and agents (${PIDS[*]})"
    kill_tree "${PIDS[@]}"
  fi
  PIDS=()
  kill_bundle_leftovers
}

# start_cluster TAG NAME:GPUS:PORTS...: a coordinator with a fresh state dir
# and one agent per NAME:GPUS:PORTS; waits until `trainctl nodes` lists them.
start_cluster() {
  local tag=$1 spec name gpus ports i ok
  shift
  stop_cluster
  ADDR="127.0.0.1:$(free_port)"
  CLUSTER=$tag
  mkdir -p "$WORK/state-$tag"

  log "cluster $tag: coordinator at $ADDR, agents: $*"
  setsid "$BIN/trainctl-coordinator" --listen "$ADDR" --state-dir "$WORK/state-$tag" \
    >>"$WORK/coordinator-$tag.log" 2>&1 &
  PIDS+=("$!")
  for i in $(seq 1 40); do
    tc nodes >/dev/null 2>&1 && break
    if ! kill -0 "${PIDS[0]}" 2>/dev/null; then
      log "ERROR: the coordinator exited: $(tail -n 3 "$WORK/coordinator-$tag.log" | tr '\n' ' ')"
      rec kind=error scenario="$tag" message="coordinator exited at start"
      return 1
    fi
    sleep 0.5
  done
  for spec in "$@"; do
    IFS=: read -r name gpus ports <<<"$spec"
    mkdir -p "$WORK/logs-$tag-$name"
    setsid "$BIN/trainctl-agent" --coordinator "$ADDR" --node-name "$name" \
      --gpus "$gpus" --log-dir "$WORK/logs-$tag-$name" --port-range "$ports" \
      --address 127.0.0.1 >>"$WORK/agent-$tag-$name.log" 2>&1 &
    PIDS+=("$!")
  done
  for i in $(seq 1 60); do
    ok=1
    tc nodes >"$WORK/nodes-$tag.txt" 2>&1 || ok=0
    for spec in "$@"; do
      grep -q -- "${spec%%:*}" "$WORK/nodes-$tag.txt" || ok=0
    done
    ((ok == 1)) && break
    sleep 0.5
  done
  append_file "trainctl nodes after start of cluster $tag" "$WORK/nodes-$tag.txt"
  if ((ok != 1)); then
    log "ERROR: cluster $tag did not come up within 30 s"
    rec kind=error scenario="$tag" message="cluster did not come up within 30 s"
    return 1
  fi
  return 0
}

# collect_job SCENARIO MODE JOB RC WALL_S NRANKS: saves describe and rank logs
# and records the run.
collect_job() {
  local scen=$1 mode=$2 job=$3 rc=$4 wall=$5 n=$6 r
  local base="$WORK/job-$CLUSTER-$job"
  tc describe "$job" -o json >"$base.json" 2>>"$WORK/cli.log"
  append_file "describe job $job of cluster $CLUSTER ($scen/$mode)" "$base.json"
  for ((r = 0; r < n; r++)); do
    tc logs "$job" --rank "$r" >"$base-rank$r.log" 2>&1
    append_file "job $job of cluster $CLUSTER, rank $r log ($scen/$mode)" "$base-rank$r.log"
  done
  rec kind=run scenario="$scen" mode="$mode" job="$job" cluster="$CLUSTER" rc="$rc" \
    wall_s="$wall" describe="$base.json" log="$base-rank0.log"
}

# submit_job NAME SUBMIT_ARGS... -- CMD...: prints the job id.
submit_job() {
  local name=$1 out id
  shift
  out=$(tc submit --name "$name" "$@" 2>>"$WORK/cli.log") || {
    log "ERROR: submit $name failed: $(tail -n 3 "$WORK/cli.log" | tr '\n' ' ')"
    return 1
  }
  id=$(grep -oE '[0-9]+' <<<"$out" | tail -n 1)
  if [[ -z "$id" ]]; then
    log "ERROR: submit $name printed no job id: $out"
    return 1
  fi
  JOBS+=("$id")
  echo "$id"
}

# run_job SCENARIO MODE NRANKS TIMEOUT_S SUBMIT_ARGS... -- CMD...: submit,
# wait (bounded), collect.
run_job() {
  local scen=$1 mode=$2 n=$3 to=$4 t1 job rc
  shift 4
  t1=$(now_s)
  job=$(submit_job "$scen-$mode" "$@") || {
    rec kind=error scenario="$scen" mode="$mode" message="submit failed"
    return 1
  }
  log "$scen/$mode: job $job submitted; waiting up to $(cap_s "$to") s"
  run_bounded timeout "$(cap_s "$to")" "$BIN/trainctl" --coordinator "$ADDR" \
    wait "$job" >>"$WORK/cli.log" 2>&1
  rc=$?
  if ((rc == 124)); then
    log "$scen/$mode: job $job still not done at the timeout; cancelling it"
    tc cancel "$job" >>"$WORK/cli.log" 2>&1
  fi
  log "$scen/$mode: job $job ended, wait exit status $rc"
  collect_job "$scen" "$mode" "$job" "$rc" "$(elapsed_s "$t1" "$(now_s)")" "$n"
}

# run_hand_nccl SCENARIO RUN: the NCCL example's --mode hand on GPUs 0 and 1.
run_hand_nccl() {
  local scen=$1 i=$2 id="$WORK/nccl-$2.id" t1 p0 p1 rc0 rc1 to
  rm -f "$id" "$id.tmp"
  to=$(cap_s 90)
  t1=$(now_s)
  CUDA_VISIBLE_DEVICES=0,1 setsid timeout "$to" "$BIN/trainctl-nccl-allreduce" \
    --mode hand --rank 0 --nranks 2 --id-file "$id" >"$WORK/hand-$i-rank0.log" 2>&1 &
  p0=$!
  CUDA_VISIBLE_DEVICES=0,1 setsid timeout "$to" "$BIN/trainctl-nccl-allreduce" \
    --mode hand --rank 1 --nranks 2 --id-file "$id" >"$WORK/hand-$i-rank1.log" 2>&1 &
  p1=$!
  OTHER_PIDS+=("$p0" "$p1")
  wait "$p0"
  rc0=$?
  wait "$p1"
  rc1=$?
  log "$scen/hand run $i: exit status $rc0 $rc1"
  append_file "hand run $i rank 0" "$WORK/hand-$i-rank0.log"
  append_file "hand run $i rank 1" "$WORK/hand-$i-rank1.log"
  rec kind=run scenario="$scen" mode=hand job="" rc="$((rc0 > rc1 ? rc0 : rc1))" \
    wall_s="$(elapsed_s "$t1" "$(now_s)")" log="$WORK/hand-$i-rank0.log"
}

run_torchrun() {
  local scen=$1 i=$2 t1 p rc
  t1=$(now_s)
  CUDA_VISIBLE_DEVICES=0,1 setsid timeout "$(cap_s 150)" "$PY" -m torch.distributed.run \
    --standalone --nproc-per-node 2 "$SHARE/ddp_train.py" >"$WORK/torchrun-$i.log" 2>&1 &
  p=$!
  OTHER_PIDS+=("$p")
  wait "$p"
  rc=$?
  log "$scen/torchrun run $i: exit status $rc"
  append_file "torchrun run $i" "$WORK/torchrun-$i.log"
  rec kind=run scenario="$scen" mode=torchrun job="" rc="$rc" \
    wall_s="$(elapsed_s "$t1" "$(now_s)")" log="$WORK/torchrun-$i.log"
}

# Builds gpu_proof.json from the records and the saved files.
summarize() {
  ((SUMMARIZED == 1)) && return 0
  SUMMARIZED=1
  "$PY" - "$REC" "$OUT/gpu_proof.json" "$WORK" "$((SECONDS - T0))" <<'PYEOF'
import json, os, statistics, sys

rec_path, out_path, work, elapsed = sys.argv[1:5]


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return None


def field(msg, snake):
    """A field of protobuf JSON under its original or lowerCamelCase name."""
    if not isinstance(msg, dict):
        return None
    if snake in msg:
        return msg[snake]
    parts = snake.split("_")
    return msg.get(parts[0] + "".join(p.title() for p in parts[1:]))


def as_int(v):
    try:
        return int(v)  # proto3 JSON prints int64 as strings
    except (TypeError, ValueError):
        return None


def last_json_line(text):
    for line in reversed((text or "").splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def job_of(describe):
    if isinstance(describe, dict) and isinstance(describe.get("job"), dict):
        return describe["job"]
    return describe


records = []
with open(rec_path) as f:
    for line in f:
        if line.strip():
            records.append(json.loads(line))

report = {"elapsed_s": int(elapsed), "scenarios": {}, "errors": []}
env = load_json(os.path.join(work, "env.json"))
if env:
    report["env"] = env

for r in records:
    if r.get("kind") == "error":
        report["errors"].append(r)
        continue
    if r.get("kind") != "run":
        continue
    run = {"mode": r["mode"], "rc": as_int(r.get("rc")), "wall_s": float(r["wall_s"])}
    if r.get("job"):
        run["job_id"] = as_int(r["job"])
        run["cluster"] = r.get("cluster")
        job = job_of(load_json(r.get("describe", "")))
        if job is not None:
            run["state"] = field(job, "state")
            sub = as_int(field(job, "submit_time_ms"))
            start = as_int(field(job, "start_time_ms"))
            end = as_int(field(job, "end_time_ms"))
            if sub and start:
                run["submit_to_running_ms"] = start - sub
            if start and end:
                run["running_s"] = (end - start) / 1e3
            tasks = field(job, "tasks") or []
            run["placement"] = [
                {"rank": field(t, "rank"), "node": field(t, "node"),
                 "gpu_indices": field(t, "gpu_indices"),
                 "gpu_uuids": field(t, "gpu_uuids")} for t in tasks]
        else:
            run["describe_error"] = "no describe output"
    run["result"] = last_json_line(read(r.get("log", "")))
    report["scenarios"].setdefault(r["scenario"], {}).setdefault(r["mode"], []).append(run)


def median(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return round(statistics.median(xs), 3) if xs else None


# Medians per scenario and mode.
for scen, modes in report["scenarios"].items():
    summary = {}
    for mode, runs in modes.items():
        s = {"runs": len(runs), "ok": sum(1 for x in runs if x["rc"] == 0),
             "wall_s": median([x["wall_s"] for x in runs])}
        if any("submit_to_running_ms" in x for x in runs):
            s["submit_to_running_ms"] = median([x.get("submit_to_running_ms") for x in runs])
        keys = set()
        for x in runs:
            if isinstance(x.get("result"), dict):
                keys |= {k for k, v in x["result"].items()
                         if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for k in sorted(keys):
            s[k] = median([(x.get("result") or {}).get(k) for x in runs])
        if any(isinstance(x.get("result"), dict) and "correct" in x["result"] for x in runs):
            s["all_correct"] = all((x.get("result") or {}).get("correct") is True for x in runs)
        summary[mode] = s
    modes["summary"] = summary

# (d): did the four experiments share one GPU while running?
d_jobs = []
for name in sorted(os.listdir(work)):
    if name.startswith("d-running-job-") and name.endswith(".json"):
        job = job_of(load_json(os.path.join(work, name)))
        if job is None:
            continue
        tasks = field(job, "tasks") or [{}]
        t = tasks[0] if tasks else {}
        d_jobs.append({"job_id": as_int(field(job, "id")), "state": field(job, "state"),
                       "node": field(t, "node"), "gpu_uuids": field(t, "gpu_uuids"),
                       "gpu_indices": field(t, "gpu_indices"),
                       "reserved_bytes_per_gpu": as_int(field(t, "reserved_bytes_per_gpu"))})
if d_jobs:
    d = report["scenarios"].setdefault("d", {})
    d["while_running"] = d_jobs
    gpus = {(j["node"], json.dumps(j["gpu_uuids"])) for j in d_jobs}
    d["all_running_together"] = all("RUNNING" in str(j["state"]) for j in d_jobs)
    d["same_gpu"] = len(d_jobs) == 4 and len(gpus) == 1 and bool(d_jobs[0]["gpu_uuids"])
    d["nodes_while_running"] = read(os.path.join(work, "d-nodes.txt"))
    d["nodes_json_while_running"] = load_json(os.path.join(work, "d-nodes.json"))
    d["nvidia_smi_while_running"] = read(os.path.join(work, "d-nvidia-smi.txt"))

# (b), (c): comparisons.
def ratio(a, b):
    return round(a / b, 3) if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else None

b = report["scenarios"].get("b", {}).get("summary", {})
if b:
    report["scenarios"]["b"]["busbw_trainctl_over_hand"] = ratio(
        b.get("trainctl", {}).get("busbw_gbps"), b.get("hand", {}).get("busbw_gbps"))
c = report["scenarios"].get("c", {}).get("summary", {})
if c:
    report["scenarios"]["c"]["samples_per_s_trainctl_over_torchrun"] = ratio(
        c.get("trainctl", {}).get("samples_per_s"), c.get("torchrun", {}).get("samples_per_s"))
    report["scenarios"]["c"]["first_allreduce_s_trainctl_minus_torchrun"] = (
        round(c["trainctl"]["time_to_first_allreduce_s"] - c["torchrun"]["time_to_first_allreduce_s"], 3)
        if isinstance(c.get("trainctl", {}).get("time_to_first_allreduce_s"), (int, float))
        and isinstance(c.get("torchrun", {}).get("time_to_first_allreduce_s"), (int, float)) else None)

report["nodes_final"] = read(os.path.join(work, "e-nodes.txt"))
report["work_dir"] = work
with open(out_path, "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)
print(json.dumps({k: v.get("summary") for k, v in report["scenarios"].items()
                  if isinstance(v, dict) and "summary" in v}, indent=1))
PYEOF
}

# shellcheck disable=SC2317  # invoked by the EXIT trap
cleanup() {
  local rc=$? j f
  set +e
  trap - EXIT INT TERM
  [[ -n "$CUR_PID" ]] && kill -TERM "$CUR_PID" 2>/dev/null
  if [[ -n "$ADDR" ]] && ((${#PIDS[@]} > 0)); then
    for j in "${JOBS[@]}"; do
      timeout 5 "$BIN/trainctl" --coordinator "$ADDR" cancel "$j" >/dev/null 2>&1
    done
  fi
  ((${#OTHER_PIDS[@]} > 0)) && kill_tree "${OTHER_PIDS[@]}"
  stop_cluster
  for f in "$WORK"/coordinator-*.log "$WORK"/agent-*.log "$WORK"/cli.log; do
    [[ -f "$f" ]] && append_file "$(basename "$f")" "$f"
  done
  [[ -n "$PY" ]] && summarize >>"$LOG" 2>&1
  log "done in $((SECONDS - T0)) s (exit $rc); report: $OUT/gpu_proof.json; raw: $LOG; work dir $WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ------------------------------------------------------------------ checks
for b in trainctl trainctl-coordinator trainctl-agent trainctl-nccl-allreduce; do
  if [[ ! -x "$BIN/$b" ]]; then
    log "ERROR: $BIN/$b missing: build it and rerun deploy/make_bundle.sh"
    exit 1
  fi
done
if [[ -z "$PY" ]]; then
  echo "python3 is needed" >&2
  exit 1
fi

use_host_nccl "the NCCL example"

have_torch=0
"$PY" -c 'import torch; assert torch.cuda.device_count() >= 2' 2>>"$LOG" && have_torch=1

{
  nvidia-smi --query-gpu=index,name,uuid,memory.total,driver_version --format=csv 2>&1
  nvidia-smi topo -m 2>&1
} >"$WORK/nvidia-smi.txt"
append_file "nvidia-smi" "$WORK/nvidia-smi.txt"
"$PY" - "$WORK/env.json" "$WORK/nvidia-smi.txt" "$BUNDLE" "$have_torch" <<'PYEOF'
import json, platform, socket, sys
out, smi, bundle, have_torch = sys.argv[1:5]
env = {"hostname": socket.gethostname(), "kernel": platform.release(),
       "python": platform.python_version(), "bundle": bundle,
       "nvidia_smi": open(smi, errors="replace").read()}
if have_torch == "1":
    import torch
    env["torch"] = torch.__version__
    env["torch_nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
print(json.dumps(env), file=open(out, "w"))
PYEOF
log "bundle $BUNDLE, work dir $WORK, torch available: $have_torch"

# ------------------------------------------------- (a) two agents, one GPU each
# GPU_PROOF_SCENARIOS (default "a b c d") picks scenarios; DDP_RUNS (default
# 3) sets the trainctl/torchrun pairs of (c).
has_scen() { [[ " ${GPU_PROOF_SCENARIOS:-a b c d} " == *" $1 "* ]]; }
if has_scen a && start_cluster a "node-a:0:29500-29549" "node-b:1:29550-29599"; then
  run_job a trainctl 2 120 --nodes 2 --gpus-per-node 1 --env NCCL_NVLS_ENABLE=0 \
    -- "$BIN/trainctl-nccl-allreduce"
fi

# --------------------------------------- (b) one agent with both GPUs vs by hand
if { has_scen b || has_scen c || has_scen d; } && start_cluster b "node-ab:0,1:29500-29599"; then
  for i in $(seq 1 "${NCCL_RUNS:-2}"); do
    has_scen b || break
    (($(left_s) < 60)) && break
    run_job b trainctl 2 90 --gpus 2 --env NCCL_NVLS_ENABLE=0 -- "$BIN/trainctl-nccl-allreduce"
    run_hand_nccl b "$i"
  done

  # ------------------------------------------- (c) DDP: trainctl vs torchrun
  if ((have_torch == 1)) && has_scen c; then
    for i in $(seq 1 "${DDP_RUNS:-3}"); do
      if (($(left_s) < 120)); then
        log "c: skipping run $i and later: $(left_s) s of budget left"
        rec kind=error scenario=c message="skipped run $i and later: out of time budget"
        break
      fi
      # DDP_PREFIX: words put before the trainctl job's command (e.g. "env
      # OMP_NUM_THREADS=1", what torchrun sets; the launch contract's own
      # variables win over --env), to compare launch environments.
      # shellcheck disable=SC2086
      run_job c trainctl 2 150 --gpus 2 --env NCCL_NVLS_ENABLE=0 \
        -- ${DDP_PREFIX:-} "$PY" "$SHARE/ddp_train.py"
      run_torchrun c "$i"
    done
  else
    rec kind=error scenario=c message="python3 has no torch with 2 GPUs: skipped"
  fi

  # ---------------------------- (d) four 0.25-GPU experiments sharing one GPU
  if ((have_torch == 1)) && has_scen d && (($(left_s) > 60)); then
    djobs=()
    td=$(now_s)
    for i in 1 2 3 4; do
      j=$(submit_job "d-exp-$i" --gpu-fraction 0.25 -- "$PY" "$SHARE/gpu_experiment.py" \
        --seconds 20 --mem-mib 512) && djobs+=("$j")
    done
    log "d: submitted ${djobs[*]}"
    # Wait until all are RUNNING (or 60 s), then look at the cluster.
    for _ in $(seq 1 120); do
      running=0
      for j in "${djobs[@]}"; do
        tc describe "$j" -o json >"$WORK/d-running-job-$j.json" 2>>"$WORK/cli.log"
        grep -q 'RUNNING' "$WORK/d-running-job-$j.json" && running=$((running + 1))
      done
      ((running == ${#djobs[@]})) && break
      sleep 0.5
    done
    log "d: $running of ${#djobs[@]} running together; looking again in 10 s, once they compute"
    sleep 10
    for j in "${djobs[@]}"; do
      tc describe "$j" -o json >"$WORK/d-running-job-$j.json" 2>>"$WORK/cli.log"
    done
    tc nodes >"$WORK/d-nodes.txt" 2>&1
    tc nodes -o json >"$WORK/d-nodes.json" 2>>"$WORK/cli.log"
    nvidia-smi >"$WORK/d-nvidia-smi.txt" 2>&1
    append_file "d: trainctl nodes while running" "$WORK/d-nodes.txt"
    append_file "d: nvidia-smi while running" "$WORK/d-nvidia-smi.txt"
    for j in "${djobs[@]}"; do
      run_bounded timeout "$(cap_s 90)" "$BIN/trainctl" --coordinator "$ADDR" \
        wait "$j" >>"$WORK/cli.log" 2>&1
      collect_job d experiment "$j" "$?" "$(elapsed_s "$td" "$(now_s)")" 1
    done
  else
    rec kind=error scenario=d message="skipped: no torch or out of time budget"
  fi

  # ------------------------------------------------------- (e) trainctl nodes
  tc nodes >"$WORK/e-nodes.txt" 2>&1
  append_file "e: trainctl nodes" "$WORK/e-nodes.txt"
fi

summarize
exit 0
