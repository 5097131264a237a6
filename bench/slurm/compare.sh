#!/usr/bin/env bash
# trainctl vs Slurm 22.05 on this machine, same run.
#
#   bench/slurm/compare.sh BIN_DIR [--jobs 500] [--concurrency 8] [--out FILE]
#                          [--rounds 1] [--coordinator-args "ARGS"]
#                          [--agent-args "ARGS"] [--no-slurm] [--tiny]
#                          [--trainctl-logs discard|keep]
#
# Starts trainctl (trainctl-coordinator, state under $TMPDIR, + one
# trainctl-agent with 8 fake GPUs) and, when slurmctld is installed, Slurm
# (munge, slurmctld, slurmd with 8 fake GPUs on fake /dev/nvidia* nodes, the
# tuned scheduler parameters this script writes to slurm.conf), then submits
# the same one-GPU
# no-op jobs to each with driver.py: N CLI submits (`trainctl submit` /
# `sbatch`, --concurrency at a time) and one batch submit of N (`trainctl
# sweep --grid` / `sbatch --array`). Each job writes its start time
# (`date +%s%N`), the same method for both. Both systems are up for the whole
# run; the array row is one `trainctl submit --array 0-(N-1)` (one SubmitJobs
# call, as Slurm's batch row is one `sbatch --array`). With --rounds R the
# runs (trainctl cli, Slurm cli, trainctl batch, Slurm batch, trainctl
# array, no scheduler) repeat R times in that alternating order and each
# figure is the median over the rounds (every round is in the JSON). The
# transport floor (trainctl-bench-floor, a no-op unary gRPC call) is measured
# first and every submit->start latency is also given as a multiple of its p50.
# Same job shape on both sides: one GPU each (`--gpus 1` / `--gres=gpu:1`) of 8
# (`--fake-gpus 8` / `Gres=gpu:8`).
# --coordinator-args: extra flags for trainctl-coordinator (e.g. "--sync
# normal" to see what the default per-write fsync costs; recorded in the
# JSON). --agent-args: extra flags for trainctl-agent (e.g. "--no-guard
# --task-shim build/bin/trainctl-task-shim" for the per-task shim the agent
# used before its guard; recorded too). Prints a table, writes --out (default bench/results/slurm_compare.json;
# "-" prints only).
# Installs nothing: `apt-get install slurm-wlm slurmctld slurmd slurm-client
# munge` first for the Slurm half (needs root for munge and mknod).
# Each round also runs the same N jobs with no scheduler at all (`xargs -P
# 8`, driver.py --system bare): the ceiling any launcher could reach on this
# host, and the ceiling's ratio to Slurm, the most any scheduler could show.
# --tiny: 20 jobs (the ctest bench_slurm_smoke; Slurm only if installed).
# --trainctl-logs: trainctl's jobs discard their output (`--no-logs`, the
# default: Slurm's rows use -o /dev/null) or keep a log file per job.
set -euo pipefail

BIN=$(cd "${1:?usage: $0 BIN_DIR [options]}" && pwd)
shift
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
JOBS=500
CONC=8
ROUNDS=1
COORD_ARGS=
AGENT_ARGS=
TC_LOGS=discard
OUT=$ROOT/bench/results/slurm_compare.json
SLURM=auto
while (($#)); do
  case $1 in
    --jobs) JOBS=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --coordinator-args) COORD_ARGS=$2; shift 2 ;;
    --agent-args) AGENT_ARGS=$2; shift 2 ;;
    --trainctl-logs) TC_LOGS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-slurm) SLURM=no; shift ;;
    --tiny) JOBS=20; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
if [[ $SLURM == auto ]]; then
  if command -v slurmctld >/dev/null && command -v munged >/dev/null && [[ $(id -u) == 0 ]]; then
    SLURM=yes
  else
    SLURM=no
    echo "Slurm (slurmctld, munged) not installed or not root: trainctl half only" >&2
  fi
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/trainctl-slurm-compare.XXXXXX")
PIDS=()
MUNGE_STARTED=
cleanup() {
  local daemons=() f p
  for f in "$WORK/slurm/slurmd.pid" "$WORK/slurm/slurmctld.pid"; do
    if [[ -f $f ]]; then daemons+=("$(cat "$f")"); fi
  done
  if [[ -n $MUNGE_STARTED && -f /run/munge/munged.pid ]]; then
    daemons+=("$(cat /run/munge/munged.pid)")
  fi
  for p in "${daemons[@]}" "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The daemons are not our children: give them 5 s to write their state
  # and exit before their directory goes.
  for _ in $(seq 1 50); do
    local alive=0
    for p in "${daemons[@]}"; do
      if [[ -d /proc/$p && $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]]; then alive=1; fi
    done
    ((alive)) || break
    sleep 0.1
  done
  [[ -n ${KEEP:-} ]] || rm -rf "$WORK" 2>/dev/null || true
}
trap cleanup EXIT
load_start=$(cut -d' ' -f1 /proc/loadavg)

