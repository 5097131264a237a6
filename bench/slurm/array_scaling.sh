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
#                                [--rounds 1] [--label TEXT]
#                                [--baseline OTHER_BIN_DIR]
#                                [--baseline-label TEXT] [--out FILE]
#                                [--logs discard|keep] [--baseline-logs MODE]
#
# --label: what BIN_DIR was built from (recorded in the JSON), e.g. the
# commit. --baseline: a second coordinator and agent from another build, up
# beside the first (ports and state of their own); every round runs the
# baseline's array right after BIN_DIR's and before the ceiling, so both
# builds meet the same minutes of a noisy host. --out: default
# bench/results/array_scaling.json ("-" prints only). Each size runs
# --rounds times; the JSON has every round and the medians per size.
# --logs / --baseline-logs: the tasks' output, discarded (`--no-logs`, the
# default, as compare.sh's Slurm rows use -o /dev/null) or kept in a log file
# per task (`keep`; what a build without --no-logs can run). The baseline may
# be BIN_DIR itself, to measure one build both ways.
set -euo pipefail

BIN=$(cd "${1:?usage: $0 BIN_DIR [options]}" && pwd)
shift
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SIZES="500 2000 5000"
ROUNDS=1
OUT=$ROOT/bench/results/array_scaling.json
LABEL=
BASE=
BASE_LABEL=
LOGS=discard
BASE_LOGS=discard
while (($#)); do
  case $1 in
    --sizes) SIZES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --label) LABEL=$2; shift 2 ;;
    --baseline) BASE=$(cd "$2" && pwd); shift 2 ;;
    --baseline-label) BASE_LABEL=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    --baseline-logs) BASE_LOGS=$2; shift 2 ;;
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

# start_stack NAME BIN: a coordinator and an agent from BIN; sets
# ADDR_NAME, COORD_NAME and AGENT_NAME (pids).
start_stack() {
  local name=$1 bin=$2 port= agent
  "$bin/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/$name-state" \
    --log-level warn >"$WORK/$name-coordinator.log" 2>&1 &
  PIDS+=($!)
  printf -v "COORD_$name" '%s' "$!"
  for _ in $(seq 1 300); do
    port=$(sed -n 's/^trainctl-coordinator listening on port \([0-9]*\)$/\1/p' \
      "$WORK/$name-coordinator.log")
    [[ -n $port ]] && break
    sleep 0.1
  done
  [[ -n $port ]] || { cat "$WORK/$name-coordinator.log" >&2; exit 1; }
  printf -v "ADDR_$name" '%s' "127.0.0.1:$port"
  TRAINCTL_COORDINATOR=127.0.0.1:$port "$bin/trainctl-agent" --node-name "$name-node" \
    --fake-gpus 8:H100:80GiB --log-dir "$WORK/$name-logs" --log-level warn \
    >"$WORK/$name-agent.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 1 300); do
    TRAINCTL_COORDINATOR=127.0.0.1:$port "$bin/trainctl" nodes 2>/dev/null |
      grep -q "$name-node" && break
    sleep 0.1
  done
  TRAINCTL_COORDINATOR=127.0.0.1:$port "$bin/trainctl" nodes | grep -q "$name-node" ||
    { cat "$WORK/$name-agent.log" >&2; exit 1; }
  # Under its guard (the default) the agent is the guard's child.
  agent=$(pgrep -P "$!" -x trainctl-agent 2>/dev/null || true)
  printf -v "AGENT_$name" '%s' "${agent:-$!}"
}

ticks() { awk '{print $14 + $15, $16 + $17}' "/proc/$1/stat"; }  # own, reaped children

# run_array NAME BIN N TAG LOGS: one array of N on stack NAME; writes
# $WORK/TAG.json (driver.py) and $WORK/TAG.cpu (coordinator, agent, tasks
# ticks; CLK_TCK).
run_array() {
  local name=$1 bin=$2 n=$3 tag=$4 logs=$5 addr coord agent c0 a0 t0 c1 a1 t1
  addr=ADDR_$name coord=COORD_$name agent=AGENT_$name
  read -r c0 _ < <(ticks "${!coord}"); read -r a0 t0 < <(ticks "${!agent}")
  TRAINCTL_COORDINATOR=${!addr} python3 "$HERE/driver.py" --trainctl "$bin/trainctl" \
    --system trainctl --mode array --jobs "$n" --dir "$WORK/d-$tag" \
    --trainctl-logs "$logs" >"$WORK/$tag.json"
  read -r c1 _ < <(ticks "${!coord}"); read -r a1 t1 < <(ticks "${!agent}")
  echo "$((c1 - c0)) $((a1 - a0)) $((t1 - t0)) $(getconf CLK_TCK)" >"$WORK/$tag.cpu"
}
jobs_per_s() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["jobs_per_s"])' "$1"; }

