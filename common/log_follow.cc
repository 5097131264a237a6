#include "common/log_follow.h"

namespace trainctl {

LogFollow::Next LogFollow::OnRead(const absl::StatusOr<v1::GetLogsResponse>& r) {
  if (r.ok()) {
    offset_ = r->next_offset();
    if (r->eof()) return Next::kDone;
    if (!r->data().empty()) return Next::kRead;
    // Caught up with the log; one more read after the job is final collects
    // the rest of it.
    if (!follow_ || job_final_) return Next::kDone;
    return Next::kWait;
  }
  if (follow_ && !job_final_ && !job_placed_ &&
      r.status().code() == absl::StatusCode::kNotFound) {
    return Next::kWait;
  }
  return Next::kFail;
}

bool LogFollow::OnWaited(const v1::Job& job, bool final) {
  job_final_ = final;
  job_placed_ = job.tasks_size() > 0;
  const bool restarted = attempt_ >= 0 && job.attempt() != attempt_;
  if (restarted) offset_ = 0;
  attempt_ = job.attempt();
  return restarted;
}

}  // namespace trainctl
