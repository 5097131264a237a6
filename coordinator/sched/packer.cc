#include "coordinator/sched/packer.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainctl::sched {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace

Packer::Packer(PackerConfig config) : config_(config) {}

PackChoice Packer::Choose(const std::vector<PackGpu>& gpus,
                          int64_t job_memory_bytes, int64_t now_ms) const {
  PackChoice choice;
  // Best candidate so far: (has trials, trial count) larger is better.
  std::tuple<bool, int> best_rank{false, -1};
  std::string why;  // The reason of the first GPU that said no.
  auto refuse = [&](const PackGpu& g, std::string reason) {
    if (why.empty()) {
      why = absl::StrFormat("GPU %d on %s: %s", g.index, g.node, reason);
    }
  };
  for (size_t i = 0; i < gpus.size(); ++i) {
    const PackGpu& g = gpus[i];
    if (!g.schedulable || g.memory_total_bytes <= 0) continue;
    const int n = static_cast<int>(g.trials.size());
    const int64_t total = g.memory_total_bytes;
    const int64_t headroom =
        static_cast<int64_t>(config_.memory_headroom_fraction * total);
    // Never reserve less than the initial share: a trial not measured yet
    // still holds some memory in the scheduler's books.
    int64_t reserve = std::max<int64_t>(
        {job_memory_bytes, 1,
         static_cast<int64_t>(config_.initial_reservation_fraction * total)});
    // Rule 1: an empty GPU takes a trial (if its memory holds the learned
    // request: the reservation check below). Else the measurements decide.
    if (n > 0 || g.other_reserved_bytes > 0) {
      const int cap = Cap(g.node, g.index);
      if (n >= config_.max_tasks_per_gpu || (cap > 0 && n >= cap)) {
        refuse(g, absl::StrFormat("holds %d trials, its limit (%s)", n,
                                  cap > 0 && cap < config_.max_tasks_per_gpu
                                      ? "learned from an out-of-memory error "
                                        "or flat throughput"
                                      : "max trials per GPU"));
        continue;
      }
      bool settling = false;
      int64_t peak = 0;
      for (const PackedTrial& t : g.trials) {
        if (now_ms - t.start_ms < config_.settle_ms) settling = true;
        peak = std::max(peak, t.peak_memory_bytes);
      }
      if (settling) {
        refuse(g, "waiting for its newest trial to settle before measuring");
        continue;
      }
      if (g.util_pct >= config_.util_target_pct &&
          !ThroughputInvitesMore(g.node, g.index, n)) {
        refuse(g, absl::StrFormat("measured utilization %.0f%% is at or above "
                                  "the packing target %d%%",
                                  g.util_pct, config_.util_target_pct));
        continue;
      }
      if (peak == 0 && n > 0) {
        // Nothing per-process: split what the GPU uses evenly.
        peak = g.memory_used_bytes / n;
      }
      const int64_t estimate = std::max<int64_t>(
          reserve, static_cast<int64_t>(std::ceil(peak * config_.memory_safety_factor)));
      const int64_t used = std::max(g.memory_used_bytes, g.other_reserved_bytes);
      const int64_t free_now = total - headroom - used;
      if (estimate > free_now) {
        refuse(g, absl::StrFormat("a trial needs about %.1f GiB, %.1f GiB is free "
                                  "after headroom",
                                  estimate / kGiB, std::max<int64_t>(0, free_now) / kGiB));
        continue;
      }
      reserve = estimate;
    }
    // Whatever the measurements say, the reservations of every job on the
    // GPU (the other jobs' and the trials') plus this one fit its memory:
    // what the scheduler promised another job is never given out again.
    int64_t booked = g.other_reserved_bytes;
    for (const PackedTrial& t : g.trials) booked += t.reserved_bytes;
    if (booked + reserve > total) {
      refuse(g, absl::StrFormat("reservations leave %.1f GiB and a trial reserves %.1f GiB",
                                std::max<int64_t>(0, total - booked) / kGiB,
                                reserve / kGiB));
      continue;
    }
    const std::tuple<bool, int> rank{n > 0, n};
    const bool better =
        !choice.gpu.has_value() || rank > best_rank ||
        (rank == best_rank &&
         std::tie(g.node, g.index) <
             std::tie(gpus[*choice.gpu].node, gpus[*choice.gpu].index));
    if (better) {
      choice.gpu = i;
      choice.reserved_bytes = reserve;
      best_rank = rank;
    }
  }
  if (!choice.gpu.has_value()) {
    choice.reason = why.empty() ? "no GPU is free for an auto-packed trial"
                                : absl::StrCat("auto-pack: ", why);
  }
  return choice;
}

int64_t Packer::OnOutOfMemory(const std::string& node, int gpu, int trials_on_gpu,
                              int64_t peak_memory_bytes, int64_t request_bytes,
                              int64_t memory_total_bytes) {
  LowerCap(learned_[{node, gpu}], std::max(1, trials_on_gpu - 1));
  int64_t next = 2 * std::max(peak_memory_bytes, request_bytes);
  next = std::max(next, memory_total_bytes / 4);
  return std::min(next, memory_total_bytes);
}

bool Packer::ObserveThroughput(const std::string& node, int gpu, int k,
                               double samples_per_s) {
  if (k <= 0 || !(samples_per_s >= 0)) return false;
  GpuLearned& g = learned_[{node, gpu}];
  double& best = g.throughput[k];
  best = std::max(best, samples_per_s);
  auto prev = g.throughput.find(k - 1);
  if (k < 2 || prev == g.throughput.end()) return false;
  if (best >= prev->second * (1.0 + config_.min_throughput_gain)) return false;
  const int before = g.cap;
  LowerCap(g, k - 1);
  return g.cap != before;
}

bool Packer::ThroughputInvitesMore(const std::string& node, int gpu,
                                   int trials) const {
  auto it = learned_.find({node, gpu});
  if (it == learned_.end()) return false;
  const std::map<int, double>& tp = it->second.throughput;
  auto cur = tp.find(trials);
  if (cur == tp.end()) return false;
  if (trials == 1) return true;
  auto prev = tp.find(trials - 1);
  return prev != tp.end() &&
         cur->second >= prev->second * (1.0 + config_.min_throughput_gain);
}

int Packer::Cap(const std::string& node, int gpu) const {
  auto it = learned_.find({node, gpu});
  return it == learned_.end() ? 0 : it->second.cap;
}

void Packer::LowerCap(GpuLearned& g, int cap) {
  if (g.cap == 0 || cap < g.cap) g.cap = cap;
}

}  // namespace trainctl::sched
