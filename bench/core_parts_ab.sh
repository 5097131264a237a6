#!/usr/bin/env bash
# OLD vs NEW A/B of the coordinator as parts (the Coordinator class split
# into JobTable, NodeRegistry, ... : commit c2011ac) against the tree before
# it (19af006), on one machine, alternating OLD then NEW in every round so
# both builds meet the same minutes of a shared host. Method and JSON shape
# follow the earlier core split A/B (bench/README.md, "The core split into
# components: old vs new", bench/results/core_refactor_ab.json).
#
#   bench/core_parts_ab.sh run [--rounds 3] [--no-array]    main rounds + arrays
#   bench/core_parts_ab.sh rerun --bench sched|submit|swarm [--filter REGEX]
#                                [--rounds 4] [--tag NAME]   focused rerun
#   bench/core_parts_ab.sh summarize [--out FILE]            JSON (+ table)
#
# Common options: --old-bin DIR --new-bin DIR (build/bin of each side),
# --old-tree DIR --new-tree DIR (each side's checkout: its bench/swarm/run.sh
# runs), --work DIR (raw outputs and runs.tsv; default /tmp/core_parts_ab/raw).
#
# Every round runs, OLD then NEW for each:
#   swarm:  TREE/bench/swarm/run.sh BIN --agents 100 --state-dir /tmp --out FILE
#   sched:  trainctl-bench-scheduler-throughput
#             --benchmark_filter='^BM_FillPass/|^BM_(Drain|SteadyDrain)/nodes:1250/jobs:100000/'
#   submit: trainctl-bench-submit --sqlite_dir=/tmp
# and after the rounds, once (it alternates NEW and OLD itself, per size and
# round): bench/slurm/array_scaling.sh NEW_BIN --baseline OLD_BIN
#   --sizes "500 2000" --rounds 3.
# The 1/5/15-minute load average at each run's start goes into runs.tsv; the
# summarizer (bench/core_parts_ab_summary.py) turns runs.tsv and the raw
# files into bench/results/core_parts_ab.json. Nothing here builds anything.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
MODE=${1:?usage: $0 run|rerun|summarize [options]}
shift
OLD_BIN=/work/wt-old/build/bin
NEW_BIN=$ROOT/build/bin
OLD_TREE=/work/wt-old
NEW_TREE=$ROOT
# Labels of the two sides (env OLD_LABEL/NEW_LABEL; the first A/B's are the
# defaults), written to meta.txt for the summarizer.
OLD_LABEL=${OLD_LABEL:-OLD-19af006}
NEW_LABEL=${NEW_LABEL:-NEW-c2011ac}
WORK=/tmp/core_parts_ab/raw
ROUNDS=
BENCH=
FILTER=
TAG=
ARRAY=yes
OUT=$ROOT/bench/results/core_parts_ab.json
while (($#)); do
  case $1 in
    --old-bin) OLD_BIN=$2; shift 2 ;;
    --new-bin) NEW_BIN=$2; shift 2 ;;
    --old-tree) OLD_TREE=$2; shift 2 ;;
    --new-tree) NEW_TREE=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --bench) BENCH=$2; shift 2 ;;
    --filter) FILTER=$2; shift 2 ;;
    --tag) TAG=$2; shift 2 ;;
    --no-array) ARRAY=; shift ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

SCHED_FILTER='^BM_FillPass/|^BM_(Drain|SteadyDrain)/nodes:1250/jobs:100000/'

# one BENCH SIDE ROUND DIR PHASE [FILTER]: one run, its load average at start
# and its exit status appended to $WORK/runs.tsv.
one() {
  local bench=$1 side=$2 round=$3 dir=$4 phase=$5 filter=${6:-} bin tree file rc t0 t1 load
  if [[ $side == old ]]; then bin=$OLD_BIN tree=$OLD_TREE; else bin=$NEW_BIN tree=$NEW_TREE; fi
  file=$dir/$bench-$side-r$round.json
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  t0=$(date +%s.%N)
  rc=0
  case $bench in
    swarm)
      "$tree/bench/swarm/run.sh" "$bin" --agents 100 --state-dir /tmp --out "$file" \
        >"$file.log" 2>&1 || rc=$? ;;
    sched)
      "$bin/trainctl-bench-scheduler-throughput" --benchmark_filter="${filter:-$SCHED_FILTER}" \
        --benchmark_out="$file" --benchmark_out_format=json >"$file.log" 2>&1 || rc=$? ;;
    submit)
      "$bin/trainctl-bench-submit" --sqlite_dir=/tmp ${filter:+--benchmark_filter="$filter"} \
        --benchmark_out="$file" --benchmark_out_format=json >"$file.log" 2>&1 || rc=$? ;;
    *) echo "unknown bench $bench" >&2; exit 2 ;;
  esac
  t1=$(date +%s.%N)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$phase" "$bench" "$side" "$round" \
    "$t0" "$t1" "$rc" "${load// /,}" "$file" >>"$WORK/runs.tsv"
  echo "$(date -u +%H:%M:%S) $phase $bench $side round $round rc=$rc load=$load"
}

