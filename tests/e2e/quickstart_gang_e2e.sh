#!/usr/bin/env bash
# A new user's 2-node gang on fake GPUs right after deploy/quickstart.sh,
# real binaries on loopback:
#  1. a bin dir holding only what the quickstart builds (its --target list,
#     read from the script) runs a coordinator and two fake-GPU agents; a
#     2-node gang is pre-flighted (the fake probe is among the targets),
#     passes and SUCCEEDS;
#  2. the same without the pre-flight program (a build that lacks it): each
#     agent says at start that this is its configuration error, the gang is
#     not pre-flighted, no node is excluded, it SUCCEEDS, and `trainctl why`
#     names the agents' error. Before the fix the nodes were excluded and the
#     gang waited forever (`trainctl wait` below times out).
# Usage: quickstart_gang_e2e.sh BUILD_BIN_DIR. Every wait has a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init quickstart-gang "${1:-}"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The quickstart's targets: the words after --target in its build of the
# agent, up to the end of that command (its continuation lines).
mapfile -t TARGETS < <(python3 - "$SRC/deploy/quickstart.sh" <<'EOF'
import shlex, sys
text = open(sys.argv[1]).read().replace("\\\n", " ")
for line in text.splitlines():
    words = shlex.split(line, comments=True)
    if "--target" in words and "trainctl-agent" in words:
        for w in words[words.index("--target") + 1:]:
            if w.startswith("-") or "$" in w:
                break
            print(w)
        break
EOF
)
((${#TARGETS[@]} > 0)) || fail "no --target list found in deploy/quickstart.sh"
printf '%s\n' "${TARGETS[@]}" | grep -qx trainctl-fake-preflight-probe ||
  fail "the quickstart does not build trainctl-fake-preflight-probe: ${TARGETS[*]}"
QBIN=$WORK/quickstart-bin
mkdir -p "$QBIN"
for t in "${TARGETS[@]}"; do
  [[ $t == trainctl-nccl-allreduce ]] && [[ ! -e $BIN/$t ]] && continue  # GPU hosts only
  cp "$BIN/$t" "$QBIN/" || fail "quickstart target $t is not in $BIN"
done
ok "a bin dir with the quickstart's ${#TARGETS[@]} targets: ${TARGETS[*]}"

# cluster NAME: a coordinator (auto pre-flight, its default) and agents
# NAME-a, NAME-b with one fake GPU each, all from $QBIN.
cluster() {
  local c=$1 line
  "$QBIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state-$c" \
    --stop-grace 1s >"$WORK/coord-$c.out" 2>>"$WORK/coord-$c.log" &
  PIDS+=($!)
  line=$(wait_line "$WORK/coord-$c.out" "listening on port") || fail "coordinator $c did not start"
  export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
  for n in "$c-a" "$c-b"; do
    "$QBIN/trainctl-agent" --node-name "$n" --fake-gpus 1:H100-fake:80GiB \
      --log-dir "$WORK/logs-$n" >"$WORK/agent-$n.log" 2>&1 &
    PIDS+=($!)
    wait_line "$WORK/agent-$n.log" "registered with the coordinator" >/dev/null ||
      fail "agent $n did not register"
  done
}

# gang: submits a 2-node gang and waits (60 s) for it to succeed.
gang() {
  local job
  job=$("$QBIN/trainctl" submit --name gang --nodes 2 --gpus-per-node 1 -- \
    sh -c 'echo "rank $RANK of $WORLD_SIZE"')
  [[ $job =~ ^[0-9]+$ ]] || fail "submit printed '$job', not a job id"
  if ! timeout 60 "$QBIN/trainctl" wait "$job" >/dev/null; then
    "$QBIN/trainctl" why "$job" >&2 || true
    fail "the 2-node gang $job did not succeed"
  fi
  echo "$job"
}

# preflight_json JOB: "<verdicts of its runs> excluded=<nodes>".
preflight_json() {
  "$QBIN/trainctl" describe "$1" -o json | python3 -c '
import json, sys
j = json.load(sys.stdin)
pf = j.get("job", j).get("preflight", {})
print(",".join(r["verdict"] for r in pf.get("runs", [])),
      "excluded=" + ",".join(e["node"] for e in pf.get("excluded", [])))'
}

cluster q
JOB=$(gang)
[[ $(preflight_json "$JOB") == "PREFLIGHT_VERDICT_PASSED excluded=" ]] ||
  fail "job $JOB: expected one passed pre-flight, got '$(preflight_json "$JOB")'"
ok "job $JOB: the 2-node gang was pre-flighted with the quickstart's probe and SUCCEEDED"

rm "$QBIN/trainctl-fake-preflight-probe"
cluster m
for n in m-a m-b; do
  grep -q "configuration error: pre-flight program .*trainctl-fake-preflight-probe does not exist" \
    "$WORK/agent-$n.log" || fail "agent $n did not report its missing probe at start"
done
ok "each agent reports its missing pre-flight program at start as its configuration error"
JOB=$(gang)
[[ $(preflight_json "$JOB") == " excluded=" ]] ||
  fail "job $JOB: expected no pre-flight and no exclusion, got '$(preflight_json "$JOB")'"
ok "job $JOB: no pre-flight, no node excluded, the gang SUCCEEDED"
"$QBIN/trainctl" why "$JOB" >"$WORK/why.txt"
grep -q "Agent error: *m-a: agent configuration error: pre-flight program .* does not exist" \
  "$WORK/why.txt" || fail "why does not name m-a's error: $(cat "$WORK/why.txt")"
grep -q "Agent error: *m-b: agent configuration error" "$WORK/why.txt" ||
  fail "why does not name m-b's error: $(cat "$WORK/why.txt")"
ok "why names each agent's configuration error"
e2e_done
