#!/usr/bin/env bash
# Checks the packaging in deploy/ against the real binaries:
#   1. every flag of `trainctl-coordinator --help` / `trainctl-agent --help`
#      is documented in deploy/config/{coordinator,agent}.conf, and every
#      flag of `trainctl-gateway -h` (when built) in deploy/config/gateway.env;
#   2. the daemons read those files (--config): the shipped file, and the
#      file with every documented option uncommented, parse and validate;
#      a misspelt key is refused, naming it;
#   3. the systemd units pass `systemd-analyze verify` (skipped, said loudly,
#      where systemd-analyze is missing) and have the settings the design
#      relies on (Restart=on-failure, KillMode=mixed for the agent, ...);
#   4. deploy/make_bundle.sh ships the units, the example configs,
#      deploy/README.md, the Grafana dashboard, the alert rules and the web
#      dashboard, and leaves out benchmarks, fuzzers and simulators.
# Usage: deploy/packaging_test.sh BIN_DIR
set -euo pipefail

BIN=$(cd "${1:?usage: $0 BIN_DIR}" && pwd)
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d /tmp/trainctl-packaging.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
pass=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
fail() { echo "FAIL: $*" >&2; exit 1; }

# Long flag names of a CLI11 --help: "  --listen TEXT=..." -> listen.
cli11_flags() {
  "$1" --help | sed -nE 's/^  (-[A-Za-z0-9],)?--([A-Za-z0-9][A-Za-z0-9-]*).*/\2/p' |
    grep -vxE 'help|config|version' | sort -u
}

# Keys a config documents, commented out or not: "# listen = ..." -> listen.
conf_keys() {
  sed -nE 's/^#? ?([A-Za-z0-9][A-Za-z0-9-]*) = .*/\1/p' "$1" | sort -u
}

