#ifndef TRAINCTL_WORKER_OUTBOX_QUEUE_H_
#define TRAINCTL_WORKER_OUTBOX_QUEUE_H_

// The agent's send queue: messages to the coordinator are queued without
// waiting for the network and written, in order, by one writer thread. Task
// exits that pile up while a write is in flight (many tasks ending in the
// same heartbeat period) go out as one AgentMessage.task_status_batch, the
// way group commit shares one fsync: no exit waits for a timer, and a burst
// of exits costs one message.

#include <deque>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::worker {

// Merges each run of two or more consecutive task exits (task_status not
// RUNNING) of `msgs` into one task_status_batch message at the run's place;
// every other message, and a lone exit, is kept as it is. The order of all
// statuses is kept. Pure.
std::vector<v1::AgentMessage> CoalesceTaskExits(std::vector<v1::AgentMessage> msgs);

// Thread-safe. Push() never blocks on a write; the writer thread takes
// everything queued, coalesces exits (when `batch_exits`: the coordinator
// said RegisterAck.accepts_task_status_batch) and writes the messages one by
// one. Stopped by the destructor or Close(), which write what is already
// queued first.
class OutboxQueue {
 public:
  // Writes one message; false when the stream is broken (the rest queued
  // is then dropped: the agent's next registration lists unreported exits).
  using Writer = absl::AnyInvocable<bool(const v1::AgentMessage&)>;

  OutboxQueue(Writer write, bool batch_exits);
  ~OutboxQueue();
  OutboxQueue(const OutboxQueue&) = delete;
  OutboxQueue& operator=(const OutboxQueue&) = delete;

  // Queues `msg` for the writer thread.
  void Push(v1::AgentMessage msg) ABSL_LOCKS_EXCLUDED(mu_);
  // Writes what is queued, then stops the writer thread. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void WriteLoop();

  Writer write_;
  const bool batch_exits_;
  absl::Mutex mu_;
  std::vector<v1::AgentMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // Started last in the constructor.
  std::thread writer_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_OUTBOX_QUEUE_H_
