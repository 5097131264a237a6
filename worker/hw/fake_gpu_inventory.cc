#include "worker/hw/fake_gpu_inventory.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/units.h"

namespace trainctl::worker {
namespace {

constexpr int kMaxFakeGpus = 64;

absl::Status BadSpec(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "invalid --fake-gpus \"%s\": %s; expected N[:MODEL[:MEMORY[:islands=K]]] "
      "with N in 1..%d, e.g. \"8\", \"4:H100:80GiB\" or "
      "\"8:H100:80GiB:islands=2\"",
      text, why, kMaxFakeGpus));
}

}  // namespace

absl::StatusOr<FakeGpuSpec> ParseFakeGpuSpec(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.size() > 4) return BadSpec(text, "too many ':'-separated fields");
  FakeGpuSpec spec;
  const absl::string_view count_text = absl::StripAsciiWhitespace(parts[0]);
  if (!absl::SimpleAtoi(count_text, &spec.count)) {
    return BadSpec(text, absl::StrFormat("\"%s\" is not a number", count_text));
  }
  if (spec.count < 1 || spec.count > kMaxFakeGpus) {
    return BadSpec(text, absl::StrFormat("%d GPUs is outside 1..%d", spec.count,
                                         kMaxFakeGpus));
  }
  if (parts.size() >= 2) {
    const absl::string_view model = absl::StripAsciiWhitespace(parts[1]);
    if (model.empty()) return BadSpec(text, "MODEL is empty");
    spec.model = std::string(model);
  }
  if (parts.size() >= 3) {
    absl::StatusOr<int64_t> memory = ParseByteSize(parts[2]);
    if (!memory.ok()) return BadSpec(text, memory.status().message());
    if (*memory <= 0) return BadSpec(text, "MEMORY must be positive");
    spec.memory_bytes = *memory;
  }
  if (parts.size() == 4) {
    absl::string_view islands = absl::StripAsciiWhitespace(parts[3]);
    if (!absl::ConsumePrefix(&islands, "islands=") ||
        !absl::SimpleAtoi(islands, &spec.nvlink_islands)) {
      return BadSpec(text, absl::StrFormat("\"%s\" is not islands=K", parts[3]));
    }
    if (spec.nvlink_islands < 1 || spec.nvlink_islands > spec.count ||
        spec.count % spec.nvlink_islands != 0) {
      return BadSpec(text, absl::StrFormat(
                               "islands=%d must be in 1..%d and divide %d",
                               spec.nvlink_islands, spec.count, spec.count));
    }
  }
  return spec;
}

FakeGpuInventory::FakeGpuInventory(FakeGpuSpec spec, std::string node_name)
    : spec_(std::move(spec)), node_name_(std::move(node_name)) {
  samples_.resize(spec_.count > 0 ? spec_.count : 0);
  for (int i = 0; i < static_cast<int>(samples_.size()); ++i) {
    samples_[i].index = i;
  }
}

absl::StatusOr<std::vector<GpuInfo>> FakeGpuInventory::ListGpus() {
  {
    absl::MutexLock lock(&mu_);
    if (failing_) {
      return absl::UnavailableError(absl::StrFormat(
          "fake GPU inventory of node %s: injected failure of ListGpus",
          node_name_));
    }
  }
  std::vector<GpuInfo> gpus(spec_.count > 0 ? spec_.count : 0);
  for (int i = 0; i < static_cast<int>(gpus.size()); ++i) {
    GpuInfo& gpu = gpus[i];
    gpu.index = i;
    gpu.uuid = absl::StrCat("GPU-fake-", node_name_, "-", i);
    gpu.name = spec_.model;
    gpu.memory_total_bytes = spec_.memory_bytes;
    const int islands = spec_.nvlink_islands >= 1 ? spec_.nvlink_islands : 1;
    const int size = std::max(1, spec_.count / islands);
    for (int peer = 0; peer < static_cast<int>(gpus.size()); ++peer) {
      if (peer != i && peer / size == i / size) gpu.nvlink_peers.push_back(peer);
    }
    gpu.mig_enabled = false;
  }
  return gpus;
}

absl::StatusOr<std::vector<GpuSample>> FakeGpuInventory::Sample() {
  absl::MutexLock lock(&mu_);
  if (failing_) {
    return absl::UnavailableError(absl::StrFormat(
        "fake GPU inventory of node %s: injected failure of Sample", node_name_));
  }
  return samples_;
}

void FakeGpuInventory::SetSample(const GpuSample& sample) {
  absl::MutexLock lock(&mu_);
  if (sample.index < 0 || sample.index >= static_cast<int>(samples_.size())) {
    return;
  }
  samples_[sample.index] = sample;
}

void FakeGpuInventory::SetFailing(bool failing) {
  absl::MutexLock lock(&mu_);
  failing_ = failing;
}

absl::StatusOr<std::vector<ProcessGpuSample>> FakeGpuInventory::SampleProcesses() {
  absl::MutexLock lock(&mu_);
  if (failing_) return absl::UnavailableError("fake GPU inventory: failing");
  return process_samples_;
}

void FakeGpuInventory::SetProcessSamples(std::vector<ProcessGpuSample> samples) {
  absl::MutexLock lock(&mu_);
  process_samples_ = std::move(samples);
}

}  // namespace trainctl::worker
