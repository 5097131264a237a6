#!/usr/bin/env bash
# Packaging test of the Python client: `pip install --no-build-isolation`
# from a copy of client/python (next to a copy of proto/, as in a checkout)
# into a venv made with --system-site-packages, offline (--no-index), as
# README.md tells users on Debian 12; then the installed package, with its
# generated stubs, imports from outside the source tree.
# Usage: install_test.sh PYTHON SOURCE_ROOT
set -euo pipefail
PY=${1:?usage: install_test.sh PYTHON SOURCE_ROOT}
SRC=$(cd "${2:?usage: install_test.sh PYTHON SOURCE_ROOT}" && pwd)
WORK=$(mktemp -d /tmp/trainctl-py-install.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A copy, so the build's egg-info and build/ never land in the checkout.
mkdir -p "$WORK/src/client"
cp -r "$SRC/client/python" "$WORK/src/client/python"
cp -r "$SRC/proto" "$WORK/src/proto"
# Only what build_stubs.py makes, and no earlier in-tree build.
rm -rf "$WORK/src/client/python/trainctl/v1" "$WORK/src/client/python/build" \
  "$WORK"/src/client/python/*.egg-info

"$PY" -m venv --system-site-packages "$WORK/venv" || fail "venv (Debian: python3-venv)"
"$WORK/venv/bin/pip" install --no-build-isolation --no-index --quiet \
  "$WORK/src/client/python" >"$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log" >&2; fail "pip install"; }
echo "ok: pip install --no-build-isolation --no-index into a --system-site-packages venv"

rm -rf "$WORK/src"  # the installed package must not need the sources
cd "$WORK"
env -u PYTHONPATH "$WORK/venv/bin/python" - <<'PYEOF' || fail "import of the installed package"
import os, sys, warnings
import trainctl
from trainctl.v1 import service_pb2_grpc, types_pb2
site = os.path.dirname(os.path.dirname(trainctl.__file__))
assert site.startswith(sys.prefix), (trainctl.__file__, sys.prefix)
assert service_pb2_grpc.CoordinatorStub and types_pb2.JobSpec
assert trainctl.Client(address="127.0.0.1:1").address == "127.0.0.1:1"
import trainctl.integrations
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    trainctl.report(loss=1.0)  # outside a task: a no-op with a warning
assert len(caught) == 1, caught
print("ok: installed trainctl and trainctl.v1 import from", site)
PYEOF
echo "2 passed, 0 failed"
