#ifndef TRAINCTL_COMMON_LOG_FOLLOW_H_
#define TRAINCTL_COMMON_LOG_FOLLOW_H_

// Following one rank's log, as a state machine: read a chunk; when caught up
// and following, wait for the job (a long poll) and read again; start over at
// offset 0 when the log changed: the job restarted (offsets are per attempt),
// or a gang's pre-flight probe (whose log the rank shows while it runs,
// Job.preflight.probe_run) gave way to the job's own command; end once the
// job is final and its log read to the end. A rank's log that ended
// (GetLogsResponse.eof) ends a follow only once the job is final: the probe's
// end, or a rank done before the others, is not the job's. The one loop behind both the
// coordinator's StreamLogs (coordinator/grpc_service.cc) and `trainctl logs
// -f` (client/cli_logs.cc); neither does I/O here, each drives it with its
// own calls. Not thread-safe; no clock.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl {

class LogFollow {
 public:
  // What the caller does next.
  enum class Next {
    // Read again from offset().
    kRead,
    // Wait for the job (WaitJob with a short timeout), then OnWaited.
    kWait,
    // The log is complete (or, not following, read to its current end).
    kDone,
    // The read failed: report the error.
    kFail,
  };

  // Reading from `offset` (bytes); `follow`: keep going until the job ends.
  LogFollow(bool follow, int64_t offset) : follow_(follow), offset_(offset) {}

  // A read answered `r`; the caller writes r->data() first when it is OK.
  // NOT_FOUND while following a job not final means no log yet (not placed,
  // or its task not started): wait for it like for new data (an unknown
  // job fails in WaitJob); once the job is final it is an error.
  Next OnRead(const absl::StatusOr<v1::GetLogsResponse>& r);

  // The wait answered `job`, final or not (`final`). Returns true when the
  // log changed since the last wait (a new attempt, restarted() true; or
  // another pre-flight run or the job's own command after one, probe_run()
  // says which): the offset went back to 0 and the caller may say so.
  bool OnWaited(const v1::Job& job, bool final);

  // Where the next read starts, bytes.
  int64_t offset() const { return offset_; }
  // The attempt whose log offset() is into: the last read's when the
  // coordinator said (GetLogsResponse.task), else the last wait's; -1 before
  // either.
  int attempt() const { return attempt_; }
  // Likewise the pre-flight run whose probe's log that is
  // (Job.preflight.probe_run, TaskRef.probe_run); 0 for the job's own
  // command.
  int probe_run() const { return probe_run_; }
  // Whether the last change OnWaited reported was a new attempt.
  bool restarted() const { return restarted_; }

 private:
  const bool follow_;
  int64_t offset_;
  // The log offset_ is into (attempt(), probe_run()).
  int attempt_ = -1;
  int probe_run_ = 0;
  bool restarted_ = false;
  bool job_final_ = false;
};

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_LOG_FOLLOW_H_
