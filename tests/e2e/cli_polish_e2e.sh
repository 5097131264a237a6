#!/usr/bin/env bash
# End-to-end checks of the CLI polish with the real binaries: the
# progress line of `submit --wait` appears on a terminal (script(1) gives
# one) and never in a pipe; every read command's -o json is JSON
# (python3 -m json.tool); the generated bash completion works in a real bash;
# the daemons name the flag a mistyped one was meant to be; the agent keeps
# its logs and relay socket in --state-dir.
# Usage: cli_polish_e2e.sh BUILD_BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init cli-polish "${1:-}"

# 0. A mistyped flag: refused, with the flag it was meant to be.
for cmd in "trainctl-coordinator --state-dri $WORK/x" "trainctl-agent --log-dri $WORK/x"; do
  # shellcheck disable=SC2086  # cmd is words
  if "$BIN"/$cmd >"$WORK/typo.out" 2>&1; then fail "$cmd was accepted"; fi
  grep -qE "did you mean --(state|log)-dir\?" "$WORK/typo.out" ||
    fail "$cmd: no suggestion: $(cat "$WORK/typo.out")"
done
ok "daemons: a mistyped flag gets 'did you mean'"

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
export TRAINCTL_COORDINATOR=127.0.0.1:${line##* }
"$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name polish-node \
  --fake-gpus 1:H100-fake:80GiB --state-dir "$WORK/agent-state" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"
T="$BIN/trainctl"

# 1. Piped: the job id alone on stdout, the summary alone on stderr.
"$T" submit --wait -- sh -c 'sleep 1.5' >"$WORK/piped.out" 2>"$WORK/piped.err" ||
  fail "submit --wait (piped) failed: $(cat "$WORK/piped.err")"
grep -qxE '[0-9]+' "$WORK/piped.out" || fail "piped stdout: $(cat "$WORK/piped.out")"
if grep -q $'\r' "$WORK/piped.err"; then fail "progress line in a pipe: $(cat -v "$WORK/piped.err")"; fi
grep -qE '^job [0-9]+ succeeded' "$WORK/piped.err" || fail "piped stderr: $(cat "$WORK/piped.err")"
ok "submit --wait piped: no progress line"
[[ -S $WORK/agent-state/rendezvous-polish-node.sock ]] ||
  fail "no relay socket in --state-dir: $(ls -la "$WORK/agent-state")"
find "$WORK/agent-state/logs" -name 'job-*.log' | grep -q . ||
  fail "no task log under --state-dir/logs: $(find "$WORK/agent-state")"
ok "agent --state-dir: logs/ and the relay socket are there"

# 2. On a terminal (script(1) runs it on a pty): the line is drawn and
#    erased before the summary.
if command -v script >/dev/null; then
  COLUMNS=80 script -qefc "$T submit --wait -- sh -c 'sleep 1.5'" "$WORK/tty.typescript" \
    >"$WORK/tty.out" 2>&1 || fail "submit --wait on a pty failed: $(cat -v "$WORK/tty.out")"
  grep -qE $'\r\e\\[K[|/\\\\-] job [0-9]+ (pending|scheduled|running) [0-9]+s' "$WORK/tty.out" ||
    fail "no progress line on a terminal: $(cat -v "$WORK/tty.out")"
  grep -qE $'\r\e\\[Kjob [0-9]+ succeeded' "$WORK/tty.out" ||
    fail "progress line not erased before the summary: $(cat -v "$WORK/tty.out")"
  ok "submit --wait on a terminal: progress line drawn, then erased"
else
  echo "SKIPPED: script(1) not installed (Debian bsdutils); no terminal check"
fi

# 3. Every read command's -o json is JSON.
"$T" sweep --sweep-id sw-e2e --grid x=1,2 -- sh -c 'echo {x}' >/dev/null 2>&1 || fail "sweep"
jid=$(head -1 "$WORK/piped.out")
for cmd in "list" "describe $jid" "nodes" "sweep list" "sweep describe sw-e2e"; do
  # shellcheck disable=SC2086  # cmd is words
  "$T" $cmd -o json | python3 -m json.tool >/dev/null || fail "trainctl $cmd -o json is not JSON"
done
ok "-o json is JSON: list, describe, nodes, sweep list, sweep describe"

# 4. The bash completion, sourced in a real bash.
"$T" completion bash >"$WORK/trainctl.bash"
got=$(bash -c "source $WORK/trainctl.bash; COMP_WORDS=(trainctl sweep desc); COMP_CWORD=2; _trainctl; echo \${COMPREPLY[*]}")
[[ $got == describe ]] || fail "completion of 'trainctl sweep desc': '$got'"
ok "bash completion: 'trainctl sweep desc' -> $got"

e2e_done
