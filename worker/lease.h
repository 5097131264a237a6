#ifndef TRAINCTL_WORKER_LEASE_H_
#define TRAINCTL_WORKER_LEASE_H_

// The agent's side of its lease with the coordinator (fencing). The
// coordinator declares a node lost when it has heard no heartbeat for
// node_timeout; the agent must not keep running tasks after that, because
// the coordinator has failed them and may have restarted their job
// elsewhere. So the agent measures the same timeout from its side, from the
// time it SENT the latest heartbeat the coordinator answered (the
// coordinator received it no earlier): its lease ends no later than the
// coordinator's timeout, and the agent then kills its tasks ("fences").
//
//   no lease ──Registered(sent, lease)──▶ held ──Granted()──▶ held (renewed)
//                                          │ now >= expiry
//                                          ▼
//                                 expired (ExpiredAt() says true once)
//                                          │ Registered()
//                                          ▼ held
//
// Answers come in the order heartbeats were sent (one ordered stream), so
// each Granted() belongs to the oldest unanswered HeartbeatSent().
//
// Thread-safe; time is passed in (no clock of its own).

#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainctl::worker {

class AgentLease {
 public:
  // A new stream registered: its registration was sent at `sent`, the ack
  // grants `lease` (<= 0: the coordinator grants none; never expires).
  // Unanswered heartbeats of earlier streams are forgotten.
  void Registered(absl::Time sent, absl::Duration lease);

  // A heartbeat is about to be sent at `sent` (call before writing it, so
  // its answer cannot come first).
  void HeartbeatSent(absl::Time sent);

  // The coordinator answered the oldest unanswered heartbeat with a lease of
  // `lease`: the lease now ends at that heartbeat's send time + `lease`
  // (never earlier than before). An answer with no heartbeat sent is ignored.
  void Granted(absl::Duration lease);

  // True exactly once when a held lease has ended at `now`; the caller then
  // fences. False while no lease is held or it has not ended.
  bool ExpiredAt(absl::Time now);

  // When the lease ends; InfiniteFuture() when none is held.
  absl::Time Expiry() const;

 private:
  mutable absl::Mutex mu_;
  bool held_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time expiry_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  std::deque<absl::Time> unanswered_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_LEASE_H_
