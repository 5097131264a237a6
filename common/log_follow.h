#ifndef TRAINCTL_COMMON_LOG_FOLLOW_H_
#define TRAINCTL_COMMON_LOG_FOLLOW_H_

// Following one rank's log, as a state machine: read a chunk; when caught up
// and following, wait for the job (a long poll) and read again; start over at
// offset 0 when the job restarted (offsets are per attempt); end once the job
// is final and its log read to the end. The one loop behind both the
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
  // NOT_FOUND while following a job not placed yet means no log yet: wait
  // for it like for new data (an unknown job fails in WaitJob).
  Next OnRead(const absl::StatusOr<v1::GetLogsResponse>& r);

  // The wait answered `job`, final or not (`final`). Returns true when the
  // job restarted since the last wait (a new attempt): the offset went back
  // to 0 and the caller may say so.
  bool OnWaited(const v1::Job& job, bool final);

  // Where the next read starts, bytes.
  int64_t offset() const { return offset_; }
  // The attempt the last wait saw; -1 before the first.
  int attempt() const { return attempt_; }

 private:
  const bool follow_;
  int64_t offset_;
  int attempt_ = -1;
  bool job_final_ = false;
  bool job_placed_ = false;
};

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_LOG_FOLLOW_H_
