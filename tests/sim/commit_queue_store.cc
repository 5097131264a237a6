#include "tests/sim/commit_queue_store.h"

#include <utility>

namespace trainctl::sim {
namespace {

absl::Status Killed() {
  return absl::UnavailableError("the coordinator was killed: its store is gone");
}

}  // namespace

CommitQueueStore::CommitQueueStore(coord::MemoryStateStore* durable, const Clock* clock)
    : durable_(durable), clock_(clock) {}

absl::StatusOr<coord::WriteTicket> CommitQueueStore::Enqueue(Write w) {
  if (crashed_) return Killed();
  if (w.is_job && w.job.id() <= 0) return absl::InvalidArgumentError("job.id must be > 0");
  if (!w.is_job && w.node.name().empty()) {
    return absl::InvalidArgumentError("node.name must not be empty");
  }
  w.ticket = next_ticket_++;
  w.queued_at = clock_->Now();
  queue_.push_back(std::move(w));
  return queue_.back().ticket;
}

absl::StatusOr<coord::WriteTicket> CommitQueueStore::EnqueuePutJob(const v1::Job& job) {
  Write w;
  w.job = job;
  return Enqueue(std::move(w));
}

absl::StatusOr<coord::WriteTicket> CommitQueueStore::EnqueuePutJobLazily(
    const v1::Job& job) {
  Write w;
  w.job = job;
  w.lazy = true;
  return Enqueue(std::move(w));
}

absl::StatusOr<coord::WriteTicket> CommitQueueStore::EnqueuePutNode(const v1::Node& node) {
  Write w;
  w.is_job = false;
  w.node = node;
  return Enqueue(std::move(w));
}

absl::Status CommitQueueStore::CommitThrough(coord::WriteTicket ticket) {
  if (crashed_) return ticket <= committed_ ? absl::OkStatus() : Killed();
  while (!queue_.empty() && queue_.front().ticket <= ticket) {
    Write w = std::move(queue_.front());
    queue_.pop_front();
    absl::Status s = w.is_job ? durable_->PutJob(w.job) : durable_->PutNode(w.node);
    if (!s.ok()) return s;
    committed_ = w.ticket;
  }
  return absl::OkStatus();
}

absl::Status CommitQueueStore::CommitAll() {
  return CommitThrough(next_ticket_ - 1);
}

void CommitQueueStore::WhenDurable(coord::WriteTicket ticket,
                                   absl::AnyInvocable<void(absl::Status) &&> done) {
  std::move(done)(CommitThrough(ticket));
}

absl::Status CommitQueueStore::PutJob(const v1::Job& job) {
  if (absl::Status s = CommitAll(); !s.ok()) return s;
  return durable_->PutJob(job);
}

absl::Status CommitQueueStore::PutNode(const v1::Node& node) {
  if (absl::Status s = CommitAll(); !s.ok()) return s;
  return durable_->PutNode(node);
}

absl::StatusOr<coord::StoredState> CommitQueueStore::Load() {
  if (absl::Status s = CommitAll(); !s.ok()) return s;
  return durable_->Load();
}

absl::StatusOr<std::vector<v1::Job>> CommitQueueStore::ReadJobs(
    const std::vector<int64_t>& ids) {
  if (absl::Status s = CommitAll(); !s.ok()) return s;
  return durable_->ReadJobs(ids);
}

absl::Status CommitQueueStore::AppendMetrics(int64_t job_id,
                                             const std::vector<v1::MetricPoint>& points) {
  if (absl::Status s = CommitAll(); !s.ok()) return s;
  return durable_->AppendMetrics(job_id, points);
}

absl::StatusOr<std::vector<v1::MetricPoint>> CommitQueueStore::ReadMetrics(
    int64_t job_id, const std::string& key) {
  if (absl::Status s = CommitAll(); !s.ok()) return s;
  return durable_->ReadMetrics(job_id, key);
}

absl::StatusOr<std::string> CommitQueueStore::ClusterId() {
  if (crashed_) return Killed();
  return durable_->ClusterId();
}

absl::Status CommitQueueStore::CommitThreadTurn() {
  coord::WriteTicket upto = 0;
  const absl::Time now = clock_->Now();
  for (const Write& w : queue_) {
    if (!w.lazy || now - w.queued_at >= kLazyFlush) upto = w.ticket;
  }
  return upto == 0 ? absl::OkStatus() : CommitThrough(upto);
}

int64_t CommitQueueStore::Crash() {
  crashed_ = true;
  const int64_t lost = static_cast<int64_t>(queue_.size());
  queue_.clear();
  return lost;
}

}  // namespace trainctl::sim