for daemon in coordinator agent; do
  bin=$BIN/trainctl-$daemon
  conf=$SRC/deploy/config/$daemon.conf
  [[ -x $bin ]] || fail "$bin not built"
  flags=$(cli11_flags "$bin")
  [[ -n $flags ]] || fail "no flags found in trainctl-$daemon --help"
  missing=$(comm -23 <(echo "$flags") <(conf_keys "$conf"))
  [[ -z $missing ]] || fail "deploy/config/$daemon.conf does not document: $(echo $missing)
  (add a commented '# NAME = default' entry with what the flag does)"
  ok "$daemon.conf documents all $(echo "$flags" | wc -l) flags of trainctl-$daemon --help"
  extra=$(comm -13 <(echo "$flags") <(conf_keys "$conf"))
  if [[ -n $extra ]]; then
    echo "note: $daemon.conf documents keys trainctl-$daemon does not have yet: $(echo $extra)"
  fi

  # CLI11 reads the config file before it handles --help, so a bad key or
  # value fails here without starting the daemon.
  out=$("$bin" --config "$conf" --help 2>&1) ||
    fail "trainctl-$daemon --config deploy/config/$daemon.conf: $out"
  ok "trainctl-$daemon reads the shipped $daemon.conf"

  # Every documented option uncommented (only the daemon's real flags; file
  # paths replaced by a file that exists).
  touch "$WORK/exists"
  full=$WORK/$daemon-full.conf
  while IFS= read -r line; do
    if [[ $line =~ ^#\ ?([A-Za-z0-9-]+)\ =\ (.*)$ ]] &&
       grep -qx "${BASH_REMATCH[1]}" <<<"$flags"; then
      key=${BASH_REMATCH[1]} value=${BASH_REMATCH[2]}
      [[ $value == \"/etc/trainctl/* ]] && value="\"$WORK/exists\""
      echo "$key = $value"
    elif [[ $line =~ ^[A-Za-z0-9-]+\ = ]]; then
      echo "$line"
    fi
  done <"$conf" >"$full"
  out=$("$bin" --config "$full" --help 2>&1) ||
    fail "trainctl-$daemon with every option of $daemon.conf uncommented: $out
$(cat "$full")"
  ok "trainctl-$daemon accepts every documented option's example value ($(wc -l <"$full") keys)"

  printf 'log-levle = "debug"\n' >"$WORK/typo.conf"
  if out=$("$bin" --config "$WORK/typo.conf" --help 2>&1); then
    fail "trainctl-$daemon accepted a config with the unknown key log-levle"
  fi
  grep -q "log-levle" <<<"$out" || fail "the error does not name the bad key: $out"
  ok "trainctl-$daemon refuses an unknown config key, naming it"
done

# The gateway (Go flags: "  -listen string").
if [[ -x $BIN/trainctl-gateway ]]; then
  gw_flags=$("$BIN/trainctl-gateway" -h 2>&1 | sed -nE 's/^  -([A-Za-z0-9][A-Za-z0-9-]*).*/\1/p' |
    grep -vxE 'help|version' | sort -u || true)
  for f in $gw_flags; do
    grep -q -- "--$f " "$SRC/deploy/config/gateway.env" ||
      fail "deploy/config/gateway.env does not document trainctl-gateway -$f"
  done
  ok "gateway.env documents all $(echo $gw_flags | wc -w) flags of trainctl-gateway"
else
  echo "note: trainctl-gateway not built; its flags are not checked"
fi

# systemd units: what the deployment relies on, then systemd's own check.
units=$SRC/deploy/systemd
need() {  # need UNIT LINE-REGEX WHY
  grep -qE "^$2\$" "$units/$1" || fail "$1: no line $2 ($3)"
}
for u in trainctl-coordinator trainctl-agent trainctl-gateway; do
  need $u.service 'Restart=on-failure' "restart after a crash"
  need $u.service 'LimitNOFILE=[0-9]+' "many streams and files"
  need $u.service 'WantedBy=multi-user.target' "start at boot"
done
for d in coordinator agent; do
  need trainctl-$d.service "ExecStart=/opt/trainctl/bin/trainctl-$d --config /etc/trainctl/$d.conf" \
    "options from the documented config file"
done
need trainctl-coordinator.service 'StateDirectory=trainctl' "state in /var/lib/trainctl"
need trainctl-agent.service 'StateDirectory=trainctl-agent' "logs in /var/lib/trainctl-agent, apart from the coordinator's state"
if grep -qE '^User=' "$units/trainctl-agent.service"; then
  fail "trainctl-agent.service: User= set; the agent runs as root to start tasks as their users"
fi
need trainctl-agent.service 'KillMode=mixed' "SIGTERM to the agent only: its stop path ends the tasks"
need trainctl-agent.service 'Delegate=yes' "the agent divides its cgroup into per-task cgroups (worker/hw/cgroup.h)"
need trainctl-gateway.service 'EnvironmentFile=/etc/trainctl/gateway.env' "flags from gateway.env"
ok "units have Restart=on-failure, LimitNOFILE, StateDirectory, KillMode=mixed and Delegate=yes (agent), --config"

if command -v systemd-analyze >/dev/null; then
  mkdir "$WORK/units"
  for f in "$units"/*.service; do
    # Point ExecStart at the build's binaries (systemd checks they exist).
    sed -E "s#/opt/trainctl/bin/(trainctl-[a-z]+)#$BIN/\1#" "$f" >"$WORK/units/$(basename "$f")"
    if [[ $f == *gateway* && ! -x $BIN/trainctl-gateway ]]; then
      sed -i "s#$BIN/trainctl-gateway#/bin/true#" "$WORK/units/$(basename "$f")"
    fi
  done
  # verify warns (exit 0) about unknown keys: any output is a failure.
  out=$(cd "$WORK/units" && systemd-analyze verify --man=no ./*.service 2>&1) ||
    fail "systemd-analyze verify: $out"
  [[ -z $out ]] || fail "systemd-analyze verify: $out"
  ok "systemd-analyze verify: $(ls "$units" | tr '\n' ' ')"
else
  echo "SKIPPED: systemd-analyze not installed (Debian package systemd); units not verified"
fi

# The bundle ships units, configs and the install guide (a stand-in build
# dir with one small executable keeps this fast).
if command -v patchelf >/dev/null; then
  mkdir -p "$WORK/build/bin" "$WORK/build/web"
  cp /bin/true "$WORK/build/bin/trainctl-standin"
  for b in trainctl-bench-standin trainctl-fuzz-standin trainctl-swarm trainctl-cluster-sim; do
    cp /bin/true "$WORK/build/bin/$b"
  done
  echo '<div id="view"></div>' >"$WORK/build/web/index.html"
  "$SRC/deploy/make_bundle.sh" "$WORK/build" "$WORK/bundle" >"$WORK/bundle.log" 2>&1 ||
    fail "make_bundle.sh: $(cat "$WORK/bundle.log")"
  for f in share/systemd/trainctl-coordinator.service share/systemd/trainctl-agent.service \
           share/systemd/trainctl-gateway.service share/config/coordinator.conf \
           share/config/agent.conf share/config/gateway.env share/doc/README.md \
           share/grafana/trainctl-dashboard.json share/prometheus/trainctl-alerts.yml \
           share/prometheus/prometheus.yml; do
    [[ -f $WORK/bundle/$f ]] || fail "the bundle has no $f"
  done
  [[ -f $WORK/bundle/share/web/index.html ]] || fail "the bundle has no share/web (the web dashboard)"
  [[ -x $WORK/bundle/bin/trainctl-standin ]] || fail "the bundle lost a tool"
  for b in trainctl-bench-standin trainctl-fuzz-standin trainctl-swarm trainctl-cluster-sim; do
    [[ ! -e $WORK/bundle/bin/$b ]] || fail "the bundle carries the benchmark/test binary $b"
  done
  grep -F -- '--static-dir /opt/trainctl/share/web' "$WORK/bundle/share/config/gateway.env" >/dev/null ||
    fail "the bundle's gateway.env does not serve share/web"
  ok "make_bundle.sh ships share/systemd, share/config, share/doc/README.md, the dashboard, the alert rules and the web dashboard (gateway.env points at it), not benchmarks or fuzzers"
else
  echo "SKIPPED: patchelf not installed; make_bundle.sh not run"
fi

echo "$pass passed, 0 failed"