# ------------------------------------------------------------------ floor
if [[ -x $BIN/trainctl-bench-floor ]]; then
  "$BIN/trainctl-bench-floor" --calls 2000 >"$WORK/floor.json"
  echo "transport floor: $(tr -d '\n ' <"$WORK/floor.json")"
else
  echo "no $BIN/trainctl-bench-floor: no transport floor" >&2
fi

# ------------------------------------------------------------------ trainctl
mkdir -p "$WORK/tc-state" "$WORK/tc-logs"
# shellcheck disable=SC2086  # COORD_ARGS is a list of flags.
"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/tc-state" \
  --log-level warn $COORD_ARGS >"$WORK/coordinator.log" 2>&1 &
PIDS+=($!)
port=
for _ in $(seq 1 300); do
  port=$(sed -n 's/^trainctl-coordinator listening on port \([0-9]*\)$/\1/p' "$WORK/coordinator.log" 2>/dev/null || true)
  [[ -n $port ]] && break
  sleep 0.1
done
[[ -n $port ]] || { cat "$WORK/coordinator.log" >&2; exit 1; }
export TRAINCTL_COORDINATOR=127.0.0.1:$port
# shellcheck disable=SC2086  # AGENT_ARGS is a list of flags.
"$BIN/trainctl-agent" --node-name bench-node --fake-gpus 8:H100:80GiB \
  --log-dir "$WORK/tc-logs" --log-level warn $AGENT_ARGS >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 300); do
  "$BIN/trainctl" nodes 2>/dev/null | grep -q bench-node && break
  sleep 0.1
done
"$BIN/trainctl" nodes | grep -q bench-node || { cat "$WORK/agent.log" >&2; exit 1; }

COORD_PID=${PIDS[0]}
# The agent runs under its guard (--guard, the default): the agent is the
# guard's child; with --no-guard it is the started process itself.
AGENT_PID=$(pgrep -P "${PIDS[1]}" -x trainctl-agent 2>/dev/null || true)
AGENT_PID=${AGENT_PID:-${PIDS[1]}}
cpu_ticks() {  # PID -> "own reaped-children" CPU ticks (utime+stime, proc(5))
  awk '{print $14 + $15, $16 + $17}' "/proc/$1/stat"
}

run_driver() {  # SYSTEM MODE ROUND -> JSON file $WORK/SYSTEM-MODE-ROUND.json
  local sys=$1 mode=$2 round=$3 c0 a0 c1 a1
  if [[ $sys == trainctl ]]; then
    read -r c0 _ < <(cpu_ticks "$COORD_PID"); read -ra a0 < <(cpu_ticks "$AGENT_PID")
  fi
  python3 "$HERE/driver.py" --system "$sys" --mode "$mode" --jobs "$JOBS" \
    --concurrency "$CONC" --dir "$WORK/stamps-$sys-$mode-$round" --trainctl "$BIN/trainctl" \
    --trainctl-logs "$TC_LOGS" \
    >"$WORK/$sys-$mode-$round.json"
  if [[ $sys == trainctl ]]; then
    # CPU per job of each trainctl process over this run (where the ms go;
    # the tasks are the agent's reaped children: the job's own programs,
    # and the shim when --task-shim is given).
    read -r c1 _ < <(cpu_ticks "$COORD_PID"); read -ra a1 < <(cpu_ticks "$AGENT_PID")
    echo "$(( c1 - c0 )) $(( a1[0] - a0[0] )) $(( a1[1] - a0[1] )) $(getconf CLK_TCK)" \
      >"$WORK/$sys-$mode-$round.cpu"
  fi
  echo "round $round $sys $mode: $(cat "$WORK/$sys-$mode-$round.json")"
}

