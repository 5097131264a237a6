#!/usr/bin/env bash
# Memory per job (target: <= 1 GiB for 1M finished jobs): RSS of
# trainctl-coordinator after a restart on a state file holding N finished jobs,
# and that file's size.
#
#   bench/history/run.sh BIN_DIR [--jobs 1000000] [--gen-dir DIR]
#                        [--state-dir DIR] [--out FILE]
#
# 1. trainctl-bench-history-gen writes N finished one-GPU experiments (copies
#    of one run through the coordinator core) through SqliteStateStore into
#    --gen-dir (default /dev/shm: every Put is a synced commit);
# 2. the file is copied to --state-dir (default $TMPDIR or /tmp, a real disk);
# 3. trainctl-coordinator starts on an empty state dir (baseline RSS), then on
#    the history: time to "listening" (the reload), VmRSS and VmHWM from
#    /proc once it listens;
# 4. on the history, the wall time of `trainctl list` (the newest 1000 jobs,
#    all finished: read from the store), `trainctl list --state failed`
#    (no job matches: the whole finished index is filtered) and `trainctl describe` of the oldest, middle and newest job
#    (GetJob of a finished job), 5 runs each, median; the whole CLI process
#    (connect + call + print) as a user sees it, and RSS again after them.
#    `trainctl list` on the empty coordinator is the floor (process start,
#    connect, one call).
# --out defaults to bench/results/history.json; "-" prints only.
set -euo pipefail

BIN=$(cd "${1:?usage: $0 BIN_DIR [options]}" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
JOBS=1000000
GEN_PARENT=/dev/shm
[[ -d $GEN_PARENT && -w $GEN_PARENT ]] || GEN_PARENT=${TMPDIR:-/tmp}
STATE_PARENT=${TMPDIR:-/tmp}
OUT=$ROOT/bench/results/history.json
while (($#)); do
  case $1 in
    --jobs) JOBS=$2; shift 2 ;;
    --gen-dir) GEN_PARENT=$2; shift 2 ;;
    --state-dir) STATE_PARENT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

GEN=$(mktemp -d "$GEN_PARENT/trainctl-history-gen.XXXXXX")
WORK=$(mktemp -d "$STATE_PARENT/trainctl-history.XXXXXX")
COORD_PID=
cleanup() {
  if [[ -n $COORD_PID ]]; then kill "$COORD_PID" 2>/dev/null || true; wait "$COORD_PID" 2>/dev/null || true; fi
  rm -rf "$GEN" "$WORK"
}
trap cleanup EXIT

load_start=$(cut -d' ' -f1 /proc/loadavg)
gen_start=$(date +%s%N)
"$BIN/trainctl-bench-history-gen" --jobs "$JOBS" --db "$GEN/trainctl.db"
gen_ns=$(($(date +%s%N) - gen_start))
mkdir -p "$WORK/empty" "$WORK/history"
cp "$GEN"/trainctl.db* "$WORK/history/"
rm -rf "$GEN"
db_bytes=$(du -cb "$WORK"/history/trainctl.db* | tail -1 | cut -f1)

# Median wall time (ms) of 5 runs of `trainctl --coordinator 127.0.0.1:$1
# ARGS...` (output discarded; a failing run aborts the benchmark).
median_ms() {
  local port=$1; shift
  local runs=() t0
  for _ in 1 2 3 4 5; do
    t0=$(date +%s%N)
    "$BIN/trainctl" --coordinator "127.0.0.1:$port" "$@" >/dev/null
    runs+=($((($(date +%s%N) - t0) / 1000)))
  done
  printf '%s\n' "${runs[@]}" | sort -n | sed -n 3p | awk '{printf "%.1f", $1 / 1000}'
}

# Starts the coordinator on $1 ("probe" as $2: also time CLI reads; "floor":
# only `trainctl list`), waits for its "listening" line; sets M_NS
# (nanoseconds to listen), M_RSS and M_HWM (KiB) and stops it.
measure() {
  local dir=$1 log=$1.log t0 port=
  t0=$(date +%s%N)
  "$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$dir" \
    --log-level warn >"$log" 2>&1 &
  COORD_PID=$!
  while [[ -z $port ]]; do
    port=$(sed -n 's/^trainctl-coordinator listening on port \([0-9]*\)$/\1/p' "$log" 2>/dev/null || true)
    if ! kill -0 "$COORD_PID" 2>/dev/null; then cat "$log" >&2; return 1; fi
    [[ -n $port ]] || sleep 0.05
  done
  local t1 rss hwm
  t1=$(date +%s%N)
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$COORD_PID/status")
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$COORD_PID/status")
  M_LAT=
  if [[ ${2:-} == floor ]]; then
    M_LAT="\"list_ms\": $(median_ms "$port" list)"
  fi
  if [[ ${2:-} == probe ]]; then
    local mid=$(((JOBS + 1) / 2))
    M_LAT="\"list_ms\": $(median_ms "$port" list),"
    M_LAT+=" \"list_state_failed_ms\": $(median_ms "$port" list --state failed),"
    M_LAT+=" \"describe_oldest_ms\": $(median_ms "$port" describe 1),"
    M_LAT+=" \"describe_middle_ms\": $(median_ms "$port" describe "$mid"),"
    M_LAT+=" \"describe_newest_ms\": $(median_ms "$port" describe "$JOBS"),"
    M_LAT+=" \"rss_after_reads_bytes\": $(($(awk '/^VmRSS:/ {print $2}' "/proc/$COORD_PID/status") * 1024))"
  fi
  kill "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
  COORD_PID=
  M_NS=$((t1 - t0)) M_RSS=$rss M_HWM=$hwm
}

measure "$WORK/empty" floor
empty_s=$M_NS empty_rss=$M_RSS empty_hwm=$M_HWM empty_lat=$M_LAT
measure "$WORK/history" probe
hist_s=$M_NS hist_rss=$M_RSS hist_hwm=$M_HWM hist_lat=$M_LAT
load_end=$(cut -d' ' -f1 /proc/loadavg)

python3 - "$OUT" <<PY
import json, sys
jobs = $JOBS
rss = $hist_rss * 1024
empty = $empty_rss * 1024
doc = {
  "benchmark": "memory per job (bench/history/run.sh)",
  "jobs": jobs,
  "generate_s": round($gen_ns / 1e9, 1),
  "sqlite_file_bytes": $db_bytes,
  "sqlite_bytes_per_job": round($db_bytes / jobs, 1),
  "empty_coordinator": {"rss_bytes": empty, "hwm_bytes": $empty_hwm * 1024,
                        "start_s": round($empty_s / 1e9, 3),
                        "cli_reads": {$empty_lat}},
  "with_history": {"rss_bytes": rss, "hwm_bytes": $hist_hwm * 1024,
                   "start_s": round($hist_s / 1e9, 3)},
  "cli_reads": {$hist_lat},
  "rss_bytes_per_job": round((rss - empty) / jobs, 1),
  "target_rss_bytes": 1 << 30,
  "meets_target": rss <= (1 << 30),
  "host": {"cores": $(nproc), "load_avg_1m_start": $load_start,
           "load_avg_1m_end": $load_end,
           "git_commit": "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)"},
}
text = json.dumps(doc, indent=1)
print(text)
if sys.argv[1] != "-":
    open(sys.argv[1], "w").write(text + "\n")
    print("wrote", sys.argv[1])
PY
