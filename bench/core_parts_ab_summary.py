#!/usr/bin/env python3
"""Summarizes bench/core_parts_ab.sh's raw outputs into one JSON.

  core_parts_ab_summary.py --work DIR --out FILE     writes the JSON
  core_parts_ab_summary.py --table FILE              prints the README table

Reads DIR/runs.tsv (one line per run: phase, bench, side, round, start, end,
exit status, load average at start, output file), DIR/reruns.tsv, DIR/meta.txt
and the outputs themselves (bench/swarm/run.sh JSON, Google Benchmark JSON,
bench/slurm/array_scaling.sh JSON). Per figure: the median, min and max of
each side, new/old of the medians, new/old per round, and in how many rounds
NEW was worse than OLD in that round.
"""
import argparse
import csv
import json
import math
import os
import platform
import re
import statistics
import subprocess

OLD_COMMIT_SHORT = "19af006"
NEW_COMMIT_SHORT = "c2011ac"
SCHED_FILTER = "^BM_FillPass/|^BM_(Drain|SteadyDrain)/nodes:1250/jobs:100000/"

# Figure suffix -> higher is better (None: a count, not a speed).
HIGHER_IS_BETTER = {
    "pass_ms": False, "placements_per_s": True, "placed": None, "placed_per_pass": None,
    "ends_per_pass": None, "per_submit_us": False, "submits_per_s": True,
    "commits_per_job": False, "commits_per_submit": False, "p50_us": False, "p99_us": False,
    "jobs_per_s": True, "per_call_ms": False, "commits_per_call": False,
    "jobs_started_per_s": True, "submit_to_started_p50_ms": False,
    "submit_to_started_p99_ms": False, "submit_ack_p99_ms": False,
    "coordinator_cpu_cores_submit_phase": False, "coordinator_cpu_cores_heartbeat_phase": False,
    "coordinator_rss_mib_submit_phase": False, "heartbeat_p99_ms_submit_phase": False,
    "submit_errors": False, "transport_floor_p50_us": False, "submit_s": False,
    "coordinator_cpu_ms_per_task": False, "agent_cpu_ms_per_task": False,
    "tasks_cpu_ms_per_task": False, "ceiling_jobs_per_s": True,
}
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def higher_is_better(key):
    return HIGHER_IS_BETTER.get(key.split(" ")[-1])


def bm_name(b):
    name = b.get("run_name") or b["name"]
    return re.sub(r"/(manual_time|real_time|process_time|iterations:\d+|min_time:[^/]+)", "", name)


def sched_figures(path):
    fig = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = bm_name(b)
        if b.get("error_occurred"):
            fig[name + " error"] = b.get("error_message", "error")
            continue
        if name.startswith("BM_FillPass/"):
            fig[name + " pass_ms"] = b["real_time"] * TO_MS[b["time_unit"]]
            fig[name + " placements_per_s"] = b["placements_per_s"]
            fig[name + " placed"] = b["placed"]
        else:
            for k in ("pass_ms", "placements_per_s", "placed_per_pass", "ends_per_pass"):
                if k in b:
                    fig[name + " " + k] = b[k]
    return fig


