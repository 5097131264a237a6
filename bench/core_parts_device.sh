#!/usr/bin/env bash
# The long cluster simulation and the coordinator's OLD vs NEW A/B in one run
# on a quiet many-core host (a lent GPU machine: no GPU is used), from
# relocatable bundles (deploy/make_bundle.sh with TRAINCTL_BUNDLE_BENCH=1):
#
#   bench/core_parts_device.sh SIM_BUNDLE OLD_BUNDLE NEW_BUNDLE OUT_DIR \
#       [--seeds N] [--events E] [--rounds R]
#
# 1. trainctl-cluster-sim over seeds 1..N (default 5,000) of E events each
#    (default 2,000: 10,000,000 events in all, unlike clusters included),
#    split over one process per core; each writes OUT_DIR/sim-K.json and the
#    run fails when any seed fails.
# 2. bench/core_parts_ab.sh run --no-array with OLD_BUNDLE/bin and
#    NEW_BUNDLE/bin, R rounds (default 4), alternating OLD then NEW per
#    benchmark (swarm at 100 agents, scheduler throughput, submit), raw
#    outputs under OUT_DIR/ab (summarize with bench/core_parts_ab_summary.py).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SIM=${1:?usage: $0 SIM_BUNDLE OLD_BUNDLE NEW_BUNDLE OUT_DIR [--seeds N] [--events E] [--rounds R]}
OLD=${2:?}
NEW=${3:?}
OUT=${4:?}
shift 4
SEEDS=5000 EVENTS=2000 ROUNDS=4
while (($#)); do
  case $1 in
    --seeds) SEEDS=$2; shift 2 ;;
    --events) EVENTS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$OUT"

cores=$(nproc)
per=$(((SEEDS + cores - 1) / cores))
pids=()
t0=$(date +%s)
for ((k = 0; k < cores; k++)); do
  first=$((k * per + 1))
  last=$(((k + 1) * per))
  ((last > SEEDS)) && last=$SEEDS
  ((first > last)) && break
  "$SIM/bin/trainctl-cluster-sim" --seeds "$first-$last" --events "$EVENTS" \
    --json "$OUT/sim-$k.json" >"$OUT/sim-$k.log" 2>&1 &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
echo "simulation: seeds 1-$SEEDS x $EVENTS events on $cores processes in $(($(date +%s) - t0)) s"
tail -qn1 "$OUT"/sim-*.log | sort | uniq -c | sort -rn | head -3
((failed == 0)) || { echo "simulation: a seed failed"; exit 1; }

OLD_LABEL=${OLD_LABEL:-OLD} NEW_LABEL=${NEW_LABEL:-NEW} \
  "$HERE/core_parts_ab.sh" run --no-array --rounds "$ROUNDS" \
  --old-bin "$OLD/bin" --new-bin "$NEW/bin" --old-tree "$HERE/.." --new-tree "$HERE/.." \
  --work "$OUT/ab"
