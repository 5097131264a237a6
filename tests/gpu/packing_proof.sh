#!/usr/bin/env bash
# GPU proof of auto-packing on one GPU (written for one H100 or
# H200; no gRPC installed: every trainctl binary and library comes from a
# bundle made by deploy/make_bundle.sh; Python 3 with PyTorch).
#
# The same 16-trial sweep (packing_train.py: a small CNN on synthetic
# CIFAR-sized data, lr x seed = 4 x 4 trials of equal work) runs twice, each
# on a fresh coordinator + one agent offering GPU 0, for the same window of
# WINDOW_S seconds from submit:
#   baseline: `trainctl sweep --gpus 1`: one trial per GPU (whole-GPU trials run
#             one after another);
#   packed:   `trainctl sweep --auto-pack`: the coordinator admits trials onto
#             the GPU while measured utilization and memory leave room.
# Aggregate throughput = samples processed by all trials by the end of the
# window (or by the last trial's end, if all finish earlier), divided by the
# time from submit: startup, ramp-up and every trainctl overhead count.
# Every trial prints {"t", "samples", "samples_per_s"} JSON lines (read here
# from the agent's task logs until `trainctl report` exists). `trainctl top
# --once -o json` is polled every 2 s: GPU utilization as NVML reports it
# through the agent, and the trials on the GPU (the k the packer chose).
#
# Writes OUT_DIR/packing_proof.json (figures and verdict) and
# OUT_DIR/packing_proof.log (raw logs). Budget: under 8 minutes; every wait
# has a timeout; every process started here is stopped on exit.
#
# Usage: packing_proof.sh BUNDLE_DIR OUT_DIR
#   env: WINDOW_S=150 (per mode), STEPS=6000 (per trial; make a trial last
#   well beyond the settle time), SETTLE=8s (coordinator --auto-pack-settle:
#   a trial imports torch and creates its CUDA context in the first ~5 s).
# Dry run without a GPU (checks the plumbing only): DRY_RUN=1 uses one fake
# GPU and skips the PyTorch check; share/packing_train.py must then be a
# CPU stand-in printing the same JSON lines.
set -uo pipefail

# bundle_args, log, append_file, free_port, tc, kill_tree, use_host_nccl.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundle_args "$0" "$@"
LOG=$OUT/packing_proof.log
WORK=$(mktemp -d /tmp/packing_proof.XXXXXX)
PY=$(command -v python3 || true)
WINDOW_S=${WINDOW_S:-150}
DRY_RUN=${DRY_RUN:-}
AGENT_GPUS=(--gpus 0)
[[ -n "$DRY_RUN" ]] && AGENT_GPUS=(--fake-gpus 1:dry-run:80GiB)
STEPS=${STEPS:-6000}
export SETTLE=${SETTLE:-8s}
: >"$LOG"

export NCCL_NVLS_ENABLE=0
export CUDA_DEVICE_ORDER=PCI_BUS_ID

T0=$SECONDS
PIDS=()
ADDR=""



