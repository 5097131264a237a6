#!/usr/bin/env bash
# Installs what trainctl needs to build and test, from Debian 12's packages
# (Debian 12's versions). Asks dpkg-query which are installed and runs
# apt-get (update, install) only when one is missing; says which in one line
# either way. deploy/quickstart_test.sh checks both cases.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git python3 procps
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libsqlite3-dev libcli11-dev libspdlog-dev
  libgtest-dev libgmock-dev libbenchmark-dev patchelf
  systemd zsh bsdutils  # packaging_test: systemd-analyze verify; cli tests: zsh -n, script(1)
  prometheus-cpp-dev curl openssl libssl-dev libyaml-cpp-dev
  passwd  # multi-user e2e: useradd (throwaway accounts)
  iproute2
  file  # deb_test: cpack's DEB generator finds the ELF files for dpkg-shlibdeps with file(1)
  # promtool and prometheus for the alert rules' and the metrics' checks
  # (promtool_rules_test, promtool_metrics_e2e, prometheus_queries_e2e):
  # Debian ships promtool only in the prometheus server package (19 MB
  # download, ~100 MB installed, ~20 s). Its service is not wanted here:
  # stopped below where this script installed it under systemd.
  prometheus
  # The Python client (client/python): runtime, stub generation (protoc and
  # grpc_python_plugin above), and its pip install test in a venv.
  python3-grpcio python3-protobuf python3-pip python3-setuptools python3-wheel python3-venv
  # exec_e2e: `trainctl exec -it` / `shell` driven through a real pseudo-terminal.
  python3-pexpect
  # torch_netns_e2e: a real PyTorch DDP gang (CPU, gloo) across network
  # namespaces (~1 min to install, ~400 MB).
  python3-torch
  # container_smoke_e2e (~20 s to install): podman, its --init (catatonit), runc
  # (crun 1.8 refuses hybrid cgroup hosts) and a static busybox for the image.
  podman catatonit runc busybox-static
  golang-go golang-grpc-gateway golang-github-grpc-ecosystem-grpc-gateway-dev golang-github-gorilla-websocket-dev
  golang-google-grpc-dev golang-goprotobuf-dev golang-google-genproto-dev
  etcd-server golang-etcd-server-dev golang-github-gogo-protobuf-dev
  chromium
)
# The web dashboard (client/web) needs Node.js and npm; a machine that has them
# from elsewhere (e.g. a newer Node.js) keeps them: Debian's npm package would
# replace that npm.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  PACKAGES+=(nodejs npm)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages are installed; no apt-get" >&2
  exit 0
fi
SUDO=
if [[ $(id -u) != 0 ]]; then SUDO=sudo; fi
echo "install-deps: ${#missing[@]} of ${#PACKAGES[@]} packages missing; apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Installed for promtool only: don't leave a Prometheus server running on
# :9090 of a build machine (containers without systemd never start it).
if [[ " ${missing[*]} " == *" prometheus "* && -d /run/systemd/system ]]; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
