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
  // The attempt the last wait saw; -1 before the first.
  int attempt() const { return attempt_; }
  // The pre-flight run whose probe's log the last wait saw the rank show
  // (Job.preflight.probe_run); 0 for the job's own command.
  int probe_run() const { return probe_run_; }
  // Whether the last change OnWaited reported was a new attempt.
  bool restarted() const { return restarted_; }

 private:
  const bool follow_;
  int64_t offset_;
  int attempt_ = -1;
  int probe_run_ = 0;
  // The log offset_ is into, as the last read said (GetLogsResponse.task);
  // have_read_ false: not known (no read since the last change, or a
  // coordinator that does not say), the last wait's attempt_ and
  // probe_run_ stand for it.
  bool restarted_ = false;
  bool have_read_ = false;
  int read_attempt_ = 0;
  int read_probe_run_ = 0;
  bool job_final_ = false;
};

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_LOG_FOLLOW_H_
