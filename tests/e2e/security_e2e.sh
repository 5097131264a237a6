#!/usr/bin/env bash
# End-to-end test of the security setup with the real binaries on loopback:
# certificates from deploy/make_certs.sh, a coordinator with TLS and a tokens
# file, agents with client certificates, users with the CLI's config file,
# and a 2-rank gang whose ranks do the NCCL-id rendezvous over TLS.
# Usage: security_e2e.sh BUILD_BIN_DIR. Waits are on conditions with deadlines.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init security "${1:-}"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
T="$BIN/trainctl"

# Starts the coordinator with ARGS on a free loopback port; sets PORT.
start_coordinator() {
  local name=$1; shift
  "$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state-$name" \
    "$@" >"$WORK/$name.out" 2>>"$WORK/$name.log" &
  PIDS+=($!)
  local line
  line=$(wait_line "$WORK/$name.out" "listening on port") || fail "coordinator $name did not start"
  PORT=${line##* }
}

# 1. Insecure mode says so loudly.
start_coordinator insecure
wait_line "$WORK/insecure.log" " W .*WARNING: INSECURE MODE.*Anyone who can reach port $PORT can run commands" \
  >/dev/null || fail "no insecure-mode warning"
kill "${PIDS[-1]}"
ok "insecure mode logs a WARNING"

# 2. Certificates and tokens.
"$SRC/deploy/make_certs.sh" "$WORK/certs" sec-node other-node >/dev/null
C=$WORK/certs
ALICE=$(openssl rand -hex 16); BOB=$(openssl rand -hex 16); OPS=$(openssl rand -hex 16)
cat >"$WORK/tokens.txtpb" <<TOK
tokens { token: "$ALICE" user: "alice" }
tokens { token: "$BOB" user: "bob" }
tokens { token: "$OPS" user: "ops" role: ROLE_ADMIN }
TOK
start_coordinator secure --tls-cert "$C/coordinator.crt" --tls-key "$C/coordinator.key" \
  --tls-ca "$C/ca.crt" --tokens-file "$WORK/tokens.txtpb"
! grep -q "INSECURE MODE" "$WORK/secure.log" || fail "TLS + tokens still says insecure"
ADDR=127.0.0.1:$PORT

# 3. An agent with another node's certificate cannot register as sec-node.
"$BIN/trainctl-agent" --coordinator "$ADDR" --node-name sec-node --fake-gpus 2 \
  --tls-cert "$C/nodes/other-node.crt" --tls-key "$C/nodes/other-node.key" --tls-ca "$C/ca.crt" \
  --log-dir "$WORK/logs-bad" >"$WORK/agent-bad.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent-bad.log" 'cannot register.*names node "other-node"' >/dev/null \
  || fail "an agent with other-node's certificate was not refused"
kill "${PIDS[-1]}"
ok "an agent cannot register for another node"

# 4. The right agent registers over mutual TLS. Its tasks run as its own
# account (--run-tasks-as-agent): alice and bob have no local accounts here;
# multiuser_e2e.sh runs each job as its user.
"$BIN/trainctl-agent" --coordinator "$ADDR" --node-name sec-node --fake-gpus 2 --run-tasks-as-agent \
  --tls-cert "$C/nodes/sec-node.crt" --tls-key "$C/nodes/sec-node.key" --tls-ca "$C/ca.crt" \
  --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"
ok "agent registered with its certificate"

# 5. alice sets coordinator, token and CA once in her config file.
mkdir -p "$WORK/alice/trainctl"
cat >"$WORK/alice/trainctl/config" <<CFG
coordinator = "$ADDR"
token = "$ALICE"
ca_cert = "$C/ca.crt"
CFG
chmod 600 "$WORK/alice/trainctl/config"
alice() { XDG_CONFIG_HOME=$WORK/alice "$T" "$@"; }
bob() { "$T" --coordinator "$ADDR" --tls-ca "$C/ca.crt" --token "$BOB" "$@"; }
ops() { TRAINCTL_AUTH_TOKEN=$OPS TRAINCTL_TLS_CA=$C/ca.crt "$T" --coordinator "$ADDR" "$@"; }

id=$(alice submit -- sh -c 'echo hello from $TRAINCTL_JOB_ID') || fail "alice submit"
alice wait "$id" || fail "alice's job $id did not succeed"
alice logs "$id" | grep -q "hello from $id" || fail "alice's log"
alice describe "$id" -o json | grep "\"user\": \"alice\"" >/dev/null || fail "spec.user is not alice"
ok "alice submits, waits, reads her log; spec.user=alice"

# 6. A gang's ranks do the rendezvous over TLS (TRAINCTL_TLS_CA from the
# agent): directly, and through the agent's relay (its upstream on the
# agent's mutual-TLS credentials).
for how in direct relay; do
  env_args=()
  [[ $how == direct ]] && env_args=(--env RENDEZVOUS_PROBE_DIRECT=1)
  gid=$(alice submit --gpus 2 "${env_args[@]}" -- "$BIN/rendezvous_probe")
  alice wait "$gid" || { alice logs "$gid" --rank 1 >&2 || true; fail "gang $gid ($how) failed"; }
  i0=$(alice logs "$gid" --rank 0 | grep -o 'ID=[0-9a-f]*'); i1=$(alice logs "$gid" --rank 1 | grep -o 'ID=[0-9a-f]*')
  [[ ${#i0} == 259 && $i0 == "$i1" ]] || fail "ranks hold different ids ($how): '$i0' '$i1'"
  via=$(alice logs "$gid" --rank 1 | grep -o 'VIA=[^ ]*' || true)
  if [[ $how == relay ]]; then
    [[ $via == "VIA=unix:"* ]] || fail "rank 1 did not use the relay: '$via'"
  else
    [[ $via != *unix:* ]] || fail "rank 1 used the relay although told not to: '$via'"
  fi
  ok "gang $gid: both ranks got the same ncclUniqueId over TLS ($how)"
done

# 7. Forbidden: bob on alice's job, no token, a wrong token, plaintext.
expect_fail() {  # WHAT PATTERN CMD...
  local what=$1 pattern=$2 out rc; shift 2
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [[ $rc != 0 && $out == *$pattern* ]] || fail "$what: rc=$rc '$out'"
}
expect_fail "bob describes alice's job" "user bob may not read job $id" bob describe "$id"
expect_fail "bob cancels alice's job" "may not cancel" bob cancel "$id"
expect_fail "bob reads alice's logs" "may not read the logs" bob logs "$id"
expect_fail "no token" "no credentials" "$T" --coordinator "$ADDR" --tls-ca "$C/ca.crt" list
expect_fail "wrong token" "unknown or revoked token" \
  "$T" --coordinator "$ADDR" --tls-ca "$C/ca.crt" --token 0000000000000000 list
expect_fail "plaintext to the TLS port" "cannot reach the coordinator" \
  "$T" --coordinator "$ADDR" --token "$BOB" list
ids() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(" ".join(sorted(str(j["id"]) for j in d.get("jobs", []))))'; }
[[ -z $(bob list -o json | ids) ]] || fail "bob's list shows jobs that are not his: $(bob list -o json | ids)"
ok "forbidden calls refused (other user's job, no token, wrong token, plaintext)"

expect_fail "bob lists every user's jobs" "only an admin may list every user's" \
  bob list --all-users
expect_fail "bob lists alice's jobs" "may list only their own jobs" bob list --user alice

# 8. The admin sees their own jobs by default, every user's with --all-users.
[[ " $(ops list -o json | ids) " != *" $id "* ]] || fail "ops's plain list shows alice's job $id"
[[ " $(ops list --all-users -o json | ids) " == *" $id "* ]] || fail "ops --all-users does not see alice's job $id"
[[ " $(ops list --user alice -o json | ids) " == *" $id "* ]] || fail "ops --user alice does not see alice's job $id"
ops describe "$id" >/dev/null || fail "ops describe"
ok "admin sees alice's jobs (--all-users, --user alice)"

# 9. The REST gateway (when built): HTTPS with the user-facing certificate,
# TLS to the coordinator, the caller's bearer token forwarded and checked.
if [[ -x $BIN/trainctl-gateway ]]; then
  "$BIN/trainctl-gateway" -listen 127.0.0.1:0 -coordinator "$ADDR" -tls-ca "$C/ca.crt" \
    -tls-cert "$C/gateway.crt" -tls-key "$C/gateway.key" >"$WORK/gateway.out" 2>"$WORK/gateway.log" &
  PIDS+=($!)
  line=$(wait_line "$WORK/gateway.out" "listening on port") || fail "gateway did not start"
  URL=https://127.0.0.1:${line##* }/v1/jobs/$id
  code() { curl -s -o /dev/null -w '%{http_code}' --cacert "$C/ca.crt" "$@"; }
  [[ $(code -H "Authorization: Bearer $ALICE" "$URL") == 200 ]] || fail "gateway: alice GET her job"
  [[ $(code -H "Authorization: Bearer $BOB" "$URL") == 403 ]] || fail "gateway: bob GET alice's job"
  [[ $(code "$URL") == 401 ]] || fail "gateway: no token"
  ok "gateway over HTTPS: owner 200, other user 403, no token 401"
  # Ready: the coordinator answers the gateway's token-less probe (with 401).
  [[ $(code "https://127.0.0.1:${line##* }/readyz") == 200 ]] || fail "gateway: /readyz"
  ok "gateway: /readyz 200 from a coordinator that wants tokens"
  # The 401 says what to send over HTTP, not the CLI's --token or config file.
  body=$(curl -s --cacert "$C/ca.crt" "$URL")
  [[ $body == *'send the HTTP header `Authorization: Bearer'* && $body != *trainctl* ]] \
    || fail "gateway: no-token body: $body"
  ok "gateway: the 401 names the Authorization header, not the CLI's --token"
fi
e2e_done
