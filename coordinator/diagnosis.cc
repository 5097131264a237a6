#include "coordinator/diagnosis.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace trainctl::coord {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

v1::UsageFinding Finding(const char* code, std::string message) {
  v1::UsageFinding f;
  f.set_code(code);
  f.set_message(std::move(message));
  return f;
}

}  // namespace

UsageSummary Summarize(const std::vector<v1::JobUsageSample>& samples) {
  UsageSummary s;
  if (samples.empty()) return s;
  s.samples = static_cast<int>(samples.size());
  s.span_ms = samples.back().time_ms() - samples.front().time_ms();
  s.util_min = s.util_max = samples.front().gpu_util_pct();
  s.memory_min = s.memory_max = samples.front().gpu_memory_used_bytes();
  double util_sum = 0, memory_sum = 0, cpu_sum = 0;
  double sm_sum = 0, occupancy_sum = 0, dram_sum = 0;
  s.gpm = true;
  s.sm_active_min = s.sm_active_max = samples.front().sm_active_pct();
  for (const v1::JobUsageSample& x : samples) {
    s.util_min = std::min(s.util_min, x.gpu_util_pct());
    s.util_max = std::max(s.util_max, x.gpu_util_pct());
    s.memory_min = std::min(s.memory_min, x.gpu_memory_used_bytes());
    s.memory_max = std::max(s.memory_max, x.gpu_memory_used_bytes());
    s.memory_total = std::max(s.memory_total, x.gpu_memory_total_bytes());
    util_sum += x.gpu_util_pct();
    memory_sum += static_cast<double>(x.gpu_memory_used_bytes());
    cpu_sum += x.cpu_pct();
    s.gpm = s.gpm && x.activity_source() == v1::GPU_ACTIVITY_SOURCE_GPM;
    s.sm_active_min = std::min(s.sm_active_min, x.sm_active_pct());
    s.sm_active_max = std::max(s.sm_active_max, x.sm_active_pct());
    sm_sum += x.sm_active_pct();
    occupancy_sum += x.sm_occupancy_pct();
    dram_sum += x.dram_bw_pct();
  }
  if (s.gpm) {
    s.sm_active_mean = sm_sum / s.samples;
    s.sm_occupancy_mean = occupancy_sum / s.samples;
    s.dram_bw_mean = dram_sum / s.samples;
  } else {
    s.sm_active_min = s.sm_active_max = 0;
  }
  s.util_mean = util_sum / s.samples;
  s.memory_mean = static_cast<int64_t>(memory_sum / s.samples);
  s.cpu_mean = cpu_sum / s.samples;
  return s;
}

std::vector<v1::UsageFinding> Diagnose(const std::vector<v1::JobUsageSample>& samples,
                                       bool auto_packed,
                                       const DiagnosisConfig& config) {
  std::vector<v1::UsageFinding> out;
  if (samples.empty()) return out;
  const int64_t newest = samples.back().time_ms();
  std::vector<v1::JobUsageSample> window;
  for (const v1::JobUsageSample& x : samples) {
    if (newest - x.time_ms() <= config.window_ms) window.push_back(x);
  }
  const UsageSummary s = Summarize(window);
  if (s.span_ms < config.min_window_ms) {
    out.push_back(Finding(
        "not_enough_samples",
        absl::StrFormat("not enough samples yet (needs %d s, has %d s)",
                        config.min_window_ms / 1000, s.span_ms / 1000)));
    return out;
  }
  const double minutes = s.span_ms / 60000.0;
  // Activity: SM activity where GPM measured every sample, else utilization.
  const double activity = s.gpm ? s.sm_active_mean : s.util_mean;
  const char* activity_name = s.gpm ? "SM activity" : "utilization";
  // CPU per task of the job (samples sum their tasks' CPU).
  const double tasks = std::max(1, window.back().tasks());
  const double cpu_per_task = s.cpu_mean / tasks;
  const bool cpu_busy = cpu_per_task >= config.busy_cpu_pct_per_task;
  const char* kInputRemedy =
      "The GPU waits for data: use more DataLoader workers (num_workers > 0, "
      "e.g. one per CPU core the task has), pin_memory=True, prefetch "
      "(prefetch_factor, persistent_workers=True), and move augmentation to "
      "the GPU or precompute it.";

  if (activity <= config.idle_util_pct) {
    if (s.memory_max <= config.idle_memory_bytes) {
      out.push_back(Finding(
          "idle",
          absl::StrFormat("GPU idle: %.0f%% mean GPU %s and no GPU memory over the "
                          "last %.1f min. The job holds a GPU it does not use: is "
                          "it running on the CPU only (a model never moved to "
                          "\"cuda\")?",
                          activity, activity_name, minutes)));
      return out;
    }
    if (cpu_busy) {
      out.push_back(Finding(
          "input_bound",
          absl::StrFormat("Input-pipeline bound: the GPU is nearly idle (%.0f%% mean "
                          "%s) while the job holds %.1f GiB of GPU memory and "
                          "runs its CPU at %.0f%% of a core per task. %s",
                          activity, activity_name, s.memory_max / kGiB,
                          cpu_per_task, kInputRemedy)));
      return out;
    }
    out.push_back(Finding(
        "stalled",
        absl::StrFormat("Stalled: the GPU is nearly idle (%.0f%% mean %s) and the "
                        "CPU too (%.0f%% of a core per task) while the job holds "
                        "%.1f GiB of GPU memory over the last %.1f min: it waits "
                        "on I/O, a lock or a peer rank.",
                        activity, activity_name, cpu_per_task,
                        s.memory_max / kGiB, minutes)));
    return out;
  }
  if (s.util_mean < config.input_bound_util_pct && cpu_busy) {
    out.push_back(Finding(
        "input_bound",
        absl::StrFormat(
            "Input-pipeline bound: the GPU is %.0f%% busy on average while the "
            "CPU runs at %.0f%% of a core per task. %s",
            s.util_mean, cpu_per_task, kInputRemedy)));
  }
  if (s.memory_total > 0 &&
      s.memory_max < config.low_memory_fraction * s.memory_total) {
    out.push_back(Finding(
        "low_memory",
        absl::StrFormat("Low GPU memory use: at most %.1f of %.1f GiB (%.0f%%). "
                        "A larger batch (scale the learning rate with it) or "
                        "more trials per GPU would use it better.",
                        s.memory_max / kGiB, s.memory_total / kGiB,
                        100.0 * s.memory_max / s.memory_total)));
  }
  const auto below = std::count_if(window.begin(), window.end(),
                                   [&](const v1::JobUsageSample& x) {
                                     return (s.gpm ? x.sm_active_pct()
                                                   : x.gpu_util_pct()) <
                                            config.pack_util_pct;
                                   });
  if (below >= config.pack_sustained_fraction * window.size()) {
    out.push_back(Finding(
        "pack_candidate",
        auto_packed
            ? absl::StrFormat("GPU %s below %.0f%% for %.1f min (mean "
                              "%.0f%%): the packer adds trials to its GPU while "
                              "memory and the GPU's activity leave room.",
                              activity_name, config.pack_util_pct, minutes, activity)
            : absl::StrFormat("Candidate for packing: GPU %s below "
                              "%.0f%% for %.1f min (mean %.0f%%). Run trials "
                              "like it several to a GPU (`trainctl submit "
                              "--auto-pack`, or --gpu-fraction).",
                              activity_name, config.pack_util_pct, minutes,
                              activity)));
  }
  return out;
}

}  // namespace trainctl::coord
