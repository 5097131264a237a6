#ifndef TRAINCTL_WORKER_OUTBOX_QUEUE_H_
#define TRAINCTL_WORKER_OUTBOX_QUEUE_H_

// The agent's send queue: messages to the coordinator are queued without
// waiting for the network and written, in order, by one writer thread. Task
// status changes that pile up while a write is in flight (many short tasks
// starting and ending together) go out as one AgentMessage.task_status_batch,
// the way group commit shares one fsync, and a burst of starts and exits
// costs one message. With a linger, task statuses are written at most once
// per linger period, as Nagle's algorithm holds small segments: the first
// status after a quiet spell goes at once, and those that follow it within
// the period wait for its end and go together. On a host running many short
// tasks the coordinator then handles several starts and exits per message,
// scheduling pass and commit; a host whose tasks start and end now and then
// sees no delay. Any other message (a heartbeat, a log chunk) ends the wait
// at once.

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::worker {

// Merges each run of two or more consecutive task_status messages of `msgs`
// (RUNNING, EXITED, START_FAILED alike) into one task_status_batch message
// at the run's place; every other message, and a lone status, is kept as it
// is. The order of all statuses is kept, so a task's RUNNING still comes
// before its exit. Pure.
std::vector<v1::AgentMessage> CoalesceTaskStatuses(std::vector<v1::AgentMessage> msgs);

// Thread-safe. Push() never blocks on a write; the writer thread takes
// everything queued, coalesces task statuses (when `batch_statuses`: the
// coordinator said RegisterAck.accepts_task_status_batch) and writes the
// messages one by one. With `batch_statuses` and a `linger` above zero, a
// queue of task statuses only is written once `linger` has passed since
// statuses were last written (at once if it has already), or at once when
// kMaxLingerStatuses are queued, another kind of message is queued, or
// Close() is called. Stopped by the destructor or Close(), which write what is already
// queued first.
class OutboxQueue {
 public:
  // Writes one message; false when the stream is broken (the rest queued
  // is then dropped: the agent's next registration lists unreported exits).
  using Writer = absl::AnyInvocable<bool(const v1::AgentMessage&)>;

  // The most task statuses a linger waits for: more are written at once.
  static constexpr size_t kMaxLingerStatuses = 256;

  OutboxQueue(Writer write, bool batch_statuses,
              absl::Duration linger = absl::ZeroDuration());
  ~OutboxQueue();
  OutboxQueue(const OutboxQueue&) = delete;
  OutboxQueue& operator=(const OutboxQueue&) = delete;

  // Queues `msg` for the writer thread.
  void Push(v1::AgentMessage msg) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes what is queued, then stops the writer thread. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WriteLoop();
  // Whether the queue is written without waiting out the linger.
  bool WriteNowLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Writer write_;
  const bool batch_statuses_;
  const absl::Duration linger_;
  absl::Mutex mu_;
  std::vector<v1::AgentMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // When task statuses were last taken for writing (with a linger only).
  absl::Time last_status_write_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // A message other than a task status is queued.
  bool urgent_ ABSL_GUARDED_BY(mu_) = false;
  // Started last in the constructor.
  std::thread writer_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_OUTBOX_QUEUE_H_
