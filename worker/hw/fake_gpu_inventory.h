#ifndef TRAINCTL_WORKER_HW_FAKE_GPU_INVENTORY_H_
#define TRAINCTL_WORKER_HW_FAKE_GPU_INVENTORY_H_

// A GpuInventory without GPUs: for tests, the in-process cluster and agents
// started with `--fake-gpus`.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "worker/hw/gpu_inventory.h"

namespace trainctl::worker {

// What the fake GPUs of one node look like.
struct FakeGpuSpec {
  // Number of GPUs, 1..64.
  int count = 0;
  // Product name reported by every GPU.
  std::string model = "Fake GPU";
  // Memory of each GPU in bytes (default 80 GiB).
  int64_t memory_bytes = int64_t{80} << 30;
  // NVLink islands of equal size (count divisible by it): GPUs
  // [k * count / islands, (k + 1) * count / islands) are joined all-to-all;
  // none across islands. 1 (default): one island of all GPUs; count: no
  // NVLink at all.
  int nvlink_islands = 1;
};

// Parses the agent flag `--fake-gpus N[:MODEL[:MEMORY[:islands=K]]]`: "8",
// "4:H100", "4:H100:80GiB" (MEMORY as common/units.h ParseByteSize accepts
// it), "8:H100:80GiB:islands=2" (two NVLink islands of 4 GPUs, as on a
// 2 x 4 NVLink-bridged host).
// Errors: INVALID_ARGUMENT with the reason for malformed text, N outside
// 1..64, an empty MODEL, a MEMORY that is not a positive byte size, or K not
// in 1..N or not dividing N.
absl::StatusOr<FakeGpuSpec> ParseFakeGpuSpec(absl::string_view text);

// `spec.count` identical GPUs of node `node_name`. GPU i has UUID
// "GPU-fake-<node_name>-<i>" (stable across restarts, distinct across nodes),
// and lists the other GPUs of its NVLink island (spec.nvlink_islands) as
// peers.
// Sample() reports zeros until SetSample() scripts a value. SetFailing(true)
// makes ListGpus() and Sample() fail with UNAVAILABLE until
// SetFailing(false). Thread-safe.
class FakeGpuInventory : public GpuInventory {
 public:
  FakeGpuInventory(FakeGpuSpec spec, std::string node_name);

  // Errors: UNAVAILABLE while failing.
  absl::StatusOr<std::vector<GpuInfo>> ListGpus() override;
  // Errors: UNAVAILABLE while failing.
  absl::StatusOr<std::vector<GpuSample>> Sample() override;

  // Errors: UNAVAILABLE while failing.
  absl::StatusOr<std::vector<ProcessGpuSample>> SampleProcesses() override;

  // Makes later Sample() calls report `sample` for GPU `sample.index`; an
  // index outside 0..count-1 is ignored.
  void SetSample(const GpuSample& sample);
  // Makes later SampleProcesses() calls report `samples` (none until set).
  void SetProcessSamples(std::vector<ProcessGpuSample> samples);
  // Turns failure injection on or off.
  void SetFailing(bool failing);

 private:
  const FakeGpuSpec spec_;
  const std::string node_name_;
  absl::Mutex mu_;
  std::vector<GpuSample> samples_ ABSL_GUARDED_BY(mu_);
  std::vector<ProcessGpuSample> process_samples_ ABSL_GUARDED_BY(mu_);
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_FAKE_GPU_INVENTORY_H_
