#!/usr/bin/env bash
# Keeps tracker and work-log talk out of the tree: a reader of the repository
# has no issue tracker and no idea what a "stop" was, so code, protos, build
# files, scripts and docs say the behaviour, rule or figure itself, never
# "issue 4", "issues 3 and 7", "(issue 7.3)", "this stop", "next stop"...
#
#   tests/lint/no_tracker_talk.sh [REPO_ROOT] [ALLOWLIST]
#
# REPO_ROOT defaults to the checkout this script is in; ALLOWLIST to
# tests/lint/no_tracker_talk.allow beside it (one repository-relative path a
# line, a file or a directory ending in '/'; '#' starts a comment). Skips
# bench/results/ (recorded data), .git, node_modules and build directories
# (build, build-*, build_*, and any directory holding a CMakeCache.txt).
# Exit 0 when nothing outside the allowlist matches; 1, listing every
# offending line as path:line:text, when something does.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="${1:-$(cd "$here/../.." && pwd)}"
allow="${2:-$here/no_tracker_talk.allow}"
cd "$root"

pattern='\b(issue|issues) [0-9]+|issue [0-9]+\.[0-9]+|this stop|next stop|last stop|earlier stop|a stop\b|stops? [0-9]+'
self="tests/lint/no_tracker_talk.sh"

allowed=()
if [[ -f "$allow" ]]; then
  while IFS= read -r line || [[ -n "$line" ]]; do
    line="${line%%#*}"
    line="$(echo "$line" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')"
    [[ -n "$line" ]] && allowed+=("$line")
  done <"$allow"
fi

declare -A used=()  # allowlist entries that allowed at least one line
is_allowed() {  # PATH; marks the entry that allows it as used
  local a
  for a in "${allowed[@]+"${allowed[@]}"}"; do
    if [[ ( "$a" == */ && "$1" == "$a"* ) || "$1" == "$a" ]]; then
      used["$a"]=1
      return 0
    fi
  done
  return 1
}

hits="$(
  find . \( -name .git -o -name node_modules -o -path ./bench/results \
            -o -name build -o -name 'build-*' -o -name 'build_*' \
            -o \( -type d -exec test -e '{}/CMakeCache.txt' \; \) \) -prune \
    -o -type f \( -name '*.cc' -o -name '*.h' -o -name '*.proto' -o -name '*.py' \
                  -o -name '*.ts' -o -name '*.md' -o -name '*.txt' -o -name '*.sh' \
                  -o -name '*.textproto' -o -name '*.conf' -o -name '*.json' \
                  -o -name '*.go' -o -name '*.yaml' -o -name '*.yml' \
                  -o -name '*.service' -o -name '*.cmake' -o -name '*.html' \
                  -o -name '*.mjs' -o -name '*.css' \) -print0 |
    xargs -0 -r grep -nHEi -- "$pattern" || true
)"

bad=0
while IFS= read -r hit; do
  [[ -z "$hit" ]] && continue
  path="${hit#./}"
  file="${path%%:*}"
  [[ "$file" == "$self" ]] && continue
  is_allowed "$file" && continue
  if [[ $bad -eq 0 ]]; then
    echo "Tracker talk (issue numbers, \"stops\"): say the behaviour, rule or figure instead." >&2
  fi
  echo "$path"
  bad=$((bad + 1))
done <<<"$hits"

# Allowlist entries with nothing left to allow: say so, so they get removed.
for a in "${allowed[@]+"${allowed[@]}"}"; do
  if [[ ! -e "$a" ]]; then
    echo "note: allowlisted $a is not in this tree" >&2
  elif [[ -z "${used[$a]+x}" ]]; then
    echo "note: $a has no tracker talk left; remove it from the allowlist" >&2
  fi
done

if [[ $bad -gt 0 ]]; then
  echo "$bad offending line(s)." >&2
  exit 1
fi
echo "no tracker talk outside the allowlist (${#allowed[@]} path(s) allowed)"
