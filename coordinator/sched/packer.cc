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
                          int64_t job_memory_bytes, int64_t now_ms,
                          const std::string& group, bool declared) const {
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
      bool same_group = !group.empty();
      int64_t peak = 0;
      // What trials that have not settled may still grow into: their
      // reservation above their peak so far (the GPU's measured use lags a
      // trial that has just started).
      int64_t growth = 0;
      for (const PackedTrial& t : g.trials) {
        const bool settled = Settled(g.node, g.index, t.job_id, t.start_ms, now_ms);
        if (!settled) {
          settling = true;
          growth += std::max<int64_t>(0, t.reserved_bytes - t.peak_memory_bytes);
        }
        same_group = same_group && t.group == group;
        peak = std::max(peak, t.peak_memory_bytes);
      }
      // Rule 3: a sweep's trials up to the GPU's plan need no settling.
      const int planned = same_group && config_.fast_ramp ? PlannedFor(g, group) : 0;
      // Rule 3a: before the sweep's first plan here, declared sizes stand in
      // for measurements (the memory checks below still apply).
      const bool declared_start = same_group && config_.fast_ramp && declared &&
                                  job_memory_bytes > 0 && planned == 0;
      const bool ramp = (n > 0 && n < planned) || declared_start;
      if (!ramp && settling) {
        refuse(g, "waiting for its newest trial to settle before measuring");
        continue;
      }
      const bool util_room = g.util_pct < config_.util_target_pct;
      const bool gpm_room = g.gpm && g.sm_active_pct < config_.sm_active_target_pct &&
                            g.dram_bw_pct < config_.dram_bw_target_pct;
      if (!ramp && !util_room && !gpm_room &&
          !ThroughputInvitesMore(g.node, g.index, n)) {
        refuse(g, g.gpm ? absl::StrFormat(
                              "measured SM activity %.0f%% and DRAM bandwidth %.0f%% "
                              "leave no room (targets %.0f%% and %.0f%%)",
                              g.sm_active_pct, g.dram_bw_pct,
                              config_.sm_active_target_pct, config_.dram_bw_target_pct)
                        : absl::StrFormat("measured utilization %.0f%% is at or above "
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
      const int64_t used =
          std::max(g.memory_used_bytes, g.other_reserved_bytes) + growth;
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
  // The best any smaller k gave (a ramp may skip k - 1).
  double best_smaller = -1;
  for (const auto& [smaller, tp] : g.throughput) {
    if (smaller < k) best_smaller = std::max(best_smaller, tp);
  }
  if (k < 2 || best_smaller < 0) return false;
  if (best >= best_smaller * (1.0 + config_.min_throughput_gain)) return false;
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
  double best_smaller = -1;
  for (const auto& [smaller, figure] : tp) {
    if (smaller < trials) best_smaller = std::max(best_smaller, figure);
  }
  return best_smaller >= 0 &&
         cur->second >= best_smaller * (1.0 + config_.min_throughput_gain);
}

bool Packer::Settled(const std::string& node, int gpu, int64_t job_id,
                     int64_t start_ms, int64_t now_ms) const {
  if (now_ms - start_ms >= config_.settle_ms) return true;
  auto it = learned_.find({node, gpu});
  if (it == learned_.end()) return false;
  const std::vector<int64_t>& s = it->second.settled;
  return std::find(s.begin(), s.end(), job_id) != s.end();
}

int Packer::Planned(const std::string& node, int gpu) const {
  auto it = learned_.find({node, gpu});
  return it == learned_.end() ? 0 : it->second.plan_k;
}

int Packer::PlannedFor(const PackGpu& g, const std::string& group) const {
  auto it = learned_.find({g.node, g.index});
  if (it == learned_.end() || it->second.plan_group != group) return 0;
  return it->second.plan_k;
}

RampPrediction Packer::Predict(const PackGpu& g) const {
  RampPrediction p;
  const int limit = config_.max_tasks_per_gpu;
  p.by_memory = p.by_sm = p.by_dram = p.by_util = limit;
  const int n = static_cast<int>(g.trials.size());
  if (n > 0) {
    int64_t peak = 0;
    for (const PackedTrial& t : g.trials) peak = std::max(peak, t.peak_memory_bytes);
    if (peak == 0) peak = g.memory_used_bytes / n;
    const double per_trial = peak * config_.memory_safety_factor;
    const double usable = (1.0 - config_.memory_headroom_fraction) *
                              static_cast<double>(g.memory_total_bytes) -
                          static_cast<double>(g.other_reserved_bytes);
    if (per_trial > 0) {
      p.by_memory = static_cast<int>(
          std::min<double>(limit, std::floor(std::max(0.0, usable) / per_trial)));
    }
    // A share is what the GPU's figure says per trial; a resource a trial
    // barely touches allows the limit.
    auto by_share = [&](double measured, double target) {
      const double share = measured / n;
      if (share <= 0) return limit;
      return static_cast<int>(std::min<double>(limit, std::floor(target / share)));
    };
    if (g.gpm) {
      p.by_sm = by_share(g.sm_active_pct, config_.sm_active_target_pct);
      p.by_dram = by_share(g.dram_bw_pct, config_.dram_bw_target_pct);
    } else {
      p.by_util = by_share(g.util_pct, config_.util_target_pct);
    }
  }
  p.k = std::min({p.by_memory, p.by_sm, p.by_dram, p.by_util, limit});
  const int cap = Cap(g.node, g.index);
  if (cap > 0) p.k = std::min(p.k, cap);
  p.k = std::max(p.k, 1);
  return p;
}

void Packer::Observe(const std::vector<PackGpu>& gpus, int64_t now_ms) {
  for (const PackGpu& g : gpus) {
    const Key key{g.node, g.index};
    if (g.trials.empty()) {
      // An emptied GPU starts over; its caps and throughput stay.
      if (auto it = learned_.find(key); it != learned_.end()) {
        GpuLearned& l = it->second;
        l.recent.clear();
        l.settled.clear();
        l.plan_group.clear();
        l.plan_k = 0;
        l.planned_with.clear();
      }
      continue;
    }
    GpuLearned& l = learned_[key];
    const int n = static_cast<int>(g.trials.size());
    Obs obs;
    obs.activity = g.gpm ? g.sm_active_pct : g.util_pct;
    for (const PackedTrial& t : g.trials) {
      obs.trials.emplace_back(t.job_id, t.peak_memory_bytes > 0
                                            ? t.peak_memory_bytes
                                            : g.memory_used_bytes / n);
    }
    std::sort(obs.trials.begin(), obs.trials.end());
    auto ids = [](const Obs& o) {
      std::vector<int64_t> v;
      for (const auto& [id, bytes] : o.trials) v.push_back(id);
      return v;
    };
    if (!l.recent.empty() && ids(l.recent.back()) != ids(obs)) l.recent.clear();
    l.recent.push_back(obs);
    const size_t window = static_cast<size_t>(std::max(1, config_.plateau_samples));
    if (l.recent.size() > window) l.recent.erase(l.recent.begin());
    // Plateau: a full window with the same trials, each one's memory and
    // the GPU's activity flat, the GPU busy.
    if (l.recent.size() == window) {
      double lo = 100, hi = 0;
      for (const Obs& o : l.recent) {
        lo = std::min(lo, o.activity);
        hi = std::max(hi, o.activity);
      }
      bool flat = hi - lo <= config_.plateau_activity_tolerance_pct &&
                  lo >= config_.plateau_min_activity_pct;
      for (size_t i = 0; flat && i < obs.trials.size(); ++i) {
        int64_t mlo = obs.trials[i].second, mhi = mlo;
        for (const Obs& o : l.recent) {
          mlo = std::min(mlo, o.trials[i].second);
          mhi = std::max(mhi, o.trials[i].second);
        }
        flat = mhi > 0 && mhi - mlo <= config_.plateau_memory_tolerance * mhi;
      }
      if (flat) {
        for (const auto& [id, bytes] : obs.trials) {
          if (std::find(l.settled.begin(), l.settled.end(), id) == l.settled.end()) {
            l.settled.push_back(id);
          }
        }
      }
    }
    // Rule 3 and the memory back-off, once per settled set of trials.
    bool all_settled = true;
    bool one_group = !g.trials.front().group.empty();
    for (const PackedTrial& t : g.trials) {
      all_settled = all_settled && Settled(g.node, g.index, t.job_id, t.start_ms, now_ms);
      one_group = one_group && t.group == g.trials.front().group;
    }
    const std::vector<int64_t> now_ids = ids(obs);
    if (!all_settled || now_ids == l.planned_with) continue;
    l.planned_with = now_ids;
    const int64_t limit = static_cast<int64_t>(
        (1.0 - config_.memory_headroom_fraction) * g.memory_total_bytes);
    if (n > 1 && std::max(g.memory_used_bytes, g.other_reserved_bytes) > limit) {
      LowerCap(l, n - 1);
    }
    if (!one_group) {
      l.plan_group.clear();
      l.plan_k = 0;
      continue;
    }
    const int predicted = Predict(g).k;
    if (l.plan_group != g.trials.front().group || l.plan_k == 0) {
      // First measurement of this sweep here: the whole prediction.
      l.plan_group = g.trials.front().group;
      l.plan_k = predicted;
    } else {
      // Later ones correct the plan by one.
      l.plan_k = std::clamp(predicted, n - 1, n + 1);
    }
  }
}

int Packer::Cap(const std::string& node, int gpu) const {
  auto it = learned_.find({node, gpu});
  return it == learned_.end() ? 0 : it->second.cap;
}

void Packer::LowerCap(GpuLearned& g, int cap) {
  if (g.cap == 0 || cap < g.cap) g.cap = cap;
}

}  // namespace trainctl::sched
