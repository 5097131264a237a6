#!/usr/bin/env bash
# Makes a relocatable trainctl bundle from a build tree, for hosts that have
# no gRPC/protobuf/Abseil installed (e.g. a GPU host with only the NVIDIA
# driver, CUDA and NCCL):
#
#   OUT/bin/    trainctl, trainctl-coordinator, trainctl-agent,
#               trainctl-task-shim, trainctl-container-env, trainctl-gateway,
#               trainctl-nccl-allreduce:
#               every tool of BUILD/bin but tests, benchmarks, fuzzers and
#               simulators (TRAINCTL_BUNDLE_BENCH=1 keeps the benchmarks, the
#               simulators and test probes, e.g. for a benchmark on a GPU host)
#   OUT/lib/    libtrainctl_nccl.so and every shared library ldd lists for the
#               above, except the host's own: glibc, libgcc_s, libstdc++ (the
#               target's are at least as new) and NVIDIA's (libnccl, libcuda,
#               libcudart, libnvidia-*: they must match the host's driver)
#   OUT/share/  tests/gpu/*.py and *.sh, worker/nccl/python/*.py (metrics helper),
#               bench/rendezvous/*.py and *.sh (rendezvous benches vs TCPStore)
#   OUT/py/trainctl/    the Python SDK (client/python/trainctl) and, when
#                       BUILD has them, its generated stubs: tasks import
#                       it with PYTHONPATH=OUT/py (trainctl.jax, report)
#   OUT/share/systemd/  the systemd units (deploy/systemd/*.service)
#   OUT/share/config/   the example configs, every option documented
#                       (deploy/config/: coordinator.conf, agent.conf,
#                       gateway.env)
#   OUT/share/doc/      README.md: the multi-host install (deploy/README.md)
#   OUT/share/grafana/     the Grafana dashboard (deploy/grafana/)
#   OUT/share/prometheus/  alert rules and an example prometheus.yml
#                          (deploy/prometheus/)
#   OUT/share/web/         the web dashboard, when BUILD/web has it (`cmake
#                          --build BUILD --target trainctl-web`); gateway.env
#                          points --static-dir there
#
# Installed as /opt/trainctl (the units' ExecStart path): see
# deploy/README.md.
#
# RUNPATH is $ORIGIN/../lib on binaries and $ORIGIN on libraries (patchelf),
# so the bundle works from any directory. Binaries are stripped.
#
# Usage: deploy/make_bundle.sh BUILD_DIR OUT_DIR
set -euo pipefail
# An empty glob (no libraries to copy) expands to nothing.
shopt -s nullglob

if [[ $# -ne 2 ]]; then
  echo "usage: $0 BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
out=$2
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! command -v patchelf >/dev/null; then
  echo "patchelf not found; installing it with apt-get" >&2
  apt-get install -y patchelf >&2
fi

# Libraries the target host provides itself (matched on the file name).
skip_re='^(ld-linux.*|libc|libm|libpthread|libdl|librt|libresolv|libutil|libanl|libgcc_s|libstdc\+\+|libnccl|libcuda|libcudart|libnvidia-.*)\.so'

is_test() {
  # Test binaries: *_test names, or anything carrying GoogleTest's flags.
  local f=$1
  case "$(basename "$f")" in
    *_test | *_tests | *-test | *-tests) return 0 ;;
  esac
  grep -qa -- 'gtest_filter' "$f"
}

is_bench() {
  # Benchmarks, load generators, simulators, fuzzers and test probes.
  local f=$1
  case "$(basename "$f")" in
    trainctl-bench-* | trainctl-loadgen | trainctl-swarm | trainctl-sim | \
      trainctl-cluster-sim | trainctl-fuzz-* | trainctl-fake-* | *_probe) return 0 ;;
  esac
  return 1
}

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/share"

