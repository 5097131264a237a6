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
  for (const v1::JobUsageSample& x : samples) {
    s.util_min = std::min(s.util_min, x.gpu_util_pct());
    s.util_max = std::max(s.util_max, x.gpu_util_pct());
    s.memory_min = std::min(s.memory_min, x.gpu_memory_used_bytes());
    s.memory_max = std::max(s.memory_max, x.gpu_memory_used_bytes());
    s.memory_total = std::max(s.memory_total, x.gpu_memory_total_bytes());
    util_sum += x.gpu_util_pct();
    memory_sum += static_cast<double>(x.gpu_memory_used_bytes());
    cpu_sum += x.cpu_pct();
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
  if (s.span_ms < config.min_window_ms) return out;
  const double minutes = s.span_ms / 60000.0;

  if (s.util_mean <= config.idle_util_pct) {
    out.push_back(Finding(
        "idle",
        absl::StrFormat("GPU idle: %.0f%% mean utilization over the last %.1f min. "
                        "The job holds a GPU it does not use: is it waiting on "
                        "I/O or a lock, or running on the CPU only?",
                        s.util_mean, minutes)));
    return out;
  }
  // CPU per task of the job (samples sum their tasks' CPU).
  const double tasks = std::max(1, window.back().tasks());
  if (s.util_mean < config.input_bound_util_pct &&
      s.cpu_mean / tasks >= config.busy_cpu_pct_per_task) {
    out.push_back(Finding(
        "input_bound",
        absl::StrFormat(
            "Input-pipeline bound: the GPU is %.0f%% busy on average while the "
            "CPU runs at %.0f%% of a core per task. The GPU waits for data: use more "
            "DataLoader workers (num_workers > 0), pin_memory=True, and move "
            "augmentation to the GPU or precompute it.",
            s.util_mean, s.cpu_mean / tasks)));
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
                                     return x.gpu_util_pct() < config.pack_util_pct;
                                   });
  if (below >= config.pack_sustained_fraction * window.size()) {
    out.push_back(Finding(
        "pack_candidate",
        auto_packed
            ? absl::StrFormat("GPU utilization below %.0f%% for %.1f min (mean "
                              "%.0f%%): the packer adds trials to its GPU while "
                              "memory and utilization leave room.",
                              config.pack_util_pct, minutes, s.util_mean)
            : absl::StrFormat("Candidate for packing: GPU utilization below "
                              "%.0f%% for %.1f min (mean %.0f%%). Run trials "
                              "like it several to a GPU (`trainctl submit "
                              "--auto-pack`, or --gpu-fraction).",
                              config.pack_util_pct, minutes, s.util_mean)));
  }
  return out;
}

}  // namespace trainctl::coord
