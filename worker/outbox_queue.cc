#include "worker/outbox_queue.h"

#include <algorithm>
#include <utility>

namespace trainctl::worker {
namespace {

bool IsTaskStatus(const v1::AgentMessage& m) { return m.has_task_status(); }

}  // namespace

std::vector<v1::AgentMessage> CoalesceTaskStatuses(std::vector<v1::AgentMessage> msgs) {
  std::vector<v1::AgentMessage> out;
  out.reserve(msgs.size());
  for (size_t i = 0; i < msgs.size();) {
    size_t end = i;
    while (end < msgs.size() && IsTaskStatus(msgs[end])) ++end;
    if (end - i >= 2) {
      v1::AgentMessage batch;
      v1::TaskStatusBatch* b = batch.mutable_task_status_batch();
      for (size_t k = i; k < end; ++k) {
        *b->add_statuses() = std::move(*msgs[k].mutable_task_status());
      }
      out.push_back(std::move(batch));
      i = end;
      continue;
    }
    out.push_back(std::move(msgs[i]));
    ++i;
  }
  return out;
}

OutboxQueue::OutboxQueue(Writer write, bool batch_statuses, absl::Duration linger)
    : write_(std::move(write)),
      batch_statuses_(batch_statuses),
      linger_(batch_statuses ? linger : absl::ZeroDuration()),
      writer_([this] { WriteLoop(); }) {}

OutboxQueue::~OutboxQueue() { Close(); }

void OutboxQueue::Push(v1::AgentMessage msg) {
  absl::MutexLock lock(&mu_);
  if (closing_ || broken_) return;
  if (!IsTaskStatus(msg)) urgent_ = true;
  queue_.push_back(std::move(msg));
}

void OutboxQueue::Close() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  if (writer_.joinable()) writer_.join();
}

bool OutboxQueue::WriteNowLocked() const {
  return closing_ || urgent_ || queue_.size() >= kMaxLingerStatuses;
}

void OutboxQueue::WriteLoop() {
  for (;;) {
    std::vector<v1::AgentMessage> batch;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](OutboxQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
            return !q->queue_.empty() || q->closing_;
          },
          this));
      if (queue_.empty()) return;  // Closing, everything written.
      if (linger_ > absl::ZeroDuration()) {
        // Only task statuses queued, and statuses were written less than
        // `linger_` ago (tasks are starting and ending in quick
        // succession): the ones that follow join them until `linger_` after
        // that write. After a quiet spell the deadline has passed: written
        // at once.
        mu_.AwaitWithDeadline(
            absl::Condition(
                +[](OutboxQueue* q) ABSL_EXCLUSIVE_LOCKS_REQUIRED(q->mu_) {
                  return q->WriteNowLocked();
                },
                this),
            last_status_write_ + linger_);
      }
      batch.swap(queue_);
      urgent_ = false;
      if (linger_ > absl::ZeroDuration() &&
          std::any_of(batch.begin(), batch.end(), IsTaskStatus)) {
        last_status_write_ = absl::Now();
      }
    }
    // Messages queued while these are written go in the next round.
    if (batch_statuses_) batch = CoalesceTaskStatuses(std::move(batch));
    for (const v1::AgentMessage& m : batch) {
      if (!write_(m)) {
        absl::MutexLock lock(&mu_);
        broken_ = true;
        queue_.clear();
        break;
      }
    }
  }
}

}  // namespace trainctl::worker