def submit_figures(path):
    fig = {}
    for b in json.load(open(path))["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        name = bm_name(b)
        if b.get("error_occurred"):
            fig[name + " error"] = b.get("error_message", "error")
            continue
        if name.startswith("BM_SubmitJob/"):
            fig[name + " per_submit_us"] = b["real_time"] * TO_MS[b["time_unit"]] * 1e3
            fig[name + " submits_per_s"] = b["items_per_second"]
            fig[name + " commits_per_job"] = b["commits_per_job"]
        elif name.startswith("BM_SubmitJobConcurrent/"):
            fig[name + " submits_per_s"] = b["items_per_second"]
            fig[name + " p50_us"] = b["submit_p50_us"]
            fig[name + " p99_us"] = b["submit_p99_us"]
            fig[name + " commits_per_submit"] = b["commits_per_submit"]
        elif name.startswith("BM_SubmitJobs/"):
            fig[name + " jobs_per_s"] = b["items_per_second"]
            fig[name + " per_call_ms"] = b["real_time"] * TO_MS[b["time_unit"]]
            fig[name + " commits_per_call"] = b["commits_per_call"]
    return fig


def swarm_figures(path):
    run = json.load(open(path))["runs"][0]
    phases = {p["name"]: p for p in run["phases"]}
    sub, hb = phases["submit"], phases["heartbeat_only"]
    return {
        "jobs_started_per_s": sub["jobs_started_per_s"],
        "submit_to_started_p50_ms": sub["submit_to_started"]["p50_us"] / 1e3,
        "submit_to_started_p99_ms": sub["submit_to_started"]["p99_us"] / 1e3,
        "submit_ack_p99_ms": sub["submit_ack"]["p99_us"] / 1e3,
        "coordinator_cpu_cores_submit_phase": sub["coordinator_cpu_cores"],
        "coordinator_cpu_cores_heartbeat_phase": hb["coordinator_cpu_cores"],
        "coordinator_rss_mib_submit_phase": int(sub.get("coordinator_rss_bytes", 0)) / 1048576.0,
        "heartbeat_p99_ms_submit_phase": sub["heartbeat"]["p99_us"] / 1e3,
        "submit_errors": int(sub.get("submit_errors", 0)),
        "transport_floor_p50_us": run["transport_floor"]["p50_us"],
        "git_commit_recorded": run["host"].get("git_commit"),
    }


FIGURES = {"swarm": swarm_figures, "sched": sched_figures, "submit": submit_figures}


def stats(old_runs, new_runs):
    """Per numeric figure present on both sides."""
    keys = [k for k in old_runs[0]["figures"] if all(
        isinstance(r["figures"].get(k), (int, float)) and not isinstance(r["figures"].get(k), bool)
        for r in old_runs + new_runs)] if old_runs and new_runs else []
    out = {}
    for k in keys:
        o = [r["figures"][k] for r in old_runs]
        n = [r["figures"][k] for r in new_runs]
        om, nm = statistics.median(o), statistics.median(n)
        hib = higher_is_better(k)
        per_round, worse = [], 0
        for ro, rn in zip(old_runs, new_runs):
            a, b = ro["figures"][k], rn["figures"][k]
            per_round.append(b / a if a else None)
            if hib is not None and a != b and ((b < a) if hib else (b > a)):
                worse += 1
        out[k] = {"old_median": om, "new_median": nm,
                  "new_over_old": nm / om if om else None,
                  "old_min": min(o), "old_max": max(o), "new_min": min(n), "new_max": max(n),
                  "higher_is_better": hib, "n_old": len(o), "n_new": len(n),
                  "new_over_old_per_round": per_round,
                  "rounds_new_worse": worse if hib is not None else None}
    return out


def geomean(summary, pred, key="new_over_old"):
    vals = [v[key] for k, v in summary.items() if pred(k) and v[key]]
    if not vals:
        return None
    return {"value": math.exp(sum(math.log(x) for x in vals) / len(vals)), "rows": len(vals)}


def read_runs(work):
    runs = []
    with open(os.path.join(work, "runs.tsv")) as f:
        for row in csv.DictReader(f, delimiter="\t"):
            runs.append(row)
    return runs


def collect(rows, bench, phase):
    sides = {"old": [], "new": []}
    for row in rows:
        if row["bench"] != bench or row["phase"] != phase:
            continue
        run = {"round": int(row["round"]), "start_unix": float(row["start_unix"]),
               "end_unix": float(row["end_unix"]),
               "loadavg_at_start": [float(x) for x in row["loadavg"].split(",")],
               "rc": int(row["rc"])}
        try:
            run["figures"] = FIGURES[bench](row["file"])
        except (OSError, ValueError, KeyError) as e:
            run["figures"] = {}
            run["error"] = "%s: %s" % (type(e).__name__, e)
        sides[row["side"]].append(run)
    for side in sides.values():
        side.sort(key=lambda r: r["round"])
    good = {s: [r for r in v if r["rc"] == 0 and r["figures"]] for s, v in sides.items()}
    return sides, stats(good["old"], good["new"])


def array_section(rows, work):
    row = next((r for r in rows if r["bench"] == "array"), None)
    if row is None:
        return None
    doc = json.load(open(row["file"]))
    runs = {"old": [], "new": []}
    for size, s in doc["sizes"].items():
        for i, rnd in enumerate(s["rounds"], 1):
            for side, key in (("new", "array"), ("old", "baseline_array")):
                a = rnd[key]
                runs[side].append({"size": int(size), "round": i, "figures": {
                    "N=%s jobs_per_s" % size: a["jobs_per_s"],
                    "N=%s submit_s" % size: a["submit_s"],
                    "N=%s coordinator_cpu_ms_per_task" % size: a["cpu_ms_per_task"]["coordinator"],
                    "N=%s agent_cpu_ms_per_task" % size: a["cpu_ms_per_task"]["agent"],
                    "N=%s tasks_cpu_ms_per_task" % size: a["cpu_ms_per_task"]["tasks"],
                    "N=%s ceiling_jobs_per_s" % size: rnd["ceiling_jobs_per_s"]}})
    summary = {}
    for size in doc["sizes"]:
        o = [r for r in runs["old"] if r["size"] == int(size)]
        n = [r for r in runs["new"] if r["size"] == int(size)]
        summary.update(stats(o, n))
    return {"command": ("bench/slurm/array_scaling.sh NEW_BIN --baseline OLD_BIN --label NEW-c2011ac "
                        "--baseline-label OLD-19af006 --sizes \"500 2000\" --rounds 3 --out FILE"),
            "order": ("array_scaling.sh's own: a 50-task warm-up array on each stack, then per size "
                      "and round NEW's array, OLD's array right after it, then the no-scheduler "
                      "ceiling (xargs -P 8); both stacks (a coordinator and one agent with 8 fake "
                      "GPUs each) are up side by side the whole time"),
            "start_unix": float(row["start_unix"]), "end_unix": float(row["end_unix"]),
            "loadavg_at_start": [float(x) for x in row["loadavg"].split(",")],
            "rc": int(row["rc"]), "runs": runs, "summary": summary,
            "raw": {k: v for k, v in doc.items() if k != "sizes"}}


def machine(rows, meta):
    cpu = "unknown"
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    osname = platform.platform()
    if os.path.exists("/etc/os-release"):
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                osname = line.split("=", 1)[1].strip().strip('"')
    fs = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "-T", "/tmp"], capture_output=True,
                        text=True).stdout.strip() or "unknown"
    loads = [float(r["loadavg"].split(",")[0]) for r in rows]
    return {"nproc": os.cpu_count(), "cpu_model": cpu,
            "loadavg_at_start": [float(x) for x in rows[0]["loadavg"].split(",")] if rows else None,
            "loadavg_1m_at_run_starts_min_max": [min(loads), max(loads)] if loads else None,
            "start_utc": meta.get("start_utc"), "end_utc": meta.get("end_utc"), "os": osname,
            "state_and_sqlite_fs": fs,
            "shared": ("2-core VM shared with another engineer's work (source edits; a build of the "
                       "OLD worktree finished just before the runs) during the runs; load average "
                       "recorded per run")}


