#!/usr/bin/env bash
# How a job array's cost per task grows with its size: one coordinator and
# one agent (8 fake GPUs), then `trainctl submit --array 0-(N-1)` of the
# no-op job of compare.sh (driver.py --mode array) for each N, with the
# no-scheduler ceiling (`xargs -P 8`, driver.py --system bare) of the same N
# after it. Per N: jobs/s, the submit call's seconds, and the CPU ms per task
# of the coordinator, the agent and the tasks (/proc/PID/stat, as
# compare.sh). A scheduler whose passes cost O(pending) makes the
# coordinator's ms per task grow with N; one that looks at an array's first
# few tasks keeps it flat.
#
#   bench/slurm/array_scaling.sh BIN_DIR [--sizes "500 2000 5000"]
#                                [--rounds 1] [--label TEXT] [--out FILE]
#
# --label: what BIN_DIR was built from (recorded in the JSON), e.g. the
# commit, to compare two builds run one after the other.
# --out: default bench/results/array_scaling.json ("-" prints only). Each
# size runs --rounds times (alternating with the ceiling); the JSON has every
# round and the median jobs/s per size.
set -euo pipefail

BIN=$(cd "${1:?usage: $0 BIN_DIR [options]}" && pwd)
shift
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SIZES="500 2000 5000"
ROUNDS=1
OUT=$ROOT/bench/results/array_scaling.json
LABEL=
while (($#)); do
  case $1 in
    --sizes) SIZES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --label) LABEL=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/trainctl-array-scaling.XXXXXX")
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  --log-level warn >"$WORK/coordinator.log" 2>&1 &
PIDS+=($!)
port=
for _ in $(seq 1 300); do
  port=$(sed -n 's/^trainctl-coordinator listening on port \([0-9]*\)$/\1/p' "$WORK/coordinator.log")
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { cat "$WORK/coordinator.log" >&2; exit 1; }
export TRAINCTL_COORDINATOR=127.0.0.1:$port
"$BIN/trainctl-agent" --node-name scaling-node --fake-gpus 8:H100:80GiB \
  --log-dir "$WORK/logs" --log-level warn >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 300); do
  "$BIN/trainctl" nodes 2>/dev/null | grep -q scaling-node && break
  sleep 0.1
done
"$BIN/trainctl" nodes | grep -q scaling-node || { cat "$WORK/agent.log" >&2; exit 1; }
COORD_PID=${PIDS[0]}
# Under its guard (the default) the agent is the guard's child.
AGENT_PID=$(pgrep -P "${PIDS[1]}" -x trainctl-agent 2>/dev/null || true)
AGENT_PID=${AGENT_PID:-${PIDS[1]}}
ticks() { awk '{print $14 + $15, $16 + $17}' "/proc/$1/stat"; }  # own, reaped children

driver() { python3 "$HERE/driver.py" --trainctl "$BIN/trainctl" "$@"; }
driver --system trainctl --mode array --jobs 50 --dir "$WORK/warm" >/dev/null

for n in $SIZES; do
  for r in $(seq 1 "$ROUNDS"); do
    read -r c0 _ < <(ticks "$COORD_PID"); read -r a0 t0 < <(ticks "$AGENT_PID")
    driver --system trainctl --mode array --jobs "$n" --dir "$WORK/a-$n-$r" >"$WORK/array-$n-$r.json"
    read -r c1 _ < <(ticks "$COORD_PID"); read -r a1 t1 < <(ticks "$AGENT_PID")
    echo "$((c1 - c0)) $((a1 - a0)) $((t1 - t0)) $(getconf CLK_TCK)" >"$WORK/array-$n-$r.cpu"
    driver --system bare --jobs "$n" --dir "$WORK/b-$n-$r" >"$WORK/bare-$n-$r.json"
    echo "N=$n round $r: array $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs_per_s"])' "$WORK/array-$n-$r.json") jobs/s, ceiling $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs_per_s"])' "$WORK/bare-$n-$r.json") jobs/s"
  done
done

python3 - "$WORK" "$OUT" "$ROUNDS" "$SIZES" "$LABEL" <<'EOF'
import json, statistics, sys
work, out, rounds, sizes, label = (sys.argv[1], sys.argv[2], int(sys.argv[3]),
                                   sys.argv[4].split(), sys.argv[5])
result = {"benchmark": "job array cost per task vs array size (bench/slurm/array_scaling.sh)",
          "label": label,
          "job": "sh -c 'date +%s%N > F', one GPU each of 8 fake GPUs, one agent",
          "sizes": {}}
for n in sizes:
    runs = []
    for r in range(1, rounds + 1):
        a = json.load(open("%s/array-%s-%d.json" % (work, n, r)))
        b = json.load(open("%s/bare-%s-%d.json" % (work, n, r)))
        c, ag, t, hz = (int(x) for x in open("%s/array-%s-%d.cpu" % (work, n, r)).read().split())
        per = lambda ticks: round(ticks * 1000.0 / hz / int(n), 2)
        runs.append({"array_jobs_per_s": a["jobs_per_s"], "submit_s": a["submit_s"],
                     "ceiling_jobs_per_s": b["jobs_per_s"],
                     "share_of_ceiling": round(a["jobs_per_s"] / b["jobs_per_s"], 3),
                     "cpu_ms_per_task": {"coordinator": per(c), "agent": per(ag), "tasks": per(t)}})
    result["sizes"][n] = {
        "array_jobs_per_s_median": statistics.median(x["array_jobs_per_s"] for x in runs),
        "ceiling_jobs_per_s_median": statistics.median(x["ceiling_jobs_per_s"] for x in runs),
        "coordinator_cpu_ms_per_task_median": statistics.median(
            x["cpu_ms_per_task"]["coordinator"] for x in runs),
        "rounds": runs}
text = json.dumps(result, indent=2)
print(text)
if out != "-":
    open(out, "w").write(text + "\n")
    print("wrote", out, file=sys.stderr)
EOF
