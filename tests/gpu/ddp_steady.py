#!/usr/bin/env python3
"""Steady-state DDP training speed under trainctl vs torchrun on one host.

Runs tests/gpu/ddp_steady_train.py (--procs ranks, 2 by default, on GPUs
0..procs-1; workloads mlp, transformer, cnn) in rounds; each round runs every arm once, the order
rotating from round to round:

  torchrun    `torchrun --standalone --nproc-per-node 2`
  trainctl    `trainctl submit --gpus 2`, the launch contract as built
  trainctl-omp-cpus  the same with `--env OMP_NUM_THREADS=<CPUs / 2>`: the
              old contract's value (the node's CPUs per local rank)
  trainctl-nosample  `trainctl submit` to a second cluster whose agent
              runs with `--task-usage-period 0` (no per-task /proc scan or
              NVML per-process queries while the job runs)
  trainctl-periodN  the same with `--task-usage-period N` (a per-task
              sample every Nth heartbeat)

Per run: steady-state steps/s per workload, first all-reduce (process start
-> the first gradient all-reduce done) and launch to exit (the launcher
started -> all ranks exited, for trainctl submit -> `trainctl wait` returns).
Each trainctl arm is compared with the torchrun run of the same round
(paired ratios: > 1 is faster for steps/s, slower for times); the summary
gives each ratio's median with its 95% interval, quartiles, min and max
and how many rounds trainctl was at least as fast. Rank 0's environment of
each arm's first run is compared variable by variable with torchrun's.

Usage: ddp_steady.py BUNDLE_DIR OUT_DIR [--rounds 8] [--deadline-s 540]
                    [--arms torchrun,trainctl] [--first-round N] [--procs 2]
                    [--step-times]
       ddp_steady.py --pool OUT.json IN.json...
--first-round numbers the rounds from N (the arm order rotates with the
round number), so a second call continues a first one's rotation; --pool
writes OUT.json with the runs of every IN.json (calls of the same arms and
--procs) and their summary over all of them. --procs 1 measures the
one-process case (a one-GPU host): torchrun and trainctl then both leave
OMP_NUM_THREADS unset. --step-times records rank 0's launch time of every
timed step (ddp_steady_train.py --step-times) and adds per run and workload
its median and 99th percentile (ms) and lost_pct: the time of steps slower
than 3x the median, beyond that median, as a percentage of the window (what
stalls of the launching thread cost); the summary gives each arm's medians
of these over its runs.
Writes OUT_DIR/ddp_steady.json after every run (a run cut short keeps the
rounds done). No round starts after --deadline-s. Needs python3 with torch
and 2 GPUs; trainctl comes from the bundle (deploy/make_bundle.sh).
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ddp_probe import Cluster, last_json_line  # noqa: E402

WORKLOADS = ("mlp", "transformer", "cnn")
# Variables that differ by construction (ids, ports, tokens, the probe's own).
EXPECTED_DIFF = ("TRAINCTL_", "TORCHELASTIC_RUN_ID", "MASTER_PORT", "DDP_PROBE_DIR",
                 "JAX_COORDINATOR_ADDRESS", "_")


def run_trainctl(cluster, script, probe, log_path, train_args, extra_env, procs):
    """One `trainctl submit --gpus PROCS` run; returns (rank 0's JSON line,
    launch to exit in seconds)."""
    env_flags = []
    for k, v in dict(NCCL_NVLS_ENABLE="0", DDP_PROBE_DIR=probe, **extra_env).items():
        env_flags += ["--env", f"{k}={v}"]
    t0 = time.monotonic()
    out = cluster.cli("submit", "--name", "ddp-steady", "--gpus", str(procs), *env_flags, "--",
                      sys.executable, script, *train_args)
    if out.returncode != 0:
        raise RuntimeError(f"submit failed: {out.stderr}")
    job = "".join(ch for ch in out.stdout.split()[-1] if ch.isdigit())
    cluster.cli("wait", job, timeout=300)
    wall = time.monotonic() - t0
    logs = cluster.cli("logs", job, "--rank", "0")
    with open(log_path, "w") as f:
        f.write(logs.stdout + logs.stderr)
    return last_json_line(log_path), wall


def run_torchrun(script, probe, log_path, train_args, procs):
    """One `torchrun --standalone --nproc-per-node PROCS` run: (JSON line,
    wall)."""
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(map(str, range(procs))),
               DDP_PROBE_DIR=probe)
    t0 = time.monotonic()
    with open(log_path, "w") as log:
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        "--nproc-per-node", str(procs), script, *train_args], env=env, stdout=log,
                       stderr=subprocess.STDOUT, timeout=300)
    return last_json_line(log_path), time.monotonic() - t0


def step_stats(path):
    """{workload: {p50_ms, p99_ms, max_ms, slow, lost_pct}} from a
    step_times.json ({workload: [ms, ...]}); None when there is none. A slow
    step takes more than 3x the median; lost_pct is the slow steps' time
    beyond the median, in % of all steps' time."""
    try:
        with open(path) as f:
            times = json.load(f)
    except (OSError, ValueError):
        return None
    out = {}
    for w, ms in times.items():
        if not ms:
            continue
        p50 = statistics.median(ms)
        p99 = sorted(ms)[min(len(ms) - 1, int(0.99 * len(ms)))]
        slow = [t for t in ms if t > 3 * p50]
        out[w] = {"p50_ms": round(p50, 4), "p99_ms": round(p99, 4), "max_ms": round(max(ms), 3),
                  "slow": len(slow),
                  "lost_pct": round(100 * sum(t - p50 for t in slow) / sum(ms), 3)}
    return out


