#ifndef TRAINCTL_WORKER_HW_NVML_GPU_INVENTORY_H_
#define TRAINCTL_WORKER_HW_NVML_GPU_INVENTORY_H_

// GpuInventory over NVIDIA's NVML, loaded at run time so the agent builds and
// runs (with fake GPUs) on hosts without the driver.

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "worker/hw/gpu_inventory.h"

namespace trainctl::worker {

// Reads the host's GPUs through libnvidia-ml.so.1 (dlopen'ed by Create()).
// NVLink peers are found from each active link's remote end: a link to
// another GPU makes that GPU a peer (matched by PCI address); links to an
// NVSwitch (HGX/DGX baseboards) make all GPUs attached to NVSwitches peers of
// each other. Owns the NVML session: nvmlShutdown() and dlclose() run in the
// destructor. Thread-safe (one mutex serialises all NVML calls).
class NvmlGpuInventory : public GpuInventory {
 public:
  // Loads NVML and initialises it (nvmlInit_v2).
  // Errors: UNAVAILABLE when libnvidia-ml.so.1 cannot be loaded (no NVIDIA
  // driver), lacks a needed function, or nvmlInit_v2 fails (message includes
  // NVML's error string).
  static absl::StatusOr<std::unique_ptr<NvmlGpuInventory>> Create();

  ~NvmlGpuInventory() override;
  NvmlGpuInventory(const NvmlGpuInventory&) = delete;
  NvmlGpuInventory& operator=(const NvmlGpuInventory&) = delete;

  // Errors: UNAVAILABLE naming the NVML function, GPU index and NVML error
  // (e.g. "GPU is lost") when a query fails.
  absl::StatusOr<std::vector<GpuInfo>> ListGpus() override;
  // Values a GPU does not support (e.g. utilization under MIG, power on some
  // boards) are reported as 0. On GPUs with GPM (nvmlGpmQueryDeviceSupport:
  // Hopper and newer) the sample carries SM activity, SM occupancy and DRAM
  // bandwidth computed between this call's GPM sample and the previous
  // call's (nvmlGpmMetricsGet; calls should be at least 100 ms apart); the
  // first call, GPUs without GPM and a failed GPM read report gpm = false.
  // Errors: UNAVAILABLE as for ListGpus().
  absl::StatusOr<std::vector<GpuSample>> Sample() override;
  // Per-process memory (nvmlDeviceGetComputeRunningProcesses_v3, and
  // nvmlDeviceGetMPSComputeRunningProcesses_v3 for MPS clients) and SM
  // utilization (nvmlDeviceGetProcessUtilization, newer samples than the
  // previous call's). Returns none where the driver lacks the call.
  // Errors: UNAVAILABLE when NVML fails otherwise.
  absl::StatusOr<std::vector<ProcessGpuSample>> SampleProcesses() override;

  // Implementation detail: the NVML entry points, defined in the .cc file.
  struct Api;

 private:
  NvmlGpuInventory(void* library, std::unique_ptr<Api> api);

  absl::Mutex mu_;
  void* const library_;              // dlopen handle.
  const std::unique_ptr<Api> api_ ABSL_PT_GUARDED_BY(mu_);
  // Per GPU, the newest process-utilization timestamp seen (microseconds).
  std::vector<unsigned long long> last_util_timestamp_ ABSL_GUARDED_BY(mu_);

  // GPM state of one GPU: support is queried once; two sample buffers
  // (nvmlGpmSample_t) alternate as previous and current.
  struct GpmState {
    enum { kUnknown, kYes, kNo } support = kUnknown;
    void* previous = nullptr;
    void* current = nullptr;
    bool have_previous = false;
  };
  // Fills the GPM figures of `sample` for GPU `index` (device handle
  // `device`); leaves gpm = false where there are none.
  void SampleGpmLocked(void* device, int index, GpuSample& sample)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<GpmState> gpm_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_NVML_GPU_INVENTORY_H_
