#!/usr/bin/env bash
# Packing comparison on one GPU (written for one H100; no gRPC installed:
# every trainctl binary and library comes from a bundle made by
# deploy/make_bundle.sh; Python 3 with CUDA PyTorch on PATH).
#
# For each workload family of packing_v2_workloads.py (cnn_loader,
# mlp_tabular, unet_small: no throughput reported to trainctl; tfm_report:
# reports samples/s), the same TRIALS equal trials (seeds 0..TRIALS-1, the
# step count calibrated so one trial alone trains for about TRIAL_S seconds)
# run in every mode, and the makespan (first submit or launch to the last
# trial's end) is measured:
#   one_per_gpu     `trainctl sweep --gpus 1`: whole-GPU trials, one at a time;
#   fixed_k         by hand, no trainctl: k trials at once on GPU $GPU, a new one
#                   started as one ends, for k in KS (k >= TRIALS is "all at
#                   once", measured once);
#   autopack        `trainctl sweep --auto-pack`;
#   autopack_declared
#                   `trainctl sweep --auto-pack --gpu-mem D`, D the trial's
#                   size as its user would state it: the calibration run's
#                   peak reserved by PyTorch plus 1 GiB for the CUDA
#                   context, times 1.5, rounded up to whole GiB;
#   autopack_mps, autopack_mps_declared
#                   the two above with `trainctl-agent --mps` (skipped when
#                   the agent has no --mps flag: null); with a declared size
#                   MPS enforces it (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT).
# Equal work per mode, so throughput ratios are inverse makespan ratios:
#   autopack_vs_best_fixed_k = best_fixed_k_s / autopack_s,
#   autopack_vs_one_per_gpu  = one_per_gpu_s / autopack_s.
# Trials killed by a CUDA out-of-memory error are counted per mode
# (oom_killed: log lines "CUDA out of memory"/"OutOfMemoryError").
#
# Writes OUT_DIR/packing_v2.json (merged with what an earlier invocation
# wrote there, so families can be run one per invocation) and
# OUT_DIR/packing_v2.log. Every wait has a timeout; every process started
# here is stopped on exit. About 6-8 minutes per family with the defaults.
#
# Usage: packing_v2_bench.sh BUNDLE_DIR OUT_DIR [--family F]...
#   env: TRIALS=6, KS="1 2 3 4 6 8" (without 1, the one-per-GPU sweep
#   stands for k = 1: fixed_k_1_from says so), TRIAL_S=8, SAMPLE=1s (coordinator
#   --usage-sample), MODE_TIMEOUT_S=150 (per trainctl mode), GPU=0 (the
#   NVML/PCI index used; instances on different GPUs may run at once),
#   MODES (default: kN for each N in KS, then one auto decl mps mpsdecl;
#   the order they run in: put the ones that matter most first).
# Dry run without a GPU (plumbing only): DRY_RUN=1 uses a fake GPU; the
# trials then fail at once (no CUDA) and the figures mean nothing.
set -uo pipefail

# log, append_file, free_port, tc, kill_tree, packing_args.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
packing_args "$0" "$@"

WL=$SHARE/packing_v2_workloads.py
LOG=$OUT/packing_v2.log
WORK=$(mktemp -d /tmp/packing_v2.XXXXXX)
PY=$(command -v python3 || true)
TRIALS=${TRIALS:-6}
KS=${KS:-"1 2 3 4 6 8"}
TRIAL_S=${TRIAL_S:-8}
SAMPLE=${SAMPLE:-1s}
MODE_TIMEOUT_S=${MODE_TIMEOUT_S:-150}
DRY_RUN=${DRY_RUN:-}
# Modes in the order run: kN (fixed k = N by hand, one per k in KS), one,
# auto, decl, mps, mpsdecl.
if [[ -z "${MODES:-}" ]]; then
  MODES=""
  for k in $KS; do
    k=$((k < TRIALS ? k : TRIALS))
    [[ " $MODES " == *" k$k "* ]] || MODES+=" k$k"
  done
  MODES+=" one auto decl mps mpsdecl"
fi
GPU=${GPU:-0}
AGENT_GPUS=(--gpus "$GPU")
[[ -n "$DRY_RUN" ]] && AGENT_GPUS=(--fake-gpus 1:dry-run:80GiB)
export NCCL_NVLS_ENABLE=0
export CUDA_DEVICE_ORDER=PCI_BUS_ID

