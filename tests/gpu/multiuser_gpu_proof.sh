#!/usr/bin/env bash
# On a GPU host, as root: jobs of an authenticated user run as that local
# account on the real GPUs: a CUDA job, and a 2-rank NCCL DDP gang
# (tests/gpu/ddp_train.py) when the host has 2 GPUs. A coordinator with a
# tokens file, the agent as root with the real GPUs (NVML), a throwaway
# account gpualice submitting with the CLI as itself. Writes
# OUT_DIR/multiuser_gpu.json (what bench/results/multiuser_gpu.json holds)
# and the jobs' logs and describe output.
# Usage (repository root, a bundle from deploy/make_bundle.sh):
#   tests/gpu/multiuser_gpu_proof.sh BUNDLE OUT_DIR
set -uo pipefail
export NCCL_NVLS_ENABLE=0
SRC=$(pwd)
OUT=${2:?OUT}; mkdir -p "$OUT"
W=$(mktemp -d /tmp/mu-gpu.XXXXXX); chmod 711 "$W"
cp -r "${1:?BUNDLE}" "$W/bundle"; chmod -R a+rX "$W/bundle"
B=$W/bundle/bin
U=gpualice
id "$U" >/dev/null 2>&1 || useradd -m -s /bin/bash "$U"
TOK=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf 'tokens { token: "%s" user: "%s" }\n' "$TOK" "$U" >"$W/tokens"
"$B/trainctl-coordinator" --listen 127.0.0.1:0 --state-dir "$W/state" --tokens-file "$W/tokens" \
  >"$W/c.out" 2>"$W/c.log" &
for _ in $(seq 100); do grep -q "listening on port" "$W/c.out" && break; sleep 0.1; done
PORT=$(grep -o "listening on port [0-9]*" "$W/c.out" | awk '{print $4}')
"$B/trainctl-agent" --coordinator "127.0.0.1:$PORT" --node-name gpu-host --log-dir "$W/logs" \
  >"$W/a.log" 2>&1 &
for _ in $(seq 300); do grep -q "registered with the coordinator" "$W/a.log" && break; sleep 0.1; done
cp "$SRC/tests/gpu/ddp_train.py" "$W/"; chmod 644 "$W/ddp_train.py"
as_alice() { (cd "$W" && runuser -u "$U" -- env TRAINCTL_COORDINATOR="127.0.0.1:$PORT" \
  TRAINCTL_AUTH_TOKEN="$TOK" PATH="$PATH" "$B/trainctl" "$@"); }
GPUS=$(nvidia-smi -L | wc -l)
j1=$(as_alice submit --gpus 1 --workdir "$W" -- python3 -c \
  "import os,torch; print('uid', os.getuid(), os.environ['USER'], os.environ['HOME']); x=torch.ones(1<<20, device='cuda'); print('cuda_sum', float(x.sum()), torch.cuda.get_device_name(0))")
as_alice wait "$j1"; r1=$?
as_alice logs "$j1" >"$OUT/job1.log" 2>&1
as_alice describe "$j1" >"$OUT/job1.describe" 2>&1
r2=skipped
if ((GPUS >= 2)); then
  j2=$(as_alice submit --gpus 2 --workdir "$W" -- python3 ddp_train.py --steps 30)
  as_alice wait "$j2"; r2=$?
  as_alice logs "$j2" --all-ranks >"$OUT/job2.log" 2>&1
  as_alice describe "$j2" >"$OUT/job2.describe" 2>&1
fi
ls -ln "$W/logs"/cluster-*/jobs-0/ >"$OUT/logs.ls" 2>&1
cp "$W/a.log" "$W/c.log" "$OUT/" 2>/dev/null
python3 - "$OUT" "$r1" "$r2" "$U" <<'PY'
import json, re, sys, subprocess
out, r1, r2, user = sys.argv[1:5]
j1 = open(out + "/job1.log").read()
res = {"gpus": int(subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.count("GPU ")),
       "user": user, "job1_exit": int(r1), "job1_log": j1.strip().splitlines()[-3:],
       "job1_runs_as": re.findall(r"Runs as:.*", open(out + "/job1.describe").read())}
if r2 != "skipped":
    res["job2_exit"] = int(r2)
    res["job2_log_tail"] = open(out + "/job2.log").read().strip().splitlines()[-4:]
    res["job2_runs_as"] = re.findall(r"Runs as:.*", open(out + "/job2.describe").read())
json.dump(res, open(out + "/multiuser_gpu.json", "w"), indent=1)
print(json.dumps(res, indent=1))
PY