def read_meta(work):
    meta = {}
    path = os.path.join(work, "meta.txt")
    if os.path.exists(path):
        for line in open(path):
            k, _, v = line.strip().partition(" ")
            meta[k] = v
    return meta


def read_sha(work, side):
    path = os.path.join(work, side + "-bin.sha256")
    if not os.path.exists(path):
        return None
    return {name: digest for digest, name in (l.split() for l in open(path) if l.strip())}


def summarize(work, out, what=None):
    global OLD_COMMIT_SHORT, NEW_COMMIT_SHORT
    rows = read_runs(work)
    meta = read_meta(work)
    # Later A/Bs name their sides in meta.txt (OLD_LABEL/NEW_LABEL).
    if meta.get("old_label", "").startswith("OLD-"):
        OLD_COMMIT_SHORT = meta["old_label"][4:]
    if meta.get("new_label", "").startswith("NEW-"):
        NEW_COMMIT_SHORT = meta["new_label"][4:]
    main_rows = [r for r in rows if r["phase"] == "main"]
    doc = {
        "what": what or ("The Coordinator as a facade over its parts (JobTable, NodeRegistry, "
                         "ExperimentStore, JobWaiters, LogRelay, PassCoalescer, DrainingTasks, "
                         "SchedulerView, Measurements, TaskStarts): OLD vs NEW, same machine, runs "
                         "alternating OLD/NEW per benchmark in each round"),
        "old": {"commit": meta.get("old_tree", " " + OLD_COMMIT_SHORT).split()[-1],
                "label": "OLD-" + OLD_COMMIT_SHORT,
                "binaries": meta.get("old_bin", "") + " (worktree at that commit, built for this A/B)",
                "sha256": read_sha(work, "old")},
        "new": {"commit": meta.get("new_tree", "").split()[-1] if meta.get("new_tree") else (
                    subprocess.run(["git", "rev-parse", NEW_COMMIT_SHORT], capture_output=True,
                                   text=True, cwd=os.path.dirname(os.path.abspath(__file__))
                                   ).stdout.strip() or NEW_COMMIT_SHORT),
                "label": "NEW-" + NEW_COMMIT_SHORT,
                "binaries": meta.get("new_bin", "") + (
                    " (a byte-identical copy, same sha256, of the main checkout's build/bin as "
                    "built from the refactored tree before the run; copied so that a rebuild of "
                    "the main checkout during the run could not change NEW)"),
                "sha256": read_sha(work, "new")},
        "machine": machine(rows, meta),
        "build": ("CMake RelWithDebInfo (-O2 -g -DNDEBUG), Ninja, same CMake options on both sides; "
                  "this A/B built nothing; the main checkout's build/bin was not rebuilt during the runs"),
        "commands": {
            "order": ("per round: swarm OLD, swarm NEW, scheduler OLD, scheduler NEW, submit OLD, "
                      "submit NEW; after the rounds the array run once (it alternates itself)"),
            "swarm": ("TREE/bench/swarm/run.sh BIN --agents 100 --state-dir /tmp --out FILE (run.sh "
                      "of each side's tree; defaults: 10 s heartbeat-only phase, 10 s submit phase "
                      "at 2,000 jobs/s asked, 2,000 floor calls)"),
            "sched": ("trainctl-bench-scheduler-throughput --benchmark_filter='%s' --benchmark_out=FILE "
                      "--benchmark_out_format=json (one repetition per run, default min time)"
                      % SCHED_FILTER),
            "submit": ("trainctl-bench-submit --sqlite_dir=/tmp --benchmark_out=FILE "
                       "--benchmark_out_format=json (all cases, one repetition per run)"),
            "array": ("bench/slurm/array_scaling.sh NEW_BIN --baseline OLD_BIN --label NEW-c2011ac "
                      "--baseline-label OLD-19af006 --sizes \"500 2000\" --rounds 3 --out FILE"),
            "script": ("bench/core_parts_ab.sh run --rounds 3 --new-bin NEW_COPY; then "
                       "bench/core_parts_ab.sh rerun --bench B --filter F --rounds 4 --tag T "
                       "--new-bin NEW_COPY for each focused_rerun entry; then "
                       "bench/core_parts_ab.sh summarize"),
        },
        "notes": NOTES,
        "benchmarks": {},
    }
    for bench, cmd in (("swarm", "bench/swarm/run.sh BIN --agents 100 (trainctl-swarm vs "
                        "trainctl-coordinator, 2,000 jobs/s asked, 10 s phases, state on /tmp)"),
                       ("sched", "trainctl-bench-scheduler-throughput"),
                       ("submit", "trainctl-bench-submit --sqlite_dir=/tmp")):
        runs, summary = collect(main_rows, bench, "main")
        section = {"command": cmd, "runs": runs, "summary": summary}
        if bench == "sched":
            section["geomean_new_over_old_pass_ms"] = geomean(summary, lambda k: k.endswith(" pass_ms"))
        if bench == "submit":
            section["geomean_new_over_old_per_submit_us"] = geomean(
                summary, lambda k: k.endswith(" per_submit_us"))
        doc["benchmarks"][bench] = section
    arr = array_section(main_rows, work)
    if arr:
        doc["benchmarks"]["array"] = arr
    reruns = []
    path = os.path.join(work, "reruns.tsv")
    if os.path.exists(path):
        seen = set()
        for line in open(path):
            tag, bench, filt = (line.rstrip("\n").split("\t") + ["", ""])[:3]
            if tag in seen:
                continue
            seen.add(tag)
            runs, summary = collect(rows, bench, tag)
            cmd = {"sched": "trainctl-bench-scheduler-throughput --benchmark_filter='%s' "
                            "--benchmark_out=FILE --benchmark_out_format=json" % (filt or SCHED_FILTER),
                   "submit": "trainctl-bench-submit --sqlite_dir=/tmp%s --benchmark_out=FILE "
                             "--benchmark_out_format=json" % (
                                 " --benchmark_filter='%s'" % filt if filt else ""),
                   "swarm": "TREE/bench/swarm/run.sh BIN --agents 100 --state-dir /tmp --out FILE"}[bench]
            reruns.append({"tag": tag, "bench": bench, "filter": filt or None, "command": cmd,
                           "rounds": len(runs["old"]), "runs": runs, "summary": summary})
    if reruns:
        doc["focused_rerun"] = {"what": RERUN_WHAT, "reruns": reruns}
    text = json.dumps(doc, indent=1)
    with open(out, "w") as f:
        f.write(text + "\n")


