#!/usr/bin/env bash
# Packaging test of the Python client: `pip install --no-build-isolation`
# from a copy of client/python (next to a copy of proto/, as in a checkout)
# into a venv made with --system-site-packages, offline (--no-index), as
# README.md tells users on Debian 12. The install must write nothing into the
# sources (`git status --porcelain --ignored` of the copy stays empty: no
# build/, no trainctl.egg-info); an editable install writes only the
# generated stubs, trainctl/v1/. Then the installed package, with its
# generated stubs, imports from outside the source tree.
# Usage: install_test.sh PYTHON SOURCE_ROOT
set -euo pipefail
PY=${1:?usage: install_test.sh PYTHON SOURCE_ROOT}
SRC=$(cd "${2:?usage: install_test.sh PYTHON SOURCE_ROOT}" && pwd)
WORK=$(mktemp -d /tmp/trainctl-py-install.XXXXXX)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A copy, so that a failing run leaves nothing in the checkout, made a git
# repository of its own: `git status --ignored` there shows whatever the
# install writes, ignored or not. What an earlier build left there (ignored
# files) is removed first.
mkdir -p "$WORK/src/client"
cp -r "$SRC/client/python" "$WORK/src/client/python"
cp -r "$SRC/proto" "$WORK/src/proto"
git() { command git -C "$WORK/src" -c init.defaultBranch=main -c user.name=install-test \
  -c user.email=install-test@localhost -c commit.gpgsign=false "$@"; }
git init -q && git add -A && git commit -q -m sources && git clean -fdXq \
  || fail "git repository of the copied sources"
[[ -z $(git status --porcelain --ignored) ]] || fail "the copied sources are not clean"

"$PY" -m venv --system-site-packages "$WORK/venv" || fail "venv (Debian: python3-venv)"
"$WORK/venv/bin/pip" install --no-build-isolation --no-index --quiet \
  "$WORK/src/client/python" >"$WORK/pip.log" 2>&1 || { cat "$WORK/pip.log" >&2; fail "pip install"; }
echo "ok: pip install --no-build-isolation --no-index into a --system-site-packages venv"
dirty=$(git status --porcelain --ignored)
[[ -z $dirty ]] || fail "pip install wrote into the source tree (git status --porcelain --ignored):
$dirty"
echo "ok: pip install wrote nothing into the source tree"

# Editable: only the generated stubs, next to the sources it runs from.
"$PY" -m venv --system-site-packages "$WORK/venv-e" || fail "venv (Debian: python3-venv)"
"$WORK/venv-e/bin/pip" install --no-build-isolation --no-index --quiet -e \
  "$WORK/src/client/python" >"$WORK/pip-e.log" 2>&1 || { cat "$WORK/pip-e.log" >&2; fail "pip install -e"; }
dirty=$(git status --porcelain --ignored)
[[ $dirty == "!! client/python/trainctl/v1/" ]] || fail "pip install -e wrote more than \
client/python/trainctl/v1/ into the source tree (git status --porcelain --ignored):
$dirty"
(cd "$WORK" && env -u PYTHONPATH "$WORK/venv-e/bin/python" -B -c \
  'import trainctl.v1.service_pb2_grpc, trainctl, sys; assert trainctl.__file__.startswith(sys.argv[1])' \
  "$WORK/src/client/python/") || fail "import of the editable install"
echo "ok: pip install -e wrote only client/python/trainctl/v1/ (ignored) and imports from the sources"

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
echo "4 passed, 0 failed"
