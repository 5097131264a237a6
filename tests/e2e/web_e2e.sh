#!/usr/bin/env bash
# The web dashboard end to end in real headless Chromium: builds client/web
# (npm install when node_modules is stale, vitest, vite build), starts a
# coordinator, two agents with 2 fake GPUs each and trainctl-gateway
# -static-dir client/web/dist on free loopback ports, then runs
# client/web/e2e/dashboard.e2e.mjs (playwright-core + /usr/bin/chromium),
# whose tasks report metrics with BUILD_BIN_DIR/trainctl and which checks the
# nodes it drains and resumes from the page with `trainctl nodes`.
# Usage: web_e2e.sh BUILD_BIN_DIR [SCREENSHOT_DIR]
# Screenshots go to SCREENSHOT_DIR (default: the temp dir, removed unless KEEP
# is set); `tests/e2e/web_e2e.sh build/bin docs` refreshes docs/dashboard.png,
# docs/dashboard-job.png, docs/dashboard-sweep.png, docs/dashboard-drain.png
# and docs/dashboard-terminal.png. Then the job page's terminal
# (client/web/e2e/terminal.e2e.mjs) against a second coordinator, one with a
# tokens file, and a gateway run with -require-auth.
# Exits 77 (ctest: skipped) with "SKIP: ..." when chromium, node or npm is
# missing (deploy/install-deps.sh installs them).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WEB=$SRC/client/web
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
for t in node npm; do
  command -v "$t" >/dev/null || { echo "SKIP: no $t (deploy/install-deps.sh installs nodejs npm)"; exit 77; }
done
[[ -x $CHROMIUM ]] || { echo "SKIP: no $CHROMIUM (deploy/install-deps.sh installs chromium)"; exit 77; }
e2e_init web-e2e "${1:-}"
SHOTS=$(mkdir -p "${2:-$WORK}" && cd "${2:-$WORK}" && pwd)

# 1. Build the dashboard (client/web/build.sh: npm install when stale, tsc,
# vite build into client/web/dist), then its unit tests.
"$WEB/build.sh" "$WEB/dist" >"$WORK/vite.log" 2>&1 || { cat "$WORK/vite.log"; fail "client/web/build.sh"; }
ok "tsc + vite build: $(tail -1 "$WORK/vite.log")"
(cd "$WEB" && npx vitest run) >"$WORK/vitest.log" 2>&1 || { cat "$WORK/vitest.log"; fail "vitest"; }
ok "vitest: $(grep -Eo 'Tests +[0-9]+ passed' "$WORK/vitest.log" | head -1)"

# 2. The cluster: coordinator, two fake-GPU agents, gateway with the dashboard.
"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  --node-timeout 5s >"$WORK/coord.out" 2>>"$WORK/coord.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
COORD=127.0.0.1:${line##* }
for n in web-node-a web-node-b; do
  "$BIN/trainctl-agent" --coordinator "$COORD" --node-name "$n" \
    --fake-gpus 2:H200-fake:141GiB --log-dir "$WORK/logs-$n" >"$WORK/agent-$n.log" 2>&1 &
  PIDS+=($!)
  wait_line "$WORK/agent-$n.log" "registered with the coordinator" >/dev/null || fail "agent $n did not register"
done
"$BIN/trainctl-gateway" -listen 127.0.0.1:0 -coordinator "$COORD" -static-dir "$WEB/dist" \
  >"$WORK/gateway.out" 2>"$WORK/gateway.log" &
PIDS+=($!)
line=$(wait_line "$WORK/gateway.out" "listening on port") || fail "gateway did not start"
URL=http://127.0.0.1:${line##* }
[[ $(curl -sS "$URL/") == *'id="view"'* ]] || fail "GET / is not the dashboard"
ok "gateway serves the dashboard at $URL/ and the API under /v1/"

# 3. The browser.
cd "$WEB"
CHROMIUM=$CHROMIUM TRAINCTL_CLI=$BIN/trainctl TRAINCTL_COORDINATOR=$COORD node e2e/dashboard.e2e.mjs "$URL" "$SHOTS" 2>&1 | tee "$WORK/browser.log" | sed 's/^/  /'
[[ ${PIPESTATUS[0]} == 0 ]] || fail "browser test (screenshot at failure: $SHOTS/failure.png)"
n=$(grep -Eo '^[0-9]+ passed' "$WORK/browser.log" | cut -d' ' -f1)
pass=$((pass + n))

# 4. The job page's terminal against a coordinator that authenticates: two
# users' tokens, one agent with 2 fake GPUs, the gateway with -require-auth;
# alice's 2-rank job runs `sleep`.
alice=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
bob=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'tokens { token: "%s" user: "alice" }\ntokens { token: "%s" user: "bob" }\n' "$alice" "$bob" >"$WORK/tokens.txtpb"
"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state-auth" \
  --tokens-file "$WORK/tokens.txtpb" >"$WORK/coord-auth.out" 2>>"$WORK/coord-auth.log" &
PIDS+=($!)
line=$(wait_line "$WORK/coord-auth.out" "listening on port") || fail "coordinator (tokens) did not start"
ACOORD=127.0.0.1:${line##* }
"$BIN/trainctl-agent" --coordinator "$ACOORD" --node-name term-node --fake-gpus 2 \
  --cgroups off --container-runtime none --run-tasks-as-agent \
  --log-dir "$WORK/logs-term" >"$WORK/agent-term.log" 2>&1 &
PIDS+=($!)
wait_line "$WORK/agent-term.log" "registered with the coordinator" >/dev/null || fail "agent term-node did not register"
"$BIN/trainctl-gateway" -listen 127.0.0.1:0 -coordinator "$ACOORD" -static-dir "$WEB/dist" -require-auth \
  >"$WORK/gateway-auth.out" 2>"$WORK/gateway-auth.log" &
PIDS+=($!)
line=$(wait_line "$WORK/gateway-auth.out" "listening on port") || fail "gateway (require-auth) did not start"
AURL=http://127.0.0.1:${line##* }
job=$("$BIN/trainctl" --coordinator "$ACOORD" --token "$alice" submit --gpus 2 -- sleep 1000) || fail "submit the terminal's job"
job=${job//[!0-9]/}
node e2e/terminal.e2e.mjs "$AURL" "$SHOTS" "$job" "$alice" "$bob" 2>&1 | tee "$WORK/terminal.log" | sed 's/^/  /'
[[ ${PIPESTATUS[0]} == 0 ]] || fail "terminal browser test (screenshot at failure: $SHOTS/terminal-failure.png)"
n=$(grep -Eo '^[0-9]+ passed' "$WORK/terminal.log" | cut -d' ' -f1)
pass=$((pass + n))
e2e_done