NOTES = [
    ("The machine was shared during the runs (another engineer editing sources in the main "
     "checkout); the load average at each run's start is in runs[].loadavg_at_start, its range in "
     "machine.loadavg_1m_at_run_starts_min_max."),
    ("NEW's binaries were built (16:36 UTC) from the refactored tree that was committed two minutes "
     "later as c2011ac; the only later change to the sources they are built from, before the runs, "
     "is 976989a's comment edit in coordinator/coordinator.h. They were copied to their own "
     "directory before the runs (sha256 in new.sha256, identical to the main checkout's build/bin "
     "at copy time) because the main checkout was being edited for a rebuild meanwhile."),
    ("coordinator/sched/, bench/, common/ and proto/ are identical at 19af006 and c2011ac, so the "
     "scheduler throughput benchmark (which links only the scheduler library) runs the same code "
     "on both sides: it is an A/A control that shows this machine's noise, not a test of the "
     "refactor. The submit benchmark drives the Coordinator core itself and the swarm and array "
     "runs the whole coordinator binary: those test the refactor."),
    ("The swarm's git_commit_recorded is what bench/swarm/run.sh records: the HEAD of the tree "
     "its script ran from (976989a for NEW, the main checkout at run time)."),
    ("bench/slurm/array_scaling.sh orders every round NEW (its BIN_DIR) first and OLD (its "
     "--baseline) right after, then the no-scheduler ceiling; it records no load average per "
     "round, so only the load at its start is recorded."),
    ("higher_is_better is set per kind of figure (times and commits: lower is better; rates: "
     "higher; counts such as placed: null). rounds_new_worse counts the rounds in which NEW's run "
     "was worse than the OLD run just before it."),
]
RERUN_WHAT = ("After the 3 main rounds: 4 more alternating rounds (old then new) of each CPU-bound "
              "figure whose new/old in the main rounds was beyond 1.15 either way, run alone with a "
              "benchmark filter: the scheduler fill pass at 1,250 nodes x 1,000 jobs (1.23; the "
              "scheduler code is the same on both sides), the memory-store concurrent submit cases "
              "(16 threads: submits/s 0.46; 1 thread: p99 1.16) with the memory SubmitJobs cases "
              "(batch 500: jobs/s 1.21). Beyond that rule, the SQLite 16-thread case too: it waits "
              "on fsync, but NEW was worse in all 3 main rounds (submits/s 0.61, p99 2.21, commits "
              "per submit 1.74).")

