#!/usr/bin/env bash
# The Debian packages end to end on this machine (root only):
#   1. builds the web dashboard (the trainctl-web target) and the four .deb
#      packages with CPack (deploy/packaging.cmake);
#   2. installs them with dpkg -i and checks what they put in place: the
#      binaries on PATH, the `trainctl` service user and /var/lib/trainctl,
#      /etc/trainctl/*.conf as conffiles, the systemd units (verified by
#      systemd-analyze where it is installed), the shell completion, the
#      dashboard;
#   3. starts the installed services: with systemctl where systemd runs,
#      else each unit's ExecStart= run directly as its User= with its
#      EnvironmentFile=, after pointing the configs at free loopback ports
#      and fake GPUs;
#   4. runs the main job against them with the installed `trainctl`: an
#      experiment and a 2-rank gang, their logs, `nodes`; the dashboard and
#      the REST API through the installed gateway;
#   5. purges the packages and checks that their files, configs and state
#      are gone.
# Exits 77 (ctest: skipped) when not root, without dpkg/cpack, or when
# trainctl packages are already installed (it does not touch those).
# Usage: deploy/deb_test.sh BUILD_BIN_DIR
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../tests/e2e/lib.sh"
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACKAGES=(trainctl trainctl-coordinator trainctl-agent trainctl-gateway)

[[ $(id -u) == 0 ]] || { echo "SKIP: dpkg -i needs root"; exit 77; }
for t in dpkg dpkg-deb cpack; do
  command -v "$t" >/dev/null || { echo "SKIP: no $t"; exit 77; }
done
for p in "${PACKAGES[@]}"; do
  if dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    echo "SKIP: $p is already installed here; this test installs and purges its own"
    exit 77
  fi
done
e2e_init deb-test "${1:-}"
BUILD=$(cd "$BIN/.." && pwd)
[[ -x $BIN/trainctl-gateway ]] || fail "trainctl-gateway not built (Go and grpc-gateway: deploy/install-deps.sh)"

INSTALLED=0
UNIT_PIDS=()
SYSTEMD=0
[[ -d /run/systemd/system ]] && SYSTEMD=1
cleanup() {
  if ((SYSTEMD)); then
    systemctl stop trainctl-gateway trainctl-agent trainctl-coordinator 2>/dev/null || true
  fi
  for p in "${UNIT_PIDS[@]}"; do kill -- "-$p" 2>/dev/null || true; done
  if ((INSTALLED)); then
    dpkg --purge "${PACKAGES[@]}" >"$WORK/purge-on-exit.log" 2>&1 || true
  fi
  e2e_cleanup
}
trap cleanup EXIT

# 1. Build.
cmake --build "$BUILD" --target trainctl-web >"$WORK/web.log" 2>&1 ||
  fail "the trainctl-web target (client/web/build.sh): $(tail -20 "$WORK/web.log")"
cpack -G DEB --config "$BUILD/CPackConfig.cmake" -B "$WORK/debs" >"$WORK/cpack.log" 2>&1 ||
  fail "cpack: $(tail -30 "$WORK/cpack.log")"
debs=()
for p in "${PACKAGES[@]}"; do
  f=$(ls "$WORK"/debs/"${p}"_*.deb 2>/dev/null || true)
  [[ -n $f ]] || fail "cpack made no $p package: $(ls "$WORK/debs")"
  debs+=("$f")
done
ok "cpack: $(cd "$WORK/debs" && ls ./*.deb | xargs -n1 basename | tr '\n' ' ')($(du -ch "$WORK"/debs/*.deb | tail -1 | cut -f1))"
dpkg-deb -c "$WORK/debs/trainctl-gateway_"*.deb | grep -E '/usr/share/trainctl/web/index.html$' >/dev/null ||
  fail "the trainctl-gateway package has no /usr/share/trainctl/web/index.html"
if dpkg-deb -c "$WORK/debs/trainctl-agent_"*.deb | grep -E 'bench|fuzz|_probe' >"$WORK/extra.txt"; then
  fail "the agent package carries benchmark or test binaries: $(cat "$WORK/extra.txt")"
fi