# Trials started by this script's agents (their command lines name the
# bundle's packing_train.py), in case an agent died without stopping them.
kill_trials() {
  local p pids=()
  for p in $(pgrep -f -- "$SHARE/packing_train.py"); do pids+=("$p"); done
  if ((${#pids[@]} > 0)); then
    log "killing leftover trials: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
}

stop_cluster() {
  if ((${#PIDS[@]} > 0)); then
    log "stopping coordinator and agent (${PIDS[*]})"
    kill_tree "${PIDS[@]}"
  fi
  PIDS=()
  kill_trials
}

cleanup() {
  stop_cluster
  # Keep the raw material next to the report.
  for f in "$WORK"/coordinator-*.log "$WORK"/agent-*.log "$WORK"/sweep-*.json; do
    [[ -f "$f" ]] && append_file "$(basename "$f")" "$f"
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z "$PY" ]] || { [[ -z "$DRY_RUN" ]] && ! "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>>"$LOG"; }; then
  log "ERROR: python3 with CUDA-enabled PyTorch is needed"
  "$PY" -c 'import json,sys; json.dump({"error": "no python3 with CUDA torch"}, open(sys.argv[1], "w"))' \
    "$OUT/packing_proof.json" 2>/dev/null
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$WORK/gpu.txt" 2>&1
log "GPU: $(head -n 1 "$WORK/gpu.txt")"

# start_cluster TAG [COORDINATOR FLAGS...]: a coordinator with a fresh state
# dir and one agent offering GPU 0; waits until `trainctl nodes` lists it.
start_cluster() {
  local tag=$1 i
  shift
  stop_cluster
  ADDR="127.0.0.1:$(free_port)"
  mkdir -p "$WORK/state-$tag" "$WORK/logs-$tag"
  log "cluster $tag: coordinator at $ADDR $*"
  setsid "$BIN/trainctl-coordinator" --listen "$ADDR" --state-dir "$WORK/state-$tag" \
    "$@" >>"$WORK/coordinator-$tag.log" 2>&1 &
  PIDS+=("$!")
  for i in $(seq 1 40); do
    tc nodes >/dev/null 2>&1 && break
    sleep 0.5
  done
  setsid "$BIN/trainctl-agent" --coordinator "$ADDR" --node-name gpu-host "${AGENT_GPUS[@]}" \
    --log-dir "$WORK/logs-$tag" --address 127.0.0.1 >>"$WORK/agent-$tag.log" 2>&1 &
  PIDS+=("$!")
  for i in $(seq 1 60); do
    tc nodes 2>/dev/null | grep -q gpu-host && return 0
    sleep 0.5
  done
  log "ERROR: cluster $tag did not come up within 30 s"
  return 1
}

# run_mode TAG SWEEP_FLAGS...: submits the sweep, polls `top` for WINDOW_S
# seconds (or until every trial ended), cancels what is left, and writes
# $WORK/mode-TAG.env with the submit time and window end.
run_mode() {
  local tag=$1 sweep t_submit t_end i n_done
  shift
  cd "$WORK" || return 1
  t_submit=$(date +%s.%N)
  sweep=$(tc sweep --name "$tag" --sweep-id "sw-$tag" "$@" \
    --grid lr=0.001,0.003,0.01,0.03 --grid seed=0,1,2,3 -- \
    "$PY" "$SHARE/packing_train.py" --lr '{lr}' --seed '{seed}' --steps "$STEPS" \
    2>>"$WORK/cli.log" | head -n 1)
  log "$tag: sweep $sweep submitted (16 trials); watching for up to $WINDOW_S s"
  for ((i = 0; ; i++)); do
    tc top --once -o json >"$WORK/top-$tag-$(printf %04d "$i").json" 2>>"$WORK/cli.log"
    tc sweep describe "sw-$tag" -o json >"$WORK/sweep-$tag.json" 2>>"$WORK/cli.log"
    n_done=$("$PY" -c 'import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception: print(0); sys.exit()
print(sum(1 for j in d.get("jobs", []) if j.get("state") in ("JOB_STATE_SUCCEEDED","JOB_STATE_FAILED","JOB_STATE_CANCELLED")))' "$WORK/sweep-$tag.json")
    if ((n_done >= 16)); then
      log "$tag: all 16 trials ended"
      break
    fi
    if "$PY" -c 'import sys,time; sys.exit(0 if time.time() - float(sys.argv[1]) >= float(sys.argv[2]) else 1)' \
      "$t_submit" "$WINDOW_S"; then
      log "$tag: window over with $n_done trials ended; cancelling the rest"
      break
    fi
    sleep 2
  done
  t_end=$(date +%s.%N)
  tc list -o json >"$WORK/list-$tag.json" 2>>"$WORK/cli.log"
  tc top --once >"$WORK/top-$tag-last.txt" 2>>"$WORK/cli.log"
  append_file "$tag: trainctl top at the end of the window" "$WORK/top-$tag-last.txt"
  tc sweep cancel "sw-$tag" >>"$WORK/cli.log" 2>&1
  printf 't_submit=%s\nt_end=%s\n' "$t_submit" "$t_end" >"$WORK/mode-$tag.env"
  # Let the agent stop the trials before the next mode uses the GPU.
  for i in $(seq 1 30); do
    pgrep -f -- "$SHARE/packing_train.py" >/dev/null || break
    sleep 0.5
  done
}

start_cluster baseline --usage-sample 1s || exit 1
run_mode baseline --gpus 1
start_cluster packed --usage-sample 1s --auto-pack-settle "$SETTLE" || exit 1
run_mode packed --auto-pack
stop_cluster

log "analysing"
"$PY" - "$WORK" "$OUT/packing_proof.json" "$WINDOW_S" "$STEPS" <<'PYEOF' 2>>"$LOG"
import glob, json, os, re, statistics, sys

work, out_path, window_s, steps = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4])

def env(tag):
    d = {}
    for line in open(os.path.join(work, f"mode-{tag}.env")):
        k, v = line.strip().split("=", 1)
        d[k] = float(v)
    return d

def trial_logs(tag):
    # logs-TAG/cluster-ID/jobs-K/job-ID.attempt-N.rank-0.log (agent.h LogPath)
    out = {}
    paths = glob.glob(os.path.join(work, f"logs-{tag}", "cluster-*", "jobs-*",
                                   "job-*.attempt-*.rank-0.log"))
    for path in paths:
        lines = []
        for line in open(path, errors="replace"):
            line = line.strip()
            if line.startswith("{"):
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    pass
        out[path] = lines
    return out

def mode(tag):
    e = env(tag)
    t0, t_end = e["t_submit"], e["t_end"]
    logs = trial_logs(tag)
    finals = [l for ls in logs.values() for l in ls if l.get("final")]
    # The window ends at t_end (window over, or every trial ended: then the
    # last trial's end).
    if len(finals) >= 16:
        t_end = max(f["t"] for f in finals)
    total = 0
    for ls in logs.values():
        done = [l["samples"] for l in ls if "samples" in l and l["t"] <= t_end]
        total += max(done) if done else 0
    per_trial = [f["samples_per_s"] for f in finals]
    # GPU view from `trainctl top -o json` polls.
    utils, ks = [], []
    for path in sorted(glob.glob(os.path.join(work, f"top-{tag}-*.json"))):
        try:
            frame = json.load(open(path))
        except ValueError:
            continue
        for nv in frame.get("nodes", []):
            gpus = nv.get("node", {}).get("gpus", [])
            tasks = nv.get("gpu_tasks", [])
            for i, g in enumerate(gpus):
                k = len(tasks[i].get("tasks", [])) if i < len(tasks) else 0
                ks.append(k)
                if k > 0:
                    utils.append(g.get("utilization_pct", 0))
    coord = open(os.path.join(work, f"coordinator-{tag}.log"), errors="replace").read()
    admitted = [int(m) for m in re.findall(r"auto-pack: job \d+ goes to GPU \d+ on \S+ as trial (\d+)", coord)]
    caps = re.findall(r"auto-pack: GPU \d+ on \S+ capped at (\d+) trials", coord)
    reasons = []
    try:
        for j in json.load(open(os.path.join(work, f"list-{tag}.json"))).get("jobs", []):
            if j.get("state") == "JOB_STATE_PENDING" and j.get("reason"):
                reasons.append(j["reason"])
    except (OSError, ValueError):
        pass
    return {
        "window_s": round(t_end - t0, 1),
        "samples": total,
        "aggregate_samples_per_s": round(total / (t_end - t0), 1) if t_end > t0 else 0,
        "trials_finished": len(finals),
        "trial_samples_per_s_median": round(statistics.median(per_trial), 1) if per_trial else None,
        "gpu_util_pct_mean_nvml": round(statistics.mean(utils), 1) if utils else None,
        "trials_on_gpu_max": max(ks) if ks else 0,
        "trials_on_gpu_median": statistics.median(ks) if ks else 0,
        "trials_on_gpu_timeline": ks,
        "packer_admissions_max_k": max(admitted) if admitted else None,
        "packer_caps": [int(c) for c in caps],
        "pending_reasons_at_end": sorted(set(reasons))[:3],
    }

gpu = open(os.path.join(work, "gpu.txt")).read().strip()
base, packed = mode("baseline"), mode("packed")
ratio = (packed["aggregate_samples_per_s"] / base["aggregate_samples_per_s"]
         if base["aggregate_samples_per_s"] else None)
report = {
    "gpu": gpu,
    "sweep": "16 trials: lr in {0.001,0.003,0.01,0.03} x seed in {0..3}; packing_train.py "
             f"--steps {steps} (bs 128, CNN width 32, synthetic 3x32x32 data on the GPU)",
    "window_s_max": window_s,
    "settle": os.environ.get("SETTLE", "8s"),
    "baseline_one_trial_per_gpu": base,
    "auto_packed": packed,
    "k_chosen_by_packer": packed["trials_on_gpu_max"],
    "throughput_ratio_packed_over_baseline": round(ratio, 3) if ratio else None,
    "target_1_5x_met": bool(ratio and ratio >= 1.5),
    "floor_0_95x_met": bool(ratio and ratio >= 0.95),
}
json.dump(report, open(out_path, "w"), indent=2)
print(json.dumps({k: v for k, v in report.items() if not isinstance(v, dict)}, indent=2))
PYEOF
rc=$?
log "done in $((SECONDS - T0)) s; report: $OUT/packing_proof.json (analysis rc $rc)"
cat "$OUT/packing_proof.json" 2>/dev/null | head -60 >&2
exit $rc