# README table: (label, section, key, unit).
TABLE = [
    ("Swarm, 100 agents: jobs started/s (2,000 asked)", "swarm", "jobs_started_per_s", "n"),
    ("Swarm: submit->started p50", "swarm", "submit_to_started_p50_ms", "ms"),
    ("Swarm: submit->started p99", "swarm", "submit_to_started_p99_ms", "ms"),
    ("Swarm: coordinator CPU during submits", "swarm", "coordinator_cpu_cores_submit_phase", "cores"),
    ("Swarm: coordinator RSS after submits", "swarm", "coordinator_rss_mib_submit_phase", "MiB"),
    ("Scheduler: fill pass, 1,250 nodes x 1,000 jobs", "sched",
     "BM_FillPass/nodes:1250/jobs:1000 pass_ms", "ms"),
    ("Scheduler: fill pass, 1,250 nodes x 100,000 jobs", "sched",
     "BM_FillPass/nodes:1250/jobs:100000 pass_ms", "ms"),
    ("Scheduler: fill pass, 5,000 nodes x 100,000 jobs", "sched",
     "BM_FillPass/nodes:5000/jobs:100000 pass_ms", "ms"),
    ("Scheduler: drain, 1,250 x 100,000, 1 end per pass", "sched",
     "BM_Drain/nodes:1250/jobs:100000/finish:1 pass_ms", "ms"),
    ("Scheduler: drain, 1,250 x 100,000, 1,000 ends per pass", "sched",
     "BM_Drain/nodes:1250/jobs:100000/finish:1000 pass_ms", "ms"),
    ("Scheduler: steady drain, 1,250 x 100,000, 20,000 ends/s: pass", "sched",
     "BM_SteadyDrain/nodes:1250/jobs:100000/rate:20000 pass_ms", "ms"),
    ("Scheduler: steady drain, same: placements/s", "sched",
     "BM_SteadyDrain/nodes:1250/jobs:100000/rate:20000 placements_per_s", "n"),
    ("Submit: memory, live 64, per submit", "submit",
     "BM_SubmitJob/memory/live:64/history:0 per_submit_us", "us"),
    ("Submit: memory, live 64 + 10,000 history, per submit", "submit",
     "BM_SubmitJob/memory/live:64/history:10000 per_submit_us", "us"),
    ("Submit: SQLite, live 64, per submit", "submit",
     "BM_SubmitJob/sqlite/live:64/history:0 per_submit_us", "us"),
    ("Submit: memory, 1 thread, p50 / call", "submit",
     "BM_SubmitJobConcurrent/memory/threads:1 p50_us", "us"),
    ("Submit: memory, 1 thread, p99 / call", "submit",
     "BM_SubmitJobConcurrent/memory/threads:1 p99_us", "us"),
    ("Submit: memory, 16 threads, submits/s", "submit",
     "BM_SubmitJobConcurrent/memory/threads:16 submits_per_s", "n"),
    ("Submit: memory, 16 threads, p50 / call", "submit",
     "BM_SubmitJobConcurrent/memory/threads:16 p50_us", "us"),
    ("Submit: SQLite, 16 threads, submits/s", "submit",
     "BM_SubmitJobConcurrent/sqlite/threads:16 submits_per_s", "n"),
    ("Submit: SQLite, 16 threads, p99 / call", "submit",
     "BM_SubmitJobConcurrent/sqlite/threads:16 p99_us", "ms_from_us"),
    ("Submit: SQLite, 16 threads, commits per submit", "submit",
     "BM_SubmitJobConcurrent/sqlite/threads:16 commits_per_submit", "f2"),
    ("Submit: memory, one SubmitJobs of 500, jobs/s", "submit",
     "BM_SubmitJobs/memory/batch:500 jobs_per_s", "n"),
    ("Array of 500 (`submit --array`), jobs/s", "array", "N=500 jobs_per_s", "n"),
    ("Array of 2,000, jobs/s", "array", "N=2000 jobs_per_s", "n"),
    ("Array of 2,000: coordinator CPU per task", "array",
     "N=2000 coordinator_cpu_ms_per_task", "ms"),
    ("Array of 2,000: agent CPU per task", "array", "N=2000 agent_cpu_ms_per_task", "ms"),
]


