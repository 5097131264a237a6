#ifndef TRAINCTL_COORDINATOR_JOB_WAITERS_H_
#define TRAINCTL_COORDINATOR_JOB_WAITERS_H_

// Callers of WaitJob waiting for a job to end (`trainctl wait`, the SDK's
// Job.wait()), each with its deadline. The coordinator answers a job's
// waiters when the job becomes final (TakeAll) and answers the ones whose
// deadline passed with the job as it is then (Expire).
//
// Not thread-safe: called under the coordinator's lock, which guards it.
// Nothing here calls a callback: they are handed back to the caller, who runs
// them after releasing its lock. No clock: times come in as arguments.

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

class JobWaiters {
 public:
  // Gets the job when it ends or at the deadline (the caller checks which).
  using Done = absl::AnyInvocable<void(absl::StatusOr<v1::Job>)>;
  // A waiter whose deadline passed, and the job it waits for.
  struct Expired {
    int64_t job_id;
    Done done;
  };

  // Adds a waiter of job `job_id` answered at the latest at `deadline`.
  void Add(int64_t job_id, absl::Time deadline, Done done);

  // Removes and returns every waiter of job `job_id` (it just ended); empty
  // when it has none.
  std::vector<Done> TakeAll(int64_t job_id);

  // Removes and returns the waiters whose deadline is at or before `now`, in
  // job id order (per job, in the order they were added).
  std::vector<Expired> Expire(absl::Time now);

  // Waiters now, all jobs together.
  size_t size() const;

 private:
  struct Waiter {
    absl::Time deadline;
    Done done;
  };
  absl::flat_hash_map<int64_t, std::vector<Waiter>> by_job_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_JOB_WAITERS_H_