# 2. Install and check what is in place.
INSTALLED=1
dpkg -i "${debs[@]}" >"$WORK/dpkg.log" 2>&1 || fail "dpkg -i: $(tail -30 "$WORK/dpkg.log")"
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" | grep -q "install ok installed" || fail "$p is not installed"
done
for b in trainctl trainctl-coordinator trainctl-agent trainctl-task-shim trainctl-container-env trainctl-gateway; do
  [[ $(command -v "$b") == /usr/bin/$b ]] || fail "$b is not /usr/bin/$b on PATH"
done
/usr/bin/trainctl --version | grep -E '[0-9]+\.[0-9]+\.[0-9]+' >/dev/null || fail "trainctl --version"
getent passwd trainctl >/dev/null || fail "no trainctl service user"
[[ $(stat -c '%U %a' /var/lib/trainctl) == "trainctl 750" ]] ||
  fail "/var/lib/trainctl is $(stat -c '%U %a' /var/lib/trainctl), not trainctl 750"
for pc in coordinator:coordinator.conf agent:agent.conf gateway:gateway.env; do
  conf=/etc/trainctl/${pc#*:}
  dpkg-query -W -f='${Conffiles}' "trainctl-${pc%%:*}" | grep -F " $conf " >/dev/null ||
    fail "$conf is not a conffile of trainctl-${pc%%:*}"
done
unitdir=
for d in /usr/lib/systemd/system /lib/systemd/system; do
  [[ -f $d/trainctl-agent.service ]] && unitdir=$d && break
done
[[ -n $unitdir ]] || fail "no trainctl-agent.service installed"
grep -x 'ExecStart=/usr/bin/trainctl-coordinator --config /etc/trainctl/coordinator.conf' \
  "$unitdir/trainctl-coordinator.service" >/dev/null || fail "the coordinator unit does not start /usr/bin/trainctl-coordinator"
grep -F -- '--static-dir /usr/share/trainctl/web' /etc/trainctl/gateway.env >/dev/null ||
  fail "gateway.env does not serve /usr/share/trainctl/web"
if command -v systemd-analyze >/dev/null; then
  out=$(systemd-analyze verify --man=no "$unitdir"/trainctl-{coordinator,agent,gateway}.service 2>&1) ||
    fail "systemd-analyze verify: $out"
  ok "systemd-analyze verify: the installed units"
fi
bash -c 'source /usr/share/bash-completion/completions/trainctl && complete -p trainctl' >/dev/null ||
  fail "the bash completion does not register for trainctl"
ok "installed: binaries in /usr/bin, user trainctl, /var/lib/trainctl, conffiles, units in $unitdir, completion"

# 3. Start the installed services on free loopback ports, fake GPUs.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
GWPORT=$(free_port)
sed -i -E "s|^listen = .*|listen = \"127.0.0.1:$PORT\"|" /etc/trainctl/coordinator.conf
sed -i -E "s|^coordinator = .*|coordinator = \"127.0.0.1:$PORT\"|" /etc/trainctl/agent.conf
printf 'fake-gpus = "2:H100-fake:80GiB"\nnode-name = "deb-node"\n' >>/etc/trainctl/agent.conf
sed -i -E "s|^TRAINCTL_GATEWAY_FLAGS=.*|TRAINCTL_GATEWAY_FLAGS=\"--listen 127.0.0.1:$GWPORT --coordinator 127.0.0.1:$PORT --static-dir /usr/share/trainctl/web\"|" \
  /etc/trainctl/gateway.env

# Runs a unit's ExecStart= as its User= (nobody for DynamicUser=) with its
# EnvironmentFile=, in a process group of its own; output to WORK/NAME.log.
run_unit() {
  local name=$1 unit=$unitdir/$1.service user exec env
  user=$(sed -n 's/^User=//p' "$unit")
  grep -qx 'DynamicUser=yes' "$unit" && user=nobody
  exec=$(sed -n 's/^ExecStart=//p' "$unit")
  env=$(sed -n 's/^EnvironmentFile=-\{0,1\}//p' "$unit")
  setsid bash -c "set -a; ${env:+source $env;} set +a; exec ${user:+runuser -u $user --} $exec" \
    >"$WORK/$name.log" 2>&1 &
  UNIT_PIDS+=($!)
}
if ((SYSTEMD)); then
  systemctl daemon-reload
  systemctl start trainctl-coordinator trainctl-agent trainctl-gateway ||
    fail "systemctl start: $(systemctl status --no-pager trainctl-\* 2>&1 | tail -30)"
  how="systemctl start"
else
  run_unit trainctl-coordinator
  run_unit trainctl-agent
  run_unit trainctl-gateway
  how="each unit's ExecStart (no systemd here)"
fi
T=(/usr/bin/trainctl --coordinator "127.0.0.1:$PORT")
end=$((SECONDS + 60))
until "${T[@]}" nodes -o json 2>/dev/null | grep -F '"deb-node"' >/dev/null; do
  ((SECONDS < end)) || fail "the installed agent did not register within 60 s"
  read -rt 0.2 <> <(:) || true
done
ok "started with $how: coordinator on :$PORT, agent deb-node registered"

# 4. The main job with the installed CLI.
# `submit` prints the job id on stdout; --wait then waits for its end.
out=$("${T[@]}" submit --gpus 1 --wait -- sh -c 'echo hello from the deb on $CUDA_VISIBLE_DEVICES' 2>>"$WORK/submit.log") ||
  fail "experiment: $out"
id=$(head -1 <<<"$out")
[[ $id =~ ^[0-9]+$ ]] || fail "no job id in: $out"
"${T[@]}" logs "$id" | grep -F "hello from the deb" >/dev/null || fail "job $id's log: $("${T[@]}" logs "$id" 2>&1)"
out=$("${T[@]}" submit --nodes 1 --gpus-per-node 2 --wait -- \
  sh -c 'echo rank $RANK of $WORLD_SIZE local $LOCAL_RANK' 2>>"$WORK/submit.log") || fail "gang: $out"
gang=$(head -1 <<<"$out")
logs=$("${T[@]}" logs "$gang" --all-ranks)
grep -F "rank 0 of 2" <<<"$logs" >/dev/null && grep -F "rank 1 of 2" <<<"$logs" >/dev/null ||
  fail "gang $gang's logs: $logs"
ok "main job: experiment $id and 2-rank gang $gang succeeded with their logs"

url=http://127.0.0.1:$GWPORT
end=$((SECONDS + 30))
# Readiness as a load balancer polls it: the gateway may have started before
# the coordinator listened.
until curl -sf "$url/readyz" >/dev/null; do
  ((SECONDS < end)) || fail "the installed gateway is not ready: $(curl -s "$url/readyz")"
  read -rt 0.2 <> <(:) || true
done
curl -sf "$url/healthz" >/dev/null || fail "/healthz: $(curl -s "$url/healthz")"
curl -sf "$url/" | grep -F 'id="view"' >/dev/null || fail "GET / is not the dashboard"
curl -sf "$url/v1/jobs/$id" | grep -F '"JOB_STATE_SUCCEEDED"' >/dev/null ||
  fail "GET /v1/jobs/$id: $(curl -s "$url/v1/jobs/$id")"
ok "gateway: the dashboard from /usr/share/trainctl/web, /readyz, /v1/jobs/$id"

# 5. Purge.
if ((SYSTEMD)); then systemctl stop trainctl-gateway trainctl-agent trainctl-coordinator; fi
for p in "${UNIT_PIDS[@]}"; do kill -- "-$p" 2>/dev/null || true; done
for p in "${UNIT_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
UNIT_PIDS=()
dpkg --purge "${PACKAGES[@]}" >"$WORK/purge.log" 2>&1 || fail "dpkg --purge: $(tail -20 "$WORK/purge.log")"
INSTALLED=0
for f in /usr/bin/trainctl /usr/bin/trainctl-agent /etc/trainctl/coordinator.conf \
         /etc/trainctl/agent.conf /var/lib/trainctl /var/lib/trainctl-agent; do
  [[ ! -e $f ]] || fail "$f is still there after dpkg --purge"
done
ok "dpkg --purge removes the binaries, configs and state"
e2e_done