def median_ci95(values):
    """A 95% confidence interval for the median that assumes no distribution:
    [k-th smallest, k-th largest] of values, k the largest rank with
    P(Binomial(n, 1/2) < k) <= 2.5% (each value falls below the median with
    probability 1/2, so the interval misses it only when fewer than k fall on
    one side). None when n < 6: no k >= 1 gives 95% then."""
    n = len(values)
    k, below = 0, 0.0
    while True:
        below += math.comb(n, k) / 2 ** n  # P(Binomial(n, 1/2) <= k)
        if below > 0.025:
            break
        k += 1
    if k < 1:
        return None
    v = sorted(values)
    return [round(v[k - 1], 4), round(v[n - k], 4)]


def spread(values):
    """Median, its 95% interval (median_ci95), quartiles, min, max of a list
    of ratios (None if empty)."""
    if not values:
        return None
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": round(statistics.median(values), 4),
            "median_ci95": median_ci95(values), "q1": round(q[0], 4),
            "q3": round(q[2], 4), "min": round(min(values), 4), "max": round(max(values), 4),
            "n": len(values)}


def summarize(runs, arms):
    """Paired ratios of each trainctl arm against the same round's torchrun."""
    # A round is known by its call (pooled files) and number: two calls may
    # number rounds alike.
    by = {(r["arm"], (r.get("call", 0), r["round"])): r for r in runs if r["line"]}
    out = {}
    for arm in arms:
        if arm == "torchrun":
            continue
        pairs = [(by[(arm, n)], by[("torchrun", n)]) for (a, n) in sorted(by)
                 if a == arm and ("torchrun", n) in by]
        s = {"rounds": len(pairs), "steps_per_s_ratio": {}, "at_least_torchrun": {}}
        for w in WORKLOADS:
            ratios = [t["line"]["steps_per_s"][w] / b["line"]["steps_per_s"][w]
                      for t, b in pairs if w in t["line"]["steps_per_s"]]
            s["steps_per_s_ratio"][w] = dict(spread(ratios) or {},
                                             each=[round(x, 4) for x in ratios])
            s["at_least_torchrun"][w] = sum(x >= 1.0 for x in ratios)
        s["first_allreduce_ratio"] = spread(
            [t["line"]["time_to_first_allreduce_s"] / b["line"]["time_to_first_allreduce_s"]
             for t, b in pairs])
        s["launch_to_exit_ratio"] = spread([t["wall_s"] / b["wall_s"] for t, b in pairs])
        out[arm] = s
    medians = {}
    for arm in arms:
        sel = [r for r in runs if r["arm"] == arm and r["line"]]
        if sel:
            medians[arm] = {w: statistics.median(r["line"]["steps_per_s"][w] for r in sel)
                            for w in WORKLOADS}
            medians[arm]["first_allreduce_s"] = statistics.median(
                r["line"]["time_to_first_allreduce_s"] for r in sel)
            medians[arm]["launch_to_exit_s"] = statistics.median(r["wall_s"] for r in sel)
            timed = [r["step_ms"] for r in sel if r.get("step_ms")]
            if timed:
                medians[arm]["step_ms"] = {
                    w: {k: statistics.median(t[w][k] for t in timed if w in t)
                        for k in ("p50_ms", "p99_ms", "lost_pct")}
                    for w in WORKLOADS if any(w in t for t in timed)}
    return {"paired_vs_torchrun": out, "medians": medians}


