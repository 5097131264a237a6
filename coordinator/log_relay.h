#ifndef TRAINCTL_COORDINATOR_LOG_RELAY_H_
#define TRAINCTL_COORDINATOR_LOG_RELAY_H_

// Log reads relayed to agents (`trainctl logs`, GetLogs): each read gets a
// request id, goes to the agent of the node the rank ran on, and is answered
// by that agent's LogChunk or, past its deadline, with DEADLINE_EXCEEDED.
// Only the node a read was sent to may answer it: request ids are
// sequential, so another node could guess one and forge a log.
//
// Not thread-safe: called under the coordinator's lock, which guards it.
// Nothing here runs a callback or sends a message: callbacks are handed back
// to the caller, who runs them after releasing its lock. No clock: times
// come in as arguments.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

class LogRelay {
 public:
  using Done = absl::AnyInvocable<void(absl::StatusOr<v1::GetLogsResponse>)>;
  // One read in flight.
  struct Read {
    // Answered with DEADLINE_EXCEEDED after this.
    absl::Time deadline;
    int64_t job_id = 0;
    int rank = 0;
    // The node asked; only its answer is taken.
    std::string node;
    Done done;
    // The bytes asked for (ReadLog.max_bytes).
    int max_bytes = 0;
    // The task whose log was asked for (GetLogsResponse.task).
    v1::TaskRef task;
  };

  // Bytes a read returns when it asks for 0, and at most (a chunk must fit
  // gRPC's default 4 MiB message limit).
  static constexpr int kDefaultBytes = 1 << 20;
  static constexpr int kMaxBytes = 2 << 20;

  // Where a read of rank `rank`'s log of `job` from `offset`, `max_bytes`
  // (0: kDefaultBytes) goes: the rank's task, whose node must be connected
  // (`node_connected(name)`). Errors: INVALID_ARGUMENT naming offset,
  // max_bytes, or rank when the job has no such rank (beyond its world
  // size, or not among its placed tasks): bad input, which a follower must
  // not wait on; FAILED_PRECONDITION when the job discards its output, or
  // the node is not connected (naming the log's path on that host);
  // NOT_FOUND when the job has no tasks yet (a follower waits for them).
  static absl::StatusOr<const v1::Task*> Route(
      const v1::Job& job, int rank, int64_t offset, int max_bytes,
      absl::FunctionRef<bool(const std::string&)> node_connected);

  // Records `read` and returns its request id (ReadLog.request_id), unique
  // for the life of this relay, counting from 1.
  int64_t Add(Read read);

  // The read `request_id` answered by `node`, removed. nullopt when no such
  // read is in flight (it timed out, or was answered already). Errors:
  // PERMISSION_DENIED, naming both nodes, when the read was sent to another
  // node (the read stays in flight for its node).
  absl::StatusOr<std::optional<Read>> Take(int64_t request_id, const std::string& node);

  // Removes the reads whose deadline is at or before `now` and returns their
  // callbacks; the caller answers each with DEADLINE_EXCEEDED.
  std::vector<Done> Expire(absl::Time now);

  // The answer to a read of `max_bytes` from the agent's chunk: NOT_FOUND
  // with the agent's message when it could not read the log; else the data,
  // the next offset, and eof once the rank is over (`rank_ended`) and the
  // chunk holds the rest of its log: empty, or shorter than asked for (the
  // agent reads up to the end of the file). A finished job's log read in
  // one call says eof at once. `task` is whose log it was
  // (GetLogsResponse.task; Read::task).
  static absl::StatusOr<v1::GetLogsResponse> Answer(const v1::LogChunk& chunk,
                                                    bool rank_ended, int max_bytes,
                                                    const v1::TaskRef& task = {});

  // Reads in flight.
  size_t size() const { return reads_.size(); }

 private:
  absl::flat_hash_map<int64_t, Read> reads_;
  int64_t next_request_ = 1;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_LOG_RELAY_H_
