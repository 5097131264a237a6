#!/usr/bin/env bash
# GPU proof of the NCCL bootstrap through the node relay with several
# ncclUniqueIds (ncclCommInitRankScalable, NCCL >= 2.23), from a bundle made
# by deploy/make_bundle.sh (no gRPC needed on the host).
#
#   (a) two agents, one GPU each ("node-a" --gpus 0, "node-b" --gpus 1): the
#       NCCL example as a 2-rank gang (--nodes 2 --gpus-per-node 1) with
#       TRAINCTL_NCCL_UNIQUE_IDS=2: rank 0 and rank 1 are the two roots
#       (NCCL's rule: 2 ids over 2 ranks), each publishes its id through its
#       node's relay, and both call ncclCommInitRankScalable with both ids;
#   (b) one agent with both GPUs (--gpus 2), the same job: both ranks on one
#       node, one relay;
#   (c) (a) again with TRAINCTL_NCCL_UNIQUE_IDS unset: one id,
#       ncclCommInitRank (the path every earlier gang took).
# Each run checks the all-reduce (every element equals 1+2), and the example's
# JSON says scalable_init, unique_ids, nccl_version and where the rendezvous
# went (unix:... = the node relay). The coordinator's metrics say how many
# long-polls it served directly and through relays.
#
# Writes OUT_DIR/scalable_init.json and OUT_DIR/scalable_init.log. Budget:
# under 5 minutes; every wait is bounded; every process started here is
# stopped on exit.
#
# Usage: scalable_init_proof.sh BUNDLE_DIR OUT_DIR
set -uo pipefail

# bundle_args, log, append_file, free_port, tc, kill_tree, use_host_nccl.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bundle_args "$0" "$@"
LOG=$OUT/scalable_init.log
WORK=$(mktemp -d /tmp/scalable_init.XXXXXX)
REC=$WORK/records.jsonl
PY=$(command -v python3 || true)
: >"$LOG"
: >"$REC"
export NCCL_NVLS_ENABLE=0
export CUDA_DEVICE_ORDER=PCI_BUS_ID
T0=$SECONDS
PIDS=()
ADDR=""
MPORT=""

rec() { "$PY" -c 'import json,sys; print(json.dumps(dict(a.split("=",1) for a in sys.argv[1:])))' "$@" >>"$REC"; }

