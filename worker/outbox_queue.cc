#include "worker/outbox_queue.h"

#include <utility>

namespace trainctl::worker {
namespace {

bool IsExit(const v1::AgentMessage& m) {
  return m.has_task_status() && m.task_status().state() != v1::TASK_STATE_RUNNING;
}

}  // namespace

std::vector<v1::AgentMessage> CoalesceTaskExits(std::vector<v1::AgentMessage> msgs) {
  std::vector<v1::AgentMessage> out;
  out.reserve(msgs.size());
  for (size_t i = 0; i < msgs.size();) {
    size_t end = i;
    while (end < msgs.size() && IsExit(msgs[end])) ++end;
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

OutboxQueue::OutboxQueue(Writer write, bool batch_exits)
    : write_(std::move(write)),
      batch_exits_(batch_exits),
      writer_([this] { WriteLoop(); }) {}

OutboxQueue::~OutboxQueue() { Close(); }

void OutboxQueue::Push(v1::AgentMessage msg) {
  absl::MutexLock lock(&mu_);
  if (closing_ || broken_) return;
  queue_.push_back(std::move(msg));
}

void OutboxQueue::Close() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
  }
  if (writer_.joinable()) writer_.join();
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
      batch.swap(queue_);
    }
    // Messages queued while these are written go in the next round.
    if (batch_exits_) batch = CoalesceTaskExits(std::move(batch));
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