# ------------------------------------------------------------------ Slurm
if [[ $SLURM == yes ]]; then
  S=$WORK/slurm
  mkdir -p "$S/dev" "$S/state" "$S/spool"
  for i in 0 1 2 3 4 5 6 7; do mknod -m 666 "$S/dev/nvidia$i" c 195 "$i"; done
  host=$(hostname -s)
  # Free ports for slurmctld and slurmd.
  read -r p1 p2 < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
  cat >"$S/slurm.conf" <<CONF
ClusterName=bench
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$p1
SlurmdPort=$p2
AuthType=auth/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,default_queue_depth=1000
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmdParameters=config_overrides
MpiDefault=none
ReturnToService=2
MaxArraySize=10001
NodeName=$host CPUs=32 RealMemory=16000 Gres=gpu:8 State=UNKNOWN
PartitionName=bench Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  cat >"$S/gres.conf" <<CONF
AutoDetect=off
NodeName=$host Name=gpu File=$S/dev/nvidia[0-7]
CONF
  export SLURM_CONF=$S/slurm.conf
  if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge && chown munge:munge /run/munge
    su -s /bin/sh munge -c /usr/sbin/munged
    MUNGE_STARTED=1
  fi
  slurmctld -f "$S/slurm.conf"
  slurmd -f "$S/slurm.conf"
  for _ in $(seq 1 300); do
    state=$(sinfo -h -o %T 2>/dev/null || true)
    [[ $state == idle ]] && break
    sleep 0.1
  done
  [[ $state == idle ]] || { echo "Slurm node not idle: '$state'" >&2; tail -20 "$S"/*.log >&2; exit 1; }
fi

# ------------------------------------------------------------------ runs
for round in $(seq 1 "$ROUNDS"); do
  for mode in cli batch; do
    run_driver trainctl "$mode" "$round"
    if [[ $SLURM == yes ]]; then run_driver slurm "$mode" "$round"; fi
  done
  run_driver trainctl array "$round"
  run_driver bare batch "$round"
done
load_end=$(cut -d' ' -f1 /proc/loadavg)

python3 - "$OUT" "$WORK" "$SLURM" "$load_start" "$load_end" "$ROUNDS" "$COORD_ARGS" "$AGENT_ARGS" \
  "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$TC_LOGS" <<'PY'
import json, os, statistics, sys
out, work, slurm, l0, l1, rounds, coord_args, agent_args, commit, tc_logs = sys.argv[1:]
rounds = int(rounds)
floor = None
if os.path.exists(os.path.join(work, "floor.json")):
    floor = json.load(open(os.path.join(work, "floor.json")))
floor_ms = floor["p50_us"] / 1000 if floor else None


def median_row(runs):
    """One row: the median of each figure over the rounds (the first run's
    shape); `rounds` keeps every run."""
    row = dict(runs[0])
    for key in ("wall_s", "jobs_per_s", "submit_s"):
        row[key] = round(statistics.median(r[key] for r in runs), 3)
    for key in ("ack_to_start", "issue_to_start", "ack_latency"):
        row[key] = {q: round(statistics.median(r[key][q] for r in runs), 3)
                    for q in runs[0][key] if q != "count"}
        row[key]["count"] = runs[0][key]["count"]
        if floor_ms and key == "issue_to_start":
            for q in ("p50_ms", "p99_ms"):
                row[key][q[:3] + "_floor_multiple"] = round(row[key][q] / floor_ms)
    if all("cpu_ms_per_job" in r for r in runs):
        row["cpu_ms_per_job"] = {
            k: round(statistics.median(r["cpu_ms_per_job"][k] for r in runs), 3)
            for k in ("coordinator", "agent", "tasks")}
    row["rounds"] = runs
    return row


rows = {}
for sys_ in ("trainctl", "slurm", "bare"):
    for mode in ("cli", "batch", "array"):
        runs = []
        for r in range(1, rounds + 1):
            p = os.path.join(work, "%s-%s-%d.json" % (sys_, mode, r))
            if os.path.exists(p):
                run = json.load(open(p))
                cpu = os.path.join(work, "%s-%s-%d.cpu" % (sys_, mode, r))
                if os.path.exists(cpu):
                    coord, agent, tasks, hz = (int(x) for x in open(cpu).read().split())
                    per_job = 1000.0 / hz / max(1, run["jobs"])
                    run["cpu_ms_per_job"] = {
                        "coordinator": round(coord * per_job, 3),
                        "agent": round(agent * per_job, 3),
                        "tasks": round(tasks * per_job, 3),
                        "note": "utime+stime from /proc over the run / jobs; "
                                "tasks = the agent's reaped children"}
                runs.append(run)
        if runs:
            rows["%s_%s" % (sys_, mode)] = median_row(runs)
ratios = {}
for mode in ("cli", "batch"):
    t, s = rows.get("trainctl_" + mode), rows.get("slurm_" + mode)
    if t and s:
        r = {"jobs_per_s": round(t["jobs_per_s"] / s["jobs_per_s"], 1)}
        # Ratios only of positive latencies: a trainctl job often starts
        # before its CLI has exited (ack_to_start < 0).
        for key in ("ack_to_start", "issue_to_start"):
            for q in ("p50_ms", "p99_ms"):
                a, b = t[key].get(q), s[key].get(q)
                if a and b and a > 0 and b > 0:
                    r["%s_%s_lower_by" % (key, q[:3])] = round(b / a, 1)
        ratios[mode] = r
ceiling = None
if "bare_batch" in rows:
    c = rows["bare_batch"]["jobs_per_s"]
    ceiling = {"jobs_per_s": c,
               "note": "the same N jobs run by `xargs -P 8` with no scheduler: "
                       "the most any launcher reaches on this host"}
    for mode in ("cli", "batch", "array"):
        if "trainctl_" + mode in rows:
            ceiling["trainctl_%s_share" % mode] = round(
                rows["trainctl_" + mode]["jobs_per_s"] / c, 3)
    if "slurm_batch" in rows:
        ceiling["over_slurm_batch"] = round(c / rows["slurm_batch"]["jobs_per_s"], 1)
doc = {"benchmark": "trainctl vs Slurm 22.05, one host (bench/slurm/compare.sh)",
       "slurm": slurm == "yes", "rounds": rounds,
       "coordinator_args": coord_args, "agent_args": agent_args,
       "trainctl_logs": tc_logs,
       "durability": ("trainctl: every ack and state change is fsynced first "
                      "(coordinator --sync full, group commit) unless "
                      "coordinator_args say otherwise; Slurm 22.05: slurmctld "
                      "acks sbatch from memory and its state-save thread writes "
                      "job state later, batched, at most every 5 s "
                      "(SAVE_MAX_WAIT, src/slurmctld/state_save.c): Slurm's "
                      "side is the less durable one"),
       "job_shape": "one GPU each of 8 (trainctl --gpus 1 on --fake-gpus 8; "
                    "sbatch --gres=gpu:1 on Gres=gpu:8)",
       "transport_floor_us": floor,
       "rows": rows, "ratios_trainctl_over_slurm": ratios,
       "ceiling_no_scheduler": ceiling,
       "targets": {"jobs_per_s_ratio": 100, "p99_submit_to_start_lower_by": 20},
       "host": {"cores": os.cpu_count(), "load_avg_1m_start": float(l0),
                "load_avg_1m_end": float(l1), "git_commit": commit}}
if floor:
    print("transport floor: p50 %.0f us, p99 %.0f us" % (floor["p50_us"], floor["p99_us"]))
print("%-16s %9s %10s %22s %22s %14s" % ("system/mode", "jobs/s", "wall s",
                                         "ack->start p50/p99 ms", "issue->start p50/p99",
                                         "x floor p50/99"))
for k, r in rows.items():
    i = r["issue_to_start"]
    print("%-16s %9.1f %10.2f %10s / %-10s %10s / %-10s %6s / %-6s" % (
        k, r["jobs_per_s"], r["wall_s"], r["ack_to_start"].get("p50_ms"),
        r["ack_to_start"].get("p99_ms"), i.get("p50_ms"), i.get("p99_ms"),
        i.get("p50_floor_multiple", "-"), i.get("p99_floor_multiple", "-")))
for k, r in rows.items():
    if "cpu_ms_per_job" in r:
        print("%-16s CPU ms per job: %s" % (k, r["cpu_ms_per_job"]))
for mode, r in ratios.items():
    print("ratio", mode, r)
if ceiling:
    print("ceiling (no scheduler, xargs -P 8):", ceiling)
text = json.dumps(doc, indent=1)
if out != "-":
    open(out, "w").write(text + "\n")
    print("wrote", out)
PY
