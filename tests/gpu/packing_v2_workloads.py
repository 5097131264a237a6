#!/usr/bin/env python3
"""Training workloads for the packing comparison (packing_v2_bench.sh).

Four families, each a complete small training of fixed work (--steps) on
synthetic data, different from packing_train.py's CNN on GPU-resident data:

  cnn_loader   a small ResNet-style CNN fed by a CPU torch DataLoader (2
               workers decoding and augmenting 3x64x64 images on the CPU,
               pin_memory): a GPU partly waiting on the input pipeline.
  mlp_tabular  a 4-layer MLP on 256-feature tabular rows, batch 512: tiny
               kernels, launch-bound (NVML utilization high, SM activity low).
  unet_small   a 3-level U-Net on 1x128x128 segmentation masks, batch 16:
               convolutions and upsampling, more of the GPU per step.
  tfm_report   a 4-layer Transformer encoder on 128-token sequences that
               reports its throughput (samples/s) to trainctl through the
               metrics API, as packing_train.py does; the others report none.

Every trial prints JSON lines: {"event": "start", "t"} once its model is on
the GPU, {"t", "samples", "samples_per_s"} every second, and a last line with
"final": true and "wall_s" (process start to end). `--calibrate SECONDS`
runs for that long after warm-up and prints {"calibrated_steps": N}: the
steps one trial takes in SECONDS alone on this GPU.
"""
import argparse
import json
import os
import sys
import time

T_PROCESS = time.time()

FAMILIES = ("cnn_loader", "mlp_tabular", "unet_small", "tfm_report")


def emit(**kv):
    print(json.dumps(kv), flush=True)


def make_reporter(enabled):
    """report(samples_per_s, step) through trainctl's metrics helper (the
    bundle's share/trainctl_metrics.py) when enabled and running as a trainctl
    task; a no-op otherwise and after the first failure."""
    if not enabled or "TRAINCTL_TOKEN" not in os.environ:
        return lambda *a: None
    here = os.path.dirname(os.path.abspath(__file__))
    lib = os.path.join(here, "..", "lib", "libtrainctl_nccl.so")
    if "TRAINCTL_NCCL_LIB" not in os.environ and os.path.exists(lib):
        os.environ["TRAINCTL_NCCL_LIB"] = lib
    try:
        sys.path.insert(0, here)
        import trainctl_metrics
    except Exception as e:
        emit(event="no_metrics", error=str(e))
        return lambda *a: None
    state = {"ok": True}

    def report(samples_per_s, step):
        if not state["ok"]:
            return
        try:
            trainctl_metrics.report(samples_per_s=samples_per_s, step=step)
        except Exception as e:
            state["ok"] = False
            emit(event="metrics_failed", error=str(e))
    return report


