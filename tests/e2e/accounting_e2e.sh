#!/usr/bin/env bash
# Accounting with the real binaries on loopback: a coordinator with tokens
# (ops: admin; ana and bob: users), two agents with two fake GPUs each, the
# trainctl CLI. A mixed run: ana's 2 x 2 gang, bob's half-GPU experiments,
# ana's sweep of two trials, bob's preemptible 2 x 2 gang preempted by ana's
# higher-priority gang (then restarted). Then:
#  1. `trainctl usage -o json` (admin) gives each user the GPU-hours of their
#     jobs' own records (`describe -o json` attempts) to the second, by user,
#     and the same total by project, queue, gpu-type and node;
#  2. the jobs, attempts and preemptions it counts are the records';
#  3. `trainctl history` lists every attempt (one JSON per line), and -o csv
#     has a header and one row per attempt;
#  4. bob (not an admin) sees only his own rows in usage and history;
#  5. bad input is refused naming the flag; the records survive a restart.
# Usage: accounting_e2e.sh BUILD_BIN_DIR. Every wait is on a condition with
# a deadline (or `trainctl wait`).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init accounting "${1:-}"
T="$BIN/trainctl"

OPS=$(openssl rand -hex 16); ANA=$(openssl rand -hex 16); BOB=$(openssl rand -hex 16)
cat >"$WORK/tokens.txtpb" <<TOK
tokens { token: "$OPS" user: "ops" role: ROLE_ADMIN }
tokens { token: "$ANA" user: "ana" }
tokens { token: "$BOB" user: "bob" }
TOK
start_coordinator 0 --tokens-file "$WORK/tokens.txtpb" --stop-grace 2s
as() { local token=$1; shift; "$T" --token "$token" "$@"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
WAIT_S=60  # wait_until's deadline (lib.sh)
expect_fail() {  # WHAT PATTERN CMD...
  local what=$1 pattern=$2 out rc; shift 2
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [[ $rc != 0 && $out == *$pattern* ]] || fail "$what: rc=$rc '$out'"
}
for n in a b; do
  "$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name "$n" --fake-gpus 2 \
    --cgroups off --container-runtime none --run-tasks-as-agent --log-dir "$WORK/logs-$n" \
    >>"$WORK/agent-$n.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent-$n.log" "registered with the coordinator" >/dev/null ||
    fail "agent $n did not register"
done
state() { as "$OPS" describe "$1" -o json | json 'd.get("job", d)["state"]'; }

# The mixed run.
ids=()
gang=$(as "$ANA" submit --nodes 2 --gpus-per-node 2 --no-preflight -- sleep 1); ids+=("$gang")
as "$ANA" wait "$gang" >/dev/null || fail "ana's gang $gang did not succeed"
for i in 1 2; do
  ids+=("$(as "$BOB" submit --gpu-fraction 0.5 -- sleep 1)")
done
as "$BOB" wait "${ids[1]}" "${ids[2]}" >/dev/null || fail "bob's half-GPU experiments"
as "$ANA" sweep --sweep-id acct-sw --grid x=1,2 -- sh -c 'sleep 0.5' >"$WORK/sweep.out" 2>&1 ||
  fail "sweep: $(cat "$WORK/sweep.out")"
for j in $(as "$ANA" list -o json | json '" ".join(str(j["id"]) for j in d.get("jobs", []) if j["spec"].get("sweep_id") == "acct-sw")'); do
  ids+=("$j")
  as "$ANA" wait "$j" >/dev/null || fail "sweep trial $j"
done
victim=$(as "$BOB" submit --nodes 2 --gpus-per-node 2 --no-preflight --preemptible -- \
  sh -c '[ "$TRAINCTL_ATTEMPT" = 1 ] && exit 0; sleep 300'); ids+=("$victim")
wait_until "job $victim running" '[[ $(state "$victim") == JOB_STATE_RUNNING ]]'
boss=$(as "$ANA" submit --nodes 2 --gpus-per-node 2 --no-preflight --priority 10 -- sleep 1)
ids+=("$boss")
as "$ANA" wait "$boss" >/dev/null || fail "ana's preempting gang $boss"
as "$BOB" wait "$victim" >/dev/null || fail "bob's preempted gang $victim did not end well"
[[ $(as "$OPS" describe "$victim" -o json | json 'd.get("job", d).get("preemptions", 0)') == 1 ]] ||
  fail "job $victim was not preempted once"
ok "mixed run: gang $gang, half-GPU ${ids[1]} ${ids[2]}, sweep trials, $victim preempted by $boss"

# The jobs' own records: GPU-seconds, attempts and jobs per user.
as "$OPS" list -o json >/dev/null
for id in "${ids[@]}"; do as "$OPS" describe "$id" -o json >"$WORK/job-$id.json"; done
python3 - "$WORK" "${ids[@]}" >"$WORK/expect.json" <<'PY'
import json, sys
work, ids = sys.argv[1], sys.argv[2:]
want = {}
for i in ids:
    d = json.load(open(f"{work}/job-{i}.json"))
    j = d.get("job", d)
    u = want.setdefault(j["spec"]["user"], {"gpu_s": 0.0, "attempts": 0, "jobs": 0, "pre": 0})
    for a in j.get("attempts", []):
        u["gpu_s"] += a.get("gpu_hours", 0) * 3600
        u["attempts"] += 1
    u["jobs"] += 1
    u["pre"] += int(j.get("preemptions", 0))
print(json.dumps(want))
PY
want_attempts=$(json 'sum(u["attempts"] for u in d.values())' <"$WORK/expect.json")
# The records are written as each attempt ends, after the job's state: poll.
counted() { as "$OPS" usage --since 1h -o json | json 'int(d.get("total", {}).get("attempts", 0))'; }
wait_until "usage counts $want_attempts attempts (has $(counted))" '[[ $(counted) == "$want_attempts" ]]'
as "$OPS" usage --since 1h -o json >"$WORK/usage.json"
python3 - "$WORK" <<'PY' || fail "usage does not match the jobs' records: $(cat "$WORK/usage.json")"
import json, sys
work = sys.argv[1]
want = json.load(open(f"{work}/expect.json"))
got = {r["key"]: r for r in json.load(open(f"{work}/usage.json"))["rows"]}
assert set(got) == set(want), (set(got), set(want))
for user, w in want.items():
    g = got[user]
    diff = abs(g["allocated_gpu_hours"] * 3600 - w["gpu_s"])
    assert diff < 1.0, f"{user}: usage {g['allocated_gpu_hours'] * 3600:.3f} GPU-s, records {w['gpu_s']:.3f}"
    assert int(g["attempts"]) == w["attempts"], (user, g, w)
    assert int(g["jobs"]) == w["jobs"], (user, g, w)
    assert int(g["preempted"]) == w["pre"], (user, g, w)
    assert 0 <= g["used_gpu_hours"] <= g["allocated_gpu_hours"] + 1e-9, g
PY
ok "usage by user: GPU-hours, attempts, jobs and preemptions equal the jobs' own records (to the second)"

total=$(json 'd["total"]["allocated_gpu_hours"]' <"$WORK/usage.json")
for by in project queue gpu-type node; do
  t=$(as "$OPS" usage --since 1h --by "$by" -o json | json 'd["total"]["allocated_gpu_hours"]')
  python3 -c "import sys; sys.exit(abs($t - $total) * 3600 >= 1)" || fail "usage --by $by total $t, by user $total"
done
nodes=$(as "$OPS" usage --since 1h --by node -o json | json '",".join(sorted(r["key"] for r in d["rows"]))')
[[ $nodes == a,b ]] || fail "usage --by node: rows $nodes"
ok "usage --by project, queue, gpu-type and node: the same total; nodes a and b"

# History: every attempt, JSON lines and CSV.
as "$OPS" history --since 1h -o json >"$WORK/history.jsonl"
[[ $(wc -l <"$WORK/history.jsonl") == "$want_attempts" ]] ||
  fail "history: $(wc -l <"$WORK/history.jsonl") lines, want $want_attempts"
grep -q '"preempted":true' "$WORK/history.jsonl" || fail "history: no preempted attempt"
as "$OPS" history --since 1h --format jobid,user,state,alloc_gpu_h -o csv >"$WORK/history.csv"
head -1 "$WORK/history.csv" | grep -q '^jobid,user,state,alloc_gpu_h' || fail "history csv header"
[[ $(($(wc -l <"$WORK/history.csv") - 1)) == "$want_attempts" ]] || fail "history csv rows"
[[ $(as "$OPS" history --since 1h --state preempted -o json | wc -l) == 1 ]] ||
  fail "history --state preempted"
ok "history: $want_attempts attempts as JSON lines and CSV; --state preempted finds the one"

# A user sees only their own rows.
as "$BOB" usage --since 1h -o json >"$WORK/bob-usage.json"
[[ $(json '",".join(r["key"] for r in d["rows"])' <"$WORK/bob-usage.json") == bob ]] ||
  fail "bob's usage: $(cat "$WORK/bob-usage.json")"
as "$BOB" history --since 1h --user ana -o json >"$WORK/bob-history.jsonl"
[[ -s $WORK/bob-history.jsonl ]] || fail "bob's history is empty"
if grep -v '"user":"bob"' "$WORK/bob-history.jsonl" | grep -q .; then
  fail "bob sees another user's attempts: $(cat "$WORK/bob-history.jsonl")"
fi
ok "bob (not an admin) sees only his own rows in usage and history"

# Bad input, and a restart.
expect_fail "usage --since" "--since" as "$OPS" usage --since yesterday
expect_fail "history --format" "--format" as "$OPS" history --format jobid,colour
kill "$COORD_PID"
wait "$COORD_PID" 2>/dev/null || true
start_coordinator "$PORT" --tokens-file "$WORK/tokens.txtpb" --stop-grace 2s
t=$(as "$OPS" usage --since 1h -o json | json 'd["total"]["allocated_gpu_hours"]')
python3 -c "import sys; sys.exit(abs($t - $total) * 3600 >= 1)" || fail "after a restart: total $t, was $total"
ok "bad --since/--format refused naming the flag; the same usage after a coordinator restart"

# Retention: restarted with --accounting-retention 1s, every attempt above
# ended more than a second ago, so its record goes before the coordinator
# serves; a window from before the horizon is refused, not answered short.
sleep 1.1  # wall time for the attempts to be older than the retention, not a wait for state
kill "$COORD_PID"
wait "$COORD_PID" 2>/dev/null || true
start_coordinator "$PORT" --tokens-file "$WORK/tokens.txtpb" --stop-grace 2s --accounting-retention 1s
expect_fail "usage from before the horizon" "is no longer kept" as "$OPS" usage --since 1h
expect_fail "history from before the horizon" "--accounting-retention" as "$OPS" history --since 1h
now=$(date -u +%Y-%m-%dT%H:%M:%S)
t=$(as "$OPS" usage --since "$now" -o json | json 'd.get("total", {}).get("allocated_gpu_hours", 0)')
[[ $t == 0 ]] || fail "usage since $now after retention: $t GPU-hours"
[[ -z $(as "$OPS" history --since "$now" -o json) ]] || fail "history since $now after retention"
grep -q "retention: deleted $want_attempts accounting records older than 1s" "$WORK/coord.log" \
  || fail "no retention line for $want_attempts records: $(grep retention "$WORK/coord.log")"
ok "--accounting-retention 1s: the $want_attempts records deleted at start-up; usage and history from before the horizon refused (OUT_OF_RANGE)"
e2e_done
