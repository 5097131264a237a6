#ifndef TRAINCTL_COORDINATOR_GRPC_WRITE_QUEUE_H_
#define TRAINCTL_COORDINATOR_GRPC_WRITE_QUEUE_H_

// The write side both of the coordinator's long-lived bidirectional streams
// share (an agent's stream, grpc_agent_services.cc; a session's,
// grpc_streams.cc): messages are queued from any thread and written one at a
// time, as gRPC allows only one StartWrite in flight per call. Transport
// only.

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace trainctl::coord {

// A server bidirectional reactor whose writes are queued. Queue() may be
// called from any thread; each message is written after the one before it
// is done. A failed write (the peer gone) finishes the call CANCELLED.
// FinishAfterQueued() lets what is queued go out first; FinishNow() does
// not. The call is finished at most once. Lock: mu_ guards the queue and the
// finishing state; it is held while starting a write or finishing, never
// while the subclass's read callbacks run.
template <typename In, typename Out>
class QueuedWriteReactor : public grpc::ServerBidiReactor<In, Out> {
 public:
  // Queues `msg` to write; dropped once the call is finishing or finished.
  void Queue(Out msg) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (finished_ || ending_) return;
    out_.push_back(std::move(msg));
    if (!writing_) {
      writing_ = true;
      StartNextWriteLocked();
    }
  }

  // Finishes the call with `status` once what is queued is written (at once
  // when nothing is); later Queue() calls are dropped.
  void FinishAfterQueued(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (finished_ || ending_) return;
    ending_ = true;
    end_status_ = status;
    if (!writing_) FinishLocked(end_status_);
  }

  // Finishes the call with `status` now; what is queued is not written.
  void FinishNow(const grpc::Status& status) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    FinishLocked(status);
  }

  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    out_.pop_front();
    if (ok && !out_.empty() && !finished_) {
      StartNextWriteLocked();
      return;
    }
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the peer went away"));
    } else if (ending_) {
      FinishLocked(end_status_);
    }
  }

 protected:
  // Called with mu_ held before each write, with the queue (never empty):
  // may merge messages at its front. It must not call back into this
  // reactor. Default: nothing.
  virtual void BeforeWrite(std::deque<Out>& queue) {}

 private:
  void StartNextWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    BeforeWrite(out_);
    this->StartWrite(&out_.front());
  }
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    this->Finish(status);
  }

  absl::Mutex mu_;
  std::deque<Out> out_ ABSL_GUARDED_BY(mu_);
  // A write is in flight (the front of out_).
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // FinishAfterQueued was called: finish with end_status_ when out_ drains.
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status end_status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_GRPC_WRITE_QUEUE_H_
