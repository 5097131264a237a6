# Helpers shared by the GPU scripts of tests/gpu (sourced, not run). They
# read the caller's variables at call time: LOG (the raw log), T0 (SECONDS
# at the start), PY (python3), BIN (the bundle's bin/), ADDR (the
# coordinator's host:port).
# shellcheck shell=bash

# log MESSAGE...: a timestamped line to stderr and LOG.
log() { echo "[$(date +%T) +$((SECONDS - T0))s] $*" | tee -a "$LOG" >&2; }

# append_file TITLE FILE: FILE's contents into LOG under a title line.
append_file() { { echo "===== $1 ($2)"; cat "$2" 2>/dev/null; echo; } >>"$LOG"; }

# free_port: a TCP port on 127.0.0.1 that was free a moment ago.
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# tc ARGS...: the bundle's CLI against ADDR, 30 s at most.
tc() { timeout 30 "$BIN/trainctl" --coordinator "$ADDR" "$@"; }

# kill_tree PID...: SIGTERM to each PID's process group (or the PID alone),
# up to 10 s for them to end, then SIGKILL, then reaps them.
kill_tree() {
  local p i alive
  for p in "$@"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done
  for i in $(seq 1 20); do
    alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive == 0)) && break
    sleep 0.5
  done
  for p in "$@"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
  for p in "$@"; do wait "$p" 2>/dev/null; done
  return 0
}

# use_host_nccl WHAT: the bundle carries no libnccl (it must match the
# host): when trainctl-nccl-allreduce finds none, puts the one pip installed
# with torch, or the first under /usr or /opt, on LD_LIBRARY_PATH; logs which,
# or that WHAT will not start.
use_host_nccl() {
  local nccl_dir
  ldd "$BIN/trainctl-nccl-allreduce" | grep -q 'libnccl.so.2 => not found' || return 0
  nccl_dir=$("$PY" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  if [[ -z "$nccl_dir" || ! -e "$nccl_dir/libnccl.so.2" ]]; then
    nccl_dir=$(dirname "$(timeout 20 find /usr /opt -name 'libnccl.so.2' -print -quit 2>/dev/null)")
  fi
  if [[ -e "$nccl_dir/libnccl.so.2" ]]; then
    export LD_LIBRARY_PATH="$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    log "using libnccl.so.2 from $nccl_dir"
  else
    log "WARNING: no libnccl.so.2 found; $1 will not start"
  fi
}

# bundle_args SCRIPT BUNDLE_DIR OUT_DIR: sets BUNDLE (absolute), OUT
# (absolute, created), BIN and SHARE (the bundle's bin/ and share/); exits 2
# with SCRIPT's usage line on a missing argument.
bundle_args() {
  local script=$1
  if [[ $# -lt 3 ]]; then
    echo "usage: $script BUNDLE_DIR OUT_DIR${USAGE_MORE:-}" >&2
    exit 2
  fi
  BUNDLE=$(cd "$2" && pwd) || exit 2
  mkdir -p "$3" || exit 2
  OUT=$(cd "$3" && pwd) || exit 2
  BIN=$BUNDLE/bin
  SHARE=$BUNDLE/share
}

# packing_args SCRIPT ARGS...: the arguments of the packing_v2 scripts,
# `BUNDLE_DIR OUT_DIR [--family F]...`, into BUNDLE (absolute), OUT
# (absolute, created) and FAMILIES (default: all four families); exits 2
# with the usage line on bad arguments.
packing_args() {
  USAGE_MORE=" [--family F]..." bundle_args "$1" "${@:2:2}"
  shift 3
  FAMILIES=()
  while [[ $# -gt 0 ]]; do
    case $1 in
      --family) FAMILIES+=("$2"); shift 2 ;;
      *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
  done
  ((${#FAMILIES[@]} == 0)) && FAMILIES=(cnn_loader mlp_tabular unet_small tfm_report)
  return 0
}
