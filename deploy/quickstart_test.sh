#!/usr/bin/env bash
# deploy/install-deps.sh and the build steps of deploy/quickstart.sh, run
# with fake dpkg-query, apt-get, sudo and cmake first on PATH (each records
# its arguments), in a scratch copy of deploy/:
#   1. every package installed: install-deps.sh says so in one line and never
#      calls apt-get;
#   2. one package missing: one line names it, and apt-get update and
#      apt-get install get exactly that package;
#   3. quickstart.sh with no build/ configures it (cmake -S . -B build) and
#      builds; run again, it builds without configuring.
# The fake `cmake --build` exits 3, which stops quickstart.sh before it
# starts any daemon. Touches no package, no build/ of the checkout.
# Usage: deploy/quickstart_test.sh
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
WORK=$(mktemp -d /tmp/trainctl-quickstart-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
pass=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
fail() { echo "FAIL: $*" >&2; exit 1; }

FAKE=$WORK/fake
mkdir -p "$FAKE" "$WORK/repo/deploy"
cp "$SRC/deploy/install-deps.sh" "$SRC/deploy/quickstart.sh" "$WORK/repo/deploy/"
# dpkg-query -W -f='${Status}' PKG: installed unless PKG is in $FAKE_MISSING.
cat >"$FAKE/dpkg-query" <<'EOF'
#!/usr/bin/env bash
pkg=${!#}
if [[ " ${FAKE_MISSING:-} " == *" $pkg "* ]]; then
  echo "dpkg-query: no packages found matching $pkg" >&2
  exit 1
fi
printf 'install ok installed'
EOF
printf '#!/usr/bin/env bash\necho "$*" >>"%s/apt-get.calls"\n' "$WORK" >"$FAKE/apt-get"
printf '#!/usr/bin/env bash\nexec "$@"\n' >"$FAKE/sudo"
# cmake: configuring writes what a configured Ninja build/ has; --build exits 3.
cat >"$FAKE/cmake" <<EOF
#!/usr/bin/env bash
echo "\$*" >>"$WORK/cmake.calls"
if [[ \$1 == --build ]]; then exit 3; fi
mkdir -p build && touch build/CMakeCache.txt build/build.ninja
EOF
chmod +x "$FAKE"/*
export PATH=$FAKE:$PATH
n=$(sed -n '/^PACKAGES=(/,/^)/p' "$SRC/deploy/install-deps.sh" | sed 's/#.*//' | tr -d '()' |
  sed 's/PACKAGES=//' | wc -w)
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then n=$((n + 2)); fi  # nodejs npm

# 1. Everything installed.
out=$("$WORK/repo/deploy/install-deps.sh" 2>&1) || fail "install-deps.sh with every package installed: $out"
[[ ! -e $WORK/apt-get.calls ]] || fail "apt-get ran with every package installed: $(cat "$WORK/apt-get.calls")"
[[ $out == "install-deps: all $n packages are installed; no apt-get" ]] ||
  fail "install-deps.sh with every package installed said: $out"
ok "every package installed: no apt-get, one line: $out"

# 2. One missing.
out=$(FAKE_MISSING=zsh "$WORK/repo/deploy/install-deps.sh" 2>&1) || fail "install-deps.sh with zsh missing: $out"
[[ $out == "install-deps: 1 of $n packages missing; apt-get install zsh" ]] ||
  fail "install-deps.sh with zsh missing said: $out"
calls=$(cat "$WORK/apt-get.calls" 2>/dev/null || true)
[[ $calls == $'update -qq\ninstall -y -qq --no-install-recommends zsh' ]] ||
  fail "apt-get calls with zsh missing: $calls"
ok "zsh missing: apt-get update, apt-get install zsh only, one line: $out"
rm -f "$WORK/apt-get.calls"

# 3. quickstart.sh: configure once, then build only.
cd "$WORK/repo"
rc=0
out=$(deploy/quickstart.sh 2>&1) || rc=$?
[[ $rc == 3 ]] || fail "quickstart.sh (first run) exited $rc, not at the fake cmake --build: $out"
calls=$(cat "$WORK/cmake.calls")
# Configured first; then only builds (the target list is asked for too:
# --target help, whether trainctl-nccl-allreduce exists here).
[[ $(head -1 <<<"$calls") == "-S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo" &&
  $(tail -n +2 <<<"$calls" | grep -vc '^--build build ') == 0 &&
  $(tail -1 <<<"$calls") == "--build build -j"*" --target trainctl "* ]] ||
  fail "quickstart.sh without build/ ran cmake: $calls"
ok "quickstart.sh without build/: configures, then builds"
rm "$WORK/cmake.calls"
rc=0
out=$(deploy/quickstart.sh 2>&1) || rc=$?
[[ $rc == 3 ]] || fail "quickstart.sh (second run) exited $rc, not at the fake cmake --build: $out"
calls=$(cat "$WORK/cmake.calls")
[[ $(grep -vc '^--build build ' <<<"$calls") == 0 &&
  $(tail -1 <<<"$calls") == "--build build -j"*" --target trainctl "* ]] ||
  fail "quickstart.sh with build/ configured ran cmake: $calls"
[[ ! -e $WORK/apt-get.calls ]] || fail "quickstart.sh ran apt-get: $(cat "$WORK/apt-get.calls")"
ok "quickstart.sh with build/ configured: builds without configuring, no apt-get"
echo "$pass passed"
