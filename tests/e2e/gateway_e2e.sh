#!/usr/bin/env bash
# End-to-end test of the REST gateway: a real coordinator, an agent with fake
# GPUs and trainctl-gateway on free loopback ports, driven with curl.
# Usage: gateway_e2e.sh BUILD_BIN_DIR
# Every wait is on a condition (the :wait endpoint long-polls) with a deadline.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
e2e_init gw-e2e "${1:-}"
fail() {
  echo "FAIL: $*" >&2
  echo "--- last response ($CODE): $(cat "$WORK/body" 2>/dev/null)" >&2
  for f in coord.log agent.log gateway.log; do echo "--- $f" >&2; tail -20 "$WORK/$f" >&2 || true; done
  exit 1
}

"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  --node-timeout 5s >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
COORD=127.0.0.1:${line##* }
"$BIN/trainctl-agent" --coordinator "$COORD" --node-name gw-node \
  --fake-gpus 2:H200-fake:141GiB --log-dir "$WORK/logs" >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent.log" "registered with the coordinator" >/dev/null || fail "agent did not register"
[[ $("$BIN/trainctl-gateway" -version) =~ ^trainctl-gateway\ [0-9]+\.[0-9]+ ]] ||
  fail "trainctl-gateway -version: $("$BIN/trainctl-gateway" -version 2>&1)"
ok "trainctl-gateway -version: $("$BIN/trainctl-gateway" -version)"
"$BIN/trainctl-gateway" -listen 127.0.0.1:0 -coordinator "$COORD" \
  >"$WORK/gateway.out" 2>"$WORK/gateway.log" &
PIDS+=($!)
line=$(wait_line "$WORK/gateway.out" "listening on port") || fail "gateway did not start"
URL=http://127.0.0.1:${line##* }

# req METHOD PATH [JSON_BODY]: sets CODE (HTTP status); the body is in $WORK/body.
# Every request carries a bearer token (forwarded as gRPC metadata).
CODE=
req() {
  local args=(-sS -o "$WORK/body" -w '%{http_code}' --max-time 60 -X "$1"
              -H 'Authorization: Bearer gw-e2e-token')
  if (($# > 2)); then args+=(-H 'Content-Type: application/json' --data "$3"); fi
  CODE=$(curl "${args[@]}" "$URL$2") || fail "curl $1 $2"
}
# js EXPR: evaluates a Python expression over the JSON body bound to j.
js() { python3 -c 'import json, sys, base64; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/body" "$1"; }
# wait_final ID: long-polls GET /v1/jobs/ID:wait until done (deadline 60 s).
wait_final() {
  local end=$((SECONDS + 60))
  while ((SECONDS < end)); do
    req GET "/v1/jobs/$1:wait?timeout_ms=10000"
    [[ $CODE == 200 ]] || fail "wait $1: HTTP $CODE"
    [[ $(js 'j["done"]') == True ]] && return 0
  done
  fail "job $1 not final after 60 s"
}

# 1. Submit a job, wait for it, read it back.
req POST /v1/jobs '{"spec": {"name": "rest-hello", "command": ["sh", "-c", "echo hello over REST from rank $RANK"]}}'
[[ $CODE == 200 ]] || fail "submit: HTTP $CODE"
id=$(js 'j["job_id"]')
[[ $id =~ ^[0-9]+$ ]] || fail "submit returned job_id '$id'"
wait_final "$id"
[[ $(js 'j["job"]["state"]') == JOB_STATE_SUCCEEDED ]] || fail "job $id did not succeed"
req GET "/v1/jobs/$id"
[[ $CODE == 200 && $(js 'j["job"]["state"]') == JOB_STATE_SUCCEEDED && $(js 'j["job"]["spec"]["name"]') == rest-hello ]] \
  || fail "GET /v1/jobs/$id"
ok "POST /v1/jobs -> job $id, GET /v1/jobs/$id:wait -> JOB_STATE_SUCCEEDED, GET /v1/jobs/$id"

# 2. The list, filtered by state (query parameters): full names, short ones
# in any case, comma-separated lists; an unknown name is a 400 naming it.
req GET "/v1/jobs?states=JOB_STATE_SUCCEEDED&limit=10"
[[ $CODE == 200 && $(js '[x["id"] for x in j["jobs"]]') == *"'$id'"* ]] || fail "GET /v1/jobs?states=..."
req GET "/v1/jobs?states=JOB_STATE_RUNNING"
[[ $CODE == 200 && $(js 'len(j["jobs"])') == 0 ]] || fail "GET /v1/jobs?states=JOB_STATE_RUNNING"
req GET "/v1/jobs?states=succeeded"
[[ $CODE == 200 && $(js '[x["id"] for x in j["jobs"]]') == "['$id']" ]] || fail "GET /v1/jobs?states=succeeded: HTTP $CODE"
req GET "/v1/jobs?states=Running,pending"
[[ $CODE == 200 && $(js 'len(j["jobs"])') == 0 ]] || fail "GET /v1/jobs?states=Running,pending: HTTP $CODE"
req GET "/v1/jobs?states=sucess"
[[ $CODE == 400 && $(js 'j["message"]') == *'"sucess"'* ]] || fail "GET /v1/jobs?states=sucess: HTTP $CODE"
ok "GET /v1/jobs?states=&limit= (JOB_STATE_SUCCEEDED, succeeded, Running,pending; sucess -> 400)"

# 3. Logs: `data` is UTF-8 text (over gRPC and in logs:stream: bytes, base64).
req GET "/v1/jobs/$id/logs?rank=0&offset=0"
[[ $CODE == 200 ]] || fail "logs: HTTP $CODE"
out=$(js 'j["data"]')
[[ $out == "hello over REST from rank 0" ]] || fail "logs: '$out'"
next=$(js 'j["next_offset"]')
[[ $next == $(printf '%s\n' "$out" | wc -c) ]] || fail "logs: next_offset $next"
req GET "/v1/jobs/$id/logs?rank=0&offset=$next"
[[ $CODE == 200 && $(js 'j["data"] == ""') == True && $(js 'j["eof"]') == True ]] || fail "logs at offset $next: no eof"
# A log with a two-byte character and a byte that is no UTF-8: the character
# as it is, the byte as U+FFFD (12 bytes in all); read 4 bytes at a time, the
# first read cuts the character: the chunks still join to the text.
req POST /v1/jobs '{"spec": {"name": "rest-utf8", "command": ["printf", "caf\\303\\251 \\377 end\\n"]}}'
[[ $CODE == 200 ]] || fail "submit utf8: HTTP $CODE"
uid=$(js 'j["job_id"]')
wait_final "$uid"
req GET "/v1/jobs/$uid/logs"
[[ $CODE == 200 && $(js 'j["data"] == "caf\u00e9 \ufffd end\n"') == True && $(js 'j["next_offset"]') == 12 ]] \
  || fail "logs of job $uid: $(cat "$WORK/body")"
text= off=0
for _ in 1 2 3 4 5 6; do
  req GET "/v1/jobs/$uid/logs?offset=$off&max_bytes=4"
  text+=$(js 'j["data"].encode("unicode_escape").decode()')   # ASCII: caf\xe9 ...
  off=$(js 'j["next_offset"]')
  [[ $(js 'j["eof"]') == True ]] && break
done
[[ $text == 'caf\xe9 \ufffd end\n' ]] || fail "logs of job $uid in 4-byte reads: '$text'"
ok "GET /v1/jobs/$id/logs: '$out' as text; invalid UTF-8 -> U+FFFD; 4-byte reads join to the text"

# 4. Nodes: the agent's 2 fake GPUs.
req GET /v1/nodes
[[ $CODE == 200 && $(js 'len(j["nodes"][0]["node"]["gpus"])') == 2 \
   && $(js 'j["nodes"][0]["node"]["gpus"][0]["name"]') == H200-fake ]] || fail "GET /v1/nodes"
ok "GET /v1/nodes: 2 GPUs"

# 5. Errors: HTTP codes with JSON bodies.
req POST /v1/jobs '{"spec": {"command": ["true"], "gpu_fraction": 1.5}}'
[[ $CODE == 400 && $(js 'j["code"]') == 3 && $(js 'j["message"]') == *"spec.gpu_fraction"* ]] \
  || fail "bad spec: HTTP $CODE"
msg=$(js 'j["message"]')
# An unknown field is refused, named by its path; no job is made.
req GET "/v1/jobs?limit=1"
newest=$(js 'j["jobs"][0]["id"]')
req POST /v1/jobs '{"spec": {"nmae": "typo", "command": ["true"]}}'
[[ $CODE == 400 && $(js 'j["message"]') == 'unknown field "spec.nmae" in the request body'* ]] \
  || fail "unknown field: HTTP $CODE"
req GET "/v1/jobs?limit=1"
[[ $(js 'j["jobs"][0]["id"]') == "$newest" ]] || fail "a job was made from a body with an unknown field"
# The coordinator's CLI hints (flags, `--`) come back as spec fields.
req POST /v1/jobs '{"spec": {"command": ["true"], "gpus": 2, "gpu_fraction": 0.5}}'
[[ $CODE == 400 && $(js 'j["message"]') == "spec.gpus: a GPU share (spec.gpu_fraction/spec.gpu_memory_bytes) is for one process on one GPU; drop spec.gpus" ]] \
  || fail "GPU share of 2 GPUs: HTTP $CODE"
req POST /v1/jobs '{"spec": {"command": []}}'
[[ $CODE == 400 && $(js 'j["message"]') == "spec.command: is empty: give the program to run and its arguments as a list of strings" ]] \
  || fail "empty command: HTTP $CODE"
req GET /v1/jobs/999999
[[ $CODE == 404 && $(js 'j["code"]') == 5 && $(js 'j["message"]') == *999999* ]] || fail "unknown job: HTTP $CODE"
req GET /v1/nothing-here
[[ $CODE == 404 ]] && js 'j["message"]' >/dev/null || fail "unknown path: HTTP $CODE"
req GET /metrics
[[ $CODE == 404 ]] && js 'j["message"]' >/dev/null || fail "path outside /v1/: HTTP $CODE"
req DELETE /v1/nodes
[[ $CODE == 405 ]] && js 'j["message"]' >/dev/null || fail "wrong method: HTTP $CODE"
# A second gateway in front of no coordinator: 503.
"$BIN/trainctl-gateway" -listen 127.0.0.1:0 -coordinator 127.0.0.1:1 \
  >"$WORK/gateway2.out" 2>"$WORK/gateway2.log" &
PIDS+=($!)
line=$(wait_line "$WORK/gateway2.out" "listening on port") || fail "second gateway did not start"
URL1=$URL URL=http://127.0.0.1:${line##* }
req GET /v1/nodes
[[ $CODE == 503 && $(js 'j["code"]') == 14 ]] || fail "no coordinator: HTTP $CODE"
ok "errors: bad spec -> 400 ($msg), unknown field -> 400 naming spec.nmae, CLI flags -> spec fields, unknown job/path -> 404, wrong method -> 405, no coordinator -> 503, JSON bodies"

# Liveness and readiness: that second gateway is up but not ready.
req GET /healthz
[[ $CODE == 200 && $(js 'j["status"]') == ok ]] || fail "healthz without a coordinator: HTTP $CODE"
req GET /readyz
[[ $CODE == 503 && $(js 'j["status"]') == "not ready" && $(js 'j["reason"]') == *"coordinator 127.0.0.1:1 did not answer"* ]] \
  || fail "readyz without a coordinator: HTTP $CODE"
reason=$(js 'j["reason"]')
URL=$URL1
req GET /healthz
[[ $CODE == 200 ]] || fail "healthz: HTTP $CODE"
req GET /readyz
[[ $CODE == 200 && $(js 'j["status"]') == ready && $(js 'j["coordinator"]') == "$COORD" ]] || fail "readyz: HTTP $CODE"
ok "GET /healthz 200; GET /readyz 200, without a coordinator 503 ($reason)"

# 6. Cancel a running job.
req POST /v1/jobs '{"spec": {"name": "rest-sleep", "command": ["sleep", "1000"]}}'
[[ $CODE == 200 ]] || fail "submit sleep: HTTP $CODE"
cid=$(js 'j["job_id"]')
end=$((SECONDS + 30))
while :; do
  req GET "/v1/jobs/$cid"
  [[ $(js 'j["job"]["state"]') == JOB_STATE_RUNNING ]] && break
  ((SECONDS < end)) || fail "job $cid not running after 30 s"
  req GET "/v1/jobs/$cid:wait?timeout_ms=200"   # a short long-poll as the pause
done
req POST "/v1/jobs/$cid:cancel"
[[ $CODE == 200 ]] || fail "cancel: HTTP $CODE"
wait_final "$cid"
[[ $(js 'j["job"]["state"]') == JOB_STATE_CANCELLED ]] || fail "job $cid not cancelled"
req POST "/v1/jobs/424242:cancel"
[[ $CODE == 404 ]] || fail "cancel of an unknown job: HTTP $CODE"
ok "POST /v1/jobs/$cid:cancel -> JOB_STATE_CANCELLED"

# 7. Logs as a server stream: newline-delimited JSON, {"result": chunk} lines.
# nd EXPR: evaluates a Python expression over the body's lines parsed as JSON (l).
nd() { python3 -c 'import json, sys, base64; l = [json.loads(x) for x in open(sys.argv[1]) if x.strip()]; print(eval(sys.argv[2]))' "$WORK/body" "$1"; }
ndlog='b"".join(base64.b64decode(x["result"]["data"] or "") for x in l).decode()'
req GET "/v1/jobs/$id/logs:stream?rank=0"
[[ $CODE == 200 && $(nd "$ndlog") == "hello over REST from rank 0" && $(nd 'l[-1]["result"]["eof"]') == True ]] \
  || fail "logs:stream of job $id"
# Follow from submit: the response ends when the job is final, with all of it.
req POST /v1/jobs '{"spec": {"name": "rest-follow", "command": ["sh", "-c", "echo one; sleep 0.5; echo two"]}}'
fid=$(js 'j["job_id"]')
req GET "/v1/jobs/$fid/logs:stream?follow=true"
[[ $CODE == 200 && $(nd "$ndlog") == $'one\ntwo' ]] || fail "logs:stream?follow=true of job $fid"
chunks=$(nd 'len(l)')
req GET "/v1/jobs/$fid"
[[ $(js 'j["job"]["state"]') == JOB_STATE_SUCCEEDED ]] || fail "followed job $fid not final when the stream ended"
req GET "/v1/jobs/999999/logs:stream?follow=true"
[[ $CODE == 404 && $(nd 'l[0]["error"]["grpc_code"]') == 5 ]] || fail "logs:stream of an unknown job: HTTP $CODE"
ok "GET /v1/jobs/$fid/logs:stream?follow=true: $chunks NDJSON chunks until the job ended; unknown job -> 404"

# 8. A sweep's trials.
req POST /v1/jobs '{"spec": {"name": "rest-trial", "command": ["true"], "sweep_id": "gw-sweep", "params": {"lr": "0.001"}}}'
[[ $CODE == 200 ]] || fail "submit trial: HTTP $CODE"
req GET /v1/sweeps/gw-sweep/jobs
[[ $CODE == 200 && $(js 'len(j["jobs"])') == 1 && $(js 'j["jobs"][0]["spec"]["params"]["lr"]') == 0.001 ]] \
  || fail "GET /v1/sweeps/gw-sweep/jobs"
ok "GET /v1/sweeps/gw-sweep/jobs: its 1 trial with params"
req GET /v1/sweeps
[[ $CODE == 200 && $(js '[(s["sweep_id"], s["trials"]) for s in j["sweeps"]]') == "[('gw-sweep', 1)]" \
   && $(js 'j["truncated"]') == False ]] || fail "GET /v1/sweeps: HTTP $CODE"
ok "GET /v1/sweeps: gw-sweep with 1 trial"

# 9. A job array from one spec: each task runs with its TRAINCTL_ARRAY_TASK_ID
# and the exported environment, stored once.
req POST /v1/jobs:array '{"spec": {"name": "rest-array", "command": ["sh", "-c", "echo task=$TRAINCTL_ARRAY_TASK_ID venv=$GW_VENV"], "exported_env": {"GW_VENV": "/opt/v"}}, "task_ids": [3, 8], "max_running": 1}'
[[ $CODE == 200 && $(js 'len(j["job_ids"])') == 2 ]] || fail "POST /v1/jobs:array: HTTP $CODE $(cat "$WORK/body")"
aids=($(js '" ".join(j["job_ids"])'))
for k in 0 1; do
  wait_final "${aids[$k]}"
  req GET "/v1/jobs/${aids[$k]}/logs"
  want="task=$([[ $k == 0 ]] && echo 3 || echo 8) venv=/opt/v"
  [[ $CODE == 200 && $(js 'j["data"].strip()') == "$want" ]] || fail "array job ${aids[$k]}: log $(cat "$WORK/body"), want '$want'"
done
req GET "/v1/jobs/${aids[1]}"
[[ $(js 'j["job"]["spec"]["exported_env"]["GW_VENV"]') == /opt/v && $(js 'j["job"]["exported_env_job_id"]') == "${aids[0]}" ]] \
  || fail "GET /v1/jobs/${aids[1]}: $(cat "$WORK/body")"
req POST /v1/jobs:array '{"spec": {"command": ["true"]}, "task_ids": [1, 1]}'
[[ $CODE == 400 && $(js 'j["message"]') == *'task_ids[1]: 1 appears twice'* ]] || fail "POST /v1/jobs:array with a repeated task id: HTTP $CODE"
ok "POST /v1/jobs:array -> jobs ${aids[*]}: tasks 3 and 8 with the exported environment (stored with job ${aids[0]}); a repeated task id -> 400"

# 10. The OpenAPI description: generated at build time, served by the gateway.
req GET /v1/openapi.json
[[ $CODE == 200 && $(js 'j["swagger"]') == 2.0 \
   && $(js 'sorted(p for p in j["paths"] if p.startswith("/v1/jobs/{job_id}/logs"))') == "['/v1/jobs/{job_id}/logs', '/v1/jobs/{job_id}/logs:stream']" \
   && $(js '"get" in j["paths"]["/v1/sweeps"] and "get" in j["paths"]["/readyz"]') == True ]] \
  || fail "GET /v1/openapi.json: HTTP $CODE"
ok "GET /v1/openapi.json: $(js 'len(j["paths"])') paths"
[[ $(js '"get" in j["paths"]["/v1/accounting/usage"] and "get" in j["paths"]["/v1/accounting/history"]') == True ]] ||
  fail "openapi.json lacks the accounting paths"

# 11. Accounting: the ended attempts above in GET /v1/accounting/usage and,
#     as NDJSON, /v1/accounting/history; a bad grouping is a 400 naming it.
req GET "/v1/accounting/usage?by=queue&since_ms=1"
[[ $CODE == 200 && $(js 'int(j["total"]["attempts"]) > 0 and j["rows"][0]["key"] == "default"') == True ]] ||
  fail "GET /v1/accounting/usage: HTTP $CODE"
attempts=$(js 'int(j["total"]["attempts"])')
req GET "/v1/accounting/history?since_ms=1"
[[ $CODE == 200 ]] || fail "GET /v1/accounting/history: HTTP $CODE"
rows=$(python3 -c 'import json, sys; print(sum(len(json.loads(l)["result"].get("records", [])) for l in open(sys.argv[1]) if l.strip()))' "$WORK/body")
[[ $rows == "$attempts" ]] || fail "history: $rows records, usage counts $attempts attempts"
req GET "/v1/accounting/usage?by=team"
[[ $CODE == 400 && $(js 'j["message"]') == *by:* ]] || fail "GET /v1/accounting/usage?by=team: HTTP $CODE"
ok "GET /v1/accounting/usage (by queue: $attempts attempts) and /v1/accounting/history ($rows NDJSON records); by=team -> 400"

e2e_done
