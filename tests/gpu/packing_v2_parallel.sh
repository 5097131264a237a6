#!/usr/bin/env bash
# Runs packing_v2_bench.sh for several workload families at once, one
# instance per GPU of this host (families dealt round-robin; an instance
# runs its families one after another), then merges their reports into
# OUT_DIR/packing_v2.json. Each family still has a GPU to itself, so its
# figures are those of a one-GPU run; only the wall time shrinks.
#
# Usage: packing_v2_parallel.sh BUNDLE_DIR OUT_DIR [--family F]...
#   env: as packing_v2_bench.sh (TRIALS, KS, TRIAL_S, SAMPLE,
#   MODE_TIMEOUT_S); GPUS="0 1 ..." picks the GPUs (default: all that
#   nvidia-smi lists).
set -uo pipefail

# packing_args.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
packing_args "$0" "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ -z "${GPUS:-}" ]]; then
  GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | tr '\n' ' ')
fi
read -r -a GPU_LIST <<<"${GPUS:-0}"
((${#GPU_LIST[@]} == 0)) && GPU_LIST=(0)

declare -A ASSIGNED=()
for i in "${!FAMILIES[@]}"; do
  g=${GPU_LIST[$((i % ${#GPU_LIST[@]}))]}
  ASSIGNED[$g]+=" --family ${FAMILIES[$i]}"
done

PIDS=()
for g in "${!ASSIGNED[@]}"; do
  mkdir -p "$OUT/gpu-$g"
  # shellcheck disable=SC2086  # ASSIGNED holds "--family F" words.
  GPU=$g bash "$HERE/packing_v2_bench.sh" "$BUNDLE" "$OUT/gpu-$g" ${ASSIGNED[$g]} \
    >"$OUT/gpu-$g/stdout.txt" 2>&1 &
  PIDS+=("$!")
  echo "GPU $g:${ASSIGNED[$g]} (pid $!)" >&2
done
rc=0
for p in "${PIDS[@]}"; do wait "$p" || rc=1; done

python3 - "$OUT" <<'PYEOF'
import glob, json, os, sys
out = sys.argv[1]
merged = {"workloads": {}, "runs": {}}
for path in sorted(glob.glob(os.path.join(out, "gpu-*", "packing_v2.json"))):
    gpu = os.path.basename(os.path.dirname(path))
    try:
        report = json.load(open(path))
    except (OSError, ValueError) as e:
        print(f"{path}: {e}", file=sys.stderr)
        continue
    merged["gpu"] = report.get("gpu")
    merged["trials_per_mode"] = report.get("trials_per_mode")
    for fam, w in report.get("workloads", {}).items():
        w["gpu_index"] = gpu
        merged["workloads"][fam] = w
    merged["runs"][gpu] = sorted(report.get("workloads", {}))
json.dump(merged, open(os.path.join(out, "packing_v2.json"), "w"), indent=2)
print(json.dumps({f: {k: v for k, v in w.items()
                      if k not in ("modes", "autopack_packer", "autopack_declared_packer")}
                  for f, w in merged["workloads"].items()}, indent=2))
PYEOF
exit $rc