def build(family, torch, nn, seed):
    """(model, batch size, next_batch(step) -> (x, y), loss_fn) for a family."""
    dev = torch.device("cuda")
    g = torch.Generator(device="cpu").manual_seed(seed)

    if family == "cnn_loader":
        class Images(torch.utils.data.Dataset):
            # Decoding stand-in: uint8 images made on the CPU, then random
            # crop and flip, as torchvision transforms would.
            def __len__(self):
                return 1 << 30

            def __getitem__(self, i):
                gen = torch.Generator().manual_seed(seed * 1_000_003 + i)
                img = torch.randint(0, 256, (3, 72, 72), dtype=torch.uint8, generator=gen)
                y0, x0 = int(torch.randint(0, 9, (1,), generator=gen)), int(
                    torch.randint(0, 9, (1,), generator=gen))
                img = img[:, y0:y0 + 64, x0:x0 + 64].float().div_(255)
                if torch.rand(1, generator=gen).item() < 0.5:
                    img = img.flip(2)
                return img, i % 100

        def block(cin, cout, stride):
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
                nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True))
        model = nn.Sequential(block(3, 32, 1), block(32, 64, 2), block(64, 128, 2),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 100))
        bs = 128
        loader = torch.utils.data.DataLoader(Images(), batch_size=bs, num_workers=2,
                                             pin_memory=True, persistent_workers=True,
                                             prefetch_factor=4)
        it = iter(loader)

        def next_batch(step):
            x, y = next(it)
            return x.to(dev, non_blocking=True), y.to(dev, non_blocking=True)
        return model.to(dev), bs, next_batch, nn.CrossEntropyLoss()

    if family == "mlp_tabular":
        model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                              nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 2))
        bs = 512
        xs = torch.randn(64, bs, 256, generator=g).to(dev)
        ys = (xs[..., 0] + xs[..., 1] > 0).long()

        def next_batch(step):
            return xs[step % 64], ys[step % 64]
        return model.to(dev), bs, next_batch, nn.CrossEntropyLoss()

    if family == "unet_small":
        def conv(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1),
                                 nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

        class UNet(nn.Module):
            def __init__(self):
                super().__init__()
                self.d1, self.d2, self.d3 = conv(1, 16), conv(16, 32), conv(32, 64)
                self.pool = nn.MaxPool2d(2)
                self.u2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
                self.c2 = conv(64, 32)
                self.u1 = nn.ConvTranspose2d(32, 16, 2, stride=2)
                self.c1 = conv(32, 16)
                self.out = nn.Conv2d(16, 1, 1)

            def forward(self, x):
                a = self.d1(x)
                b = self.d2(self.pool(a))
                c = self.d3(self.pool(b))
                b = self.c2(torch.cat([self.u2(c), b], 1))
                a = self.c1(torch.cat([self.u1(b), a], 1))
                return self.out(a)
        bs = 16
        xs = torch.randn(8, bs, 1, 128, 128, generator=g).to(dev)
        ys = (xs > 0.5).float()

        def next_batch(step):
            return xs[step % 8], ys[step % 8]
        return UNet().to(dev), bs, next_batch, nn.BCEWithLogitsLoss()

    if family == "tfm_report":
        vocab, seq, bs = 1000, 128, 32

        class Encoder(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(vocab, 256)
                layer = nn.TransformerEncoderLayer(256, 4, 512, batch_first=True)
                self.enc = nn.TransformerEncoder(layer, 4)
                self.head = nn.Linear(256, vocab)

            def forward(self, x):
                return self.head(self.enc(self.emb(x)))
        xs = torch.randint(0, vocab, (16, bs, seq), generator=g).to(dev)

        def next_batch(step):
            x = xs[step % 16]
            return x, x.roll(-1, 1)
        ce = nn.CrossEntropyLoss()
        return Encoder().to(dev), bs, next_batch, lambda out, y: ce(
            out.reshape(-1, vocab), y.reshape(-1))

    raise SystemExit(f"unknown family {family!r}; one of {', '.join(FAMILIES)}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--family", required=True, choices=FAMILIES)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--calibrate", type=float, default=0,
                   help="run this many seconds after warm-up and print the steps done")
    a = p.parse_args()

    import torch
    from torch import nn
    torch.manual_seed(a.seed)
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    model, bs, next_batch, loss_fn = build(a.family, torch, nn, a.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    report = make_reporter(a.family == "tfm_report")

    def step(i):
        x, y = next_batch(i)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    # Warm-up (cuDNN autotuning, allocator, loader workers) counts as work
    # in the trial's wall time but not in its steps.
    for i in range(5):
        step(i)
    torch.cuda.synchronize()
    emit(event="start", t=time.time(), family=a.family)
    t0 = time.time()
    last = t0
    done = 0
    steps = 1 << 62 if a.calibrate > 0 else a.steps
    while done < steps:
        loss = step(done)
        done += 1
        now = time.time()
        if now - last >= 1.0:
            torch.cuda.synchronize()
            now = time.time()
            rate = done * bs / (now - t0)
            emit(t=now, samples=done * bs, samples_per_s=round(rate, 1))
            report(rate, done)
            last = now
            if a.calibrate > 0 and now - t0 >= a.calibrate:
                break
    torch.cuda.synchronize()
    end = time.time()
    if a.calibrate > 0:
        emit(calibrated_steps=int(done * a.calibrate / (end - t0)), seconds=a.calibrate,
             warmup_s=round(t0 - T_PROCESS, 2),
             peak_memory_reserved_bytes=torch.cuda.max_memory_reserved())
        return
    emit(final=True, t=end, samples=done * bs, samples_per_s=round(done * bs / (end - t0), 1),
         wall_s=round(end - T_PROCESS, 2), loss=round(float(loss), 4),
         peak_memory_bytes=torch.cuda.max_memory_allocated())


if __name__ == "__main__":
    main()
