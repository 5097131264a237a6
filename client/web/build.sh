#!/usr/bin/env bash
# Builds the web dashboard into OUT_DIR (default client/web/dist): `npm
# install` when node_modules is older than package-lock.json (the versions
# are the lock file's; `--no-save` rather than `npm ci`, which refuses the
# lock file because the registry here lacks some of rollup's optional
# packages for other platforms), then the type check (tsc) and vite build.
# Used by tests/e2e/web_e2e.sh and by the `trainctl-web` CMake target (the
# trainctl-gateway package and the bundle ship its output).
# Usage: client/web/build.sh [OUT_DIR]
set -euo pipefail
WEB=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:-$WEB/dist}
mkdir -p "$out"
out=$(cd "$out" && pwd)
for t in node npm; do
  command -v "$t" >/dev/null || { echo "build.sh: no $t (deploy/install-deps.sh installs nodejs npm)" >&2; exit 1; }
done
cd "$WEB"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [[ ! node_modules/.package-lock.json -nt package-lock.json ]]; then
  npm install --no-save --no-audit --no-fund >"$log" 2>&1 || { cat "$log" >&2; echo "build.sh: npm install failed" >&2; exit 1; }
fi
npx tsc --noEmit >"$log" 2>&1 || { cat "$log" >&2; echo "build.sh: tsc failed" >&2; exit 1; }
npx vite build --outDir "$out" --emptyOutDir >"$log" 2>&1 || { cat "$log" >&2; echo "build.sh: vite build failed" >&2; exit 1; }
[[ -f $out/index.html ]] || { echo "build.sh: vite wrote no $out/index.html" >&2; exit 1; }
echo "web dashboard: $out ($(du -sk "$out" | cut -f1) KiB)"
