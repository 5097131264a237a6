#include "common/log_follow.h"

namespace trainctl {

LogFollow::Next LogFollow::OnRead(const absl::StatusOr<v1::GetLogsResponse>& r) {
  if (r.ok()) {
    offset_ = r->next_offset();
    if (r->has_task()) {
      attempt_ = r->task().attempt();
      probe_run_ = r->task().probe_run();
    }
    // A rank's log that ended is the end unless following a job not known
    // final: its next log (the command after a pre-flight probe, a new
    // attempt) may come.
    if (r->eof()) return follow_ && !job_final_ ? Next::kWait : Next::kDone;
    if (!r->data().empty()) return Next::kRead;
    // Caught up with the log; one more read after the job is final collects
    // the rest of it.
    if (!follow_ || job_final_) return Next::kDone;
    return Next::kWait;
  }
  // No log yet while following a job not final: not placed yet, or placed
  // and its task not started yet (a gang's command right after its
  // pre-flight): wait for it like for new data.
  if (follow_ && !job_final_ && r.status().code() == absl::StatusCode::kNotFound) {
    return Next::kWait;
  }
  return Next::kFail;
}

bool LogFollow::OnWaited(const v1::Job& job, bool final) {
  job_final_ = final;
  const int probe_run = job.preflight().probe_run();
  // Compared with the log the offset is into (unknown before the first
  // wait unless a read said).
  const bool changed =
      attempt_ >= 0 && (job.attempt() != attempt_ || probe_run != probe_run_);
  if (changed) {
    offset_ = 0;
    restarted_ = job.attempt() != attempt_;
  }
  attempt_ = job.attempt();
  probe_run_ = probe_run;
  return changed;
}

}  // namespace trainctl
