#ifndef TRAINCTL_COORDINATOR_SCHED_GANG_PLACER_H_
#define TRAINCTL_COORDINATOR_SCHED_GANG_PLACER_H_

#include <optional>
#include <string>
#include <vector>

#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

// Places gangs (all or nothing, on whole free GPUs) in one Schedule() call.
// PACK (GangPlacement::kPack) tries the gang's layouts fewest nodes first,
// on best-fit nodes (fewest free GPUs left, then name); SPREAD (kSpread)
// tries them most nodes first, on the emptiest nodes. Within a node it takes
// the GPUs of the smallest NVLink island that has enough, else the lowest
// indexes. From the PassState's per-count node buckets, or by the reference
// scan of every node when the state is not indexed (both give the same
// plan). Also the facts and sentence of a gang that waits. Counts are GPUs;
// nodes by position. Single-threaded: used within one Schedule() call.
class GangPlacer {
 public:
  // Over `state` (must outlive it).
  explicit GangPlacer(PassState& state) : state_(state) {}

  // Where `job` would go now (skipping held GPUs if `honor_hold`): GPU
  // positions per node, in rank order; nullopt when no layout fits.
  std::optional<GangPlan> Find(const JobRequest& job, bool honor_hold) const;
  // Find by the scan of every node (the index's reference).
  std::optional<GangPlan> FindLinear(const JobRequest& job,
                                     bool honor_hold) const;
  // Whether Find would find a plan, without making it.
  bool Fits(const JobRequest& job, bool honor_hold) const;

  // Places `job` on Find's plan: takes those GPUs whole, fills `placement`
  // (reserved_bytes_per_gpu: the smallest of its GPUs' memory). False
  // (nothing changed) when no layout fits.
  bool Place(const JobRequest& job, bool honor_hold, Placement& placement);

  // The layouts of `job` this cluster could ever hold (not empty for a job
  // that passed InfeasibleReason).
  Layouts PossibleLayouts(const JobRequest& job) const;

  // What the reason of a waiting `job` depends on; `hold_taken`: whether
  // the head-of-queue hold is taken (then blocked_by_hold may be set).
  GangFacts WaitFacts(const JobRequest& job, bool hold_taken) const;
  // "waiting for 4 free GPUs on one node (now at most 2 free GPUs on any
  // node)"; for facts not blocked by the hold.
  std::string WaitReason(const JobRequest& job, const GangFacts& f) const;

 private:
  std::optional<GangPlan> FindIndexed(const JobRequest& job,
                                      bool honor_hold) const;
  std::vector<int> PickGpus(int n, int count, bool honor_hold) const;

  PassState& state_;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_GANG_PLACER_H_
