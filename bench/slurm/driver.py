#!/usr/bin/env python3
"""Submits N one-GPU no-op jobs to trainctl or Slurm and times them.

The same method for both systems: each job's command is
`sh -c 'date +%s%N > DIR/I'`, so its start is the time its own process ran;
submit is timed around the CLI call (`trainctl submit` / `sbatch`): issued
just before the CLI process starts, acked when it has exited with the id.

  cli mode    N CLI calls, --concurrency at a time (one job each);
  batch mode  one CLI call for all N: `trainctl sweep --grid i=0,..,N-1` /
              `sbatch --array=0-(N-1)`.
  array mode  trainctl only: one `trainctl submit --array 0-(N-1)` (one
              SubmitJobs call; each task writes to DIR/$TRAINCTL_ARRAY_TASK_ID),
              the same call as Slurm's batch row.

  bare        no scheduler: `xargs -P 8` runs the same N jobs, 8 at a time
              (one per GPU slot, the same shape as the schedulers' one GPU
              of 8): the ceiling any launcher could reach on this host.

jobs_per_s = N / (last job's start - first submit issued). Prints one JSON
object. Used by compare.sh; runnable alone:
  driver.py --system trainctl --trainctl build/bin/trainctl --jobs 200 --dir /tmp/x
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import time


def percentile(values, p):
    """Nearest-rank percentile; None for no values."""
    if not values:
        return None
    s = sorted(values)
    rank = max(1, min(len(s), -(-len(s) * p // 100)))
    return s[int(rank) - 1]


def summary_ms(ns_values):
    ms = [v / 1e6 for v in ns_values]
    if not ms:
        return {"count": 0}
    return {"count": len(ms), "p50_ms": round(percentile(ms, 50), 3),
            "p99_ms": round(percentile(ms, 99), 3), "max_ms": round(max(ms), 3),
            "min_ms": round(min(ms), 3)}


def job_shell(directory, index):
    return "date +%%s%%N > %s/%s" % (directory, index)


def log_flags(args):
    """trainctl's flags for the jobs' output: --no-logs unless --trainctl-logs
    keep. Slurm's rows discard theirs (-o /dev/null), so by default both
    sides skip the log file."""
    return ["--no-logs"] if args.trainctl_logs == "discard" else []


def submit_argv(args, index):
    shell = job_shell(args.dir, index)
    if args.system == "trainctl":
        return [args.trainctl, "submit", "--gpus", "1"] + log_flags(args) + [
            "--", "sh", "-c", shell]
    return ["sbatch", "--gres=gpu:1", "-o", "/dev/null", "-J", "bench", "--wrap", shell]


def batch_argv(args):
    if args.mode == "array":
        return [args.trainctl, "submit", "--gpus", "1", "--export", args.export,
                "--array", "0-%d" % (args.jobs - 1)] + log_flags(args) + [
                "--", "sh", "-c",
                job_shell(args.dir, "$TRAINCTL_ARRAY_TASK_ID")]
    if args.system == "trainctl":
        grid = "i=" + ",".join(str(i) for i in range(args.jobs))
        return [args.trainctl, "sweep", "--gpus", "1", "--grid", grid] + log_flags(args) + [
                "--", "sh", "-c", job_shell(args.dir, "{i}")]
    return ["sbatch", "--array=0-%d" % (args.jobs - 1), "--gres=gpu:1", "-o",
            "/dev/null", "-J", "bench", "--wrap",
            job_shell(args.dir, "$SLURM_ARRAY_TASK_ID")]


def run_bare(args):
    """Runs the N jobs with `xargs -P SLOTS` (no scheduler); returns (started,
    ended) ns of the xargs call."""
    issued = time.time_ns()
    subprocess.run(["xargs", "-P", str(args.slots), "-I{}", "sh", "-c",
                    job_shell(args.dir, "{}")],
                   input="\n".join(str(i) for i in range(args.jobs)) + "\n",
                   text=True, check=True)
    return issued, time.time_ns()


def run_cli(argv, env):
    issued = time.time_ns()
    proc = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    acked = time.time_ns()
    if proc.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (argv[0], proc.returncode,
                                                   proc.stderr.strip()))
    return issued, acked


def wait_starts(directory, n, timeout_s):
    """Start time (ns) of each job index, once all N have written theirs."""
    starts = {}
    deadline = time.time() + timeout_s
    while len(starts) < n and time.time() < deadline:
        for name in os.listdir(directory):
            if name in starts:
                continue
            try:
                with open(os.path.join(directory, name)) as f:
                    text = f.read().strip()
                if text:
                    starts[name] = int(text)
            except (OSError, ValueError):
                pass
        if len(starts) < n:
            time.sleep(0.02)
    return starts


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=["trainctl", "slurm", "bare"], required=True)
    ap.add_argument("--mode", choices=["cli", "batch", "array"], default="cli")
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--slots", type=int, default=8,
                    help="bare: jobs run at once (the GPU slots)")
    ap.add_argument("--dir", required=True, help="empty directory for the start stamps")
    ap.add_argument("--trainctl", default="trainctl", help="path of the trainctl CLI")
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--export", default="ALL",
                    help="trainctl array mode: submit --export (ALL, as sbatch's default; "
                         "NONE sends no environment copy per task)")
    ap.add_argument("--trainctl-logs", choices=["discard", "keep"], default="discard",
                    help="trainctl rows: discard the jobs' output (--no-logs, as Slurm's "
                         "-o /dev/null; the default) or keep a log file per job")
    args = ap.parse_args()
    if args.mode == "array" and args.system != "trainctl":
        ap.error("--mode array is trainctl's (Slurm's array is --mode batch)")
    os.makedirs(args.dir, exist_ok=True)
    env = dict(os.environ)

    acks = {}
    t_begin = time.time_ns()
    if args.system == "bare":
        # Nothing to submit: each job counts as issued (and acked) when
        # xargs starts.
        issued, _ = run_bare(args)
        for i in range(args.jobs):
            acks[str(i)] = (issued, issued)
    elif args.mode == "cli":
        with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
            futures = {pool.submit(run_cli, submit_argv(args, i), env): str(i)
                       for i in range(args.jobs)}
            for fut, name in futures.items():
                acks[name] = fut.result()
    else:
        issued, acked = run_cli(batch_argv(args), env)
        for i in range(args.jobs):
            acks[str(i)] = (issued, acked)
    t_acked = time.time_ns()
    starts = wait_starts(args.dir, args.jobs, args.timeout_s)
    if len(starts) < args.jobs:
        print("only %d of %d jobs started within %.0f s" %
              (len(starts), args.jobs, args.timeout_s), file=sys.stderr)

    first_issue = min(a[0] for a in acks.values())
    last_start = max(starts.values()) if starts else t_acked
    from_ack = [starts[k] - acks[k][1] for k in starts]
    from_issue = [starts[k] - acks[k][0] for k in starts]
    result = {
        "system": args.system, "mode": args.mode, "jobs": args.jobs,
        "started": len(starts),
        "concurrency": args.concurrency if args.mode == "cli" else 1,
        "wall_s": round((last_start - first_issue) / 1e9, 3),
        "jobs_per_s": round(len(starts) / max(1e-9, (last_start - first_issue) / 1e9), 2),
        "submit_s": round((t_acked - t_begin) / 1e9, 3),
        "ack_to_start": summary_ms(from_ack),
        "issue_to_start": summary_ms(from_issue),
        "ack_latency": summary_ms([a[1] - a[0] for a in acks.values()]),
    }
    print(json.dumps(result))
    return 0 if len(starts) == args.jobs else 1


if __name__ == "__main__":
    sys.exit(main())
