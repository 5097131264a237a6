// Scheduler: experiments (a share of one GPU): the best-fit GPU, from the
// free-capacity indexes or by the reference scan of every GPU, placing one,
// and why one waits.

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

// The best-fit GPU for `job` now, skipping held GPUs if `honor_hold`.
std::optional<GpuRef> SchedulePass::FindExperimentGpu(const JobRequest& job,
                                                      bool honor_hold) const {
  return indexed_ ? FindExperimentGpuIndexed(job, honor_hold)
                  : FindExperimentGpuLinear(job, honor_hold);
}

// FindExperimentGpu from the indexes: in each memory class the first GPU
// with free bytes >= the reservation is that class's best fit (the key
// orders by free bytes, then the same ties as the linear scan); the best
// of the classes wins. O(classes x log GPUs), plus the held GPUs skipped.
std::optional<GpuRef> SchedulePass::FindExperimentGpuIndexed(
    const JobRequest& job, bool honor_hold) const {
  std::optional<GpuRef> best;
  // (room left after placing, then ExpKey's ties).
  std::tuple<int64_t, int, int, int, int, int> best_key;
  for (const MemoryClass& c : classes_) {
    const int64_t want = ReservationBytes(job, c.memory_bytes);
    auto it = c.gpus.lower_bound(ExpKey{want, INT32_MIN, INT32_MIN,
                                        INT32_MIN, INT32_MIN, INT32_MIN});
    for (; it != c.gpus.end(); ++it) {
      const auto& [free, whole_free, rank, index, n, g] = *it;
      if (honor_hold && IsHeld(n, g)) continue;
      auto key = std::make_tuple(free - want, whole_free, rank, index, n, g);
      if (!best || key < best_key) {
        best = GpuRef{n, g};
        best_key = key;
      }
      break;
    }
  }
  return best;
}

// The reference: every GPU of the cluster, O(GPUs).
std::optional<GpuRef> SchedulePass::FindExperimentGpuLinear(
    const JobRequest& job, bool honor_hold) const {
  std::optional<GpuRef> best;
  // (room left after placing, whole free GPUs on the node, name, index).
  std::tuple<int64_t, int, absl::string_view, int> best_key;
  for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
    const NodeState& node = nodes_[n];
    if (!node.schedulable) continue;
    const int whole_free = WholeFreeCount(node);
    for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
      const GpuState& gpu = node.gpus[g];
      if (!IsUsable(gpu) || (honor_hold && IsHeld(n, g))) continue;
      if (gpu.task_count >= config_.max_tasks_per_gpu) continue;
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

bool SchedulePass::PlaceExperiment(const JobRequest& job, bool honor_hold,
                                   Placement& placement) {
  std::optional<GpuRef> ref = FindExperimentGpu(job, honor_hold);
  if (!ref) return false;
  NodeState& node = nodes_[ref->node];
  GpuState& gpu = node.gpus[ref->gpu];
  const int64_t want = ReservationBytes(job, gpu.memory_total_bytes);
  gpu.reserved_bytes = std::max<int64_t>(gpu.reserved_bytes, 0) + want;
  ++gpu.task_count;
  placement.nodes.push_back(NodeAssignment{node.name, {gpu.index}});
  placement.reserved_bytes_per_gpu = want;
  placement.whole_gpus = want >= gpu.memory_total_bytes;
  NodeChanged(ref->node);
  return true;
}

SchedulePass::ExperimentFacts SchedulePass::ExperimentWaitFacts(
    const JobRequest& job) const {
  ExperimentFacts f;
  if (hold_taken_ && FindExperimentGpu(job, /*honor_hold=*/false)) {
    f.blocked_by_hold = true;
    return f;
  }
  if (indexed_) {
    for (const MemoryClass& c : classes_) {
      if (c.free_all.empty()) continue;
      const int64_t most = *c.free_all.rbegin();
      f.max_free = std::max(f.max_free, most);
      if (ReservationBytes(job, c.memory_bytes) <= most) {
        f.task_limited = true;
      }
    }
    return f;
  }
  for (const NodeState& node : nodes_) {
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

std::string SchedulePass::ExperimentWaitReason(const JobRequest& job,
                                               const ExperimentFacts& f) const {
  if (f.blocked_by_hold) return BlockedByHoldReason();
  std::string want;
  if (job.gpu_memory_bytes > 0) {
    want = absl::StrFormat("%s free on one GPU", GiB(job.gpu_memory_bytes));
  } else if (job.gpu_fraction >= 1.0) {
    want = "a whole free GPU";
  } else {
    want = absl::StrFormat(
        "%g%% of one GPU free (%s on the largest GPU)",
        job.gpu_fraction * 100.0,
        GiB(ReservationBytes(job, shape_.max_gpu_memory_bytes)));
  }
  std::string now =
      f.task_limited
          ? absl::StrFormat(
                "every GPU with that much free memory already runs %d "
                "tasks, the limit",
                config_.max_tasks_per_gpu)
          : absl::StrFormat("at most %s free on any GPU", GiB(f.max_free));
  return absl::StrFormat("waiting for %s (now %s%s)", want, now,
                         shape_.LostNote());
}

}  // namespace trainctl::sched::internal