elves=()
for f in "$build"/bin/*; do
  [[ -f "$f" && -x "$f" ]] || continue
  if is_test "$f"; then continue; fi
  if [[ ${TRAINCTL_BUNDLE_BENCH:-0} != 1 ]] && is_bench "$f"; then continue; fi
  cp -L "$f" "$out/bin/"
  elves+=("$f")
  echo "bin: $(basename "$f")"
done
if [[ -f "$build/lib/libtrainctl_nccl.so" ]]; then
  cp -L "$build/lib/libtrainctl_nccl.so" "$out/lib/"
  elves+=("$build/lib/libtrainctl_nccl.so")
  echo "lib: libtrainctl_nccl.so"
else
  echo "note: $build/lib/libtrainctl_nccl.so not built (no NCCL); skipped" >&2
fi
if [[ ${#elves[@]} -eq 0 ]]; then
  echo "no executables in $build/bin" >&2
  exit 1
fi

# ldd prints the whole closure: "libfoo.so.1 => /path/libfoo.so.1 (0x...)".
declare -A seen=()
for f in "${elves[@]}"; do
  while read -r name arrow path _; do
    [[ "$arrow" == "=>" ]] || continue
    if [[ "$path" == "not" ]]; then
      if [[ ! "$name" =~ $skip_re ]]; then
        echo "warning: $(basename "$f") needs $name, which ldd cannot find" >&2
      fi
      continue
    fi
    [[ "$name" =~ $skip_re ]] && continue
    [[ -n "${seen[$name]:-}" ]] && continue
    seen[$name]=1
    cp -L "$path" "$out/lib/$name"
  done < <(ldd "$f")
done
echo "libs: ${#seen[@]} shared libraries copied"

chmod u+w "$out"/bin/* "$out"/lib/*
strip --strip-unneeded "$out"/bin/* "$out"/lib/libtrainctl_nccl.so 2>/dev/null || true
# shellcheck disable=SC2016  # $ORIGIN is for the dynamic loader, not bash.
for f in "$out"/bin/*; do
  # Static binaries (trainctl-task-shim) have no dynamic section to patch.
  readelf -d "$f" 2>/dev/null | grep -q '(NEEDED)' || continue
  patchelf --set-rpath '$ORIGIN/../lib' "$f"
done
# shellcheck disable=SC2016
for f in "$out"/lib/*; do
  patchelf --set-rpath '$ORIGIN' "$f"
done

for f in "$src"/tests/gpu/*.py "$src"/tests/gpu/*.sh "$src"/worker/nccl/python/*.py \
  "$src"/bench/rendezvous/*.py "$src"/bench/rendezvous/*.sh; do
  cp "$f" "$out/share/"
done
chmod +x "$out"/share/*.sh 2>/dev/null || true
mkdir -p "$out/py"
cp -r "$src/client/python/trainctl" "$out/py/"
if [ -d "$build/client/python/gen/trainctl/v1" ]; then
  cp -r "$build/client/python/gen/trainctl/v1" "$out/py/trainctl/"
fi
find "$out/py" -name __pycache__ -prune -exec rm -rf {} +
mkdir -p "$out/share/systemd" "$out/share/config" "$out/share/doc"
cp "$src"/deploy/systemd/*.service "$out/share/systemd/"
cp "$src"/deploy/config/* "$out/share/config/"
cp "$src/deploy/README.md" "$out/share/doc/README.md"
mkdir -p "$out/share/grafana" "$out/share/prometheus"
cp "$src"/deploy/grafana/*.json "$out/share/grafana/"
cp "$src"/deploy/prometheus/*.yml "$out/share/prometheus/"
if [[ -f $build/web/index.html ]]; then
  cp -r "$build/web" "$out/share/web"
  echo "web: the dashboard ($(du -sk "$out/share/web" | cut -f1) KiB)"
elif [[ -e $out/bin/trainctl-gateway ]]; then
  echo "warning: $build/web has no dashboard (cmake --build $build --target trainctl-web);" \
    "the gateway's --static-dir /opt/trainctl/share/web will be missing" >&2
fi

# Every binary must resolve all its non-host libraries from the bundle.
for f in "$out"/bin/* "$out"/lib/libtrainctl_nccl.so; do
  [[ -e "$f" ]] || continue
  missing=$(ldd "$f" | awk '$3 == "not" {print $1}' | grep -Ev "$skip_re" || true)
  if [[ -n "$missing" ]]; then
    echo "error: $(basename "$f") cannot find: $missing" >&2
    exit 1
  fi
done

echo "bundle: $out ($(du -sh "$out" | cut -f1), $(du -sb "$out" | cut -f1) bytes)"
