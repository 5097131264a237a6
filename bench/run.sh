#!/bin/sh
# Runs the benchmarks at full size and writes Google Benchmark JSON to
# bench/results/scheduler.json and bench/results/submit.json, then prints a
# short table (medians of 3 repetitions). Takes about 2 minutes on 2 cores.
#
#   bench/run.sh [BUILD_DIR]     (default: build-bench)
#
# Builds the two benchmark targets first (a no-op when up to date). The SQLite
# cases write to $TMPDIR (default /tmp): point it at the disk you mean to
# measure; a tmpfs would make the "durable" figures meaningless.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$ROOT/build-bench}
OUT=$ROOT/bench/results
REPS=3

if [ ! -f "$BUILD/build.ninja" ] && [ ! -f "$BUILD/Makefile" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja
fi
cmake --build "$BUILD" --target trainctl-bench-scheduler trainctl-bench-submit -j2

SQLITE_DIR=${TMPDIR:-/tmp}
FS=$(findmnt -n -o FSTYPE -T "$SQLITE_DIR" 2>/dev/null || echo unknown)
if [ "$FS" = tmpfs ]; then
  echo "warning: $SQLITE_DIR is on tmpfs: the SQLite figures will not include real fsyncs" >&2
fi
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
CONTEXT="git_commit=$COMMIT,cores=$(nproc),os=$(. /etc/os-release && echo "$ID-$VERSION_ID"),sqlite_fs=$FS"

mkdir -p "$OUT"
"$BUILD/bin/trainctl-bench-scheduler" \
  --benchmark_repetitions=$REPS \
  --benchmark_context="$CONTEXT" \
  --benchmark_out="$OUT/scheduler.json" --benchmark_out_format=json
"$BUILD/bin/trainctl-bench-submit" --sqlite_dir="$SQLITE_DIR" \
  --benchmark_repetitions=$REPS \
  --benchmark_context="$CONTEXT" \
  --benchmark_out="$OUT/submit.json" --benchmark_out_format=json

# The short table: medians from the JSON just written.
python3 - "$OUT/scheduler.json" "$OUT/submit.json" <<'EOF'
import json, sys

def medians(path):
    with open(path) as f:
        doc = json.load(f)
    return [b for b in doc["benchmarks"] if b.get("aggregate_name") == "median"]

print()
print("%-40s %12s %14s" % ("Schedule() per call", "time", "jobs/s"))
for b in medians(sys.argv[1]):
    print("%-40s %9.3f %-2s %14.0f" % (b["run_name"], b["real_time"], b["time_unit"],
                                        b["items_per_second"]))
print()
print("%-40s %12s %14s %14s %8s" % ("SubmitJob", "per submit", "submits/s",
                                       "jobs/s cycle", "writes"))
for b in medians(sys.argv[2]):
    name = b["run_name"].replace("/iterations:", " n=").replace("/manual_time", "")
    print("%-40s %9.1f %-2s %14.0f %14.0f %8.0f" % (
        name, b["real_time"], b["time_unit"], b["items_per_second"],
        b["cycle_jobs_per_s"], b["store_writes_per_submit"]))
print()
print("wrote", sys.argv[1], "and", sys.argv[2])
EOF
