#!/usr/bin/env bash
# Runs trainctl-swarm against a fresh trainctl-coordinator for each swarm size
# and writes one JSON with every run.
#
#   bench/swarm/run.sh BIN_DIR [--agents "100 1000 10000"] [--duration-s 10]
#                      [--rate 2000] [--state-dir DIR] [--out FILE] [--tiny]
#
# BIN_DIR holds trainctl-coordinator and trainctl-swarm (build/bin). Each size
# gets its own coordinator (state in a fresh directory under --state-dir,
# default $TMPDIR or /tmp: put it on the disk you mean to measure, its
# synchronous SQLite commits are part of every submit). --out defaults to
# bench/results/swarm.json; "-" prints only. --tiny: 10 agents, 1 s phases,
# 50 jobs/s (the ctest bench_swarm_smoke).
set -euo pipefail

BIN=$(cd "${1:?usage: $0 BIN_DIR [options]}" && pwd)
shift
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
AGENTS="100 1000 10000"
DURATION=10
RATE=2000
STATE_PARENT=${TMPDIR:-/tmp}
OUT=$ROOT/bench/results/swarm.json
FLOOR_CALLS=2000
while (($#)); do
  case $1 in
    --agents) AGENTS=$2; shift 2 ;;
    --duration-s) DURATION=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --state-dir) STATE_PARENT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --tiny) AGENTS=10; DURATION=1; RATE=50; FLOOR_CALLS=50; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d "$STATE_PARENT/trainctl-swarm.XXXXXX")
COORD_PID=
cleanup() {
  if [[ -n $COORD_PID ]]; then kill "$COORD_PID" 2>/dev/null || true; wait "$COORD_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
FS=$(findmnt -n -o FSTYPE -T "$WORK" 2>/dev/null || echo unknown)
export TRAINCTL_GIT_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)

results=()
for n in $AGENTS; do
  mkdir -p "$WORK/state-$n"
  # Ulimit for one TCP connection per agent.
  ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
  "$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state-$n" \
    --node-timeout 120s --log-level warn >"$WORK/coord-$n.log" 2>&1 &
  COORD_PID=$!
  port=
  for _ in $(seq 1 300); do
    port=$(sed -n 's/^trainctl-coordinator listening on port \([0-9]*\)$/\1/p' "$WORK/coord-$n.log" 2>/dev/null || true)
    [[ -n $port ]] && break
    kill -0 "$COORD_PID" 2>/dev/null || { cat "$WORK/coord-$n.log" >&2; exit 1; }
    sleep 0.1
  done
  [[ -n $port ]] || { echo "coordinator did not start" >&2; cat "$WORK/coord-$n.log" >&2; exit 1; }
  "$BIN/trainctl-swarm" --coordinator "127.0.0.1:$port" --coordinator-pid "$COORD_PID" \
    --agents "$n" --duration-s "$DURATION" --rate "$RATE" --floor-calls "$FLOOR_CALLS" \
    --note "state dir on $FS" --out "$WORK/swarm-$n.json"
  results+=("$WORK/swarm-$n.json")
  kill "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
  COORD_PID=
done

python3 - "$OUT" "${results[@]}" <<'PY'
import json, sys
out, paths = sys.argv[1], sys.argv[2:]
runs = [json.load(open(p)) for p in paths]
doc = {"benchmark": "trainctl-swarm (bench/swarm/run.sh)", "runs": runs}
text = json.dumps(doc, indent=1)
if out == "-":
    print(text)
else:
    open(out, "w").write(text + "\n")
    print("wrote", out)
PY