T0=$SECONDS
PIDS=()
ADDR=""



# Trials of this script's current family (their command lines name the
# bundle's workload file and the family), in case an agent died without
# stopping them; an instance on another GPU runs other families.
FAMILY=""
kill_trials() {
  local p pids=()
  [[ -z "$FAMILY" ]] && return 0
  for p in $(pgrep -f -- "$WL --family $FAMILY "); do pids+=("$p"); done
  if ((${#pids[@]} > 0)); then
    log "killing leftover trials: ${pids[*]}"
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
}

stop_cluster() {
  local d
  if ((${#PIDS[@]} > 0)); then
    log "stopping coordinator and agent (${PIDS[*]})"
    kill_tree "${PIDS[@]}"
  fi
  PIDS=()
  kill_trials
  # MPS daemons an agent killed before its own shutdown may have left.
  for d in "$WORK"/logs-*-mps/mps/gpu-*/pipe; do
    [[ -S "$d/control" ]] || continue
    echo quit | CUDA_MPS_PIPE_DIRECTORY=$d timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
  done
}

cleanup() {
  stop_cluster
  for f in "$WORK"/coordinator-*.log "$WORK"/agent-*.log; do
    [[ -f "$f" ]] && append_file "$(basename "$f")" "$f"
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z "$PY" ]] || { [[ -z "$DRY_RUN" ]] && ! "$PY" -c 'import torch; assert torch.cuda.is_available()' 2>>"$LOG"; }; then
  log "ERROR: python3 with CUDA-enabled PyTorch is needed"
  exit 1
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$WORK/gpu.txt" 2>&1
log "GPU: $(head -n 1 "$WORK/gpu.txt")"
HAVE_MPS=""
"$BIN/trainctl-agent" --help 2>&1 | grep -- '--mps' >/dev/null && HAVE_MPS=1
log "agent MPS support: ${HAVE_MPS:-no (autopack_mps skipped)}"

# start_cluster TAG [AGENT FLAGS...]: a coordinator with a fresh state dir
# and one agent offering GPU $GPU; waits until `trainctl nodes` lists it.
start_cluster() {
  local tag=$1 i
  shift
  stop_cluster
  ADDR="127.0.0.1:$(free_port)"
  mkdir -p "$WORK/state-$tag" "$WORK/logs-$tag"
  log "cluster $tag: coordinator at $ADDR"
  setsid "$BIN/trainctl-coordinator" --listen "$ADDR" --state-dir "$WORK/state-$tag" \
    --usage-sample "$SAMPLE" >>"$WORK/coordinator-$tag.log" 2>&1 &
  PIDS+=("$!")
  for i in $(seq 1 40); do
    tc nodes >/dev/null 2>&1 && break
    sleep 0.5
  done
  setsid "$BIN/trainctl-agent" --coordinator "$ADDR" --node-name gpu-host "${AGENT_GPUS[@]}" \
    --log-dir "$WORK/logs-$tag" --address 127.0.0.1 "$@" >>"$WORK/agent-$tag.log" 2>&1 &
  PIDS+=("$!")
  for i in $(seq 1 60); do
    tc nodes 2>/dev/null | grep gpu-host >/dev/null && return 0
    sleep 0.5
  done
  log "ERROR: cluster $tag did not come up within 30 s"
  return 1
}

# trainctl_mode TAG FAMILY STEPS SWEEP_FLAGS...: submits the sweep, waits
# until all trials ended (MODE_TIMEOUT_S at most), writes
# $WORK/mode-TAG.env (submit time) and copies trial logs to $WORK/trials-TAG/.
trainctl_mode() {
  local tag=$1 family=$2 steps=$3 t_submit i n_done seeds
  shift 3
  seeds=$(seq -s, 0 $((TRIALS - 1)))
  t_submit=$(date +%s.%N)
  tc sweep --name "$tag" --sweep-id "sw-$tag" "$@" --grid "seed=$seeds" -- \
    "$PY" "$WL" --family "$family" --steps "$steps" --seed '{seed}' >>"$WORK/cli.log" 2>&1
  log "$tag: $TRIALS trials submitted"
  for ((i = 0; ; i++)); do
    tc sweep describe "sw-$tag" -o json >"$WORK/sweep-$tag.json" 2>>"$WORK/cli.log"
    n_done=$("$PY" -c 'import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception: print(0); sys.exit()
print(sum(1 for j in d.get("jobs", []) if j.get("state") in ("JOB_STATE_SUCCEEDED","JOB_STATE_FAILED","JOB_STATE_CANCELLED")))' "$WORK/sweep-$tag.json")
    ((i % 5 == 0)) && tc top --once >>"$WORK/top-$tag.txt" 2>>"$WORK/cli.log"
    ((n_done >= TRIALS)) && break
    if "$PY" -c 'import sys,time; sys.exit(0 if time.time() - float(sys.argv[1]) >= float(sys.argv[2]) else 1)' \
      "$t_submit" "$MODE_TIMEOUT_S"; then
      log "$tag: timeout with $n_done trials ended; cancelling the rest"
      echo "timeout=1" >>"$WORK/mode-$tag.env"
      break
    fi
    sleep 1
  done
  tc sweep cancel "sw-$tag" >>"$WORK/cli.log" 2>&1
  echo "t_submit=$t_submit" >>"$WORK/mode-$tag.env"
  mkdir -p "$WORK/trials-$tag"
  find "$WORK/logs-$tag" -name 'job-*.log' -exec cp {} "$WORK/trials-$tag/" \; 2>/dev/null
  for i in $(seq 1 30); do
    pgrep -f -- "$WL --family $family " >/dev/null || break
    sleep 0.5
  done
}

# log_makespan FAMILY MODE: the mode's makespan in the log as soon as it
# ended (first submit or launch to the last trial's end), and the
# coordinator's placement lines, so that a run cut short still tells.
log_makespan() {
  local family=$1 m=$2 tag
  case $m in k*) tag="$family-k$((${m#k} < TRIALS ? ${m#k} : TRIALS))" ;; *) tag="$family-$m" ;; esac
  log "$tag: $("$PY" - "$WORK" "$tag" "$TRIALS" <<'PYEOF' 2>&1
import glob, json, os, sys
work, tag, trials = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    t0 = float(dict(l.strip().split("=", 1) for l in open(f"{work}/mode-{tag}.env"))["t_submit"])
except (OSError, KeyError, ValueError):
    print("no result"); sys.exit()
ends = []
for path in glob.glob(f"{work}/trials-{tag}/*.log"):
    for line in open(path, errors="replace"):
        if line.startswith("{") and '"final"' in line:
            try:
                ends.append(json.loads(line)["t"])
            except (ValueError, KeyError):
                pass
print(f"{len(ends)}/{trials} trials ended, makespan {max(ends) - t0:.1f} s" if ends
      else "no trial ended")
PYEOF
)"
  if [[ -f "$WORK/coordinator-$tag.log" ]]; then
    grep -h "auto-pack: job" "$WORK/coordinator-$tag.log" | sed "s/^/  $tag| /" >>"$LOG"
  fi
}

# fixed_k TAG FAMILY STEPS K: TRIALS trials by hand on GPU $GPU, K at a time.
fixed_k() {
  local tag=$1 family=$2 steps=$3 k=$4
  mkdir -p "$WORK/trials-$tag"
  log "$tag: $TRIALS trials by hand, $k at once"
  CUDA_VISIBLE_DEVICES=$GPU timeout "$MODE_TIMEOUT_S" "$PY" - "$WL" "$family" "$steps" "$k" \
    "$TRIALS" "$WORK/trials-$tag" "$WORK/mode-$tag.env" <<'PYEOF' 2>>"$LOG"
import subprocess, sys, time
wl, family, steps, k, trials, out, env = sys.argv[1:8]
k, trials = int(k), int(trials)
t0 = time.time()
running, next_seed = [], 0
while next_seed < trials or running:
    while next_seed < trials and len(running) < k:
        f = open(f"{out}/trial-{next_seed}.log", "w")
        running.append(subprocess.Popen([sys.executable, wl, "--family", family, "--steps",
                                         steps, "--seed", str(next_seed)],
                                        stdout=f, stderr=subprocess.STDOUT))
        next_seed += 1
    time.sleep(0.1)
    running = [p for p in running if p.poll() is None]
open(env, "w").write(f"t_submit={t0}\n")
PYEOF
}

for family in "${FAMILIES[@]}"; do
  log "=== family $family"
  FAMILY=$family
  kill_trials
  CUDA_VISIBLE_DEVICES=$GPU timeout 90 "$PY" "$WL" --family "$family" --calibrate "$TRIAL_S" \
    >"$WORK/calibrate-$family.log" 2>&1
  STEPS=$("$PY" -c 'import json,sys
for l in open(sys.argv[1]):
    if "calibrated_steps" in l: print(max(10, json.loads(l)["calibrated_steps"]))' \
    "$WORK/calibrate-$family.log" 2>/dev/null | tail -n 1)
  [[ -z "$STEPS" ]] && { append_file "calibration $family" "$WORK/calibrate-$family.log"; STEPS=100; }
  log "$family: $STEPS steps for about $TRIAL_S s alone"
  DECLARED_GIB=$("$PY" -c 'import json,math,sys
for l in open(sys.argv[1]):
    if "calibrated_steps" in l:
        b = json.loads(l).get("peak_memory_reserved_bytes", 0)
        print(max(1, math.ceil((b / 2**30 + 1) * 1.5)))' "$WORK/calibrate-$family.log" 2>/dev/null | tail -n 1)
  DECLARED_GIB=${DECLARED_GIB:-4}
  log "$family: declared size ${DECLARED_GIB}GiB"
  echo "$DECLARED_GIB" >"$WORK/declared-$family"
  echo "$STEPS" >"$WORK/steps-$family"
  for m in $MODES; do
    case $m in
      k*)
        k=${m#k}
        fixed_k "$family-k$((k < TRIALS ? k : TRIALS))" "$family" "$STEPS" "$((k < TRIALS ? k : TRIALS))"
        ;;
      one)
        start_cluster "$family-one" || exit 1
        trainctl_mode "$family-one" "$family" "$STEPS" --gpus 1
        ;;
      auto)
        start_cluster "$family-auto" || exit 1
        trainctl_mode "$family-auto" "$family" "$STEPS" --auto-pack
        append_file "$family auto-pack: trainctl top" "$WORK/top-$family-auto.txt"
        ;;
      decl)
        start_cluster "$family-decl" || exit 1
        trainctl_mode "$family-decl" "$family" "$STEPS" --auto-pack --gpu-mem "${DECLARED_GIB}GiB"
        ;;
      mps | mpsdecl)
        [[ -z "$HAVE_MPS" ]] && continue
        start_cluster "$family-$m" --mps || exit 1
        if [[ $m == mps ]]; then
          trainctl_mode "$family-mps" "$family" "$STEPS" --auto-pack
        else
          trainctl_mode "$family-mpsdecl" "$family" "$STEPS" --auto-pack --gpu-mem "${DECLARED_GIB}GiB"
        fi
        ;;
      *) log "unknown mode $m (skipped)" ;;
    esac
    log_makespan "$family" "$m"
  done
  stop_cluster
