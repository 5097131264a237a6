#!/usr/bin/env bash
# End-to-end test of a shared GPU host with the real binaries: a coordinator
# with TLS and tokens, one agent running as root (the deployment of
# docs/security.md), and two throwaway local accounts, "alice" and "bob"
# (named tca<pid> and tcb<pid> so parallel runs never meet). Checks that
#  - each job runs as its user, with the submitter's environment (--export);
#  - bob's job cannot read alice's environment (her TRAINCTL_TOKEN), her log,
#    her checkpoint dir or the node's TLS key, nor signal her processes;
#  - nothing of the agent's own environment reaches a task;
#  - logs, work and checkpoint dirs belong to the job's user (0600/0700), the
#    state DB is 0600;
#  - a user without a local account is refused with the reason, and root is
#    refused at submit without --allow-root-jobs.
# Needs root (useradd, an agent that switches uid); exits 77 (skipped)
# otherwise. Usage: multiuser_e2e.sh BUILD_BIN_DIR. Waits are on conditions
# with deadlines.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
if [[ $(id -u) != 0 ]] || ! command -v useradd >/dev/null || ! command -v runuser >/dev/null; then
  echo "skipped: needs root, useradd and runuser (throwaway accounts)"
  exit 77
fi
e2e_init multiuser "${1:-}"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
A=tca$$ B=tcb$$ GHOST=tcghost$$
# The agent runs in a cgroup v2 of its own (as under systemd's Delegate=yes)
# where the kernel lets us make one: it then gives each task a cgroup.
CGMOUNT=
for m in /sys/fs/cgroup /sys/fs/cgroup/unified; do
  [[ -f $m/cgroup.controllers || -f $m/cgroup.procs && $(stat -f -c %T "$m" 2>/dev/null) == cgroup2fs ]] \
    && { CGMOUNT=$m; break; }
done
CG=
if [[ -n $CGMOUNT ]] && mkdir "$CGMOUNT/trainctl-e2e-$$" 2>/dev/null; then
  CG=$CGMOUNT/trainctl-e2e-$$
fi
cleanup_accounts() {
  e2e_cleanup
  userdel -r "$A" 2>/dev/null || true
  userdel -r "$B" 2>/dev/null || true
  if [[ -n $CG ]]; then
    # Deepest first; the agent is gone by now.
    find "$CG" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null || true
    rmdir "$CG" 2>/dev/null || true
  fi
}
trap cleanup_accounts EXIT
useradd -m -s /bin/sh "$A"
useradd -m -s /bin/sh "$B"
HOME_A=$(getent passwd "$A" | cut -d: -f6)
UID_A=$(id -u "$A")
# Users traverse WORK (no listing) to reach their work and checkpoint dirs,
# and run the CLI from it (the build dir may sit under root's home).
chmod 711 "$WORK"
mkdir -m 755 "$WORK/bin"
cp "$BIN/trainctl" "$WORK/bin/"
T=$WORK/bin/trainctl

"$SRC/deploy/make_certs.sh" "$WORK/certs" mu-node >/dev/null
C=$WORK/certs
chmod 755 "$C"
TA=$(openssl rand -hex 16); TB=$(openssl rand -hex 16); TG=$(openssl rand -hex 16)
TR=$(openssl rand -hex 16); OPS=$(openssl rand -hex 16)
cat >"$WORK/tokens.txtpb" <<TOK
tokens { token: "$TA" user: "$A" }
tokens { token: "$TB" user: "$B" }
tokens { token: "$TG" user: "$GHOST" }
tokens { token: "$TR" user: "root" }
tokens { token: "$OPS" user: "ops" role: ROLE_ADMIN }
TOK
chmod 600 "$WORK/tokens.txtpb"

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  --tls-cert "$C/coordinator.crt" --tls-key "$C/coordinator.key" --tls-ca "$C/ca.crt" \
  --tokens-file "$WORK/tokens.txtpb" --checkpoint-root "$WORK/ckpt" \
  >"$WORK/coordinator.out" 2>"$WORK/coordinator.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coordinator.out" "listening on port") || fail "coordinator did not start"
