#!/usr/bin/env bash
# Compares scheduling policies on every shipped Muri trace with trainctl-sim's
# own cost model (restart overhead paid once per start, no --compat): fifo,
# fifo-backfill, las, las-nopack and las-tiresias (the coordinator's
# sched::Scheduler: strict FIFO, FIFO + head-of-queue reservation + backfill,
# the default policy (LAS + reservation/backfill + interleave packing), the
# same without packing, and the LAS default of before: Tiresias thresholds,
# preemption of same-level jobs that overtook), the Muri artifact's srtf and
# tiresias (muri_policy.h; srtf knows job durations, an oracle) and muri-l
# (our reproduction of Muri-L). Prints a table and writes
# bench/results/sim_policies.json (.txt beside it), then validates muri-l
# under the artifact's cost model (--compat muri) against the published
# Muri-L into bench/results/sim_muri_l.txt, sweeps las's interleave group
# size (--interleave-max-jobs 2..4) into bench/results/sim_interleave.txt,
# then runs the starvation
# scenario (a gang behind a stream of 1-GPU jobs) into
# bench/results/sim_starvation.txt, and sweeps las's
# reservation_min_wait_s (--reservation-min-wait-s: Slurm's
# bf_min_age_reserve) over every trace and the starvation scenario into
# bench/results/sim_reservation_age.{json,txt}.
#
#   bench/sim/compare_policies.sh [BUILD_DIR] [MURI_DIR]
# BUILD_DIR defaults to build; MURI_DIR to ../shared/traces/muri. Any trace
# CSV in MURI_DIR/sim (Muri format) is replayed; the simulator has no
# per-trace constants.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
build="${1:-build}"
muri="${2:-../shared/traces/muri}"
sim="$build/bin/trainctl-sim"
# The heredoc scripts below read the published figures with published.py.
export PYTHONPATH="$PWD/bench/sim${PYTHONPATH:+:$PYTHONPATH}"
[[ -x "$sim" ]] || { echo "no $sim; build it: cmake --build $build --target trainctl-sim" >&2; exit 1; }
[[ -d "$muri/sim" ]] || { echo "no Muri data at $muri" >&2; exit 1; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
runs="$tmp/runs.tsv"
: >"$runs"
traces=(trace1 trace1_pr trace2 trace2_pr trace3 trace3_pr trace4 trace4_pr)
policies=(fifo fifo-backfill las las-nopack las-tiresias srtf tiresias muri-l)
for trace in "${traces[@]}"; do
  for policy in "${policies[@]}"; do
    out="$tmp/$trace.$policy.csv"
    json=$("$sim" --trace "$muri/sim/$trace.csv" --cluster "$muri/sim/cluster_n8g8.csv" \
      --policy "$policy" --jobs-out "$out" | tail -n 1)
    printf '%s\t%s\t%s\t%s\n' "$trace" "$policy" "$out" "$json" >>"$runs"
  done
done

python3 - "$runs" "$muri" bench/results/sim_policies.json <<'PY' | tee bench/results/sim_policies.txt
import csv, json, platform, sys
from published import published
runs, muri, dest = sys.argv[1:4]
pub = published(muri)
rows = []
with open(runs) as f:
    for line in f:
        trace, policy, jobs_csv, js = line.rstrip("\n").split("\t", 3)
        m = json.loads(js)
        waits = []
        with open(jobs_csv) as jf:
            for r in csv.DictReader(jf):
                waits.append(float(r["start_time_s"]) - float(r["submit_time_s"]))
        t = pub.get((trace, "Tiresias (dlas-gpu)"))
        ml = pub.get((trace, "Muri-L"))
        rows.append({
            "trace": trace, "policy": policy, "jobs": int(m["jobs"]),
            "avg_jct_s": m["avg_jct_s"], "p99_jct_s": m["p99_jct_s"],
            "makespan_s": m["makespan_s"],
            "avg_queueing_delay_s": sum(waits) / len(waits),
            "gpu_allocation": m["gpu_allocation"],
            "gpu_allocation_while_queued": m["gpu_allocation_while_queued"],
            "preemptions": int(m["preemptions"]),
            "published_tiresias_avg_jct_s": float(t["avg_jct_s"]) if t else None,
            "avg_jct_vs_published_tiresias":
                m["avg_jct_s"] / float(t["avg_jct_s"]) if t else None,
            "avg_jct_vs_published_muri_l":
                m["avg_jct_s"] / float(ml["avg_jct_s"]) if ml else None,
            "wall_s": m["wall_s"],
        })
print("| trace | policy | avg JCT (s) | p99 JCT (s) | makespan (s) | avg queueing delay (s) | GPU alloc | GPU alloc while queued | preemptions | avg JCT / published Tiresias | / published Muri-L |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    ratio = r["avg_jct_vs_published_tiresias"]
    ml = r["avg_jct_vs_published_muri_l"]
    print("| %s | %s | %.0f | %.0f | %.0f | %.0f | %.1f%% | %.1f%% | %d | %s | %s |" % (
        r["trace"], r["policy"], r["avg_jct_s"], r["p99_jct_s"], r["makespan_s"],
        r["avg_queueing_delay_s"], 100 * r["gpu_allocation"],
        100 * r["gpu_allocation_while_queued"], r["preemptions"],
        "%.2f" % ratio if ratio is not None else "-",
        "%.2f" % ml if ml is not None else "-"))
with open(dest, "w") as f:
    json.dump({"host": platform.node(), "cost_model": "trainctl (no --compat)",
               "cluster": "cluster_n8g8 (8 nodes x 8 GPUs)", "rows": rows}, f, indent=1)
PY

# Muri-L validation: muri-l under the artifact's cost model (--compat muri:
# restart overhead of every group member charged at every event) against
# the published Muri-L (avg JCT, makespan, p99 JCT).
for trace in "${traces[@]}"; do
  json=$("$sim" --trace "$muri/sim/$trace.csv" --cluster "$muri/sim/cluster_n8g8.csv" \
    --policy muri-l --compat muri | tail -n 1)
  printf '%s\t%s\n' "$trace" "$json"
done >"$tmp/muril.tsv"
python3 - "$tmp/muril.tsv" "$muri" <<'PY' | tee bench/results/sim_muri_l.txt
import json, sys
from published import published
pub = published(sys.argv[2], "Muri-L")
print("muri-l --compat muri vs the published Muri-L (ratio = ours / published)")
print()
print("| trace | avg JCT (s) | published | ratio | makespan ratio | p99 JCT ratio |")
print("|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    trace, js = line.rstrip("\n").split("\t", 1)
    m = json.loads(js)
    p = pub[trace]
    print("| %s | %.0f | %.0f | %.3f | %.3f | %.3f |" % (
        trace, m["avg_jct_s"], float(p["avg_jct_s"]),
        m["avg_jct_s"] / float(p["avg_jct_s"]),
        m["makespan_s"] / float(p["makespan_s"]),
        m["p99_jct_s"] / float(p["p99_jct_s"])))
PY

# Interleave group size: las with at most K jobs on the same GPUs
# (PolicyConfig.interleave.max_jobs; default 3, Muri packs 4).
for k in 2 3 4; do
  for trace in "${traces[@]}"; do
    json=$("$sim" --trace "$muri/sim/$trace.csv" --cluster "$muri/sim/cluster_n8g8.csv" \
      --policy las --interleave-max-jobs "$k" | tail -n 1)
    printf '%s\t%s\t%s\n' "$k" "$trace" "$json"
  done
done >"$tmp/interleave.tsv"
python3 - "$tmp/interleave.tsv" "$muri" <<'PY' | tee bench/results/sim_interleave.txt
import json, sys
from published import published
pub = {t: float(r["avg_jct_s"])
       for t, r in published(sys.argv[2], "Tiresias (dlas-gpu)").items()}
rows, traces = {}, []
for line in open(sys.argv[1]):
    k, trace, js = line.rstrip("\n").split("\t", 2)
    m = json.loads(js)
    if trace not in traces:
        traces.append(trace)
    rows.setdefault(k, {})[trace] = m
print("las, avg JCT / published Tiresias (GPU allocation while queued) per trace,")
print("by the most jobs sharing GPUs (--interleave-max-jobs K).")
print()
print("| K | " + " | ".join(traces) + " | max ratio | min alloc while queued |")
print("|---|" + "---|" * (len(traces) + 2))
for k, per in rows.items():
    ratios = [per[t]["avg_jct_s"] / pub[t] for t in traces]
    alloc = [per[t]["gpu_allocation_while_queued"] for t in traces]
    print("| %s | %s | %.2f | %.1f%% |" % (k, " | ".join(
        "%.2f (%.1f%%)" % (r, 100 * a) for r, a in zip(ratios, alloc)),
        max(ratios), 100 * min(alloc)))
PY

# Starvation: one node of 8 GPUs. Eight 1-GPU jobs (1000 s each) fill it at
# t = 0..70 s; an 8-GPU gang arrives at t = 80 s; then a 1-GPU job (1000 s)
# arrives every 125 s until t = 5000 s, so about 8 are always running.
# Greedy backfill (Muri-style fifo-backfill, no reservation) hands every
# freed GPU to the next small job and the gang waits for the stream to end;
# with the head-of-queue reservation the gang starts once the first eight
# drain (~1070 s).
{
  echo "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node"
  echo "1,1,8,92,5205"
} >"$tmp/one_node.csv"
{
  echo "job_id,num_gpu,submit_time,iterations,model_name,batch_size,duration,interval,iteration_time,resource_time_0,resource_time_1,resource_time_2,priority"
  id=0
  for ((t = 0; t <= 70; t += 10)); do
    echo "$id,1,$((t * 1000)),9852,resnet18,128,0,0,100,0,0,0,0"; id=$((id + 1))
  done
  echo "1000,8,80000,9852,resnet18,128,0,0,100,0,0,0,0"
  for ((t = 100; t <= 5000; t += 125)); do
    echo "$id,1,$((t * 1000)),9852,resnet18,128,0,0,100,0,0,0,0"; id=$((id + 1))
  done
} >"$tmp/starvation.csv"
{
  echo "Starvation scenario: 8-GPU gang (job 1000, submitted at 80 s) behind a"
  echo "stream of 1-GPU jobs of 1000 s on one 8-GPU node."
  echo
  echo "| policy | gang start (s) | gang wait (s) | avg JCT all jobs (s) |"
  echo "|---|---|---|---|"
  for spec in "fifo-backfill --compat muri:greedy backfill, no reservation (Muri-style baseline)" \
              "fifo-backfill:fifo-backfill (reservation + backfill)" \
              "las:las (default)" \
              "las --reservation-min-wait-s 600:las, reservation_min_wait_s 600" \
              "las --reservation-min-wait-s 3600:las, reservation_min_wait_s 3600"; do
    args="${spec%%:*}"; label="${spec#*:}"
    # shellcheck disable=SC2086
    json=$("$sim" --trace "$tmp/starvation.csv" --cluster "$tmp/one_node.csv" \
      --policy $args --jobs-out "$tmp/starve.out.csv" | tail -n 1)
    python3 - "$tmp/starve.out.csv" "$json" "$label" <<'PY'
import csv, json, sys
rows = {r["job_id"]: r for r in csv.DictReader(open(sys.argv[1]))}
g = rows["1000"]
m = json.loads(sys.argv[2])
print("| %s | %.0f | %.0f | %.0f |" % (sys.argv[3], float(g["start_time_s"]),
      float(g["start_time_s"]) - float(g["submit_time_s"]), m["avg_jct_s"]))
PY
  done
} | tee bench/results/sim_starvation.txt

# reservation_min_wait_s sweep: las with a blocked job allowed to
# hold the head-of-queue reservation only after waiting W seconds. 1e9 =
# never within these traces (no reservation at all: starves gangs; a
# reference, not a candidate).
ages=(0 600 3600 14400 86400 345600 1e9)
sweep="$tmp/sweep.tsv"
: >"$sweep"
for w in "${ages[@]}"; do
  for trace in "${traces[@]}"; do
    json=$("$sim" --trace "$muri/sim/$trace.csv" --cluster "$muri/sim/cluster_n8g8.csv" \
      --policy las --reservation-min-wait-s "$w" | tail -n 1)
    printf '%s\t%s\t%s\n' "$w" "$trace" "$json" >>"$sweep"
  done
  "$sim" --trace "$tmp/starvation.csv" --cluster "$tmp/one_node.csv" --policy las \
    --reservation-min-wait-s "$w" --jobs-out "$tmp/starve.$w.csv" >/dev/null
  printf '%s\tstarvation\t%s\n' "$w" "$tmp/starve.$w.csv" >>"$sweep"
done
python3 - "$sweep" "$muri" bench/results/sim_reservation_age.json <<'PY' | tee bench/results/sim_reservation_age.txt
import csv, json, sys
from published import published
sweep, muri, dest = sys.argv[1:4]
pub = {t: float(r["avg_jct_s"])
       for t, r in published(muri, "Tiresias (dlas-gpu)").items()}
rows, traces, order = {}, [], []
with open(sweep) as f:
    for line in f:
        w, trace, rest = line.rstrip("\n").split("\t", 2)
        if w not in rows:
            rows[w] = {"reservation_min_wait_s": float(w), "traces": {}}
            order.append(w)
        if trace == "starvation":
            g = {r["job_id"]: r for r in csv.DictReader(open(rest))}["1000"]
            rows[w]["starvation_gang_wait_s"] = (
                float(g["start_time_s"]) - float(g["submit_time_s"]))
            continue
        if trace not in traces:
            traces.append(trace)
        m = json.loads(rest)
        rows[w]["traces"][trace] = {
            "avg_jct_s": m["avg_jct_s"],
            "avg_jct_vs_published_tiresias":
                m["avg_jct_s"] / pub[trace] if trace in pub else None,
            "preemptions": int(m["preemptions"]),
            "gpu_allocation_while_queued": m["gpu_allocation_while_queued"]}
print("las, avg JCT / published Tiresias per trace, by reservation_min_wait_s"
      " (W); last column: the starvation scenario's gang wait.")
print()
print("| W (s) | " + " | ".join(traces) + " | max | GPU alloc while queued | preemptions | gang wait (s) |")
print("|---|" + "---|" * (len(traces) + 4))
for w in order:
    r = rows[w]
    ratios = [r["traces"][t]["avg_jct_vs_published_tiresias"] for t in traces]
    alloc = [r["traces"][t]["gpu_allocation_while_queued"] for t in traces]
    pre = [r["traces"][t]["preemptions"] for t in traces]
    print("| %s | %s | %.2f | %.1f-%.1f%% | %d-%d | %.0f |" % (
        "never (1e9)" if float(w) >= 1e9 else "%g" % float(w),
        " | ".join("%.2f" % x for x in ratios), max(ratios),
        100 * min(alloc), 100 * max(alloc), min(pre), max(pre),
        r["starvation_gang_wait_s"]))
with open(dest, "w") as f:
    json.dump({"policy": "las", "cluster": "cluster_n8g8 (8 nodes x 8 GPUs)",
               "rows": [rows[w] for w in order]}, f, indent=1)
PY
