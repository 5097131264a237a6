#!/usr/bin/env python3
"""A plain PyTorch DDP training script, as users write it: nothing trainctl-
specific. It reads the torchrun launch environment (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT through init_method env://), so it runs
unchanged under `torchrun --standalone --nproc-per-node 2 ddp_train.py` and as
a trainctl gang job (`trainctl submit --gpus 2 -- python3 ddp_train.py`).

It trains a small MLP on synthetic data for --steps steps and rank 0 prints one
JSON line:
  world_size, time_to_first_allreduce_s (process start -> the first backward's
  gradient all-reduce completed), total_wall_s (process start -> end), steps,
  samples_per_s (global samples per second over the steps after --warmup),
  phases_s (process start -> torch imported, CUDA device set, process group
  ready, DDP wrapped, first all-reduce done: where the start-up time goes).

With DDP_PROBE_DIR set, every rank also writes DDP_PROBE_DIR/rank<N>.json: its
phases and what its launcher gave it (environment, CPU affinity, nice value,
rlimits, cgroup, stdio types), to compare launchers (tests/gpu/ddp_probe.sh).
"""

import argparse
import json
import os
import time


def process_start_boot_s():
    """When this process was exec'd, in seconds since boot (proc(5): field 22
    of /proc/self/stat, clock ticks); the same clock as CLOCK_BOOTTIME."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.clock_gettime(time.CLOCK_BOOTTIME)


START_S = process_start_boot_s()


def since_start_s():
    return time.clock_gettime(time.CLOCK_BOOTTIME) - START_S


def process_facts():
    """What the launcher gave this process, beyond argv: the things that can
    change how fast it starts (proc(5), getrlimit(2), sched_getaffinity(2))."""
    import resource
    import stat

    def fd_kind(fd):
        try:
            mode = os.fstat(fd).st_mode
        except OSError:
            return "closed"
        for name, test in (("file", stat.S_ISREG), ("pipe", stat.S_ISFIFO),
                           ("socket", stat.S_ISSOCK), ("tty", stat.S_ISCHR)):
            if test(mode):
                return name
        return "other"

    def read(path):
        try:
            with open(path) as f:
                return f.read()
        except OSError:
            return None

    limits = {}
    for name in ("RLIMIT_NOFILE", "RLIMIT_MEMLOCK", "RLIMIT_STACK",
                 "RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_CORE"):
        limits[name] = list(resource.getrlimit(getattr(resource, name)))
    status = read("/proc/self/status") or ""
    return {
        "env": dict(os.environ),
        "cpus": sorted(os.sched_getaffinity(0)),
        "nice": os.nice(0),
        "rlimits": limits,
        "cgroup": read("/proc/self/cgroup"),
        "status": {k: v.strip() for k, _, v in (l.partition(":") for l in status.splitlines())
                   if k in ("NoNewPrivs", "Seccomp", "Cpus_allowed_list", "Mems_allowed_list",
                            "Threads", "voluntary_ctxt_switches")},
        "stdio": [fd_kind(0), fd_kind(1), fd_kind(2)],
        "cwd": os.getcwd(),
        "umask": os.umask(0o022),
        "sched": os.sched_getscheduler(0),
        "pgid_is_pid": os.getpgid(0) == os.getpid(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256, help="per rank")
    parser.add_argument("--width", type=int, default=2048)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    phases = {"imported": since_start_s()}
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    torch.cuda.synchronize()
    phases["cuda_set"] = since_start_s()
    dist.init_process_group("nccl")
    phases["pg_ready"] = since_start_s()
    rank = dist.get_rank()
    world_size = dist.get_world_size()

    torch.manual_seed(1234 + rank)
    model = nn.Sequential(
        nn.Linear(1024, args.width), nn.ReLU(),
        nn.Linear(args.width, args.width), nn.ReLU(),
        nn.Linear(args.width, 10),
    ).to(device)
    model = DDP(model, device_ids=[local_rank])
    torch.cuda.synchronize()
    phases["ddp_ready"] = since_start_s()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.randn(args.batch, 1024, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)

    first_allreduce_s = None
    timed_from = None
    for step in range(args.steps):
        if step == args.warmup:
            torch.cuda.synchronize()
            timed_from = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        if first_allreduce_s is None:
            torch.cuda.synchronize()
            first_allreduce_s = since_start_s()
            phases["first_allreduce"] = first_allreduce_s
        opt.step()
    torch.cuda.synchronize()
    timed_steps = args.steps - args.warmup
    samples_per_s = None
    if timed_from is not None and timed_steps > 0:
        elapsed = time.perf_counter() - timed_from
        samples_per_s = timed_steps * args.batch * world_size / elapsed

    dist.barrier()
    dist.destroy_process_group()
    phases = {k: round(v, 3) for k, v in phases.items()}
    probe_dir = os.environ.get("DDP_PROBE_DIR")
    if probe_dir:
        facts = process_facts()
        facts["phases_s"] = phases
        with open(os.path.join(probe_dir, f"rank{rank}.json"), "w") as f:
            json.dump(facts, f, indent=1, sort_keys=True)
    if rank == 0:
        print(json.dumps({
            "world_size": world_size,
            "time_to_first_allreduce_s": round(first_allreduce_s, 3),
            "total_wall_s": round(since_start_s(), 3),
            "steps": args.steps,
            "samples_per_s": round(samples_per_s, 1) if samples_per_s else None,
            "final_loss": round(float(loss.item()), 4),
            "phases_s": phases,
        }), flush=True)


if __name__ == "__main__":
    main()