done

log "analysing"
"$PY" - "$WORK" "$OUT/packing_v2.json" "$TRIALS" "$KS" "${FAMILIES[*]}" <<'PYEOF' 2>>"$LOG"
import glob, json, os, re, sys

work, out_path, trials, ks, families = sys.argv[1:6]
trials = int(trials)
ks = [int(k) for k in ks.split()]

def trial_lines(tag):
    out = []
    for path in sorted(glob.glob(os.path.join(work, f"trials-{tag}", "*.log"))):
        lines, oom = [], False
        for line in open(path, errors="replace"):
            if "CUDA out of memory" in line or "OutOfMemoryError" in line:
                oom = True
            line = line.strip()
            if line.startswith("{"):
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    pass
        out.append((lines, oom))
    return out

def mode(tag):
    env = {}
    try:
        for line in open(os.path.join(work, f"mode-{tag}.env")):
            k, v = line.strip().split("=", 1)
            env[k] = float(v)
    except OSError:
        return None
    logs = trial_lines(tag)
    finals = [l for ls, _ in logs for l in ls if l.get("final")]
    ooms = sum(1 for _, oom in logs if oom)
    if len(finals) < trials or env.get("timeout"):
        return {"makespan_s": None, "trials_finished": len(finals), "oom_killed": ooms}
    return {"makespan_s": round(max(f["t"] for f in finals) - env["t_submit"], 2),
            "trials_finished": len(finals), "oom_killed": ooms,
            "trial_wall_s_max": max(f.get("wall_s", 0) for f in finals)}

