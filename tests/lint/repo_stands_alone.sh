#!/usr/bin/env bash
# The repository stands alone: no tracked file cites the design, style,
# recipe or trace-semantics documents kept outside it (the names the pattern
# below matches). The design is docs/design.md, the Muri compatibility rules
# bench/sim/README.md. Usage: repo_stands_alone.sh SOURCE_DIR
set -euo pipefail
cd "${1:?usage: repo_stands_alone.sh SOURCE_DIR}"
# Built from parts, so this script does not match itself.
pattern="(DES""IGN|STY""LE|RECI""PES|SEMAN""TICS)[.]md"
hits=$(git ls-files -z 2>/dev/null | xargs -0 grep -nE "$pattern" -- 2>/dev/null || true)
if [[ -n $hits ]]; then
  echo "files cite documents outside the repository (cite docs/design.md instead):"
  echo "$hits"
  echo "0 passed, 1 failed"
  exit 1
fi
echo "1 passed, 0 failed"
