#ifndef TRAINCTL_WORKER_HW_CUDA_DRIVER_HOLD_H_
#define TRAINCTL_WORKER_HW_CUDA_DRIVER_HOLD_H_

// Keeps the CUDA driver initialised in the agent for its whole life, so every
// task process it launches initialises CUDA faster.
//
// Why (measured on 2 x H200, persistence mode on, CUDA 13,
// bench/results/cuinit_parent.json): a process's cuInit(0) takes 0.32 s when
// no other process on the host has initialised the driver, and 0.037 s while
// one has (and stays alive). torchrun gets this for free: its launcher calls
// torch.cuda.is_available()/device_count() before it starts the workers
// (torch/distributed/launcher/api.py), so its ranks skip ~0.28 s each; a
// trainctl rank without this paid it, and DDP's first all-reduce came 1.06-1.10x
// later than under torchrun (bench/results/ddp_probe.json).
//
// Only cuInit is called: no context is created, so no GPU memory is taken and
// the agent is not a GPU process in nvidia-smi. The driver stays loaded until
// the agent exits (CUDA has no way to de-initialise).

#include <string>

#include "absl/status/status.h"

namespace trainctl::worker {

// Loads `library` (dlopen, default the driver's libcuda.so.1) and calls
// cuInit(0) in this process, once; the library is never unloaded. Idempotent
// per process: a second call after success returns OK without loading again.
// Errors: UNAVAILABLE when the library cannot be loaded (no NVIDIA driver),
// has no cuInit, or cuInit returns non-zero (the message gives the CUresult
// number, e.g. 100 = CUDA_ERROR_NO_DEVICE).
absl::Status HoldCudaDriver(const std::string& library = "libcuda.so.1");

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_CUDA_DRIVER_HOLD_H_
