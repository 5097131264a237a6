#!/usr/bin/env bash
# The rendezvous through node relays vs PyTorch's TCPStore, same host, same
# run (bench/README.md, "Rendezvous through node relays"):
#
#   trainctl, relay:  512 simulated nodes x 8 ranks = 4,096 ranks, each node
#                     one relay (worker/nccl/rendezvous_relay.h) doing one
#                     coordinator fetch; and 8,192 nodes x 8 = 65,536 ranks;
#   trainctl, direct: 4,096 ranks each long-polling the coordinator (as
#                     before the relays);
#   TCPStore:         4,096 clients waiting for one key.
#
# All rounds: every rank waiting, then rank 0 publishes; the figure is from
# the last request to every rank holding the id. Rounds alternate between
# trainctl and TCPStore, --repeats times; the summary takes medians.
# Targets: relay 4,096 <= 0.5 x TCPStore 4,096; relay 65,536 <= 1,000 ms.
#
#   bash bench/rendezvous/relay_compare.sh build OUT          # here
#   bash bundle/share/relay_compare.sh bundle OUT              # GPU host
#
# DIR is a build or bundle directory (its bin/ has trainctl-bench-rendezvous);
# PYTHON (default python3) must import torch. Writes OUT/rendezvous_relay.json
# (--summary-only: from the runs already in OUT).
set -euo pipefail

DIR=$(cd "${1:?usage: $0 BUILD_OR_BUNDLE_DIR OUT [--repeats N] [--procs P]}" && pwd)
OUT=${2:?usage: $0 BUILD_OR_BUNDLE_DIR OUT}
shift 2
REPEATS=3
PROCS=0
NOTE=""
SUMMARY_ONLY=0
while (($#)); do
  case $1 in
    --repeats) REPEATS=$2; shift 2 ;;
    --procs) PROCS=$2; shift 2 ;;
    --note) NOTE=$2; shift 2 ;;
    --summary-only) SUMMARY_ONLY=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-python3}
BENCH=$DIR/bin/trainctl-bench-rendezvous
[[ -x $BENCH ]] || { echo "no $BENCH: build trainctl-bench-rendezvous" >&2; exit 1; }
((SUMMARY_ONLY == 1)) || "$PYTHON" -c 'import torch' ||
  { echo "$PYTHON cannot import torch" >&2; exit 1; }
mkdir -p "$OUT"
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# The rank processes: one per 4 cores (at least 1) for trainctl, the
# TCPStore clients over every core (its own default).
cores=$(nproc)
((PROCS > 0)) || PROCS=$(((cores + 3) / 4))

for r in $(seq 1 "$REPEATS"); do
  ((SUMMARY_ONLY == 0)) || break
  echo "== repeat $r: trainctl (direct 4,096; relay 512 x 8 and 8,192 x 8)" >&2
  "$BENCH" --ranks 4096 --relay-nodes 512,8192 --procs "$PROCS" \
    --note "relay_compare.sh repeat $r${NOTE:+; $NOTE}" --out "$OUT/trainctl_$r.json" >&2
  echo "== repeat $r: torch TCPStore, 4,096 clients" >&2
  "$PYTHON" "$HERE/tcpstore_fanout.py" --ranks 4096 --modes publish_after_last_request \
    --out "$OUT/tcpstore_$r.json"
done

python3 - "$OUT" "$REPEATS" <<'PY'
import json, os, sys
out, repeats = sys.argv[1], int(sys.argv[2])
tc = [json.load(open(os.path.join(out, "trainctl_%d.json" % r))) for r in range(1, repeats + 1)]
ts = [json.load(open(os.path.join(out, "tcpstore_%d.json" % r))) for r in range(1, repeats + 1)]

def med(v):
    v = sorted(v)
    return v[len(v) // 2] if v else None

def rounds(docs, ranks, mode):
    return [x for d in docs for x in d["rounds"] if x["ranks"] == ranks and x["mode"] == mode]

def relay_rounds(docs, ranks):
    # "..._table": beyond a job's size limit, the group opened on the
    # coordinator's rendezvous table directly (fanout.cc).
    return [x for d in docs for x in d["rounds"] if x["ranks"] == ranks
            and x["mode"].startswith("relay_publish_after_last_request")]

relay_4k = relay_rounds(tc, 4096)
relay_64k = relay_rounds(tc, 65536)
direct_4k = rounds(tc, 4096, "publish_after_last_request")
store_4k = rounds(ts, 4096, "publish_after_last_request")
ms = lambda rs: [x["last_request_to_all_ms"] for x in rs]
s = {
    "relay_4096_ms": med(ms(relay_4k)), "relay_4096_runs_ms": ms(relay_4k),
    "relay_65536_ms": med(ms(relay_64k)), "relay_65536_runs_ms": ms(relay_64k),
    "direct_4096_ms": med(ms(direct_4k)), "direct_4096_runs_ms": ms(direct_4k),
    "tcpstore_4096_ms": med(ms(store_4k)), "tcpstore_4096_runs_ms": ms(store_4k),
    # int64 fields come as JSON strings (protobuf's JSON mapping).
    "coordinator_fetches_relay_4096": med([int(x.get("coordinator_fetches", 0)) for x in relay_4k]),
    "coordinator_fetches_relay_65536": med([int(x.get("coordinator_fetches", 0)) for x in relay_64k]),
    "local_hop_ms": med([x.get("local_hop_ms", 0) for x in relay_4k]),
    "errors": sum(int(x.get("errors", 0)) for x in relay_4k + relay_64k + direct_4k + store_4k),
}
if s["relay_4096_ms"] is not None and s["tcpstore_4096_ms"]:
    s["relay_4096_over_tcpstore"] = s["relay_4096_ms"] / s["tcpstore_4096_ms"]
    s["target_relay_4096_le_half_tcpstore"] = s["relay_4096_over_tcpstore"] <= 0.5
if s["relay_65536_ms"] is not None:
    s["target_relay_65536_le_1000ms"] = s["relay_65536_ms"] <= 1000
for k, v in s.items():
    print("%-36s %s" % (k, v))
doc = {"benchmark": "rendezvous through node relays vs torch TCPStore "
                    "(bench/rendezvous/relay_compare.sh)",
       "summary_median_of_repeats": s, "trainctl_runs": tc, "tcpstore_runs": ts}
with open(os.path.join(out, "rendezvous_relay.json"), "w") as f:
    json.dump(doc, f, indent=1)
print("wrote", os.path.join(out, "rendezvous_relay.json"))
PY
