// Scheduler: preemption (Preemption, PolicyConfig.preemption). Which
// preemptible running jobs a blocked job outranks, and the search for the
// victims whose GPUs let it fit (lowest rank first, then sparing those it
// does not need).

#include "coordinator/sched/preemption.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace trainctl::sched::internal {

// Whether a job of (priority, LAS level, submit_seq) `a` may preempt a
// preemptible job `b`: lower priority, or equal priority and a deeper
// level; with overtake_preemption also equal priority and level and `b`
// submitted later. Jobs of one level do not preempt each other by default:
// they would take turns at every scheduling event (LAS's round robin at
// event granularity), paying a restart each time.
bool OutranksForPreemption(const PolicyConfig& policy, int a_priority,
                           int a_level, int64_t a_seq, int b_priority,
                           int b_level, int64_t b_seq) {
  if (b_priority != a_priority) return b_priority < a_priority;
  if (b_level != a_level) return b_level > a_level;
  return policy.overtake_preemption && b_seq > a_seq;
}

// Whether `job` may preempt running job `r`.
bool Preemption::MayPreempt(const JobRequest& job, const RunningJob& r) const {
  if (!r.preemptible) return false;
  const PolicyConfig& policy = state_.policy();
  return OutranksForPreemption(
      policy, job.priority, LasLevel(policy, job.attained_gpu_s),
      job.submit_seq, r.priority, LasLevel(policy, r.attained_gpu_s),
      r.submit_seq);
}

// Whether any running job not yet evicted is one `job` may preempt
// (MayPreempt), in O(log priorities) instead of O(running jobs).
bool Preemption::AnyMayBePreempted(const JobRequest& job) {
  return AnyMayBePreempted(job.priority,
                           LasLevel(state_.policy(), job.attained_gpu_s),
                           job.submit_seq);
}

// AnyMayBePreempted for a job of (priority, LAS level, submit_seq).
bool Preemption::AnyMayBePreempted(int priority, int level,
                                   int64_t submit_seq) {
  const PolicyConfig& policy = state_.policy();
  if (!preemptible_summary_) {
    preemptible_summary_.emplace();
    const std::vector<RunningJob>& running = state_.running();
    for (int i = 0; i < static_cast<int>(running.size()); ++i) {
      const RunningJob& r = running[i];
      if (state_.evicted(i) || !r.preemptible) continue;
      auto [it, added] = preemptible_summary_->insert(
          {r.priority, {LasLevel(policy, r.attained_gpu_s), r.submit_seq}});
      if (!added) {
        it->second.first =
            std::max(it->second.first, LasLevel(policy, r.attained_gpu_s));
        it->second.second = std::max(it->second.second, r.submit_seq);
      }
    }
  }
  if (preemptible_summary_->empty()) return false;
  if (preemptible_summary_->begin()->first < priority) return true;
  auto it = preemptible_summary_->find(priority);
  if (it == preemptible_summary_->end()) return false;
  // A superset of OutranksForPreemption at equal priority: a deeper level
  // somewhere, or (overtake_preemption) a later submit somewhere.
  return it->second.first > level ||
         (policy.overtake_preemption && it->second.second > submit_seq);
}

// Whether `preemptor` is a job of this call's queue not placed yet.
bool Preemption::WaitsForPreemptor(int64_t preemptor) {
  if (queued_ids_.empty()) {
    queued_ids_.reserve(queue_.size());
    for (const JobRequest& j : queue_) queued_ids_.insert(j.job_id);
  }
  return queued_ids_.contains(preemptor) && !placed_.contains(preemptor);
}