ADDR=127.0.0.1:${line##* }

# A node key that others can read is refused, as ssh refuses such keys.
cp "$C/nodes/mu-node.key" "$WORK/lax.key"
chmod 644 "$WORK/lax.key"
set +e
out=$("$BIN/trainctl-agent" --coordinator "$ADDR" --node-name mu-node --fake-gpus 2 \
  --tls-cert "$C/nodes/mu-node.crt" --tls-key "$WORK/lax.key" --tls-ca "$C/ca.crt" \
  --log-dir "$WORK/logs" 2>&1)
rc=$?
set -e
[[ $rc != 0 && $out == *"readable by group or others (mode 0644)"* ]] \
  || fail "an agent with a world-readable key started: rc=$rc $out"
ok "the agent refuses a node key that group or others can read"

# podman, where it runs containers here: step 8 mounts through it.
IMG=localhost/trainctl-smoke
PODMAN=
if command -v podman >/dev/null && [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1 &&
   podman_setup "$IMG" 2>/dev/null; then
  PODMAN=1
fi
AGENT_SECRET_TOKEN=agent-only-s3cret CG=$CG sh -c \
  '[ -z "$CG" ] || echo $$ >"$CG/cgroup.procs"; exec "$0" "$@"' "$BIN/trainctl-agent" --coordinator "$ADDR" \
  --node-name mu-node --fake-gpus 4 --no-guard \
  --container-global-args "${G[*]:-}" --container-run-args "${R[*]:-}" \
  --tls-cert "$C/nodes/mu-node.crt" --tls-key "$C/nodes/mu-node.key" --tls-ca "$C/ca.crt" \
  --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
AGENT=$!
PIDS+=($AGENT)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"

# Each user runs the CLI as themselves, with their token in the environment.
as() {  # USER TOKEN CMD...
  local user=$1 token=$2; shift 2
  (cd / && runuser -u "$user" -- env TRAINCTL_AUTH_TOKEN="$token" TRAINCTL_TLS_CA="$C/ca.crt" \
    TRAINCTL_COORDINATOR="$ADDR" "$@")
}
ops() { TRAINCTL_AUTH_TOKEN=$OPS TRAINCTL_TLS_CA=$C/ca.crt "$T" --coordinator "$ADDR" "$@"; }
field() {  # JOB PYTHON-EXPR over the describe JSON `j`
  ops describe "$1" -o json | python3 -c "import json,sys; j=json.load(sys.stdin)['job']; print($2)"
}
wait_state() {  # JOB STATE
  local end=$((SECONDS + 30))
  while ((SECONDS < end)); do
    [[ $(field "$1" "j.get('state','').replace('JOB_STATE_','').lower()") == "$2" ]] && return 0
    read -rt 0.1 <> <(:) || true
  done
  return 1
}

# 1. alice's job runs as alice, with her exported environment; it keeps a
# secret in its checkpoint dir and waits.
cat >"$HOME_A/job.sh" <<'JOB'
echo "whoami=$(id -un) home=$HOME myvar=$MYVAR"
echo "agent-secret=${AGENT_SECRET_TOKEN:-absent}"
echo "alice-secret" >"$TRAINCTL_CHECKPOINT_DIR/secret"
echo $$ >"$TRAINCTL_CHECKPOINT_DIR/pid.tmp" && mv "$TRAINCTL_CHECKPOINT_DIR/pid.tmp" "$TRAINCTL_CHECKPOINT_DIR/pid"
exec sleep 300
JOB
chown "$A" "$HOME_A/job.sh"
aid=$(as "$A" "$TA" env MYVAR=from-alices-shell "$T" submit --workdir "$HOME_A" -- sh job.sh) \
  || fail "alice submit"
wait_state "$aid" running || fail "alice's job $aid is not running"
CKPT=$(field "$aid" "j['checkpoint_dir']")
end=$((SECONDS + 30))
until [[ -s $CKPT/pid ]] || ((SECONDS > end)); do read -rt 0.05 <> <(:) || true; done
[[ -s $CKPT/pid ]] || fail "alice's job wrote no pid"
APID=$(cat "$CKPT/pid")
ALOG=$(field "$aid" "j['tasks'][0]['log_path']")
[[ $(stat -c %U "/proc/$APID") == "$A" ]] || fail "alice's task runs as $(stat -c %U "/proc/$APID")"
grep -q "whoami=$A home=$HOME_A myvar=from-alices-shell" "$ALOG" \
  || fail "alice's task: $(cat "$ALOG")"
grep -q "agent-secret=absent" "$ALOG" || fail "the agent's environment reached the task"
ops describe "$aid" | grep "Runs as:     $A (uid $UID_A)" >/dev/null || fail "describe: $(ops describe "$aid")"
ok "alice's job runs as $A with her exported MYVAR and HOME; none of the agent's env"

# 2. Files belong to the job's user and are private.
[[ $(stat -c '%U %a' "$ALOG") == "$A 600" ]] || fail "log: $(stat -c '%U %a' "$ALOG")"
[[ $(stat -c '%U %a' "$CKPT") == "$A 700" ]] || fail "checkpoint dir: $(stat -c '%U %a' "$CKPT")"
[[ $(stat -c '%a' "$WORK/state/trainctl.db") == 600 ]] || fail "state DB mode"
ok "log 0600, checkpoint dir 0700 (owned by $A), state DB 0600"

# 3. bob's job, on the same node, tries everything against alice.
KEY=$(tr '\0' '\n' <"/proc/$AGENT/cmdline" | grep -A1 -x -- --tls-key | tail -1)
cat >"$WORK/probe.sh" <<'PROBE'
# Arguments: alice's task pid, her log, her checkpoint dir, the key path
# named in the agent's command line.
try() { if eval "$2" >/dev/null 2>&1; then echo "$1=READ"; else echo "$1=denied"; fi; }
echo "whoami=$(id -un)"
try environ "grep -a TRAINCTL_TOKEN /proc/$1/environ"
try signal "kill -0 $1"
try log "cat '$2'"
try ckpt "cat '$3/secret'"
try ckptls "ls '$3'"
try key "cat '$4'"
PROBE
chmod 644 "$WORK/probe.sh"
bid=$(as "$B" "$TB" "$T" submit --workdir / -- sh "$WORK/probe.sh" "$APID" "$ALOG" "$CKPT" "$KEY") \
  || fail "bob submit"
as "$B" "$TB" "$T" wait "$bid" >/dev/null || fail "bob's probe job failed: $(as "$B" "$TB" "$T" logs "$bid")"
BOUT=$(as "$B" "$TB" "$T" logs "$bid")
for what in environ signal log ckpt ckptls key; do
  grep -qx "$what=denied" <<<"$BOUT" || fail "bob's job could $what: $BOUT"
done
grep -qx "whoami=$B" <<<"$BOUT" || fail "bob's job: $BOUT"
kill -0 "$APID" || fail "alice's task died"
ok "bob's job (as $B) cannot read alice's environ/token, log, checkpoint dir or the node key, nor signal her task"

# 4. With cgroups, each task has its own, and a process that left the task's
# process group (setsid) dies with it at cancel.
if [[ -n $CG ]] && grep -q "cgroup v2 at" "$WORK/agent.log"; then
  grep -q "^0::/.*trainctl-e2e-$$/tasks/" "/proc/$APID/cgroup" \
    || fail "alice's task is not in a task cgroup: $(cat "/proc/$APID/cgroup")"
  eid=$(as "$A" "$TA" "$T" submit --workdir "$HOME_A" -- sh -c \
    'setsid sleep 300 & echo $! >"$TRAINCTL_CHECKPOINT_DIR/escapee"; exec sleep 300') \
    || fail "escapee submit"
  ECKPT=$WORK/ckpt/$eid
  end=$((SECONDS + 30))
  until [[ -s $ECKPT/escapee ]] || ((SECONDS > end)); do read -rt 0.05 <> <(:) || true; done
  ESC=$(cat "$ECKPT/escapee") || fail "no escapee pid"
  kill -0 "$ESC" || fail "the escapee is not running"
  as "$A" "$TA" "$T" cancel "$eid" >/dev/null || fail "cancel escapee job"
  wait_state "$eid" cancelled || fail "escapee job not cancelled"
  end=$((SECONDS + 30))
  while kill -0 "$ESC" 2>/dev/null && ((SECONDS < end)); do read -rt 0.05 <> <(:) || true; done
  ! kill -0 "$ESC" 2>/dev/null || { ps -eo pid,pgid,sid,ppid,stat,user,cmd | grep -v "ps -eo" >&2; fail "the setsid'd process $ESC outlived its cancelled job"; }
  ok "each task in its own cgroup; a setsid'd process dies with its job at cancel"
  # A task without limits runs in a slot cgroup; the next one reuses the
  # slot the last one left (no new memory cgroup per short task). A task
  # with a memory limit gets one named after it.
  cg_of() { as "$A" "$TA" "$T" logs "$1" | sed -n 's/^0:://p'; }
  s1=$(as "$A" "$TA" "$T" submit --workdir "$HOME_A" -- cat /proc/self/cgroup) || fail "slot submit 1"
  as "$A" "$TA" "$T" wait "$s1" >/dev/null || fail "slot job $s1 failed"
  s2=$(as "$A" "$TA" "$T" submit --workdir "$HOME_A" -- cat /proc/self/cgroup) || fail "slot submit 2"
  as "$A" "$TA" "$T" wait "$s2" >/dev/null || fail "slot job $s2 failed"
  c1=$(cg_of "$s1"); c2=$(cg_of "$s2")
  [[ $c1 == */tasks/*slot-* ]] || fail "job $s1 ran in $c1, not a slot cgroup"
  [[ $c1 == "$c2" ]] || fail "job $s2 ran in $c2, not in the slot $c1 that job $s1 left"
  b1=$(as "$B" "$TB" "$T" submit --workdir / -- cat /proc/self/cgroup) || fail "bob's slot submit"
  as "$B" "$TB" "$T" wait "$b1" >/dev/null || fail "bob's slot job $b1 failed"
  cb=$(as "$B" "$TB" "$T" logs "$b1" | sed -n 's/^0:://p')
  [[ $cb == */tasks/*slot-* && $cb != "$c1" ]] || fail "bob's job $b1 ran in $cb (alice's slot: $c1)"
  if grep -Eq "controllers: [a-z ]*memory" "$WORK/agent.log"; then
    m=$(as "$A" "$TA" "$T" submit --mem 256MiB --workdir "$HOME_A" -- cat /proc/self/cgroup) || fail "--mem submit"
    as "$A" "$TA" "$T" wait "$m" >/dev/null || fail "--mem job $m failed"
    [[ $(cg_of "$m") == */tasks/*job-$m.attempt-0.rank-0 ]] || fail "--mem job $m ran in $(cg_of "$m")"
  fi
  ok "tasks without limits reuse an emptied slot cgroup of their user ($c1; bob's: $cb); a --mem task gets its own"
else
  echo "note: no writable cgroup v2 here: per-task cgroups not checked"
fi

# 5. --export NONE and a list.
nid=$(as "$A" "$TA" env MYVAR=x OTHER=y "$T" submit --export OTHER --workdir "$HOME_A" \
  -- sh -c 'echo "myvar=${MYVAR:-unset} other=${OTHER:-unset}"') || fail "submit --export OTHER"
as "$A" "$TA" "$T" wait "$nid" >/dev/null || fail "export job failed"
as "$A" "$TA" "$T" logs "$nid" | grep -qx "myvar=unset other=y" || fail "--export OTHER: $(as "$A" "$TA" "$T" logs "$nid")"
ok "--export OTHER passes only OTHER"

# 6. A user with no account on the node, and root.
gid=$(as "$B" "$TG" "$T" submit --workdir / -- true) || fail "ghost submit"
wait_state "$gid" failed || fail "ghost's job did not fail"
ops describe "$gid" | grep "$GHOST has no local account" >/dev/null || fail "ghost: $(ops describe "$gid")"
set +e
out=$(TRAINCTL_AUTH_TOKEN=$TR TRAINCTL_TLS_CA=$C/ca.crt "$T" --coordinator "$ADDR" submit -- true 2>&1)
rc=$?
set -e
[[ $rc != 0 && $out == *"--allow-root-jobs"* ]] || fail "root's job accepted: $out"
ok "a user without a local account fails with the reason; root is refused at submit"

# 7. The launch contract's names never come from a user: bob's exported
# TRAINCTL_CHECKPOINT_DIR made the root agent create and chown that path to
# him (any directory of the node). Named, it is refused naming the
# variable; in his shell, `--export ALL` leaves it out; either way nothing
# is made where it points.
VICTIM=$WORK/victim-dir
set +e
out=$(as "$B" "$TB" "$T" submit --export "TRAINCTL_CHECKPOINT_DIR=$VICTIM" --workdir / -- true 2>&1)
rc=$?
set -e
# (The CLI refuses it; a client that sends it anyway gets the server's
# INVALID_ARGUMENT, "spec.exported_env[TRAINCTL_CHECKPOINT_DIR]: ... cannot
# be exported": coordinator/job_spec_test.cc.)
[[ $rc != 0 && $out == *"TRAINCTL_CHECKPOINT_DIR"*"cannot be exported"* ]] ||
  fail "an exported TRAINCTL_CHECKPOINT_DIR was accepted: rc $rc: $out"
xid=$(as "$B" "$TB" env TRAINCTL_CHECKPOINT_DIR="$VICTIM" "$T" submit --workdir / \
  -- sh -c 'echo "ckpt=$TRAINCTL_CHECKPOINT_DIR"') || fail "bob's --export ALL submit"
as "$B" "$TB" "$T" wait "$xid" >/dev/null || fail "bob's job $xid failed"
as "$B" "$TB" "$T" logs "$xid" | grep -qx "ckpt=$WORK/ckpt/$xid" ||
  fail "bob's job got TRAINCTL_CHECKPOINT_DIR $(as "$B" "$TB" "$T" logs "$xid")"
[[ ! -e $VICTIM ]] || fail "the agent made $VICTIM: $(stat -c '%U %a' "$VICTIM")"
ok "TRAINCTL_CHECKPOINT_DIR cannot be exported (refused, or left out of ALL); the agent made nothing there"

# 8. --image mounts only what the user may enter: root podman bind-mounted
# alice's 0700 project for bob. The shim checks each mount as bob first and
# fails the task with the line a job without --image gets.
if ops nodes -o json | grep -q '"podman"'; then
  mkdir -m 700 "$HOME_A/project" && echo alice-private >"$HOME_A/project/secret.txt"
  chown -R "$A" "$HOME_A/project"
  iid=$(as "$B" "$TB" "$T" submit --image localhost/any:1 --workdir "$HOME_A/project" \
    -- cat secret.txt) || fail "bob's --image submit"
  wait_state "$iid" failed || fail "bob's --image job on alice's project did not fail: $(ops describe "$iid")"
  log=$(ops logs "$iid" 2>&1 || true)
  grep -q "cannot enter the working directory $HOME_A/project as uid $(id -u "$B")" <<<"$log" ||
    fail "bob's --image job: $log"
  if grep -q alice-private <<<"$log"; then fail "bob read alice's file through --image"; fi
  ok "bob's --image job with alice's 0700 work dir fails as without --image ($(grep -o 'cannot enter[^:]*' <<<"$log"))"
  # (Not where the agent's task cgroups sit in the v2 tree of a hybrid host:
  # podman's cgroupfs manager then also makes them in the v1 hierarchies,
  # where runc takes the agent's `tasks` directory for cgroup v1's `tasks`
  # file and cannot start the container.)
  if [[ -n $PODMAN && ( -z $CG || -f /sys/fs/cgroup/cgroup.controllers ) ]]; then
    # His own 0700 dir: mounted (the directory he opened, bound at a stage
    # in the task's own mount namespace), read inside as himself.
    HOME_B=$(getent passwd "$B" | cut -d: -f6)
    mkdir -m 700 "$HOME_B/proj" && echo bob-data >"$HOME_B/proj/data.txt"
    chown -R "$B" "$HOME_B/proj"
    pid=$(as "$B" "$TB" "$T" submit --image "$IMG" --workdir "$HOME_B/proj" \
      -- /bin/busybox sh -c 'echo "uid=$(/bin/busybox id -u) data=$(/bin/busybox cat data.txt)"') ||
      fail "bob's own --image submit"
    as "$B" "$TB" "$T" wait "$pid" >/dev/null || fail "bob's --image job $pid: $(ops logs "$pid" 2>&1)"
    ops logs "$pid" | grep -qx "uid=$(id -u "$B") data=bob-data" || fail "bob's --image job: $(ops logs "$pid")"
    if findmnt -rn | grep -q "containers/.*\.mnt"; then fail "a stage is mounted on the host: $(findmnt -rn | grep '\.mnt')"; fi
    ok "bob's --image job mounts his own 0700 dir and reads it as uid $(id -u "$B"); nothing is mounted on the host"
  else
    echo "note: podman cannot run a container under the agent's task cgroups here: bob's own --image mount not checked"
  fi
else
  echo "note: no podman on this node: --image mounts not checked"
fi

as "$A" "$TA" "$T" cancel "$aid" >/dev/null || fail "alice cancels"
wait_state "$aid" cancelled || fail "alice's job not cancelled"
e2e_done