def fmt(v, unit):
    if unit == "ms_from_us":
        v, unit = v / 1e3, "ms"
    if unit == "n":
        return "{:,.0f}".format(v)
    if unit == "us":
        return "{:,.0f} us".format(v)
    if unit == "ms":
        return ("{:.2f} ms" if v < 1 else "{:.1f} ms").format(v)
    if unit == "cores":
        return "{:.2f} cores".format(v)
    if unit == "f2":
        return "{:.2f}".format(v)
    if unit == "MiB":
        return "{:.0f} MiB".format(v)
    return str(v)


def table(path):
    doc = json.load(open(path))
    reruns = {}
    nre = 0
    for rr in doc.get("focused_rerun", {}).get("reruns", []):
        nre = max(nre, rr["rounds"])
        for k, v in rr["summary"].items():
            reruns.setdefault((rr["bench"], k), v["new_over_old"])
    n = max(len(doc["benchmarks"]["sched"]["runs"]["old"]), 1)
    old_short = doc["old"]["label"].replace("OLD-", "")
    new_short = doc["new"]["label"].replace("NEW-", "")
    head = ["Figure (median of %d runs each)" % n, "old (%s)" % old_short,
            "new (%s)" % new_short, "new / old", "old runs min-max", "new runs min-max"]
    if reruns:
        head.append("new / old, rerun of %d" % nre)
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for label, sec, key, unit in TABLE:
        s = doc["benchmarks"].get(sec, {}).get("summary", {}).get(key)
        if s is None:
            continue
        cells = [label, fmt(s["old_median"], unit), fmt(s["new_median"], unit),
                 "%.2f" % s["new_over_old"] if s["new_over_old"] else "-",
                 "%s-%s" % (fmt(s["old_min"], unit), fmt(s["old_max"], unit)),
                 "%s-%s" % (fmt(s["new_min"], unit), fmt(s["new_max"], unit))]
        if reruns:
            r = reruns.get((sec, key))
            cells.append("%.2f" % r if r else "-")
        print("| " + " | ".join(cells) + " |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work")
    ap.add_argument("--out")
    ap.add_argument("--table")
    ap.add_argument("--what", help="the JSON's 'what': which change the A/B measures")
    a = ap.parse_args()
    if a.table:
        table(a.table)
    else:
        summarize(a.work, a.out, a.what)


if __name__ == "__main__":
    main()
