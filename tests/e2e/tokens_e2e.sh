#!/usr/bin/env bash
# End-to-end test of tokens with a lifecycle and the audit trail, with the
# real coordinator and CLI on loopback: an admin of the bootstrap
# --tokens-file makes tokens (`trainctl token create`), a made token works,
# a revoked one is refused from the next call on and still after a
# coordinator restart on the same state, while another made token still
# works; `trainctl audit` shows who did what; users may do none of it.
# Without authentication a job is charged to the submitting account.
# Usage: tokens_e2e.sh BUILD_BIN_DIR. Waits are on conditions with deadlines.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init tokens "${1:-}"
T="$BIN/trainctl"

# Starts the coordinator NAME with ARGS on a free loopback port, state in
# $WORK/state-NAME; sets PORT and COORD_PID.
start_coordinator() {
  local name=$1; shift
  "$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state-$name" \
    "$@" >"$WORK/$name.out" 2>>"$WORK/$name.log" &
  COORD_PID=$!
  PIDS+=($COORD_PID)
  local line
  line=$(wait_line "$WORK/$name.out" "listening on port") || fail "coordinator $name did not start"
  PORT=${line##* }
}

expect_fail() {  # WHAT PATTERN CMD...
  local what=$1 pattern=$2 out rc; shift 2
  set +e; out=$("$@" 2>&1); rc=$?; set -e
  [[ $rc != 0 && $out == *$pattern* ]] || fail "$what: rc=$rc '$out'"
}
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# 1. The bootstrap file: an admin and a user.
OPS=$(openssl rand -hex 16); BOB=$(openssl rand -hex 16)
cat >"$WORK/tokens.txtpb" <<TOK
tokens { token: "$OPS" user: "ops" role: ROLE_ADMIN }
tokens { token: "$BOB" user: "bob" }
TOK
start_coordinator main --tokens-file "$WORK/tokens.txtpb"
ADDR=127.0.0.1:$PORT
as() { local token=$1; shift; "$T" --coordinator "$ADDR" --token "$token" "$@"; }

# 2. ops makes a token for alice: the secret alone on stdout, its id on stderr.
ALICE=$(as "$OPS" token create --user alice --name laptop 2>"$WORK/create.err") \
  || fail "token create: $(cat "$WORK/create.err")"
[[ $ALICE =~ ^[0-9a-f]{64}$ ]] || fail "token create printed '$ALICE', not a 64-hex secret"
ALICE_ID=$(grep -o 'tok-[0-9a-f]\{12\}' "$WORK/create.err") || fail "no id: $(cat "$WORK/create.err")"
ok "admin made alice's token $ALICE_ID; the secret alone on stdout"

# 3. With it alice submits and lists her jobs (as alice).
id=$(as "$ALICE" submit -- true) || fail "alice submit with a made token"
[[ $(as "$ALICE" list -o json | json '" ".join(j["id"] for j in d.get("jobs", []))') == "$id" ]] \
  || fail "alice's list does not show her job $id"
[[ $(as "$ALICE" describe "$id" -o json | json 'd["job"]["spec"]["user"]') == alice ]] \
  || fail "job $id is not alice's"
ok "alice's made token submits and lists her jobs (spec.user=alice)"

# 4. A second token (carol), with a lifetime, as JSON: the list shows both,
# with the expiry, never a secret.
as "$OPS" token create --user carol --expires 90d -o json >"$WORK/carol.json"
CAROL=$(json 'd["secret"]' <"$WORK/carol.json"); CAROL_ID=$(json 'd["token"]["id"]' <"$WORK/carol.json")
as "$OPS" token list >"$WORK/list.txt"
grep -E "^$ALICE_ID +laptop +alice +user .* never +valid" "$WORK/list.txt" >/dev/null \
  || fail "token list: alice's row: $(cat "$WORK/list.txt")"
grep -E "^$CAROL_ID +- +carol +user .* in (89d23h|90d0h) +valid" "$WORK/list.txt" >/dev/null \
  || fail "token list: carol's row does not show her 90d expiry: $(cat "$WORK/list.txt")"
! grep -q -e "$ALICE" -e "$CAROL" "$WORK/list.txt" || fail "token list shows a secret"
as "$OPS" token list -o json | json 'len(d["tokens"])' | grep -qx 2 || fail "token list -o json"
ok "token list: both tokens, carol's expiry, no secret"

# 5. Revoked: the next call with alice's token is refused; twice is a no-op.
as "$OPS" token revoke "$ALICE_ID" | grep -q "revoked token $ALICE_ID of user alice at .* by ops" \
  || fail "token revoke output"
expect_fail "alice after revocation" "revoked at" as "$ALICE" list
as "$OPS" token revoke "$ALICE_ID" >/dev/null || fail "revoking twice is not a no-op"
expect_fail "revoke an unknown id" "no token tok-000000000000" as "$OPS" token revoke tok-000000000000
as "$OPS" token list | grep -q "$ALICE_ID" && fail "token list (valid only) shows the revoked token"
as "$OPS" token list --all | grep -E "^$ALICE_ID .*revoked .* by ops" >/dev/null \
  || fail "token list --all does not show alice's revocation"
ok "revoked token refused on the next call; list --all shows the revocation"

# 6. A restart on the same state: still refused; carol and the file still work.
kill "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
start_coordinator main --tokens-file "$WORK/tokens.txtpb"
ADDR=127.0.0.1:$PORT
expect_fail "alice after a restart" "revoked at" as "$ALICE" list
as "$CAROL" list >/dev/null || fail "carol's made token after a restart"
as "$OPS" list --all-users -o json | json '" ".join(j["id"] for j in d.get("jobs", []))' \
  | grep -qw "$id" || fail "ops after a restart"
ok "after a restart: the revoked token is still refused, carol's and the file's work"

# 7. The audit trail: who made and revoked which token, kept across the
# restart; an admin submitting and cancelling as another user too.
sid=$(as "$OPS" submit --user carol -- true) || fail "ops submits as carol"
as "$OPS" cancel "$sid" >/dev/null || fail "ops cancels carol's job $sid"
as "$OPS" audit >"$WORK/audit.txt"
grep -E " ops +job\.submit_as +$sid +submitted as user carol" "$WORK/audit.txt" >/dev/null \
  || fail "audit: no job.submit_as of $sid: $(cat "$WORK/audit.txt")"
grep -E " ops +job\.cancel_as +$sid +cancelled user carol's job" "$WORK/audit.txt" >/dev/null \
  || fail "audit: no job.cancel_as of $sid: $(cat "$WORK/audit.txt")"
grep -E " ops +token\.create +$ALICE_ID +user alice" "$WORK/audit.txt" >/dev/null \
  || fail "audit: no token.create of $ALICE_ID by ops: $(cat "$WORK/audit.txt")"
grep -E " ops +token\.create +$CAROL_ID" "$WORK/audit.txt" >/dev/null || fail "audit: carol's token.create"
[[ $(grep -c "token.revoke" "$WORK/audit.txt") == 1 ]] \
  || fail "audit: not exactly one token.revoke: $(cat "$WORK/audit.txt")"
as "$OPS" audit --since 1h -o json | json '",".join(e["action"] for e in d["events"])' \
  | grep -qx "token.create,token.create,token.revoke,job.submit_as,job.cancel_as" \
  || fail "audit --since 1h -o json: $(as "$OPS" audit --since 1h -o json)"
grep -q 'audit {"seq":"1",.*"action":"token.create"' "$WORK/main.log" \
  || fail "no structured audit line in the coordinator's log"
ok "audit lists token.create, token.revoke, job.submit_as and job.cancel_as with who; logs each as JSON"

# 8. Users (of the file or made) may not list tokens or read the trail.
expect_fail "bob token list" "only an admin" as "$BOB" token list
expect_fail "bob audit" "only an admin" as "$BOB" audit
expect_fail "carol token create" "only an admin" as "$CAROL" token create --user carol --role admin
expect_fail "bad --expires" "--expires" as "$OPS" token create --user x --expires 3parsecs
ok "non-admins are refused token list, audit and token create; a bad --expires is a usage error"

# 8b. Retention: restarted with --audit-retention 1s, the coordinator
# deletes the older events at start-up and keeps the newest, and the
# numbering goes on from it. A malformed retention is refused at start.
set +e; out=$("$BIN/trainctl-coordinator" --audit-retention 1y 2>&1); rc=$?; set -e
[[ $rc != 0 && $out == *"--audit-retention"* && $out == *"1y"* ]] \
  || fail "--audit-retention 1y: rc=$rc '$out'"
sleep 1.1  # wall time for the events to be older than the retention, not a wait for state
kill "$COORD_PID"; wait "$COORD_PID" 2>/dev/null || true
start_coordinator main --tokens-file "$WORK/tokens.txtpb" --audit-retention 1s
ADDR=127.0.0.1:$PORT
events() { as "$OPS" audit -o json | json '",".join("%s:%s" % (e["seq"], e["action"]) for e in d["events"])'; }
WAIT_S=20 wait_until "the older audit events deleted" '[[ $(events) == "5:job.cancel_as" ]]'
as "$OPS" token revoke "$CAROL_ID" >/dev/null || fail "revoke after pruning"
[[ $(events) == "5:job.cancel_as,6:token.revoke" ]] || fail "after pruning: $(events)"
grep -q "retention: deleted 4 audit events older than 1s" "$WORK/main.log" \
  || fail "no retention line in the coordinator's log"
ok "--audit-retention 1s: the 4 older events deleted at start-up, the newest kept, numbering goes on (6)"

# 9. Without authentication a job is charged to the submitting account (the
# password database), never to nobody; the coordinator takes it.
start_coordinator insecure
me=$(id -un)
jid=$(env -u USER "$T" --coordinator 127.0.0.1:$PORT submit -- true) || fail "insecure submit"
[[ $("$T" --coordinator 127.0.0.1:$PORT describe "$jid" -o json | json 'd["job"]["spec"]["user"]') == "$me" ]] \
  || fail "without authentication job $jid is not charged to $me"
ok "without authentication the job's user is the local account ($me)"

e2e_done
