#!/usr/bin/env python3
"""Does a launcher that holds the GPUs make its children's CUDA start faster?

Times, in a child process, cuInit + cuDeviceGetCount and the primary context
on device 1 (ctypes on libcuda.so.1), while the parent holds: nothing; an NVML
session (nvmlInit_v2); cuInit only; primary contexts on every device. Prints
one JSON object of medians (seconds). Needs an NVIDIA driver; no torch.
"""
import ctypes, json, os, statistics, subprocess, sys

CHILD = r'''
import ctypes, time
t = time.perf_counter(); cu = ctypes.CDLL("libcuda.so.1"); cu.cuInit(0)
n = ctypes.c_int(); cu.cuDeviceGetCount(ctypes.byref(n)); t1 = time.perf_counter()
ctx = ctypes.c_void_p(); dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), 1)
cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); cu.cuCtxSetCurrent(ctx); cu.cuCtxSynchronize()
print(round(t1 - t, 4), round(time.perf_counter() - t1, 4))
'''


def child_times(reps):
    out = []
    for _ in range(reps):
        r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
        a, b = r.stdout.split()
        out.append((float(a), float(b)))
    return {"cuInit_s": statistics.median(a for a, _ in out),
            "ctx_s": statistics.median(b for _, b in out)}


def main():
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
    res = {"parent holds nothing": child_times(reps)}
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    nvml.nvmlInit_v2()
    res["parent holds NVML"] = child_times(reps)
    nvml.nvmlShutdown()
    cu = ctypes.CDLL("libcuda.so.1")
    cu.cuInit(0)
    res["parent did cuInit"] = child_times(reps)
    n = ctypes.c_int(); cu.cuDeviceGetCount(ctypes.byref(n))
    ctxs = []
    for i in range(n.value):
        ctx = ctypes.c_void_p(); dev = ctypes.c_int(); cu.cuDeviceGet(ctypes.byref(dev), i)
        cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev); ctxs.append(ctx)
    res["parent holds contexts"] = child_times(reps)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