def env_diff(envs):
    """Variables of each arm's rank-0 environment that differ from torchrun's
    (those different by construction left out): {arm: {name: [torchrun's,
    arm's]}}."""
    base = envs.get("torchrun")
    if base is None:
        return {}
    diff = {}
    for arm, env in envs.items():
        if arm == "torchrun" or env is None:
            continue
        d = {}
        for k in sorted(set(base) | set(env)):
            if k.startswith(EXPECTED_DIFF) or base.get(k) == env.get(k):
                continue
            v = env.get(k)
            d[k] = [base.get(k), "<removed>" if v and "TOKEN" in k else v]
        diff[arm] = d
    return diff


def pool(out_path, in_paths):
    """Writes out_path: the runs of every result file in in_paths (one
    experiment cut into calls by the device's time limit) with the summary
    over all of them. Raises ValueError when the files ran different arms,
    --procs or --seconds."""
    results = []
    for path in in_paths:
        with open(path) as f:
            results.append(json.load(f))
    first = results[0]
    for r in results[1:]:
        for key in ("arms", "procs", "seconds_per_workload"):
            if r.get(key) != first.get(key):
                raise ValueError(f"{key} differs: {first.get(key)} vs {r.get(key)}")
    runs = [dict(run, call=i) for i, r in enumerate(results) for run in r["runs"]]
    # Each call's file is ddp_steady.json in its own OUT_DIR: name the calls
    # by their first round and run count, not by that file name.
    calls = [{"first_round": r.get("first_round"), "runs": len(r["runs"])} for r in results]
    pooled = dict(first, pooled_from=calls,
                  summary=summarize(runs, first["arms"]), runs=runs)
    pooled.pop("first_round", None)
    with open(out_path, "w") as f:
        json.dump(pooled, f, indent=1)
    print(json.dumps(pooled["summary"], indent=1))


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--pool":
        if len(sys.argv) < 4:
            sys.exit("usage: ddp_steady.py --pool OUT.json IN.json...")
        pool(sys.argv[2], sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("bundle")
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--arms", default="torchrun,trainctl,trainctl-omp-cpus")
    ap.add_argument("--seconds", type=float, default=3.0, help="timed window per workload")
    ap.add_argument("--deadline-s", type=float, default=540)
    ap.add_argument("--first-round", type=int, default=1,
                    help="number of the first round (continues an earlier call's rotation)")
    ap.add_argument("--procs", type=int, default=2, help="ranks (one GPU each)")
    ap.add_argument("--step-times", action="store_true",
                    help="record and summarize each timed step's launch time")
    args = ap.parse_args()
    started = time.monotonic()
    bundle, out = os.path.abspath(args.bundle), os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    script = os.path.join(bundle, "share", "ddp_steady_train.py")
    train_args = ["--seconds", str(args.seconds)] + (["--step-times"] if args.step_times else [])
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    old_omp = str(max(1, (os.cpu_count() or 2) // args.procs))
    arms = args.arms.split(",")
    work = tempfile.mkdtemp(prefix="ddp_steady.")
    # One agent offering GPUs 0..procs-1 (an agent refuses GPUs the host lacks).
    gpus = ",".join(map(str, range(args.procs)))
    cluster = Cluster(bundle, work, agents=(("node-a", gpus, "29600-29699"),))
    # A cluster of its own per --task-usage-period arm (the agent's flag).
    clusters = {"trainctl": cluster, "trainctl-omp-cpus": cluster}
    for i, arm in enumerate(a for a in arms if a not in ("torchrun", *clusters)):
        period = "0" if arm == "trainctl-nosample" else arm.removeprefix("trainctl-period")
        if not period.isdigit():
            sys.exit(f"unknown arm {arm!r}")
        arm_work = os.path.join(work, arm)
        os.makedirs(arm_work)
        ports = f"{29700 + 100 * i}-{29799 + 100 * i}"
        clusters[arm] = Cluster(bundle, arm_work, agents=(("node-q", gpus, ports),),
                                agent_args=("--task-usage-period", period))
    runs, envs, round_s = [], {}, None
    result = {}
    try:
        for rnd in range(args.first_round, args.first_round + args.rounds):
            elapsed = time.monotonic() - started
            if round_s is not None and elapsed + round_s > args.deadline_s:
                print(f"deadline: stopping after {rnd - args.first_round} rounds", flush=True)
                break
            t_round = time.monotonic()
            order = arms[(rnd - 1) % len(arms):] + arms[:(rnd - 1) % len(arms)]
            for arm in order:
                probe = os.path.join(work, f"{arm}-{rnd}")
                os.makedirs(probe)
                os.chmod(probe, 0o777)
                log = os.path.join(work, f"{arm}-{rnd}.log")
                if arm == "torchrun":
                    line, wall = run_torchrun(script, probe, log, train_args, args.procs)
                else:
                    extra = {"OMP_NUM_THREADS": old_omp} if arm == "trainctl-omp-cpus" else {}
                    line, wall = run_trainctl(clusters[arm], script, probe, log, train_args,
                                             extra, args.procs)
                if line is None:
                    with open(log, errors="replace") as f:
                        print(f"round {rnd} {arm}: no result; log tail:\n{f.read()[-3000:]}",
                              flush=True)
                if arm not in envs:
                    try:
                        with open(os.path.join(probe, "env.json")) as f:
                            envs[arm] = json.load(f)
                    except (OSError, ValueError):
                        envs[arm] = None
                run = {"arm": arm, "round": rnd, "wall_s": round(wall, 3), "line": line}
                if args.step_times:
                    run["step_ms"] = step_stats(os.path.join(probe, "step_times.json"))
                runs.append(run)
                print(f"round {rnd} {arm}: wall {wall:.2f} s "
                      f"{json.dumps((line or {}).get('steps_per_s'))} first all-reduce "
                      f"{(line or {}).get('time_to_first_allreduce_s')}", flush=True)
                result = {"what": __doc__.split("\n")[0], "arms": arms,
                          "old_omp_num_threads": old_omp, "seconds_per_workload": args.seconds,
                          "first_round": args.first_round, "procs": args.procs,
                          "cpu_count": os.cpu_count(), "summary": summarize(runs, arms),
                          "env_diff_vs_torchrun": env_diff(envs), "runs": runs}
                with open(os.path.join(out, "ddp_steady.json"), "w") as f:
                    json.dump(result, f, indent=1)
            round_s = time.monotonic() - t_round
    finally:
        for c in {id(c): c for c in clusters.values()}.values():
            c.stop()
    print(json.dumps(result.get("summary"), indent=1))
    print(json.dumps(result.get("env_diff_vs_torchrun"), indent=1))


if __name__ == "__main__":
    main()
