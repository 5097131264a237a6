#ifndef TRAINCTL_WORKER_HW_GPU_INVENTORY_H_
#define TRAINCTL_WORKER_HW_GPU_INVENTORY_H_

// The agent's view of its GPUs, behind an interface: NVML on GPU hosts
// (NvmlGpuInventory), a fake elsewhere (FakeGpuInventory).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainctl::worker {

// Static facts of one GPU.
struct GpuInfo {
  // NVML index on this host.
  int index = 0;
  // "GPU-8f2c..." as CUDA_VISIBLE_DEVICES accepts it.
  std::string uuid;
  // Product name, e.g. "NVIDIA H200".
  std::string name;
  int64_t memory_total_bytes = 0;
  // Indices of the GPUs joined to this one by at least one active NVLink.
  std::vector<int> nvlink_peers;
  bool mig_enabled = false;
};

// A measurement of one GPU.
struct GpuSample {
  int index = 0;
  int64_t memory_used_bytes = 0;
  // Percent of the last sample period the GPU was busy (0-100).
  int utilization_pct = 0;
  int temperature_c = 0;
  double power_w = 0;
  // True when the three GPM figures below were measured (NVML GPM, Hopper
  // and newer, not under MIG): percent 0-100 over the period since the
  // previous Sample(). SM activity: share of SMs busy
  // (NVML_GPM_METRIC_SM_UTIL); SM occupancy: active warps over the
  // theoretical maximum (NVML_GPM_METRIC_SM_OCCUPANCY); DRAM bandwidth: of
  // the theoretical peak (NVML_GPM_METRIC_DRAM_BW_UTIL). NVML has no GPM
  // figures per process (nvmlGpmMigSampleGet is per MIG instance), so these
  // are the whole GPU's.
  bool gpm = false;
  double sm_active_pct = 0;
  double sm_occupancy_pct = 0;
  double dram_bw_pct = 0;
};

// What one process uses of one GPU (NVML per-process accounting).
struct ProcessGpuSample {
  int gpu_index = 0;
  int pid = 0;
  // GPU memory the process holds, bytes; -1 when the driver does not say
  // (e.g. some containers).
  int64_t memory_used_bytes = -1;
  // SM utilization of the process over the last sample period, 0-100; -1
  // when the driver does not give it.
  int sm_util_pct = -1;
};

// Lists and samples the host's GPUs. Implementations are thread-safe.
class GpuInventory {
 public:
  virtual ~GpuInventory() = default;
  // All GPUs of the host, in index order.
  // Errors: UNAVAILABLE when the driver cannot be queried.
  virtual absl::StatusOr<std::vector<GpuInfo>> ListGpus() = 0;
  // One sample of every GPU, in index order.
  // Errors: UNAVAILABLE when the driver cannot be queried.
  virtual absl::StatusOr<std::vector<GpuSample>> Sample() = 0;
  // The compute processes on every GPU now, with what each uses. The
  // default (an inventory that cannot tell) returns none.
  // Errors: UNAVAILABLE when the driver cannot be queried.
  virtual absl::StatusOr<std::vector<ProcessGpuSample>> SampleProcesses() {
    return std::vector<ProcessGpuSample>{};
  }
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_GPU_INVENTORY_H_
