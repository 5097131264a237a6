#!/usr/bin/env bash
# What the pre-flight of a gang costs before its processes start, with the
# fake probe (trainctl-fake-preflight-probe: the probe's process start and
# rendezvous exchange through the coordinator, no NCCL): real binaries on
# loopback, a coordinator and two agents with one fake GPU each; N 2-node
# gangs (`true`) with --preflight and N with --no-preflight, alternating, one
# at a time. Figure: submit -> RUNNING (Job.start_time_ms - submit_time_ms,
# the coordinator's clock) median and p90 of each, and the difference. The
# NCCL part (communicator set-up and the all-reduce) is measured on GPUs by
# tests/gpu/preflight_proof.sh.
#
# Usage: bench/preflight/overhead.sh BUILD_BIN_DIR [N] [OUT_JSON]
#   (N default 20; OUT_JSON default: none, the figures are printed)
set -euo pipefail
BIN=$(cd "${1:?usage: $0 BUILD_BIN_DIR [N] [OUT_JSON]}" && pwd)
N=${2:-20}
OUT_JSON=${3:-}
WORK=$(mktemp -d /tmp/trainctl-preflight-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

wait_line() {
  local file=$1 regex=$2 end=$((SECONDS + 30))
  while ((SECONDS < end)); do
    if grep -qE "$regex" "$file" 2>/dev/null; then grep -E "$regex" "$file" | tail -1; return 0; fi
    read -rt 0.05 <> <(:) || true
  done
  echo "timed out waiting for /$regex/ in $file" >&2
  return 1
}

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" --sync normal \
  >"$WORK/coord.out" 2>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port")
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
for n in a b; do
  "$BIN/trainctl-agent" --node-name "$n" --fake-gpus 1:H100-fake:80GiB \
    --log-dir "$WORK/logs-$n" >"$WORK/agent-$n.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent-$n.log" "registered with the coordinator" >/dev/null
done

: >"$WORK/runs"
for ((i = 0; i < N; i++)); do
  for mode in preflight no-preflight; do
    job=$("$BIN/trainctl" submit --nodes 2 --gpus-per-node 1 "--$mode" -- true)
    timeout 60 "$BIN/trainctl" wait "$job" >/dev/null 2>&1
    "$BIN/trainctl" describe "$job" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin); j = j.get("job", j)
print(sys.argv[1], int(j["start_time_ms"]) - int(j["submit_time_ms"]))' "$mode" >>"$WORK/runs"
  done
done

python3 - "$WORK/runs" "$N" "$OUT_JSON" <<'PYEOF'
import json, statistics, sys
runs, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ms = {"preflight": [], "no-preflight": []}
for line in open(runs):
    mode, v = line.split()
    ms[mode].append(int(v))
def p90(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.9 * (len(xs) - 1))))]
res = {"gangs_per_mode": n, "probe": "trainctl-fake-preflight-probe",
       "what": "submit -> RUNNING of a 2-node x 1-GPU gang, ms (coordinator clock)"}
for mode, xs in ms.items():
    res[mode] = {"median_ms": statistics.median(xs), "p90_ms": p90(xs)}
res["preflight_adds_median_ms"] = res["preflight"]["median_ms"] - res["no-preflight"]["median_ms"]
print(json.dumps(res, indent=1))
if out:
    with open(out, "w") as f:
        json.dump(res, f, indent=2, sort_keys=True)
PYEOF