start_stack main "$BIN"
[[ -z $BASE ]] || start_stack base "$BASE"
run_array main "$BIN" 50 warm-main "$LOGS"
[[ -z $BASE ]] || run_array base "$BASE" 50 warm-base "$BASE_LOGS"

for n in $SIZES; do
  for r in $(seq 1 "$ROUNDS"); do
    run_array main "$BIN" "$n" "array-$n-$r" "$LOGS"
    line="N=$n round $r: array $(jobs_per_s "$WORK/array-$n-$r.json") jobs/s"
    if [[ -n $BASE ]]; then
      run_array base "$BASE" "$n" "base-$n-$r" "$BASE_LOGS"
      line+=", baseline $(jobs_per_s "$WORK/base-$n-$r.json") jobs/s"
    fi
    python3 "$HERE/driver.py" --system bare --jobs "$n" --dir "$WORK/b-$n-$r" >"$WORK/bare-$n-$r.json"
    echo "$line, ceiling $(jobs_per_s "$WORK/bare-$n-$r.json") jobs/s"
  done
done

python3 - "$WORK" "$OUT" "$ROUNDS" "$SIZES" "$LABEL" "${BASE:+$BASE_LABEL}" "${BASE:+yes}" \
  "$LOGS" "$BASE_LOGS" <<'EOF'
import json, statistics, sys
work, out, rounds, sizes, label, base_label, has_base, logs, base_logs = (
    sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(), sys.argv[5],
    sys.argv[6], sys.argv[7] == "yes", sys.argv[8], sys.argv[9])


def one(tag, n):
    a = json.load(open("%s/%s.json" % (work, tag)))
    c, ag, t, hz = (int(x) for x in open("%s/%s.cpu" % (work, tag)).read().split())
    per = lambda ticks: round(ticks * 1000.0 / hz / int(n), 2)
    return {"jobs_per_s": a["jobs_per_s"], "submit_s": a["submit_s"],
            "cpu_ms_per_task": {"coordinator": per(c), "agent": per(ag), "tasks": per(t)}}


result = {"benchmark": "job array cost per task vs array size (bench/slurm/array_scaling.sh)",
          "label": label,
          "logs": logs,
          "job": "sh -c 'date +%s%N > F', one GPU each of 8 fake GPUs, one agent",
          "sizes": {}}
if has_base:
    result["baseline_label"] = base_label
    result["baseline_logs"] = base_logs
for n in sizes:
    runs = []
    for r in range(1, rounds + 1):
        run = {"array": one("array-%s-%d" % (n, r), n),
               "ceiling_jobs_per_s": json.load(open("%s/bare-%s-%d.json" % (work, n, r)))["jobs_per_s"]}
        if has_base:
            run["baseline_array"] = one("base-%s-%d" % (n, r), n)
        runs.append(run)
    med = lambda key, f: statistics.median(f(x[key]) for x in runs)
    size = {"array_jobs_per_s_median": med("array", lambda a: a["jobs_per_s"]),
            "coordinator_cpu_ms_per_task_median":
                med("array", lambda a: a["cpu_ms_per_task"]["coordinator"]),
            "agent_cpu_ms_per_task_median":
                med("array", lambda a: a["cpu_ms_per_task"]["agent"]),
            "tasks_cpu_ms_per_task_median":
                med("array", lambda a: a["cpu_ms_per_task"]["tasks"]),
            "ceiling_jobs_per_s_median": statistics.median(x["ceiling_jobs_per_s"] for x in runs)}
    if has_base:
        size["baseline_array_jobs_per_s_median"] = med("baseline_array", lambda a: a["jobs_per_s"])
        for part in ("coordinator", "agent", "tasks"):
            size["baseline_%s_cpu_ms_per_task_median" % part] = med(
                "baseline_array", lambda a: a["cpu_ms_per_task"][part])
    size["rounds"] = runs
    result["sizes"][n] = size
text = json.dumps(result, indent=2)
print(text)
if out != "-":
    open(out, "w").write(text + "\n")
    print("wrote", out, file=sys.stderr)
EOF
