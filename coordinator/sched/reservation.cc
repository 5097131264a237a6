// Scheduler: the head-of-queue reservation ("hold", Reservation): which
// later jobs may still use held GPUs, what an experiment or a gang holds, its
// estimated start from the running jobs' time limits, and the reason of a job
// that waits behind it.

#include "coordinator/sched/reservation.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace trainctl::sched::internal {

// Whether `job`, after the holder in queue order, may use held GPUs: it
// cannot delay the holder.
bool Reservation::MayUse(const JobRequest& job) const {
  return MayUse(job.priority, LasLevel(state_.policy(), job.attained_gpu_s),
                job.submit_seq, job.time_limit_s, job.preemptible);
}

// MayUse for a job of these values (the tail's fast path has them
// without the JobRequest).
bool Reservation::MayUse(int priority, int level, int64_t submit_seq,
                         int64_t time_limit_s, bool preemptible) const {
  if (!taken_) return false;
  if (eta_s_ >= 0 && time_limit_s > 0 &&
      static_cast<double>(time_limit_s) <= eta_s_) {
    return true;
  }
  // A preemptible job the holder may preempt (MayPreempt's rule) cannot
  // delay it either.
  if (!state_.policy().preemption || !preemptible) return false;
  return OutranksForPreemption(state_.policy(), holder_priority_, holder_level_,
                               holder_submit_seq_, priority, level, submit_seq);
}

void Reservation::Take(const JobRequest& job,
                       absl::FunctionRef<bool()> fits_without_hold) {
  taken_ = true;
  holder_job_id_ = job.job_id;
  holder_priority_ = job.priority;
  holder_submit_seq_ = job.submit_seq;
  holder_level_ = LasLevel(state_.policy(), job.attained_gpu_s);
  if (job.kind == JobKind::kExperiment) {
    HoldForExperiment(job);
  } else {
    HoldForGang(job);
  }
  eta_s_ = Eta(fits_without_hold);
  state_.BumpStateVersion();
}

void Reservation::HoldForExperiment(const JobRequest& job) {
  const std::vector<NodeState>& nodes = state_.nodes();
  std::optional<GpuRef> best;
  // (-memory, -free bytes now, name, index).
  std::tuple<int64_t, int64_t, absl::string_view, int> best_key;
  for (int n = 0; n < static_cast<int>(nodes.size()); ++n) {
    const NodeState& node = nodes[n];
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
  state_.Hold(best->node, best->gpu);
  const NodeState& node = nodes[best->node];
  description_ =
      absl::StrFormat("GPU %d on %s", node.gpus[best->gpu].index, node.name);
}

void Reservation::HoldForGang(const JobRequest& job) {
  const std::vector<NodeState>& nodes = state_.nodes();
  const ClusterShape& shape = state_.shape();
  const int node_count = static_cast<int>(nodes.size());
  for (const Layout& layout : GangLayouts(job, node_count)) {
    std::vector<int> candidates;
    for (int n = 0; n < node_count; ++n) {
      if (nodes[n].schedulable && shape.gpus_on_node[n] >= layout.per_node) {
        candidates.push_back(n);
      }
    }
    if (static_cast<int>(candidates.size()) < layout.nodes) continue;
    // Most GPUs first, then most whole free GPUs now, then name.
    auto key = [&](int n) {
      return std::make_tuple(-shape.gpus_on_node[n],
                             state_.indexed()
                                 ? -state_.index().FreeCount(n, false)
                                 : -WholeFreeCount(nodes[n]),
                             absl::string_view(nodes[n].name));
    };
    std::sort(candidates.begin(), candidates.end(),
              [&](int a, int b) { return key(a) < key(b); });
    std::vector<std::string> names;
    for (int i = 0; i < layout.nodes; ++i) {
      const int n = candidates[i];
      state_.HoldNode(n);
      names.push_back(nodes[n].name);
    }
    description_ = absl::StrCat(names.size() == 1 ? "node " : "nodes ",
                                JoinList(names, "and"));
    return;
  }
}

// Seconds until the held GPUs free up enough for the holder, from the time
// limits of the running jobs on them; -1 when unknown.
double Reservation::Eta(absl::FunctionRef<bool()> fits_without_hold) {
  const std::vector<RunningJob>& running = state_.running();
  std::vector<int> on_hold;
  for (int i = 0; i < static_cast<int>(running.size()); ++i) {
    if (state_.evicted(i)) continue;
    bool touches = false;
    for (const NodeAssignment& a : running[i].placement.nodes) {
      const std::optional<int> n = state_.NodeIndex(a.node);
      if (!n) continue;
      const std::vector<GpuState>& gpus = state_.nodes()[*n].gpus;
      for (int g = 0; g < static_cast<int>(gpus.size()); ++g) {
        if (state_.IsHeld(*n, g) &&
            std::find(a.gpu_indices.begin(), a.gpu_indices.end(),
                      gpus[g].index) != a.gpu_indices.end()) {
          touches = true;
        }
      }
    }
    if (touches) on_hold.push_back(i);
  }
  std::sort(on_hold.begin(), on_hold.end(), [&running](int a, int b) {
    const double x = running[a].remaining_s;
    const double y = running[b].remaining_s;
    // Unknown ends (< 0) last.
    return std::make_tuple(x < 0, x) < std::make_tuple(y < 0, y);
  });
  double eta = -1;
  std::vector<int> released;
  for (int i : on_hold) {
    if (running[i].remaining_s < 0) break;
    state_.ApplyRunning(i, -1);
    released.push_back(i);
    if (fits_without_hold()) {
      eta = running[i].remaining_s;
      break;
    }
  }
  for (int i : released) state_.ApplyRunning(i, +1);
  return eta;
}

// For a job that would fit now but for the hold.
std::string Reservation::BlockedReason() const {
  return absl::StrFormat(
             "waiting for job %d, earlier in the queue, which has reserved %s "
             "until enough of it drains",
             holder_job_id_, description_) +
         (eta_s_ >= 0
              ? absl::StrCat(" (estimated in ", ShortDuration(eta_s_), ")")
              : std::string());
}

}  // namespace trainctl::sched::internal
