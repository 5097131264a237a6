#ifndef TRAINCTL_COORDINATOR_SCHED_RESERVATION_H_
#define TRAINCTL_COORDINATOR_SCHED_RESERVATION_H_

#include <cstdint>
#include <string>

#include "absl/functional/function_ref.h"
#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::sched::internal {

// The head-of-queue reservation ("hold") of one Schedule() call: the first
// job that waits long enough (PolicyConfig.reservation_min_wait_s) takes it
// and marks GPUs in the PassState held for itself (Take); jobs after it in
// queue order may use held GPUs only when they cannot delay it (MayUse):
// they end, by their time limit, before its estimated start, or it may
// preempt them. Holds at most once per call. Times are seconds from now;
// the estimate comes from the running jobs' remaining_s and is < 0 when
// unknown. Single-threaded: used within one Schedule() call.
class Reservation {
 public:
  // A hold not taken yet, under `state`'s policy.
  explicit Reservation(PassState& state) : state_(state) {}

  // Whether the hold is taken, by which job, what it covers ("nodes a and
  // b", "GPU 3 on a") and its estimated start in seconds (< 0: unknown).
  bool taken() const { return taken_; }
  int64_t holder_job_id() const { return holder_job_id_; }
  const std::string& description() const { return description_; }
  double eta_s() const { return eta_s_; }

  // Whether `job`, after the holder in queue order, may use held GPUs: it
  // cannot delay the holder. False while the hold is not taken.
  bool MayUse(const JobRequest& job) const;
  // MayUse for a job of these values (the tail's fast path has them
  // without the JobRequest).
  bool MayUse(int priority, int level, int64_t submit_seq, int64_t time_limit_s,
              bool preemptible) const;

  // Takes the hold for `job` (call at most once, when !taken()): for a gang,
  // every GPU of the nodes with the most GPUs that could hold the first of
  // its layouts enough schedulable nodes could hold when empty; for an
  // experiment, the largest GPU its reservation fits. Then estimates its
  // start: running jobs on held GPUs are freed in order of their
  // remaining_s until `fits_without_hold` (asked with the hold ignored)
  // says `job` fits; the estimate is that job's remaining_s. Leaves the
  // state as it found it but for the held marks.
  void Take(const JobRequest& job, absl::FunctionRef<bool()> fits_without_hold);

  // The reason of a job that would fit now but for the hold.
  std::string BlockedReason() const;

 private:
  void HoldForExperiment(const JobRequest& job);
  void HoldForGang(const JobRequest& job);
  double Eta(absl::FunctionRef<bool()> fits_without_hold);

  PassState& state_;
  bool taken_ = false;
  int64_t holder_job_id_ = 0;
  int holder_priority_ = 0;
  int64_t holder_submit_seq_ = 0;
  int holder_level_ = 0;
  double eta_s_ = -1;
  std::string description_;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_RESERVATION_H_
