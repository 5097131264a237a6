#ifndef TRAINCTL_COORDINATOR_JOB_LIFECYCLE_H_
#define TRAINCTL_COORDINATOR_JOB_LIFECYCLE_H_

// What the end of a task means for its job: one pure function of the job's
// record, decided in one place. The coordinator applies the step it returns
// (stops live tasks, moves the job along its state machine, persists once).
//
// The rules, in order:
//   1. A job that is final or PENDING: nothing (a late report).
//   2. A pre-flight runs: the probe's end is judged by the pre-flight
//      (preflight.h), not here.
//   3. A failed task of an auto-packed trial that ran out of GPU memory:
//      requeue the trial asking for more memory (unless the caller says that
//      is no longer possible: it already had the whole GPU).
//   4. A failed task (exit code or signal not 0, could not start, lost): the
//      attempt fails; the job restarts while its failures (attempts that
//      were not preemptions or pre-flight requeues) stay below
//      spec.max_restarts, else it fails.
//   5. A task still live: wait for it.
//   6. Every rank exited 0: the job succeeded.

#include <algorithm>
#include <cstdint>
#include <string>

#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

struct AttemptStep {
  enum class Kind {
    // Nothing to do now (rule 1 or 5).
    kWait,
    // Judge the running pre-flight (rule 2).
    kJudgePreflight,
    // Requeue after running out of GPU memory (rule 3): task `rank`.
    kRequeueAfterOom,
    // Stop live tasks and requeue as a new attempt (rule 4).
    kRestart,
    // Stop live tasks and fail (rule 4).
    kFail,
    // Succeed (rule 6).
    kSucceed,
  };
  Kind kind = Kind::kWait;
  // The job's reason for kRestart and kFail ("rank 1 on node-a exited with
  // code 3; see `trainctl logs 7 --rank 1`", and for a restart the attempt
  // and restart count).
  std::string reason;
  // kRequeueAfterOom: the rank that ran out of memory.
  int rank = 0;
};

// The step a task end of `job` (its tasks as now recorded) calls for.
// `oom_requeue_possible`: false once the caller found rule 3's requeue
// impossible, to get the step the failure calls for instead.
AttemptStep DecideAttempt(const v1::Job& job, bool oom_requeue_possible = true);

// A failed attempt of `job`, for `why`: kRestart (with "attempt N failed:
// WHY; restarting (k of M restarts)") while restarts are left, else kFail
// with `why`. Preemptions and pre-flight requeues use up no restart.
AttemptStep RestartOrFail(const v1::Job& job, const std::string& why);

// How long `job`, being placed at `now_ms` (Unix ms), waited in the queue,
// ms: since the end of its attempt before (its record is the last one until
// this placement opens the next), or since its submit; never negative.
inline int64_t QueueWaitMs(const v1::Job& job, int64_t now_ms) {
  int64_t since_ms = job.submit_time_ms();
  if (job.attempts_size() > 0) {
    since_ms = std::max(since_ms, job.attempts(job.attempts_size() - 1).end_time_ms());
  }
  return std::max<int64_t>(0, now_ms - since_ms);
}

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_JOB_LIFECYCLE_H_