def packer_log(tag):
    try:
        text = open(os.path.join(work, f"coordinator-{tag}.log"), errors="replace").read()
    except OSError:
        return {}
    ks = [int(m) for m in re.findall(r"auto-pack: job \d+ goes to GPU \d+ on \S+ as trial (\d+)", text)]
    plans = [int(m) for m in re.findall(r"plan (\d+) trials", text)]
    gpm = re.findall(r"SM activity (\d+)%, DRAM bandwidth (\d+)%", text)
    return {"max_trials_admitted": max(ks) if ks else None,
            "plans": sorted(set(plans)),
            "activity_source": "gpm" if gpm else "utilization",
            "sm_dram_at_admissions": [[int(a), int(b)] for a, b in gpm][:12]}

try:
    report = json.load(open(out_path))
except (OSError, ValueError):
    report = {}
report["gpu"] = open(os.path.join(work, "gpu.txt")).read().strip()
report["trials_per_mode"] = trials
report.setdefault("workloads", {})
for fam in families.split():
    steps = open(os.path.join(work, f"steps-{fam}")).read().strip()
    one = mode(f"{fam}-one")
    auto = mode(f"{fam}-auto")
    decl = mode(f"{fam}-decl")
    mps = mode(f"{fam}-mps")
    mpsdecl = mode(f"{fam}-mpsdecl")
    try:
        declared_gib = int(open(os.path.join(work, f"declared-{fam}")).read())
    except (OSError, ValueError):
        declared_gib = None
    fixed = {}
    for k in ks:
        eff = min(k, trials)
        fixed[str(k)] = mode(f"{fam}-k{eff}")
    # Without k = 1 in KS, k = 1 is the one-per-GPU sweep (one trial at a
    # time, through trainctl): the same schedule, named so in the report.
    k1_from = None
    if "1" not in fixed and one:
        fixed["1"] = one
        k1_from = "one_per_gpu"
    timed = {k: v["makespan_s"] for k, v in fixed.items() if v and v["makespan_s"]}
    best_k = min(timed, key=timed.get) if timed else None
    def s(m):
        return m["makespan_s"] if m else None
    def ratio(a, b):
        return round(a / b, 3) if a and b else None
    w = {
        "steps_per_trial": int(steps),
        "one_per_gpu_s": s(one),
        "fixed_k_s": {k: s(v) for k, v in sorted(fixed.items(), key=lambda kv: int(kv[0]))},
        "fixed_k_1_from": k1_from or "by hand",
        "best_fixed_k": int(best_k) if best_k else None,
        "best_fixed_k_s": timed.get(best_k) if best_k else None,
        "autopack_s": s(auto),
        "autopack_mps_s": s(mps),
        "declared_gpu_mem_gib": declared_gib,
        "autopack_declared_s": s(decl),
        "autopack_mps_declared_s": s(mpsdecl),
        "autopack_vs_best_fixed_k": ratio(timed.get(best_k) if best_k else None, s(auto)),
        "autopack_vs_one_per_gpu": ratio(s(one), s(auto)),
        "autopack_mps_vs_best_fixed_k": ratio(timed.get(best_k) if best_k else None, s(mps)),
        "autopack_declared_vs_best_fixed_k": ratio(timed.get(best_k) if best_k else None, s(decl)),
        "autopack_declared_vs_one_per_gpu": ratio(s(one), s(decl)),
        "autopack_mps_declared_vs_best_fixed_k": ratio(timed.get(best_k) if best_k else None,
                                                       s(mpsdecl)),
        "oom_killed": {"one_per_gpu": one["oom_killed"] if one else None,
                       "fixed_k": {k: v["oom_killed"] if v else None for k, v in fixed.items()},
                       "autopack": auto["oom_killed"] if auto else None,
                       "autopack_declared": decl["oom_killed"] if decl else None,
                       "autopack_mps": mps["oom_killed"] if mps else None,
                       "autopack_mps_declared": mpsdecl["oom_killed"] if mpsdecl else None},
        "autopack_packer": packer_log(f"{fam}-auto"),
        "autopack_declared_packer": packer_log(f"{fam}-decl"),
        "modes": {"one_per_gpu": one, "autopack": auto, "autopack_declared": decl,
                  "autopack_mps": mps, "autopack_mps_declared": mpsdecl},
    }
    report["workloads"][fam] = w
json.dump(report, open(out_path, "w"), indent=2)
print(json.dumps({f: {k: v for k, v in w.items()
                      if k not in ("modes", "autopack_packer", "autopack_declared_packer")}
                  for f, w in report["workloads"].items()}, indent=2))
PYEOF
rc=$?
log "done in $((SECONDS - T0)) s; report: $OUT/packing_v2.json (analysis rc $rc)"
exit $rc
