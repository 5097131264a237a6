// Scheduler: the head-of-queue reservation ("hold"): which later jobs may
// still use held GPUs, what an experiment or a gang holds, its estimated
// start from the running jobs' time limits, and the reason of a job that
// waits behind it.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

// Whether `job`, after the holder in queue order, may use held GPUs: it
// cannot delay the holder.
bool SchedulePass::MayUseHold(const JobRequest& job) const {
  return MayUseHold(job.priority, LasLevel(policy_, job.attained_gpu_s),
                    job.submit_seq, job.time_limit_s, job.preemptible);
}

// MayUseHold for a job of these values (the tail's fast path has them
// without the JobRequest).
bool SchedulePass::MayUseHold(int priority, int level, int64_t submit_seq,
                              int64_t time_limit_s, bool preemptible) const {
  if (!hold_taken_) return false;
  if (hold_eta_s_ >= 0 && time_limit_s > 0 &&
      static_cast<double>(time_limit_s) <= hold_eta_s_) {
    return true;
  }
  // A preemptible job the holder may preempt (MayPreempt's rule) cannot
  // delay it either.
  if (!policy_.preemption || !preemptible) return false;
  return OutranksForPreemption(holder_priority_, holder_level_,
                               holder_submit_seq_, priority, level,
                               submit_seq);
}

void SchedulePass::HoldForExperiment(const JobRequest& job) {
  std::optional<GpuRef> best;
  // (-memory, -free bytes now, name, index).
  std::tuple<int64_t, int64_t, absl::string_view, int> best_key;
  for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
    const NodeState& node = nodes_[n];
    if (!node.schedulable) continue;
    for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
      const GpuState& gpu = node.gpus[g];
      if (!IsUsable(gpu)) continue;
      if (ReservationBytes(job, gpu.memory_total_bytes) >
          gpu.memory_total_bytes) {
        continue;
      }
      auto key = std::make_tuple(-gpu.memory_total_bytes, -FreeBytes(gpu),
                                 absl::string_view(node.name), gpu.index);
      if (!best || key < best_key) {
        best = GpuRef{n, g};
        best_key = key;
      }
    }
  }
  if (!best) return;
  held_[best->node][best->gpu] = true;
  NodeChanged(best->node);
  const NodeState& node = nodes_[best->node];
  held_description_ =
      absl::StrFormat("GPU %d on %s", node.gpus[best->gpu].index, node.name);
}

void SchedulePass::HoldForGang(const JobRequest& job) {
  const int node_count = static_cast<int>(nodes_.size());
  for (const Layout& layout : GangLayouts(job, node_count)) {
    std::vector<int> candidates;
    for (int n = 0; n < node_count; ++n) {
      if (nodes_[n].schedulable &&
          shape_.gpus_on_node[n] >= layout.per_node) {
        candidates.push_back(n);
      }
    }
    if (static_cast<int>(candidates.size()) < layout.nodes) continue;
    // Most GPUs first, then most whole free GPUs now, then name.
    auto key = [this](int n) {
      return std::make_tuple(-shape_.gpus_on_node[n],
                             indexed_ ? -whole_free_[n]
                                      : -WholeFreeCount(nodes_[n]),
                             absl::string_view(nodes_[n].name));
    };
    std::sort(candidates.begin(), candidates.end(),
              [&](int a, int b) { return key(a) < key(b); });
    std::vector<std::string> names;
    for (int i = 0; i < layout.nodes; ++i) {
      const int n = candidates[i];
      std::fill(held_[n].begin(), held_[n].end(), true);
      NodeChanged(n);
      names.push_back(nodes_[n].name);
    }
    held_description_ = absl::StrCat(names.size() == 1 ? "node " : "nodes ",
                                     JoinList(names, "and"));
    return;
  }
}

// Seconds until the held GPUs free up enough for `job`, from the time
// limits of the running jobs on them; -1 when unknown.
double SchedulePass::HoldEta(const JobRequest& job) {
  std::vector<int> on_hold;
  for (int i = 0; i < static_cast<int>(running_.size()); ++i) {
    if (evicted_[i]) continue;
    bool touches = false;
    for (const NodeAssignment& a : running_[i].placement.nodes) {
      auto it = node_index_.find(a.node);
      if (it == node_index_.end()) continue;
      const std::vector<GpuState>& gpus = nodes_[it->second].gpus;
      for (int g = 0; g < static_cast<int>(gpus.size()); ++g) {
        if (held_[it->second][g] &&
            std::find(a.gpu_indices.begin(), a.gpu_indices.end(),
                      gpus[g].index) != a.gpu_indices.end()) {
          touches = true;
        }
      }
    }
    if (touches) on_hold.push_back(i);
  }
  std::sort(on_hold.begin(), on_hold.end(), [this](int a, int b) {
    const double x = running_[a].remaining_s;
    const double y = running_[b].remaining_s;
    // Unknown ends (< 0) last.
    return std::make_tuple(x < 0, x) < std::make_tuple(y < 0, y);
  });
  double eta = -1;
  std::vector<int> released;
  for (int i : on_hold) {
    if (running_[i].remaining_s < 0) break;
    ApplyRunning(i, -1);
    released.push_back(i);
    if (FitsNow(job, /*honor_hold=*/false)) {
      eta = running_[i].remaining_s;
      break;
    }
  }
  for (int i : released) ApplyRunning(i, +1);
  return eta;
}

// For a job that would fit now but for the hold.
std::string SchedulePass::BlockedByHoldReason() const {
  return absl::StrFormat(
             "waiting for job %d, earlier in the queue, which has reserved %s "
             "until enough of it drains",
             holder_job_id_, held_description_) +
         (hold_eta_s_ >= 0 ? absl::StrCat(" (estimated in ",
                                          ShortDuration(hold_eta_s_), ")")
                           : std::string());
}

}  // namespace trainctl::sched::internal
