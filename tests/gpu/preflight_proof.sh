#!/usr/bin/env bash
# GPU proof of the pre-flight of gangs (docs/preflight.md) on one
# host with 2 GPUs, from a bundle made by deploy/make_bundle.sh (no gRPC on
# the host; NCCL from the host or from pip's nvidia-nccl, as gpu_proof.sh).
#
#   (a) two agents, one GPU each (node-a --gpus 0, node-b --gpus 1), their
#       probe the real trainctl-nccl-allreduce --preflight: a 2-rank gang
#       (--nodes 2 --gpus-per-node 1) with --preflight, three times, and the
#       same gang with --no-preflight three times: the pre-flight's time to
#       communicator ready, bus bandwidth, verdict, and what it adds to
#       submit -> running;
#   (b) node-a (GPU 0) and node-b (GPU 1) whose probe is broken
#       (--preflight-probe pointing at a program that does not exist): the
#       gang's pre-flight fails on node-b, node-b is excluded for the job and
#       the gang waits (`trainctl why` says why); then node-c joins (GPU 1
#       again, a good probe): the gang is placed on node-a + node-c, passes
#       there and SUCCEEDS. `trainctl describe` shows both pre-flights and
#       the exclusion.
#
# Writes OUT_DIR/preflight_proof.json (everything measured) and
# OUT_DIR/preflight_proof.log (describe outputs, daemon logs). Budget: about
# 3 minutes; every wait has a timeout; every process started here is stopped
# on exit.
#
# Usage: preflight_proof.sh BUNDLE_DIR OUT_DIR
set -uo pipefail

# bundle_args, log, append_file, free_port, tc, kill_tree, use_host_nccl.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundle_args "$0" "$@"
LOG=$OUT/preflight_proof.log
WORK=$(mktemp -d /tmp/preflight_proof.XXXXXX)
REC=$WORK/records.jsonl
PY=$(command -v python3 || true)
: >"$LOG"
: >"$REC"

# NVLink SHARP (multicast) stays off on these machines.
export NCCL_NVLS_ENABLE=0
export CUDA_DEVICE_ORDER=PCI_BUS_ID

T0=$SECONDS
ADDR=""
PIDS=()

# rec SCENARIO MODE JOB RC DESCRIBE_JSON: one record for the report.
rec() {
  "$PY" -c 'import json,sys; print(json.dumps(dict(zip(["scenario","mode","job","rc","describe"], sys.argv[1:]))))' "$@" >>"$REC"
}


