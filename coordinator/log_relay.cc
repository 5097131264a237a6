#include "coordinator/log_relay.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace trainctl::coord {

int64_t LogRelay::Add(Read read) {
  const int64_t id = next_request_++;
  reads_.emplace(id, std::move(read));
  return id;
}

absl::StatusOr<std::optional<LogRelay::Read>> LogRelay::Take(int64_t request_id,
                                                             const std::string& node) {
  auto it = reads_.find(request_id);
  if (it == reads_.end()) return std::optional<Read>();
  if (it->second.node != node) {
    return absl::PermissionDeniedError(absl::StrCat("node ", node, " answered log read ",
                                                    request_id, " that was sent to node ",
                                                    it->second.node));
  }
  std::optional<Read> read(std::move(it->second));
  reads_.erase(it);
  return read;
}

std::vector<LogRelay::Done> LogRelay::Expire(absl::Time now) {
  std::vector<Done> out;
  for (auto it = reads_.begin(); it != reads_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    out.push_back(std::move(it->second.done));
    reads_.erase(it++);
  }
  return out;
}

absl::StatusOr<v1::GetLogsResponse> LogRelay::Answer(const v1::LogChunk& chunk,
                                                     bool rank_ended, int max_bytes,
                                                     const v1::TaskRef& task) {
  if (!chunk.error().empty()) return absl::NotFoundError(chunk.error());
  v1::GetLogsResponse resp;
  resp.set_data(chunk.data());
  resp.set_next_offset(chunk.next_offset());
  *resp.mutable_task() = task;
  resp.set_eof(rank_ended &&
               (chunk.data().empty() || static_cast<int64_t>(chunk.data().size()) < max_bytes));
  return resp;
}

absl::StatusOr<const v1::Task*> LogRelay::Route(
    const v1::Job& job, int rank, int64_t offset, int max_bytes,
    absl::FunctionRef<bool(const std::string&)> node_connected) {
  if (offset < 0) return absl::InvalidArgumentError("offset: must not be negative");
  if (max_bytes < 0 || max_bytes > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat("max_bytes: must be in [0, ", kMaxBytes, "]"));
  }
  if (job.spec().discard_output()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job.id(), " discards its output (submitted with --no-logs): no log was kept"));
  }
  const v1::Task* task = nullptr;
  for (const v1::Task& t : job.tasks()) {
    if (t.rank() == rank) task = &t;
  }
  if (task == nullptr) {
    if (job.tasks().empty() && (job.world_size() <= 0 || rank < job.world_size())) {
      return absl::NotFoundError(absl::StrCat("job ", job.id(), " has no logs yet: it is ",
                                              v1::JobState_Name(job.state())));
    }
    return absl::InvalidArgumentError(absl::StrCat("rank: job ", job.id(), " has no rank ",
                                                   rank, " (world size ", job.world_size(),
                                                   ")"));
  }
  if (!node_connected(task->node())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "node ", task->node(), " is not connected; rank ", rank, "'s log is at ",
        task->log_path().empty() ? "?" : task->log_path(), " on that host"));
  }
  return task;
}

}  // namespace trainctl::coord