std::optional<std::vector<int64_t>> Preemption::TryPreempt(
    const JobRequest& job, bool honor_hold,
    absl::FunctionRef<bool()> fits_now) {
  if (!SearchesLeft()) return std::nullopt;
  if (!AnyMayBePreempted(job)) return std::nullopt;
  const PolicyConfig& policy = state_.policy();
  const std::vector<RunningJob>& running = state_.running();
  std::vector<int> candidates;
  for (int i = 0; i < static_cast<int>(running.size()); ++i) {
    if (!state_.evicted(i) && MayPreempt(job, running[i])) {
      candidates.push_back(i);
    }
  }
  if (candidates.empty()) return std::nullopt;
  ++searches_;
  // Fitting is monotone in what is freed, so when stopping every candidate
  // is not enough, no prefix of them is: the search below would free them
  // all one by one and give up.
  if (state_.indexed() && !FitsWithAllFreed(job, honor_hold, candidates)) {
    return std::nullopt;
  }
  // Lowest rank first: lowest priority, deepest LAS level, latest submit.
  std::vector<std::tuple<int, int, int64_t, int>> ranked;
  ranked.reserve(candidates.size());
  for (int c : candidates) {
    const RunningJob& r = running[c];
    ranked.emplace_back(r.priority, -LasLevel(policy, r.attained_gpu_s),
                        -r.submit_seq, c);
  }
  std::sort(ranked.begin(), ranked.end());
  for (size_t i = 0; i < ranked.size(); ++i) {
    candidates[i] = std::get<3>(ranked[i]);
  }
  std::vector<int> chosen;
  bool fits = false;
  for (int c : candidates) {
    state_.ApplyRunning(c, -1);
    chosen.push_back(c);
    if (fits_now()) {
      fits = true;
      break;
    }
  }
  if (!fits) {
    for (int c : chosen) state_.ApplyRunning(c, +1);
    return std::nullopt;
  }
  // Spare victims it does not need, the most valuable (last chosen) first.
  std::vector<int> victims;
  for (int i = static_cast<int>(chosen.size()) - 2; i >= 0; --i) {
    state_.ApplyRunning(chosen[i], +1);
    if (!fits_now()) {
      state_.ApplyRunning(chosen[i], -1);
      victims.push_back(chosen[i]);
    }
  }
  victims.push_back(chosen.back());
  std::vector<int64_t> ids;
  preemptible_summary_.reset();
  last_victims_ = victims;
  for (int v : victims) {
    state_.Evict(v);
    const RunningJob& r = running[v];
    ranking_.AddUsage(QueueName(r.queue), r.user, r.project,
                      state_.UsageOf(r.placement), -1);
    ids.push_back(r.job_id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Whether `job` would fit (FitsNow) once the running jobs `freed` were
// stopped, without changing the state: O(GPUs of `freed` + nodes x
// layouts). Exact when the running jobs' reservations are counted in their
// GPUs' state, as ClusterSnapshot requires.
bool Preemption::FitsWithAllFreed(const JobRequest& job, bool honor_hold,
                                  const std::vector<int>& freed) {
  const std::vector<NodeState>& nodes = state_.nodes();
  // (node, GPU position) -> tasks and bytes freed on it.
  absl::flat_hash_map<std::pair<int, int>, std::pair<int, int64_t>> gpus;
  for (int i : freed) {
    for (const auto& [n, positions] : state_.RunningGpus(i)) {
      for (int g : positions) {
        auto& [tasks, bytes] = gpus[{n, g}];
        tasks += 1;
        bytes +=
            PlacementBytesOn(state_.running()[i].placement, nodes[n].gpus[g]);
      }
    }
  }
  // A freed GPU as ApplyRunning(-1) would leave it (it clamps at 0).
  auto after = [&](int n, int g, const std::pair<int, int64_t>& f) {
    GpuState gpu = nodes[n].gpus[g];
    gpu.reserved_bytes = std::max<int64_t>(0, gpu.reserved_bytes - f.second);
    gpu.task_count = std::max(0, gpu.task_count - f.first);
    return gpu;
  };
  if (job.kind == JobKind::kExperiment) {
    for (const auto& [ng, f] : gpus) {
      const auto [n, g] = ng;
      if (!nodes[n].schedulable || (honor_hold && state_.IsHeld(n, g))) {
        continue;
      }
      const GpuState gpu = after(n, g, f);
      if (IsUsable(gpu) && gpu.task_count < state_.config().max_tasks_per_gpu &&
          ReservationBytes(job, gpu.memory_total_bytes) <= FreeBytes(gpu)) {
        return true;
      }
    }
    // The GPUs not freed did not fit before (Place failed).
    return false;
  }
  std::vector<int> free(nodes.size());
  for (int n = 0; n < static_cast<int>(nodes.size()); ++n) {
    free[n] = state_.GangFreeCount(n, honor_hold);
  }
  for (const auto& [ng, f] : gpus) {
    const auto [n, g] = ng;
    if (!nodes[n].schedulable || (honor_hold && state_.IsHeld(n, g))) continue;
    free[n] += static_cast<int>(IsWholeFree(after(n, g, f))) -
               static_cast<int>(IsWholeFree(nodes[n].gpus[g]));
  }
  for (const Layout& layout :
       GangLayouts(job, static_cast<int>(nodes.size()))) {
    int fitting = 0;
    for (int count : free) fitting += count >= layout.per_node;
    if (fitting >= layout.nodes) return true;
  }
  return false;
}

}  // namespace trainctl::sched::internal
