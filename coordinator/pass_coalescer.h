#ifndef TRAINCTL_COORDINATOR_PASS_COALESCER_H_
#define TRAINCTL_COORDINATOR_PASS_COALESCER_H_

// When the coordinator runs a scheduling pass. Every event that may change
// what can be placed (a submit, a cancel, a task exit, a node change, a time
// limit) asks for a pass at the end of its locked section. The pass runs
// there and then, unless another event is already waiting for the
// coordinator's lock: then the pass at the end of that event's section serves
// both, so a burst of N events costs one pass over the queue, not N. A burst
// is the events already queued for the lock when the pass is first asked
// for: the last of them runs it, however many arrived behind them since
// (callers do not wait for the pass, so under a steady load the queue never
// drains). It is also cut after kMaxEvents events or kMaxDelay after its
// first request, so a steady stream of events never starves the queue: at
// 100,000 pending jobs a pass costs tens of ms (bench/README.md, scheduler
// throughput).
//
// Not thread-safe, except for the waiting count (EnterWait/LeaveWait/
// waiting, atomics read without any lock): every other call is made under
// the coordinator's lock, which guards this part. No clock of its own: times
// come in as arguments.

#include <atomic>

#include "absl/time/time.h"

namespace trainctl::coord {

class PassCoalescer {
 public:
  // Events one pass may serve before it must run.
  static constexpr int kMaxEvents = 256;
  // Longest a requested pass may wait for a later event to run it.
  static constexpr absl::Duration kMaxDelay = absl::Milliseconds(2);

  // An event asks for a pass at `now` (the first request of a burst starts
  // its kMaxDelay, and the events waiting for the lock then make the burst).
  void Request(absl::Time now);

  // An event took the coordinator's lock (EventLock): one fewer of the
  // burst's events is still ahead.
  void Entered();

  // Whether the requested pass must run now, at `now`: one was requested and
  // no waiting event of its burst can take it (none waits, every event that
  // waited when it was asked for has had the lock, the burst reached
  // kMaxEvents, or kMaxDelay passed). False when none was requested.
  bool MustRunNow(absl::Time now) const;

  // Whether a pass was requested and has not run.
  bool requested() const { return requested_; }

  // The requested pass is about to run: the burst ends.
  void Clear();

  // An event starts / stops waiting for the coordinator's lock. Thread-safe.
  void EnterWait() { waiting_.fetch_add(1); }
  void LeaveWait() { waiting_.fetch_sub(1); }
  // Events waiting for the lock now; may be stale. Thread-safe.
  int waiting() const { return waiting_.load(); }

 private:
  std::atomic<int> waiting_{0};
  bool requested_ = false;
  // Events the requested pass serves so far, and when the first asked.
  int events_ = 0;
  absl::Time requested_at_;
  // Events of the burst that have not had the lock yet.
  int ahead_ = 0;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_PASS_COALESCER_H_
