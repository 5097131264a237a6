# Shared pieces of the end-to-end scripts (sourced, not run).
#   e2e_init NAME BIN_DIR   sets BIN (absolute), WORK (a fresh temp dir), PIDS,
#                           and a trap that kills every started process and
#                           removes WORK (kept when KEEP is set)
#   ok MESSAGE              counts and prints a passed check
#   e2e_done                prints "N passed, 0 failed"
#   wait_line FILE REGEX    waits (deadline 30 s) for a line, prints it
#   wait_metric REGEX       scrapes http://127.0.0.1:$MPORT/metrics into
#                           $WORK/metrics.txt until a line matches (deadline
#                           30 s; the coordinator refreshes its series about
#                           once a second)
#   fail MESSAGE            prints MESSAGE and the tail of every $WORK/*.log,
#                           exits 1 (scripts may define their own fail)
#   start_coordinator [PORT] [ARGS...]
#                           starts trainctl-coordinator on 127.0.0.1:PORT
#                           (0 or none: a free port) with its state in
#                           $WORK/state and ARGS; sets PORT, COORD_PID and
#                           TRAINCTL_COORDINATOR (the same PORT again after a
#                           kill: a restart over the same state)
#   wait_until WHAT COND    evals COND until it is true (deadline WAIT_S,
#                           default 30 s), else fails naming WHAT
#   job ID EXPR             job ID's `trainctl describe -o json` (with $T,
#                           the CLI) as `j`, prints the Python EXPR of it
#   state ID / wait_state ID STATE
#                           the job's state (JOB_STATE_...); waits for STATE
#   podman_setup IMAGE      imports IMAGE (a static busybox) when missing and
#                           finds the podman arguments that run a container
#                           here: sets G (global), R (run), found and why;
#                           returns 1 with PODMAN_WHY when none does

e2e_init() {
  local name=$1
  BIN=$(cd "${2:?usage: $name BIN_DIR}" && pwd)
  WORK=$(mktemp -d "/tmp/trainctl-$name.XXXXXX")
  PIDS=()
  pass=0
  trap e2e_cleanup EXIT
}

e2e_cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] || rm -rf "$WORK"
}

ok() { echo "ok: $*"; pass=$((pass + 1)); }

e2e_done() { echo "$pass passed, 0 failed"; }

fail() {
  echo "FAIL: $*" >&2
  local f
  for f in "$WORK"/*.log; do
    [[ -f $f ]] || continue
    echo "--- $(basename "$f")" >&2
    tail -30 "$f" >&2
  done
  exit 1
}

start_coordinator() {
  local port=${1:-0}
  shift || true
  # Empty the old output first: the background job's own `>` may truncate it
  # only after wait_line has already seen the previous run's line.
  : >"$WORK/coord.out"
  "$BIN/trainctl-coordinator" --listen "127.0.0.1:$port" --state-dir "$WORK/state" "$@" \
    >"$WORK/coord.out" 2>>"$WORK/coord.log" &
  COORD_PID=$!
  PIDS+=("$COORD_PID")
  local line
  line=$(wait_line "$WORK/coord.out" "listening on port") || fail "coordinator did not start"
  PORT=${line##* }
  export TRAINCTL_COORDINATOR=127.0.0.1:$PORT
}

wait_until() {
  local what=$1 cond=$2 end=$((SECONDS + ${WAIT_S:-30}))
  until eval "$cond"; do
    ((SECONDS < end)) || fail "timed out waiting for: $what"
    read -rt 0.1 <> <(:) || true
  done
}

job() { "$T" describe "$1" -o json | python3 -c "import json,sys; j=json.load(sys.stdin); j=j.get('job', j); print($2)"; }
state() { job "$1" 'j["state"]'; }
wait_state() { wait_until "job $1 $2 (is $(state "$1"))" "[[ \$(state $1) == $2 ]]"; }

wait_line() {
  local file=$1 regex=$2 end=$((SECONDS + 30))
  while ((SECONDS < end)); do
    if grep -qE "$regex" "$file" 2>/dev/null; then grep -E "$regex" "$file" | tail -1; return 0; fi
    read -rt 0.05 <> <(:) || true
  done
  return 1
}

wait_metric() {
  local regex=$1 end=$((SECONDS + 30))
  while ((SECONDS < end)); do
    if curl -sf --max-time 5 "http://127.0.0.1:$MPORT/metrics" >"$WORK/metrics.txt" 2>/dev/null &&
       grep -qE "$regex" "$WORK/metrics.txt"; then
      return 0
    fi
    read -rt 0.1 <> <(:) || true
  done
  return 1
}

# Fallbacks tried when a plain `podman run` fails, each for a host problem
# seen on the development VM (docs/containers.md): --runtime runc (crun 1.8
# refuses a hybrid cgroup host whose v2 tree has a controller), and --ulimit
# nofile/nproc at this shell's hard limits (nproc lowered to 16384 first;
# rootful podman asks for 1048576 of each, which needs CAP_SYS_RESOURCE).
podman_setup() {
  local img=$1
  PODMAN_WHY=
  if ! podman image exists "$img"; then
    mkdir -p "$WORK/rootfs/bin"
    cp /bin/busybox "$WORK/rootfs/bin/busybox"
    tar -C "$WORK/rootfs" -c . | podman import - "$img" >/dev/null ||
      { PODMAN_WHY="podman import failed (no container storage here?)"; return 1; }
  fi
  local runc_args=() nofile nproc ulimit_args cand g r err
  command -v runc >/dev/null && runc_args=(--runtime runc)
  nofile=$(ulimit -Hn)
  nproc=$(ulimit -Hu)
  [[ $nproc == unlimited || $nproc -gt 16384 ]] && nproc=16384
  ulimit_args=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
  G=() R=() found=
  why=()
  for cand in plain runc ulimit runc+ulimit; do
    g=() r=()
    case $cand in
      runc) ((${#runc_args[@]})) || continue; g=("${runc_args[@]}") ;;
      ulimit) ulimit -u "$nproc"; r=("${ulimit_args[@]}") ;;
      runc+ulimit) ((${#runc_args[@]})) || continue; g=("${runc_args[@]}"); r=("${ulimit_args[@]}") ;;
    esac
    if err=$(podman "${g[@]}" run --rm --init "${r[@]}" "$img" /bin/busybox true 2>&1); then
      G=("${g[@]}") R=("${r[@]}") found=$cand
      return 0
    fi
    why+=("$cand: $(tail -n1 <<<"$err")")
  done
  PODMAN_WHY="podman cannot run a container here: $(printf '%s; ' "${why[@]}")"
  return 1
}