header() {
  mkdir -p "$WORK"
  [[ -f $WORK/runs.tsv ]] ||
    printf 'phase\tbench\tside\tround\tstart_unix\tend_unix\trc\tloadavg\tfile\n' >"$WORK/runs.tsv"
  # The array round (not with --no-array) also runs the CLI and an agent.
  local need=(trainctl-coordinator trainctl-swarm trainctl-bench-scheduler-throughput
              trainctl-bench-submit)
  [[ -n $ARRAY ]] && need+=(trainctl-agent trainctl trainctl-task-shim)
  for b in "${need[@]}"; do
    [[ -x $OLD_BIN/$b && -x $NEW_BIN/$b ]] || { echo "missing $b in $OLD_BIN or $NEW_BIN" >&2; exit 1; }
  done
}

case $MODE in
  run)
    header
    ROUNDS=${ROUNDS:-3}
    dir=$WORK/main
    mkdir -p "$dir"
    {
      echo "start_utc $(date -u +%Y-%m-%dT%H:%M:%SZ)"
      echo "old_bin $OLD_BIN"; echo "new_bin $NEW_BIN"
      echo "old_label $OLD_LABEL"; echo "new_label $NEW_LABEL"
      echo "old_tree $OLD_TREE $(git -C "$OLD_TREE" rev-parse HEAD)"
      echo "new_tree $NEW_TREE $(git -C "$NEW_TREE" rev-parse HEAD)"
    } >"$WORK/meta.txt"
    for side in old new; do
      bin=$OLD_BIN
      [[ $side == new ]] && bin=$NEW_BIN
      (cd "$bin" && for b in trainctl-coordinator trainctl-agent trainctl \
         trainctl-bench-scheduler-throughput trainctl-bench-submit; do
         [[ -f $b ]] && sha256sum "$b"; done) >"$WORK/$side-bin.sha256" || true
    done
    for r in $(seq 1 "$ROUNDS"); do
      for bench in swarm sched submit; do
        one "$bench" old "$r" "$dir" main
        one "$bench" new "$r" "$dir" main
      done
    done
    if [[ -n $ARRAY ]]; then
      t0=$(date +%s.%N)
      load=$(cut -d' ' -f1-3 /proc/loadavg)
      rc=0
      "$ROOT/bench/slurm/array_scaling.sh" "$NEW_BIN" --baseline "$OLD_BIN" \
        --label "$NEW_LABEL" --baseline-label "$OLD_LABEL" --sizes "500 2000" --rounds 3 \
        --out "$dir/array.json" >"$dir/array.log" 2>&1 || rc=$?
      t1=$(date +%s.%N)
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' main array both 1 "$t0" "$t1" "$rc" \
        "${load// /,}" "$dir/array.json" >>"$WORK/runs.tsv"
      echo "$(date -u +%H:%M:%S) array rc=$rc load=$load"
    fi
    echo "end_utc $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$WORK/meta.txt"
    ;;
  rerun)
    header
    ROUNDS=${ROUNDS:-4}
    [[ -n $BENCH ]] || { echo "rerun needs --bench" >&2; exit 2; }
    TAG=${TAG:-rerun-$BENCH}
    dir=$WORK/$TAG
    mkdir -p "$dir"
    printf '%s\t%s\t%s\n' "$TAG" "$BENCH" "$FILTER" >>"$WORK/reruns.tsv"
    for r in $(seq 1 "$ROUNDS"); do
      one "$BENCH" old "$r" "$dir" "$TAG" "$FILTER"
      one "$BENCH" new "$r" "$dir" "$TAG" "$FILTER"
    done
    ;;
  summarize)
    python3 "$HERE/core_parts_ab_summary.py" --work "$WORK" --out "$OUT"
    ;;
  *) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
