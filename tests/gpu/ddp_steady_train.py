#!/usr/bin/env python3
"""A plain PyTorch DDP script (nothing trainctl-specific: torchrun's env://
rendezvous) that measures steady-state training speed on three workloads,
one after the other in the same process group:

  mlp          a small MLP, batch 32: each step is a handful of tiny kernels,
               so its speed is bound by the CPU launching them
  transformer  an 8-layer encoder (d_model 1024, 16 heads, sequence 256,
               batch 16), bf16 autocast, AdamW
  cnn          a 5-layer CNN on 3x64x64 images made and augmented on the CPU
               by a DataLoader (4 workers per rank, DistributedSampler)

For each workload: --warmup steps, then a calibration of --calib steps, then
as many steps as take about --seconds (rank 0's calibration, agreed by all
ranks with an all-reduce), timed between two CUDA synchronisations. Rank 0
prints one JSON line:
  time_to_first_allreduce_s  process start -> the first backward's gradient
                             all-reduce done (of the mlp)
  total_wall_s               process start -> end
  steps_per_s                {workload: steady-state optimizer steps per second}
  steps                      {workload: timed steps}
  omp_num_threads, torch_threads  what the launcher's environment gave
With DDP_PROBE_DIR set, rank 0 also writes DDP_PROBE_DIR/env.json: its
environment, to compare launchers variable by variable; with --step-times
it also writes DDP_PROBE_DIR/step_times.json: {workload: [ms, ...]}, the
CPU time of each timed step's launch (no synchronisation between steps, so a
step that stalls the launching thread, e.g. on a lock the driver shares with
a monitoring process, stands out). DDP_STEADY_DEVICE=cpu
runs it on the CPU with gloo (a smoke test of the script, no timings).
"""

import argparse
import json
import os
import time


def process_start_boot_s():
    """When this process was exec'd, seconds since boot (proc(5): field 22 of
    /proc/self/stat, clock ticks): the same clock as CLOCK_BOOTTIME."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2:].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return time.clock_gettime(time.CLOCK_BOOTTIME)


START_S = process_start_boot_s()


def since_start_s():
    """Seconds since this process was exec'd."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) - START_S


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workloads", default="mlp,transformer,cnn")
    ap.add_argument("--warmup", type=int, default=15)
    ap.add_argument("--calib", type=int, default=15)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--step-times", action="store_true",
                    help="rank 0 writes each timed step's launch time to DDP_PROBE_DIR")
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data.distributed import DistributedSampler

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = os.environ.get("DDP_STEADY_DEVICE", "cuda") == "cuda"  # cpu: a smoke test
    if cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    class Images(Dataset):
        """Synthetic 3x64x64 images, made and augmented on the CPU per item
        (random crop of a 72x72 uint8 image, flip, normalise): a DataLoader's
        usual CPU work."""

        def __len__(self):
            return 1 << 20

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            img = torch.randint(0, 256, (3, 72, 72), dtype=torch.uint8, generator=g)
            y0, x0 = (int(v) for v in torch.randint(0, 9, (2,), generator=g))
            img = img[:, y0:y0 + 64, x0:x0 + 64].float().div_(255)
            if i % 2:
                img = img.flip(2)
            img = (img - 0.5) / 0.25
            return img, i % 10

    def mlp():
        model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(256, 256), nn.ReLU())],
                              nn.Linear(256, 10)).to(device)
        x = torch.randn(32, 256, device=device)
        y = torch.randint(0, 10, (32,), device=device)
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), \
            (lambda: (x, y)), nn.CrossEntropyLoss(), None

    def transformer():
        layer = nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True, dropout=0.0)
        model = nn.Sequential(nn.TransformerEncoder(layer, 8), nn.Linear(1024, 10)).to(device)
        x = torch.randn(16, 256, 1024, device=device)
        y = torch.randint(0, 10, (16 * 256,), device=device)
        loss_fn = nn.CrossEntropyLoss()
        return model, torch.optim.AdamW(model.parameters(), lr=1e-4), (lambda: (x, y)), \
            (lambda out, t: loss_fn(out.reshape(-1, 10), t)), torch.bfloat16

    def cnn():
        def block(i, o, s):
            return [nn.Conv2d(i, o, 3, s, 1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]
        model = nn.Sequential(*block(3, 64, 1), *block(64, 128, 2), *block(128, 256, 2),
                              *block(256, 256, 2), *block(256, 512, 2),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 10))
        model = model.to(device)
        data = Images()
        loader = DataLoader(data, batch_size=64, sampler=DistributedSampler(data, seed=0),
                            num_workers=4, pin_memory=cuda, persistent_workers=True,
                            drop_last=True)
        it = iter(loader)

        def batch():
            x, y = next(it)
            return x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), batch, \
            nn.CrossEntropyLoss(), torch.bfloat16

    builders = {"mlp": mlp, "transformer": transformer, "cnn": cnn}
    first_allreduce_s = None
    steps_per_s, timed, step_ms = {}, {}, {}
    for name in args.workloads.split(","):
        torch.manual_seed(1234 + rank)
        model, opt, batch, loss_fn, dtype = builders[name]()
        model = DDP(model, device_ids=[local_rank] if cuda else None)
        dtype = dtype if cuda else None

        def step():
            x, y = batch()
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
                loss = loss_fn(model(x), y)
            loss.backward()  # DDP all-reduces the gradients here
            opt.step()

        for i in range(args.warmup):
            step()
            if first_allreduce_s is None:
                sync()
                first_allreduce_s = since_start_s()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.calib):
            step()
        sync()
        per_step = (time.perf_counter() - t0) / args.calib
        n = torch.tensor([max(10, int(args.seconds / max(per_step, 1e-6)))], device=device)
        dist.all_reduce(n, op=dist.ReduceOp.MAX)  # every rank runs as many steps
        n = int(n.item())
        sync()
        t0 = time.perf_counter()
        if args.step_times:
            marks = [t0]
            for _ in range(n):
                step()
                marks.append(time.perf_counter())
            step_ms[name] = [round((b - a) * 1e3, 4) for a, b in zip(marks, marks[1:])]
        else:
            for _ in range(n):
                step()
        sync()
        steps_per_s[name] = round(n / (time.perf_counter() - t0), 2)
        timed[name] = n
        del model, opt
    dist.barrier()
    dist.destroy_process_group()
    probe_dir = os.environ.get("DDP_PROBE_DIR")
    if probe_dir and rank == 0:
        with open(os.path.join(probe_dir, "env.json"), "w") as f:
            json.dump(dict(os.environ), f, indent=1, sort_keys=True)
        if step_ms:
            with open(os.path.join(probe_dir, "step_times.json"), "w") as f:
                json.dump(step_ms, f)
    if rank == 0:
        print(json.dumps({
            "world_size": world,
            "time_to_first_allreduce_s": round(first_allreduce_s, 3),
            "total_wall_s": round(since_start_s(), 3),
            "steps_per_s": steps_per_s,
            "steps": timed,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "torch_threads": torch.get_num_threads(),
        }), flush=True)


if __name__ == "__main__":
    main()