stop_cluster() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 20); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  PIDS=()
}
cleanup() {
  stop_cluster
  for f in "$WORK"/*.log; do append_file "$(basename "$f")" "$f"; done
  "$PY" - "$REC" "$OUT/scalable_init.json" "$WORK/env.json" <<'PYEOF'
import json, sys
rec, out, env = sys.argv[1:4]
rows = [json.loads(l) for l in open(rec) if l.strip()]
runs = [r for r in rows if r.get("kind") == "run"]
doc = {"benchmark": "NCCL bootstrap through the node relay, ncclCommInitRankScalable "
                    "(tests/gpu/scalable_init_proof.sh)",
       "env": json.load(open(env)) if env else {}, "runs": runs,
       "errors": [r for r in rows if r.get("kind") == "error"]}
want = {"a": (2, True), "b": (2, True), "c": (1, False)}
ok = bool(runs)
for r in runs:
    k, scalable = want.get(r["scenario"], (None, None))
    r["passed"] = (r.get("state", "").endswith("SUCCEEDED") and r.get("correct") == "True"
                   and r.get("rendezvous", "").startswith("unix:")
                   and (r.get("scalable_init") == str(scalable)
                        or (k == 2 and r.get("scalable_init") == "False"
                            and int(float(r.get("nccl_version", "0"))) < 22300)))
    ok = ok and r["passed"]
doc["passed"] = ok and not doc["errors"]
json.dump(doc, open(out, "w"), indent=1)
print("passed" if doc["passed"] else "FAILED", "->", out)
PYEOF
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_cluster() {
  local tag=$1 spec name gpus i ok
  shift
  stop_cluster
  ADDR="127.0.0.1:$(free_port)"
  MPORT=$(free_port)
  mkdir -p "$WORK/state-$tag"
  setsid "$BIN/trainctl-coordinator" --listen "$ADDR" --state-dir "$WORK/state-$tag" \
    --metrics-listen "127.0.0.1:$MPORT" >>"$WORK/coordinator-$tag.log" 2>&1 &
  PIDS+=("$!")
  for i in $(seq 1 40); do tc nodes >/dev/null 2>&1 && break; sleep 0.5; done
  for spec in "$@"; do
    IFS=: read -r name gpus <<<"$spec"
    mkdir -p "$WORK/agent-$tag-$name/logs"
    setsid "$BIN/trainctl-agent" --coordinator "$ADDR" --node-name "$name" --gpus "$gpus" \
      --log-dir "$WORK/agent-$tag-$name/logs" --address 127.0.0.1 \
      >>"$WORK/agent-$tag-$name.log" 2>&1 &
    PIDS+=("$!")
  done
  for i in $(seq 1 60); do
    ok=1
    tc nodes >"$WORK/nodes.txt" 2>&1 || ok=0
    for spec in "$@"; do grep -q -- "${spec%%:*}" "$WORK/nodes.txt" || ok=0; done
    ((ok == 1)) && return 0
    sleep 0.5
  done
  log "ERROR: cluster $tag did not come up"
  rec kind=error scenario="$tag" message="cluster did not come up"
  return 1
}

# run SCENARIO IDS SUBMIT_ARGS...: the NCCL example as a 2-rank gang; IDS is
# TRAINCTL_NCCL_UNIQUE_IDS (empty: unset).
run() {
  local scen=$1 ids=$2 job out state line
  shift 2
  local env_args=(--env NCCL_NVLS_ENABLE=0)
  [[ -n "$ids" ]] && env_args+=(--env "TRAINCTL_NCCL_UNIQUE_IDS=$ids")
  out=$(tc submit --name "scalable-$scen" "$@" "${env_args[@]}" -- "$BIN/trainctl-nccl-allreduce" 2>&1)
  job=$(grep -oE '[0-9]+' <<<"$out" | head -n 1)
  if [[ -z "$job" ]]; then
    log "ERROR: $scen: submit failed: $out"
    rec kind=error scenario="$scen" message="submit failed"
    return 1
  fi
  log "$scen: job $job (TRAINCTL_NCCL_UNIQUE_IDS=${ids:-unset})"
  timeout 120 "$BIN/trainctl" --coordinator "$ADDR" wait "$job" >>"$WORK/cli.log" 2>&1 ||
    tc cancel "$job" >>"$WORK/cli.log" 2>&1
  state=$(tc describe "$job" -o json 2>/dev/null | "$PY" -c 'import json,sys; j=json.load(sys.stdin); print(j.get("job", j).get("state",""))' 2>/dev/null)
  tc logs "$job" --rank 0 >"$WORK/job-$scen-rank0.log" 2>&1
  tc logs "$job" --rank 1 >"$WORK/job-$scen-rank1.log" 2>&1
  curl -sf --max-time 5 "http://127.0.0.1:$MPORT/metrics" 2>/dev/null |
    grep -E '^trainctl_rendezvous_' >"$WORK/metrics-$scen.log"
  line=$(grep -E '^\{.*"busbw_gbps"' "$WORK/job-$scen-rank0.log" | tail -n 1)
  "$PY" - "$REC" "$scen" "$job" "$state" "${ids:-1}" "$line" "$WORK/metrics-$scen.log" <<'PYEOF'
import json, sys
rec, scen, job, state, ids, line, metrics = sys.argv[1:8]
r = {"kind": "run", "scenario": scen, "job": job, "state": state, "ids_asked": ids}
try:
    j = json.loads(line)
    for k in ("correct", "scalable_init", "unique_ids", "nccl_version", "rendezvous",
              "busbw_gbps", "comm_ready_ms", "comm_ready_max_ms"):
        r[k] = str(j.get(k))
except ValueError:
    r["error"] = "no JSON line from rank 0"
r["coordinator_metrics"] = open(metrics).read()
open(rec, "a").write(json.dumps(r) + "\n")
PYEOF
  log "$scen: state $state; rank 0: ${line:-<no result>}"
}

for b in trainctl trainctl-coordinator trainctl-agent trainctl-nccl-allreduce; do
  [[ -x "$BIN/$b" ]] || { log "ERROR: $BIN/$b missing (build with NCCL, rerun make_bundle.sh)"; exit 1; }
done
use_host_nccl "the NCCL runs"
"$PY" -c 'import json,socket,subprocess,sys; print(json.dumps({"hostname": socket.gethostname(), "gpus": subprocess.run(["nvidia-smi","--query-gpu=index,name,driver_version","--format=csv,noheader"],capture_output=True,text=True).stdout}))' >"$WORK/env.json" 2>/dev/null || echo '{}' >"$WORK/env.json"

if start_cluster a "node-a:0" "node-b:1"; then
  run a 2 --nodes 2 --gpus-per-node 1
  run c "" --nodes 2 --gpus-per-node 1
fi
if start_cluster b "node-ab:0,1"; then
  run b 2 --gpus 2
fi
