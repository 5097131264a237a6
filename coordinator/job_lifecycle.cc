#include "coordinator/job_lifecycle.h"

#include "absl/strings/str_cat.h"
#include "coordinator/job_facts.h"

namespace trainctl::coord {

AttemptStep RestartOrFail(const v1::Job& job, const std::string& why) {
  AttemptStep step;
  const int failures = job.attempt() - job.preemptions() - job.preflight().requeues();
  if (failures < job.spec().max_restarts()) {
    step.kind = AttemptStep::Kind::kRestart;
    step.reason = absl::StrCat("attempt ", job.attempt(), " failed: ", why, "; restarting (",
                               failures + 1, " of ", job.spec().max_restarts(), " restarts)");
  } else {
    step.kind = AttemptStep::Kind::kFail;
    step.reason = why;
  }
  return step;
}

AttemptStep DecideAttempt(const v1::Job& job, bool oom_requeue_possible) {
  AttemptStep step;
  if (IsFinal(job.state()) || job.state() == v1::JOB_STATE_PENDING) return step;
  if (InPreflight(job)) {
    step.kind = AttemptStep::Kind::kJudgePreflight;
    return step;
  }
  if (oom_requeue_possible && job.spec().auto_pack()) {
    for (const v1::Task& t : job.tasks()) {
      if (TaskFailed(t) && t.out_of_memory()) {
        step.kind = AttemptStep::Kind::kRequeueAfterOom;
        step.rank = t.rank();
        return step;
      }
    }
  }
  for (const v1::Task& t : job.tasks()) {
    if (!TaskFailed(t)) continue;
    std::string why = absl::StrCat("rank ", t.rank(), " on ", t.node(), " ", ExitText(t));
    if (job.world_size() > 1) {
      absl::StrAppend(&why, "; see `trainctl logs ", job.id(), " --rank ", t.rank(), "`");
    }
    return RestartOrFail(job, why);
  }
  for (const v1::Task& t : job.tasks()) {
    if (t.state() != v1::TASK_STATE_EXITED) return step;
  }
  step.kind = AttemptStep::Kind::kSucceed;
  return step;
}

}  // namespace trainctl::coord
