#ifndef TRAINCTL_COORDINATOR_SCHED_EXPERIMENT_PLACER_H_
#define TRAINCTL_COORDINATOR_SCHED_EXPERIMENT_PLACER_H_

#include <optional>
#include <string>

#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

// Places experiments (a share of one GPU: JobRequest.gpu_fraction or
// gpu_memory_bytes) in one Schedule() call: best fit, the GPU with the least
// room left after the reservation among those where it fits and that run
// fewer than max_tasks_per_gpu tasks (ties: fewer whole free GPUs on the
// node, node name, GPU index). From the PassState's free-capacity index, or
// by the reference scan of every GPU when the state is not indexed (both
// give the same GPU). Also the facts and sentence of an experiment that
// waits. Bytes for memory. Single-threaded: used within one Schedule() call.
class ExperimentPlacer {
 public:
  // Over `state` (must outlive it).
  explicit ExperimentPlacer(PassState& state) : state_(state) {}

  // The best-fit GPU for `job` now, skipping held GPUs if `honor_hold`;
  // nullopt when none has room.
  std::optional<GpuRef> Find(const JobRequest& job, bool honor_hold) const;
  // Find by the scan of every GPU, O(GPUs) (the index's reference).
  std::optional<GpuRef> FindLinear(const JobRequest& job,
                                   bool honor_hold) const;

  // Places `job` on Find's GPU: reserves its bytes there, fills
  // `placement`. False (nothing changed) when no GPU has room.
  bool Place(const JobRequest& job, bool honor_hold, Placement& placement);

  // What the reason of a waiting `job` depends on; `hold_taken`: whether
  // the head-of-queue hold is taken (then blocked_by_hold may be set).
  ExperimentFacts WaitFacts(const JobRequest& job, bool hold_taken) const;
  // "waiting for 25% of one GPU free (20.0 GiB on the largest GPU) (now at
  // most 10.0 GiB free on any GPU)"; for facts not blocked by the hold.
  std::string WaitReason(const JobRequest& job, const ExperimentFacts& f) const;

 private:
  PassState& state_;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_EXPERIMENT_PLACER_H_
