#!/usr/bin/env bash
# The main job on one machine: installs the dependencies, builds, starts a
# coordinator and an agent (fake GPUs where the machine has none), submits an
# experiment and a 2-rank gang through the trainctl CLI, and prints what they
# did. Everything runs from build/bin and stops at the end (--keep leaves the
# coordinator and agent running and prints how to use them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
KEEP=0
[[ ${1:-} == --keep ]] && KEEP=1

deploy/install-deps.sh
# Configured once (a build/ of another generator is kept); later runs only
# rebuild what changed.
if [[ -f build/CMakeCache.txt && (-f build/build.ninja || -f build/Makefile) ]]; then
  echo "quickstart: build/ is configured; building what changed" >&2
else
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
# The agent's helpers too: the task shim (tasks as their users, in their
# cgroups), trainctl-container-env (--image with podman) and the fake
# pre-flight probe (a gang over two nodes on fake GPUs is probed with it).
# On a GPU host (NCCL found) also the real probe, trainctl-nccl-allreduce;
# an agent lacking its probe says so at start and gangs there run unprobed.
EXTRA=()
if cmake --build build --target help | grep -q '^trainctl-nccl-allreduce:'; then
  EXTRA=(trainctl-nccl-allreduce)
fi
cmake --build build -j"$(nproc)" --target trainctl trainctl-coordinator trainctl-agent \
  trainctl-task-shim trainctl-container-env trainctl-fake-preflight-probe "${EXTRA[@]}"

BIN=$PWD/build/bin
WORK=$(mktemp -d /tmp/trainctl-quickstart.XXXXXX)
PIDS=()
cleanup() {
  if ((KEEP == 0)); then
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
  fi
}
trap cleanup EXIT

# The coordinator on a free loopback port; it prints the port it bound.
"$BIN/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  >"$WORK/coordinator.out" 2>"$WORK/coordinator.log" &
PIDS+=($!)
for _ in $(seq 100); do
  grep -q "listening on port" "$WORK/coordinator.out" 2>/dev/null && break
  read -rt 0.1 <> <(:) || true
done
PORT=$(awk '/listening on port/ {print $NF}' "$WORK/coordinator.out")
[[ -n $PORT ]] || { cat "$WORK/coordinator.log"; exit 1; }
export TRAINCTL_COORDINATOR=127.0.0.1:$PORT

# One agent: the real GPUs through NVML, or 2 fake ones on a machine without.
GPU_FLAGS=(--fake-gpus 2:Fake-H100:80GiB)
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then GPU_FLAGS=(); fi
"$BIN/trainctl-agent" --coordinator "$TRAINCTL_COORDINATOR" --node-name "$(hostname)" \
  --log-dir "$WORK/logs" "${GPU_FLAGS[@]}" \
  >"$WORK/agent.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  "$BIN/trainctl" nodes 2>/dev/null | grep -q ready && break
  read -rt 0.1 <> <(:) || true
done
"$BIN/trainctl" nodes | grep -q ready || { echo "the agent did not register:"; cat "$WORK/agent.log"; exit 1; }

T=$BIN/trainctl
echo "== coordinator at $TRAINCTL_COORDINATOR, state in $WORK/state"
echo "== trainctl nodes"
"$T" nodes

echo "== an experiment: trainctl submit --gpu-fraction 0.5 -- sh -c '...'"
EXP=$("$T" submit --name hello --gpu-fraction 0.5 -- \
  sh -c 'echo "hello from rank $RANK of $WORLD_SIZE on GPU $CUDA_VISIBLE_DEVICES"')
"$T" wait "$EXP"
"$T" logs "$EXP"

echo "== a 2-rank gang: trainctl submit --gpus 2 -- sh -c '...'"
GANG=$("$T" submit --name gang --gpus 2 -- \
  sh -c 'echo "rank $RANK/$WORLD_SIZE local_rank $LOCAL_RANK master $MASTER_ADDR:$MASTER_PORT devices $CUDA_VISIBLE_DEVICES"')
"$T" wait "$GANG"
"$T" logs "$GANG" --rank 0
"$T" logs "$GANG" --rank 1

echo "== trainctl list"
"$T" list
echo "== trainctl describe $GANG"
"$T" describe "$GANG"

if ((KEEP)); then
  echo "== still running (pids ${PIDS[*]}); try:"
  echo "   export TRAINCTL_COORDINATOR=$TRAINCTL_COORDINATOR"
  echo "   $T submit --gpu-fraction 0.25 -- sleep 30; $T list; $T nodes"
fi
