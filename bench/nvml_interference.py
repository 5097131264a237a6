#!/usr/bin/env python3
"""What the agent's telemetry costs a launch-bound training loop on one GPU.

A training loop (a small MLP, batch 32, the launch-bound workload of
tests/gpu/ddp_steady_train.py) runs in this process on GPU 0 and counts its
steps in windows of --window-s seconds. Beside it, a second process does
each second what a trainctl agent does at each heartbeat (worker/agent.cc
Agent::Heartbeat, worker/hw/nvml_gpu_inventory.cc), one kind per window:

  none      nothing (the baseline);
  device    the per-GPU sample: nvmlDeviceGetUtilizationRates and
            nvmlDeviceGetMemoryInfo of every GPU;
  process   the per-task sample's NVML side: nvmlDeviceGetComputeRunningProcesses_v3
            and nvmlDeviceGetProcessUtilization of every GPU;
  procscan  the per-task sample's /proc side: /proc/<pid>/stat of every
            process (the process-group CPU sampler's walk).

The kinds take turns window by window, round after round (--rounds), so a
drift of the host's speed falls on all of them alike. Reports, per kind,
the median steps/s and its ratio to the same round's `none` window
(median, min, max), and the median and maximum duration of one sample's
NVML calls, ms. Writes the JSON to OUT (and prints it).

Usage: nvml_interference.py OUT.json [--rounds 10] [--window-s 3]
Needs torch with CUDA and libnvidia-ml.so.1.
"""

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import statistics
import time

KINDS = ("none", "device", "process", "procscan")


class ProcessInfo(ctypes.Structure):
    """nvmlProcessInfo_t as nvmlDeviceGetComputeRunningProcesses_v3 fills it."""
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]


class ProcessUtilSample(ctypes.Structure):
    """nvmlProcessUtilizationSample_t."""
    _fields_ = [("pid", ctypes.c_uint), ("timeStamp", ctypes.c_ulonglong),
                ("smUtil", ctypes.c_uint), ("memUtil", ctypes.c_uint),
                ("encUtil", ctypes.c_uint), ("decUtil", ctypes.c_uint)]


class Utilization(ctypes.Structure):
    """nvmlUtilization_t, percent."""
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class Memory(ctypes.Structure):
    """nvmlMemory_t, bytes."""
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def sampler(kind_value, stop, durations):
    """The agent's stand-in: once a second, the current kind's calls; appends
    each sample's duration (ms) to `durations` as (kind, ms)."""
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    nvml.nvmlInit_v2()
    count = ctypes.c_uint()
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    devs = []
    for i in range(count.value):
        d = ctypes.c_void_p()
        nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(d))
        devs.append(d)
    last_seen = [0] * len(devs)
    while not stop.is_set():
        kind = KINDS[kind_value.value]
        t0 = time.perf_counter()
        if kind == "device":
            for d in devs:
                u, m = Utilization(), Memory()
                nvml.nvmlDeviceGetUtilizationRates(d, ctypes.byref(u))
                nvml.nvmlDeviceGetMemoryInfo(d, ctypes.byref(m))
        elif kind == "process":
            for i, d in enumerate(devs):
                n = ctypes.c_uint(64)
                infos = (ProcessInfo * 64)()
                nvml.nvmlDeviceGetComputeRunningProcesses_v3(d, ctypes.byref(n), infos)
                n = ctypes.c_uint(64)
                samples = (ProcessUtilSample * 64)()
                nvml.nvmlDeviceGetProcessUtilization(d, samples, ctypes.byref(n),
                                                     ctypes.c_ulonglong(last_seen[i]))
                last_seen[i] = int(time.time() * 1e6) - 1000000
        elif kind == "procscan":
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        with open("/proc/%s/stat" % pid) as f:
                            f.read()
                    except OSError:
                        pass
        if kind != "none":
            durations.append((kind, (time.perf_counter() - t0) * 1000))
        stop.wait(1.0)


def main():
    """Runs the rounds and writes the summary."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--window-s", type=float, default=3.0)
    a = ap.parse_args()

    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(32, 64, device="cuda")
    y = torch.randint(0, 10, (32,), device="cuda")

    def steps_for(seconds):
        end = time.perf_counter() + seconds
        n = 0
        while time.perf_counter() < end:
            for _ in range(20):
                opt.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()
            torch.cuda.synchronize()
            n += 20
        return n / seconds

    steps_for(2.0)  # warm-up: allocator, kernels' first launches
    ctx = mp.get_context("spawn")
    kind_value, stop = ctx.Value("i", 0), ctx.Event()
    manager = ctx.Manager()
    durations = manager.list()
    proc = ctx.Process(target=sampler, args=(kind_value, stop, durations), daemon=True)
    proc.start()
    rows = []
    try:
        for r in range(a.rounds):
            row = {}
            order = KINDS[r % len(KINDS):] + KINDS[:r % len(KINDS)]
            for kind in order:
                kind_value.value = KINDS.index(kind)
                time.sleep(0.05)
                row[kind] = round(steps_for(a.window_s), 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    finally:
        stop.set()
        proc.join(5)
    durs = list(durations)
    summary = {}
    for kind in KINDS:
        ratios = [row[kind] / row["none"] for row in rows]
        ms = [d for k, d in durs if k == kind]
        summary[kind] = {
            "steps_per_s_median": round(statistics.median(row[kind] for row in rows), 1),
            "ratio_to_none": {"median": round(statistics.median(ratios), 4),
                              "min": round(min(ratios), 4), "max": round(max(ratios), 4)},
            "sample_ms": ({"median": round(statistics.median(ms), 3),
                           "max": round(max(ms), 3), "n": len(ms)} if ms else None)}
    result = {"what": __doc__.splitlines()[0], "rounds": a.rounds,
              "window_s": a.window_s, "gpu": torch.cuda.get_device_name(0),
              "cpus": os.cpu_count(), "summary": summary, "per_round": rows}
    text = json.dumps(result, indent=1)
    print(text)
    with open(a.out, "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