stop_cluster() {
  if ((${#PIDS[@]} > 0)); then
    log "stopping coordinator and agents (${PIDS[*]})"
    kill_tree "${PIDS[@]}"
  fi
  PIDS=()
}

# start_cluster TAG NAME:GPUS:PORTS[:PROBE]...: a coordinator with a fresh
# state dir and one agent per spec (PROBE: its --preflight-probe); waits
# until `trainctl nodes` lists them all.
start_cluster() {
  local tag=$1 spec name gpus ports probe i ok extra
  shift
  stop_cluster
  ADDR="127.0.0.1:$(free_port)"
  mkdir -p "$WORK/state-$tag"
  log "cluster $tag: coordinator at $ADDR, agents: $*"
  setsid "$BIN/trainctl-coordinator" --listen "$ADDR" --state-dir "$WORK/state-$tag" \
    --preflight-timeout 90s >>"$WORK/coordinator-$tag.log" 2>&1 &
  PIDS+=("$!")
  for i in $(seq 1 40); do
    tc nodes >/dev/null 2>&1 && break
    sleep 0.5
  done
  for spec in "$@"; do
    IFS=: read -r name gpus ports probe <<<"$spec"
    extra=()
    [[ -n "$probe" ]] && extra=(--preflight-probe "$probe")
    mkdir -p "$WORK/logs-$tag-$name"
    setsid "$BIN/trainctl-agent" --coordinator "$ADDR" --node-name "$name" \
      --gpus "$gpus" --log-dir "$WORK/logs-$tag-$name" --port-range "$ports" \
      --address 127.0.0.1 "${extra[@]}" >>"$WORK/agent-$tag-$name.log" 2>&1 &
    PIDS+=("$!")
  done
  for i in $(seq 1 60); do
    ok=1
    tc nodes >"$WORK/nodes-$tag.txt" 2>&1 || ok=0
    for spec in "$@"; do grep -q -- "${spec%%:*}" "$WORK/nodes-$tag.txt" || ok=0; done
    ((ok == 1)) && break
    sleep 0.5
  done
  append_file "trainctl nodes, cluster $tag" "$WORK/nodes-$tag.txt"
  if ((ok != 1)); then
    log "ERROR: cluster $tag did not come up within 30 s"
    return 1
  fi
}

# run_gang SCENARIO MODE TIMEOUT_S SUBMIT_FLAGS...: submits the NCCL example
# as a 2 x 1 gang, waits, saves describe (text and JSON), records it.
run_gang() {
  local scen=$1 mode=$2 to=$3 out job rc base
  shift 3
  out=$(tc submit --name "$scen-$mode" --nodes 2 --gpus-per-node 1 "$@" -- \
    "$BIN/trainctl-nccl-allreduce" --bytes 256MiB 2>>"$WORK/cli.log") || {
    log "ERROR: submit $scen/$mode failed: $(tail -n 3 "$WORK/cli.log" | tr '\n' ' ')"
    rec "$scen" "$mode" "" 1 ""
    return 1
  }
  job=$(grep -oE '[0-9]+' <<<"$out" | tail -n 1)
  timeout "$to" "$BIN/trainctl" --coordinator "$ADDR" wait "$job" >>"$WORK/cli.log" 2>&1
  rc=$?
  ((rc == 124)) && tc cancel "$job" >>"$WORK/cli.log" 2>&1
  base="$WORK/$scen-$mode-job$job"
  tc describe "$job" >"$base.txt" 2>&1
  tc describe "$job" -o json >"$base.json" 2>&1
  append_file "describe job $job ($scen/$mode), wait exit $rc" "$base.txt"
  log "$scen/$mode: job $job ended, wait exit status $rc"
  rec "$scen" "$mode" "$job" "$rc" "$base.json"
}

summarize() {
  "$PY" - "$REC" "$OUT/preflight_proof.json" "$WORK" "$((SECONDS - T0))" <<'PYEOF'
import json, statistics, sys

rec_path, out_path, work, elapsed = sys.argv[1:5]


def load(path):
    try:
        with open(path) as f:
            j = json.load(f)
        return j.get("job", j)
    except (OSError, ValueError):
        return None


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def median(xs):
    xs = [x for x in xs if isinstance(x, (int, float))]
    return round(statistics.median(xs), 3) if xs else None


report = {"elapsed_s": int(elapsed), "runs": [], "summary": {}}
for line in open(rec_path):
    if not line.strip():
        continue
    r = json.loads(line)
    run = {"scenario": r["scenario"], "mode": r["mode"], "job": r["job"],
           "wait_rc": int(r["rc"] or 1)}
    job = load(r.get("describe", ""))
    if job:
        run["state"] = job.get("state")
        sub, start = num(job.get("submit_time_ms")), num(job.get("start_time_ms"))
        if sub and start:
            run["submit_to_running_ms"] = start - sub
        run["nodes"] = sorted({t.get("node") for t in job.get("tasks", [])})
        pf = job.get("preflight", {})
        run["excluded"] = pf.get("excluded", [])
        run["preflights"] = []
        for p in pf.get("runs", []):
            s, e = num(p.get("start_time_ms")), num(p.get("end_time_ms"))
            run["preflights"].append({
                "index": p.get("index"), "verdict": p.get("verdict"),
                "nodes": p.get("nodes"), "reason": p.get("reason"),
                "took_ms": (e - s) if s and e else None,
                "comm_ready_max_ms": p.get("comm_ready_max_ms"),
                "links": p.get("links", []), "ranks": p.get("ranks", [])})
    report["runs"].append(run)

for (scen, mode) in sorted({(r["scenario"], r["mode"]) for r in report["runs"]}):
    runs = [r for r in report["runs"] if r["scenario"] == scen and r["mode"] == mode]
    s = {"runs": len(runs), "succeeded": sum(1 for r in runs if r.get("state") == "JOB_STATE_SUCCEEDED"),
         "submit_to_running_ms": median([r.get("submit_to_running_ms") for r in runs])}
    passed = [p for r in runs for p in r.get("preflights", []) if p["verdict"] == "PREFLIGHT_VERDICT_PASSED"]
    if passed:
        s["preflight_took_ms"] = median([p["took_ms"] for p in passed])
        s["comm_ready_max_ms"] = median([p["comm_ready_max_ms"] for p in passed])
        s["network_busbw_gbps"] = median([l.get("median_busbw_gbps") for p in passed for l in p["links"]
                                          if l.get("link_class") == "LINK_CLASS_NETWORK"])
        s["intra_node_busbw_gbps"] = median([l.get("median_busbw_gbps") for p in passed for l in p["links"]
                                             if l.get("link_class") == "LINK_CLASS_INTRA_NODE"])
    if scen == "b":
        s["excluded"] = sorted({e.get("node") for r in runs for e in r.get("excluded", [])})
        s["final_nodes"] = runs[-1].get("nodes") if runs else None
        s["verdicts"] = [p["verdict"] for r in runs for p in r.get("preflights", [])]
    report["summary"][f"{scen}/{mode}"] = s

a_on = report["summary"].get("a/preflight", {}).get("submit_to_running_ms")
a_off = report["summary"].get("a/no-preflight", {}).get("submit_to_running_ms")
if a_on is not None and a_off is not None:
    report["summary"]["preflight_adds_ms"] = round(a_on - a_off, 1)
b = report["summary"].get("b/preflight", {})
report["summary"]["exclusion_proved"] = (
    b.get("excluded") == ["node-b"] and b.get("final_nodes") == ["node-a", "node-c"]
    and b.get("succeeded") == 1)
report["work_dir"] = work
with open(out_path, "w") as f:
    json.dump(report, f, indent=2, sort_keys=True)
print(json.dumps(report["summary"], indent=1))
PYEOF
}

cleanup() {
  local rc=$? f
  set +e
  trap - EXIT INT TERM
  stop_cluster
  for f in "$WORK"/coordinator-*.log "$WORK"/agent-*.log "$WORK"/cli.log; do
    [[ -f "$f" ]] && append_file "$(basename "$f")" "$f"
  done
  for f in "$WORK"/logs-*/cluster-*/jobs-*/job-*.preflight-*.rank-*.log; do
    [[ -f "$f" ]] && append_file "probe log" "$f"
  done
  [[ -n "$PY" ]] && summarize 2>>"$LOG" | tee -a "$LOG"
  log "done in $((SECONDS - T0)) s (exit $rc); report: $OUT/preflight_proof.json; raw: $LOG"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for b in trainctl trainctl-coordinator trainctl-agent trainctl-nccl-allreduce; do
  if [[ ! -x "$BIN/$b" ]]; then
    log "ERROR: $BIN/$b missing: build it (with NCCL) and rerun deploy/make_bundle.sh"
    exit 1
  fi
done
if [[ -z "$PY" ]]; then
  echo "python3 is needed" >&2
  exit 1
fi
# libnccl.so.2 from the host or pip (the bundle does not carry it); the
# agents pass LD_LIBRARY_PATH on to the probes and the job.
use_host_nccl "the NCCL probe"
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv >"$WORK/smi.txt" 2>&1
append_file "nvidia-smi" "$WORK/smi.txt"

# (a) the real NCCL probe passes; what it measures and costs.
if start_cluster a node-a:0:29500-29599 node-b:1:29600-29699; then
  for i in 1 2 3; do
    run_gang a preflight 120 --preflight
    run_gang a no-preflight 120 --no-preflight
  done
fi

# (b) a broken probe on node-b: excluded; the gang waits (node-a alone cannot
# hold it) until node-c (GPU 1 again, a good probe) joins, then passes its
# pre-flight on node-a + node-c and runs there.
if start_cluster b node-a:0:29500-29599 "node-b:1:29600-29699:$WORK/no-such-probe"; then
  out=$(tc submit --name b-preflight --nodes 2 --gpus-per-node 1 --preflight -- \
    "$BIN/trainctl-nccl-allreduce" --bytes 256MiB 2>>"$WORK/cli.log")
  job=$(grep -oE '[0-9]+' <<<"$out" | tail -n 1)
  excluded=""
  for i in $(seq 1 120); do
    excluded=$(tc describe "$job" -o json 2>/dev/null | "$PY" -c '
import json, sys
j = json.load(sys.stdin); j = j.get("job", j)
print(",".join(e["node"] for e in j.get("preflight", {}).get("excluded", [])))' 2>/dev/null)
    [[ -n "$excluded" ]] && break
    sleep 0.5
  done
  log "b: job $job excluded: '$excluded'"
  tc why "$job" >"$WORK/b-why.txt" 2>&1
  append_file "why job $job after the exclusion" "$WORK/b-why.txt"
  mkdir -p "$WORK/logs-b-node-c"
  setsid "$BIN/trainctl-agent" --coordinator "$ADDR" --node-name node-c --gpus 1 \
    --log-dir "$WORK/logs-b-node-c" --port-range 29700-29799 --address 127.0.0.1 \
    >>"$WORK/agent-b-node-c.log" 2>&1 &
  PIDS+=("$!")
  timeout 180 "$BIN/trainctl" --coordinator "$ADDR" wait "$job" >>"$WORK/cli.log" 2>&1
  rc=$?
  ((rc == 124)) && tc cancel "$job" >>"$WORK/cli.log" 2>&1
  tc describe "$job" >"$WORK/b-job$job.txt" 2>&1
  tc describe "$job" -o json >"$WORK/b-job$job.json" 2>&1
  append_file "describe job $job (b), wait exit $rc" "$WORK/b-job$job.txt"
  log "b: job $job ended, wait exit status $rc"
  rec b preflight "$job" "$rc" "$WORK/b-job$job.json"
fi
