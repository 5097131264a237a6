#!/usr/bin/env python3
"""A small "experiment" for the GPU-sharing check: holds a little GPU memory
(--mem-mib) and runs matmuls for --seconds on the one GPU it sees
(CUDA_VISIBLE_DEVICES, set by the trainctl agent), then prints one JSON line
with the GPU's UUID, the iterations done and the TFLOP/s it got."""

import argparse
import json
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--mem-mib", type=int, default=512)
    parser.add_argument("--n", type=int, default=2048)
    args = parser.parse_args()

    import torch

    dev = torch.device("cuda", 0)
    hold = torch.empty(args.mem_mib * 2**20, dtype=torch.uint8, device=dev)
    a = torch.randn(args.n, args.n, device=dev)
    b = torch.randn(args.n, args.n, device=dev)
    iters = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
        iters += 20
    elapsed = time.perf_counter() - t0
    props = torch.cuda.get_device_properties(dev)
    print(json.dumps({
        "gpu_uuid": str(getattr(props, "uuid", "")),
        "gpu_name": props.name,
        "held_mib": hold.numel() // 2**20,
        "iters": iters,
        "seconds": round(elapsed, 2),
        "tflops": round(2 * args.n**3 * iters / elapsed / 1e12, 2),
        "checksum": float(c[0, 0].item()),
    }), flush=True)


if __name__ == "__main__":
    main()
