#!/usr/bin/env python3
"""A small training for the auto-packing proof: a CNN on synthetic
CIFAR-sized data (3x32x32 images, 10 classes) kept on the GPU, so the input
pipeline costs nothing and the trial is as small as the trainings people pack
by hand. Runs --steps optimizer steps on the one GPU it sees
(CUDA_VISIBLE_DEVICES, set by the trainctl agent) and prints, about every
second, one JSON line {"t": unix time, "samples": samples so far,
"samples_per_s": over the last interval}; at the end one line with
"final": true. Inside a trainctl task it also reports `samples_per_s` to the
coordinator (trainctl_metrics.py over libtrainctl_nccl.so), which the
auto-packer uses; the proof script reads the log lines."""

import argparse
import json
import os
import sys
import time


def make_reporter():
    """report(samples_per_s, step) through trainctl's metrics API when this
    runs as a trainctl task with the bundle's library beside it; a no-op
    otherwise, and after the first failure (reporting never stops training)."""
    if "TRAINCTL_TOKEN" not in os.environ:
        return lambda *a: None
    here = os.path.dirname(os.path.abspath(__file__))
    lib = os.path.join(here, "..", "lib", "libtrainctl_nccl.so")
    if "TRAINCTL_NCCL_LIB" not in os.environ and os.path.exists(lib):
        os.environ["TRAINCTL_NCCL_LIB"] = lib
    try:
        sys.path.insert(0, here)
        import trainctl_metrics
    except Exception as e:  # no helper beside us
        print(json.dumps({"event": "no_metrics", "error": str(e)}), flush=True)
        return lambda *a: None
    state = {"ok": True}

    def report(samples_per_s, step):
        if not state["ok"]:
            return
        try:
            trainctl_metrics.report(samples_per_s=samples_per_s, step=step)
        except Exception as e:
            state["ok"] = False
            print(json.dumps({"event": "metrics_failed", "error": str(e)}), flush=True)
    return report


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--bs", type=int, default=128)
    p.add_argument("--width", type=int, default=32, help="channels of the first conv")
    p.add_argument("--steps", type=int, default=4000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    import torch
    import torch.nn as nn

    torch.manual_seed(args.seed)
    dev = torch.device("cuda", 0)
    w = args.width
    model = nn.Sequential(
        nn.Conv2d(3, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(),
        nn.Conv2d(w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2 * w, 4 * w, 3, padding=1), nn.BatchNorm2d(4 * w), nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(4 * w, 4 * w, 3, padding=1), nn.BatchNorm2d(4 * w), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * w, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # 32 synthetic batches resident on the GPU, cycled.
    xs = torch.randn(32, args.bs, 3, 32, 32, device=dev)
    ys = torch.randint(0, 10, (32, args.bs), device=dev)

    report = make_reporter()
    samples = 0
    t_start = time.time()
    last_t, last_samples = t_start, 0
    print(json.dumps({"t": round(t_start, 3), "samples": 0, "event": "start",
                      "bs": args.bs, "lr": args.lr}), flush=True)
    for step in range(args.steps):
        i = step % 32
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xs[i]), ys[i])
        loss.backward()
        opt.step()
        samples += args.bs
        if step % 50 == 49:
            torch.cuda.synchronize()
            now = time.time()
            if now - last_t >= 1.0:
                rate = round((samples - last_samples) / (now - last_t), 1)
                print(json.dumps({
                    "t": round(now, 3), "samples": samples,
                    "samples_per_s": rate,
                    "loss": round(float(loss.item()), 4)}), flush=True)
                report(rate, step + 1)
                last_t, last_samples = now, samples
    torch.cuda.synchronize()
    now = time.time()
    print(json.dumps({
        "t": round(now, 3), "samples": samples, "final": True,
        "train_seconds": round(now - t_start, 3),
        "samples_per_s": round(samples / (now - t_start), 1),
        "max_memory_allocated_mib": torch.cuda.max_memory_allocated(dev) // 2**20}),
        flush=True)


if __name__ == "__main__":
    main()
