#ifndef TRAINCTL_COORDINATOR_SCHED_INTERLEAVE_PACKER_H_
#define TRAINCTL_COORDINATOR_SCHED_INTERLEAVE_PACKER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "coordinator/sched/interleave.h"
#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::sched::internal {

// Interleave packing in one Schedule() call (PolicyConfig.interleave): the
// groups of jobs with identical placements (running jobs, and this call's
// placements), and packing a waiting gang with a usable interleave profile
// onto the group it interleaves with best (highest utilization, then fewer
// jobs), on those jobs' GPUs, when the group takes its GPU count and layout,
// none of its GPUs is held, and the interleave arithmetic (interleave.h)
// finds the packing worthwhile. Off, at no cost, when packing is disabled
// or no gang of the queue has a usable profile. Single-threaded: used within
// one Schedule() call.
class InterleavePacker {
 public:
  // Over `state` (must outlive it); inactive until Init.
  explicit InterleavePacker(PassState& state) : state_(state) {}

  // Groups the running jobs by placement when packing is on and some gang
  // of `queue` has a usable profile.
  void Init(const std::vector<JobRequest>& queue);
  // Whether this call may pack.
  bool active() const { return active_; }

  // Adds placed job `job_id` (profile `profile`, which must outlive the
  // pass) to the group of `placement`.
  void AddPlaced(const Placement& placement, int64_t job_id,
                 const InterleaveProfile* profile) {
    AddMember(placement, {job_id, profile, -1});
  }

  // Packs `job` onto the best group that takes it; `hold_taken`: whether
  // the head-of-queue hold is taken. On success fills `decision` (kPlaced,
  // the group's placement, packed_with, reason), adds the job's tasks to
  // those GPUs and returns true; the caller accounts the placement (and
  // calls AddPlaced). False, nothing changed, when no group takes it.
  bool TryPack(const JobRequest& job, bool hold_taken, Decision& decision);

 private:
  // A running job, or a job placed by this call (running == -1), on the
  // GPUs of a group.
  struct GroupMember {
    int64_t job_id = 0;
    const InterleaveProfile* profile = nullptr;
    // Position in PassState::running(), or -1 for a placement of this call.
    int running = -1;
  };
  // Jobs with identical placements: they share those GPUs.
  struct PackGroup {
    Placement placement;
    int gpus = 0;
    std::vector<GroupMember> members;
  };

  static std::string PlacementKey(const Placement& placement);
  void AddMember(const Placement& placement, GroupMember member);
  bool GroupTakes(const JobRequest& job, const PackGroup& g,
                  bool hold_taken) const;
  std::pair<double, double> GroupFigures(
      std::vector<const InterleaveProfile*> members);

  PassState& state_;
  bool active_ = false;
  std::vector<PackGroup> groups_;
  // PlacementKey -> index in groups_.
  absl::flat_hash_map<std::string, size_t> group_of_;
  // (shape, profile) -> the state version at which it last found no group.
  absl::flat_hash_map<std::vector<double>, int64_t> failed_;
  // GroupFigures by the members' profiles.
  absl::flat_hash_map<std::vector<double>, std::pair<double, double>> figures_;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_INTERLEAVE_PACKER_H_
