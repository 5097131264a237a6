#ifndef TRAINCTL_COORDINATOR_SCHED_PREEMPTION_H_
#define TRAINCTL_COORDINATOR_SCHED_PREEMPTION_H_

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/functional/function_ref.h"
#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/queue_ranking.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::sched::internal {

// Preemption in one Schedule() call (PolicyConfig.preemption): which
// preemptible running jobs a blocked job outranks, the search for the
// victims whose GPUs let it fit (lowest rank first, then sparing those it
// does not need; at most max_preemption_searches searches a call), and the
// bookkeeping around it: which running jobs this call evicts (their GPUs
// freed in the PassState, their usage taken off the QueueRanking) and which
// queued jobs this call placed (a job preempted for X waits while X is
// queued and not placed). Running jobs by position in PassState::running().
// Single-threaded: used within one Schedule() call.
class Preemption {
 public:
  // Over `state` and `ranking`, for the pending jobs `queue` (all three
  // must outlive it).
  Preemption(PassState& state, QueueRanking& ranking,
             const std::vector<JobRequest>& queue)
      : state_(state), ranking_(ranking), queue_(queue) {}

  // Whether `job` may preempt running job `r` (r preemptible, and `job`
  // outranks it: OutranksForPreemption).
  bool MayPreempt(const JobRequest& job, const RunningJob& r) const;

  // Whether any running job not yet evicted is one `job` (or a job of
  // these priority, LAS level and submit_seq) may preempt; a superset test,
  // O(log priorities) instead of O(running jobs).
  bool AnyMayBePreempted(const JobRequest& job);
  bool AnyMayBePreempted(int priority, int level, int64_t submit_seq);

  // Whether this call may still search for victims.
  bool SearchesLeft() const {
    return searches_ < state_.policy().max_preemption_searches;
  }

  // Whether `preemptor` is a job of this call's queue not placed yet.
  bool WaitsForPreemptor(int64_t preemptor);
  // Notes that queued job `job_id` was placed by this call.
  void MarkPlaced(int64_t job_id) { placed_.insert(job_id); }

  // Finds running jobs whose preemption lets `job` fit, as `fits_now` (asked
  // with those jobs' GPUs freed) says; on success leaves their GPUs freed,
  // marks them evicted, takes their usage off and returns their ids,
  // ascending. nullopt (state unchanged) when none is found or no search
  // is left.
  std::optional<std::vector<int64_t>> TryPreempt(
      const JobRequest& job, bool honor_hold,
      absl::FunctionRef<bool()> fits_now);

  // The positions of the victims the last successful TryPreempt chose.
  const std::vector<int>& last_victims() const { return last_victims_; }

 private:
  bool FitsWithAllFreed(const JobRequest& job, bool honor_hold,
                        const std::vector<int>& freed);

  PassState& state_;
  QueueRanking& ranking_;
  const std::vector<JobRequest>& queue_;
  std::vector<int> last_victims_;
  // Per priority, the deepest LAS level and the latest submit_seq among the
  // preemptible running jobs not evicted; rebuilt after evictions.
  std::optional<std::map<int, std::pair<int, int64_t>>> preemptible_summary_;
  int searches_ = 0;
  // Ids of the queue's jobs (filled on first use) and of those placed by
  // this call.
  absl::flat_hash_set<int64_t> queued_ids_;
  absl::flat_hash_set<int64_t> placed_;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_PREEMPTION_H_
