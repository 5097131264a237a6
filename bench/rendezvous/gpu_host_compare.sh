#!/usr/bin/env bash
# Rendezvous fan-out, trainctl vs PyTorch's TCPStore, same host, same run.
# For the GPU host (PyTorch installed, no gRPC):
#
#   deploy/make_bundle.sh build bundle          # here, where trainctl is built
#   bash bench/rendezvous/gpu_host_compare.sh bundle OUT   # on the GPU host
#
# Runs BUNDLE/bin/trainctl-bench-rendezvous (a coordinator in its process, N
# simulated ranks over loopback gRPC in a rank process it forks) and tcpstore_fanout.py (N TCPStore
# clients) for N = 1,024 and 4,096 (--ranks to change), alternating twice,
# and writes OUT/rendezvous_fanout.json with both systems' rounds and the
# ratios (TCPStore time / trainctl time; > 1 means trainctl is faster).
set -euo pipefail

BUNDLE=$(cd "${1:?usage: $0 BUNDLE OUT [--ranks 1024,4096]}" && pwd)
OUT=${2:?usage: $0 BUNDLE OUT}
shift 2
RANKS=1024,4096
REPEATS=2
while (($#)); do
  case $1 in
    --ranks) RANKS=$2; shift 2 ;;
    --repeats) REPEATS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}  # one with torch
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

for r in $(seq 1 "$REPEATS"); do
  echo "== repeat $r: trainctl" >&2
  "$BUNDLE/bin/trainctl-bench-rendezvous" --ranks "$RANKS" \
    --note "gpu_host_compare.sh repeat $r" --out "$OUT/trainctl_$r.json" >&2
  echo "== repeat $r: torch TCPStore" >&2
  "$PYTHON" "$HERE/tcpstore_fanout.py" --ranks "$RANKS" --out "$OUT/tcpstore_$r.json"
done

python3 - "$OUT" "$REPEATS" <<'PY'
import json, os, sys
out, repeats = sys.argv[1], int(sys.argv[2])
tc = [json.load(open(os.path.join(out, "trainctl_%d.json" % r))) for r in range(1, repeats + 1)]
ts = [json.load(open(os.path.join(out, "tcpstore_%d.json" % r))) for r in range(1, repeats + 1)]

def best(docs):
    """Per (ranks, mode): the median over repeats of last_request_to_all_ms."""
    by = {}
    for d in docs:
        for r in d["rounds"]:
            by.setdefault((r["ranks"], r["mode"]), []).append(r["last_request_to_all_ms"])
    return {k: sorted(v)[len(v) // 2] for k, v in by.items()}

a, b = best(tc), best(ts)
rows = []
for key in sorted(a):
    if key in b:
        rows.append({"ranks": key[0], "mode": key[1],
                     "trainctl_last_request_to_all_ms": a[key],
                     "tcpstore_last_request_to_all_ms": b[key],
                     "tcpstore_over_trainctl": b[key] / a[key] if a[key] else None})
        print("%5d %-27s trainctl %8.2f ms   TCPStore %8.2f ms   ratio %.2f" % (
            key[0], key[1], a[key], b[key], b[key] / a[key] if a[key] else 0))
doc = {"benchmark": "rendezvous fan-out, trainctl vs torch TCPStore "
                    "(bench/rendezvous/gpu_host_compare.sh)",
       "summary_median_of_repeats": rows, "trainctl_runs": tc, "tcpstore_runs": ts}
with open(os.path.join(out, "rendezvous_fanout.json"), "w") as f:
    json.dump(doc, f, indent=1)
print("wrote", os.path.join(out, "rendezvous_fanout.json"))
PY
