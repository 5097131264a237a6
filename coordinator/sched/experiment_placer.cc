// Scheduler: experiments (ExperimentPlacer; a share of one GPU): the
// best-fit GPU, from the free-capacity indexes or by the reference scan of
// every GPU, placing one, and why one waits.

#include "coordinator/sched/experiment_placer.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace trainctl::sched::internal {

std::optional<GpuRef> ExperimentPlacer::Find(const JobRequest& job,
                                             bool honor_hold) const {
  return state_.indexed()
             ? state_.index().BestExperimentGpu(job, honor_hold, state_.held())
             : FindLinear(job, honor_hold);
}

// The reference: every GPU of the cluster, O(GPUs).
std::optional<GpuRef> ExperimentPlacer::FindLinear(const JobRequest& job,
                                                   bool honor_hold) const {
  const std::vector<NodeState>& nodes = state_.nodes();
  std::optional<GpuRef> best;
  // (room left after placing, whole free GPUs on the node, name, index).
  std::tuple<int64_t, int, absl::string_view, int> best_key;
  for (int n = 0; n < static_cast<int>(nodes.size()); ++n) {
    const NodeState& node = nodes[n];
    if (!node.schedulable) continue;
    const int whole_free = WholeFreeCount(node);
    for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
      const GpuState& gpu = node.gpus[g];
      if (!IsUsable(gpu) || (honor_hold && state_.IsHeld(n, g))) continue;
      if (gpu.task_count >= state_.config().max_tasks_per_gpu) continue;
      const int64_t want = ReservationBytes(job, gpu.memory_total_bytes);
      const int64_t free = FreeBytes(gpu);
      if (want > free) continue;
      auto key = std::make_tuple(free - want, whole_free,
                                 absl::string_view(node.name), gpu.index);
      if (!best || key < best_key) {
        best = GpuRef{n, g};
        best_key = key;
      }
    }
  }
  return best;
}

bool ExperimentPlacer::Place(const JobRequest& job, bool honor_hold,
                             Placement& placement) {
  std::optional<GpuRef> ref = Find(job, honor_hold);
  if (!ref) return false;
  NodeState& node = state_.MutableNode(ref->node);
  GpuState& gpu = node.gpus[ref->gpu];
  const int64_t want = ReservationBytes(job, gpu.memory_total_bytes);
  gpu.reserved_bytes = std::max<int64_t>(gpu.reserved_bytes, 0) + want;
  ++gpu.task_count;
  placement.nodes.push_back(NodeAssignment{node.name, {gpu.index}});
  placement.reserved_bytes_per_gpu = want;
  placement.whole_gpus = want >= gpu.memory_total_bytes;
  state_.NodeChanged(ref->node);
  return true;
}

ExperimentFacts ExperimentPlacer::WaitFacts(const JobRequest& job,
                                            bool hold_taken) const {
  ExperimentFacts f;
  if (hold_taken && Find(job, /*honor_hold=*/false)) {
    f.blocked_by_hold = true;
    return f;
  }
  if (state_.indexed()) {
    for (const FreeCapacityIndex::MemoryClass& c : state_.index().classes()) {
      if (c.free_all.empty()) continue;
      const int64_t most = *c.free_all.rbegin();
      f.max_free = std::max(f.max_free, most);
      if (ReservationBytes(job, c.memory_bytes) <= most) {
        f.task_limited = true;
      }
    }
    return f;
  }
  for (const NodeState& node : state_.nodes()) {
    if (!node.schedulable) continue;
    for (const GpuState& gpu : node.gpus) {
      if (!IsUsable(gpu)) continue;
      f.max_free = std::max(f.max_free, FreeBytes(gpu));
      if (ReservationBytes(job, gpu.memory_total_bytes) <= FreeBytes(gpu)) {
        f.task_limited = true;  // Room enough, so the task count blocks it.
      }
    }
  }
  return f;
}

std::string ExperimentPlacer::WaitReason(const JobRequest& job,
                                         const ExperimentFacts& f) const {
  std::string want;
  if (job.gpu_memory_bytes > 0) {
    want = absl::StrFormat("%s free on one GPU", GiB(job.gpu_memory_bytes));
  } else if (job.gpu_fraction >= 1.0) {
    want = "a whole free GPU";
  } else {
    want = absl::StrFormat(
        "%g%% of one GPU free (%s on the largest GPU)",
        job.gpu_fraction * 100.0,
        GiB(ReservationBytes(job, state_.shape().max_gpu_memory_bytes)));
  }
  std::string now =
      f.task_limited
          ? absl::StrFormat(
                "every GPU with that much free memory already runs %d "
                "tasks, the limit",
                state_.config().max_tasks_per_gpu)
          : absl::StrFormat("at most %s free on any GPU", GiB(f.max_free));
  return absl::StrFormat("waiting for %s (now %s%s)", want, now,
                         state_.shape().LostNote());
}

}  // namespace trainctl::sched::internal
