#!/usr/bin/env bash
# GPU types and node constraints (admin levers), with the real binaries on
# loopback: a coordinator and two agents with fake GPUs of different models
# (hnode: 2 x "NVIDIA H100 80GB HBM3", --features ib,nvlink; anode: 2 x
# "NVIDIA A100-SXM4-40GB", no features), the trainctl CLI.
#  1. `trainctl nodes` shows each GPU's type ("h100 80G") and the features;
#  2. --gpu-type h100 lands on the h100 node; with it full, a second
#     --gpu-type h100 job waits while the a100 node is free, and `trainctl
#     why` names the --gpu-type constraint;
#  3. --gpu-type b200 is refused at submit, saying what the cluster has;
#     an unparsable --constraint is refused naming the field;
#  4. --constraint ib lands on the node started with --features ib;
#     -x/--exclude and -w/--nodelist are respected.
# Usage: gpu_types_e2e.sh BUILD_BIN_DIR. Every wait is on a condition with
# a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init gputypes "${1:-}"
"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  >"$WORK/coord.out" 2>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
start_agent() {
  local node=$1
  shift
  "$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name "$node" \
    --cgroups off --container-runtime none --log-dir "$WORK/logs-$node" "$@" \
    >"$WORK/agent-$node.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent-$node.log" "registered with the coordinator" >/dev/null ||
    fail "agent $node did not register"
}
start_agent hnode --fake-gpus "2:NVIDIA H100 80GB HBM3:80GiB" --features ib,nvlink \
  --labels rack=r1
start_agent anode --fake-gpus "2:NVIDIA A100-SXM4-40GB:40GiB"
T="$BIN/trainctl"
job_field() {
  "$T" describe "$1" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin); job = j.get("job", j)
if sys.argv[1] == "state":
    print(job["state"])
else:
    print(",".join(sorted({t["node"] for t in job.get("tasks", [])})))
' "$2"
}
wait_state() {
  local id=$1 want=$2 end=$((SECONDS + 30))
  until [[ $(job_field "$id" state) == "$want" ]]; do
    ((SECONDS < end)) || fail "job $id is $(job_field "$id" state), not $want"
    read -rt 0.1 <> <(:) || true
  done
}
# Submits "$@" -- sleep 300, waits until it runs, prints its id.
run_on() {
  local id
  id=$("$T" submit --no-preflight "$@" -- sleep 300) || fail "submit $* was refused"
  wait_state "$id" JOB_STATE_RUNNING
  echo "$id"
}
refused() {  # refused PATTERN ARGS...: submit ARGS must fail, saying PATTERN
  local pattern=$1 rc=0 out
  shift
  out=$("$T" submit "$@" -- true 2>&1) || rc=$?
  ((rc != 0)) || fail "submit $* was accepted (job $out)"
  grep -qF -- "$pattern" <<<"$out" || fail "submit $*: the error does not say \"$pattern\": $out"
}

# 1. Types and features in `trainctl nodes`.
nodes=$(COLUMNS=250 "$T" nodes)
grep -q "hnode.*h100 80G.*ib,nvlink rack=r1" <<<"$nodes" || fail "nodes: no h100 type / features on hnode: $nodes"
grep -q "anode.*a100 40G" <<<"$nodes" || fail "nodes: no a100 type on anode: $nodes"
ok "trainctl nodes shows h100 80G with ib,nvlink on hnode and a100 40G on anode"

# 2. --gpu-type h100 lands on hnode; a second one waits, why names it.
j1=$(run_on --gpus 2 --gpu-type h100)
[[ $(job_field "$j1" nodes) == hnode ]] || fail "--gpu-type h100 job $j1 ran on $(job_field "$j1" nodes)"
j2=$("$T" submit --gpu-type h100 -- sleep 300)
end=$((SECONDS + 30))
until why=$("$T" why "$j2") && grep -qF -- "--gpu-type h100: rules out anode (a100)" <<<"$why"; do
  ((SECONDS < end)) || fail "why $j2 does not name the --gpu-type constraint: $why"
  read -rt 0.1 <> <(:) || true
done
[[ $(job_field "$j2" state) == JOB_STATE_PENDING ]] || fail "job $j2 is $(job_field "$j2" state) while hnode is full"
ok "--gpu-type h100 job $j1 runs on hnode; job $j2 waits with anode free, and why names --gpu-type h100"
"$T" cancel "$j1" >/dev/null
wait_state "$j2" JOB_STATE_RUNNING
[[ $(job_field "$j2" nodes) == hnode ]] || fail "job $j2 ran on $(job_field "$j2" nodes)"
"$T" cancel "$j2" >/dev/null
wait_state "$j2" JOB_STATE_CANCELLED
ok "job $j2 started on hnode once job $j1 freed it"

# 3. Refused at submit.
refused "no node satisfies --gpu-type b200 (the cluster has a100 x2, h100 x2)" --gpu-type b200
refused "spec.constraint" --constraint 'ib&nvlink|x'
refused "--constraint gds" --constraint gds
refused "both in --nodelist and --exclude" -w anode -x anode
ok "--gpu-type b200, an unsatisfiable or unparsable --constraint and -w/-x of one node are refused at submit"

# 4. Features, exclude, nodelist.
j3=$(run_on --constraint ib)
[[ $(job_field "$j3" nodes) == hnode ]] || fail "--constraint ib job $j3 ran on $(job_field "$j3" nodes)"
"$T" cancel "$j3" >/dev/null
j4=$(run_on -x hnode)
[[ $(job_field "$j4" nodes) == anode ]] || fail "-x hnode job $j4 ran on $(job_field "$j4" nodes)"
j5=$(run_on --nodelist anode)
[[ $(job_field "$j5" nodes) == anode ]] || fail "-w anode job $j5 ran on $(job_field "$j5" nodes)"
"$T" cancel "$j4" "$j5" >/dev/null 2>&1 || { "$T" cancel "$j4" >/dev/null; "$T" cancel "$j5" >/dev/null; }
ok "--constraint ib ran on hnode, -x hnode and -w anode on anode"
desc=$("$T" describe "$j3")
grep -qF -- "--constraint ib" <<<"$desc" || fail "describe $j3 does not show the selection: $desc"
ok "describe shows the node selection"
e2e_done
