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
  samples_per_s (global samples per second over the steps after --warmup).
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

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    world_size = dist.get_world_size()

    torch.manual_seed(1234 + rank)
    model = nn.Sequential(
        nn.Linear(1024, args.width), nn.ReLU(),
        nn.Linear(args.width, args.width), nn.ReLU(),
        nn.Linear(args.width, 10),
    ).to(device)
    model = DDP(model, device_ids=[local_rank])
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
        opt.step()
    torch.cuda.synchronize()
    timed_steps = args.steps - args.warmup
    samples_per_s = None
    if timed_from is not None and timed_steps > 0:
        elapsed = time.perf_counter() - timed_from
        samples_per_s = timed_steps * args.batch * world_size / elapsed

    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps({
            "world_size": world_size,
            "time_to_first_allreduce_s": round(first_allreduce_s, 3),
            "total_wall_s": round(since_start_s(), 3),
            "steps": args.steps,
            "samples_per_s": round(samples_per_s, 1) if samples_per_s else None,
            "final_loss": round(float(loss.item()), 4),
        }), flush=True)


if __name__ == "__main__":
    main()
