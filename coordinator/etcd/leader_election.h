#ifndef TRAINCTL_COORDINATOR_ETCD_LEADER_ELECTION_H_
#define TRAINCTL_COORDINATOR_ETCD_LEADER_ELECTION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/etcd/etcd_state_store.h"

namespace trainctl::coord {

// Leader election among coordinators through etcd's election API
// (v3electionpb.Election; the same protocol as etcd's Go
// concurrency.Election): each candidate holds an etcd lease of `ttl`, kept
// alive from a background thread every ttl/3; Campaign blocks until this
// candidate's key is the oldest under the election name. When the leader
// dies its lease expires after at most `ttl` and the next candidate's
// Campaign returns; a clean shutdown resigns at once.
//
// A leader whose lease cannot be renewed for `ttl` (etcd unreachable, the
// process stalled) must stop acting as leader: lost() is notified. Its state
// writes are fenced anyway (LeaderFence), so a late write never lands.
// Thread-safe.
class LeaderElection {
 public:
  // Grants the lease (`ttl` >= 2 s: etcd's minimum lease TTL is 1.5 x its
  // election timeout, 1.5 s by default) and starts keeping it alive.
  // `conn` must outlive this object. Errors: INVALID_ARGUMENT for an empty
  // name or a ttl under 2 s; UNAVAILABLE when etcd does not answer.
  static absl::StatusOr<std::unique_ptr<LeaderElection>> Create(
      EtcdConnection* conn, std::string name, absl::Duration ttl);

  // Stops the keep-alive, resigns if leader, and revokes the lease, so a
  // standby takes over without waiting for the TTL.
  ~LeaderElection();

  // Blocks until this candidate is the leader, publishing `value` (the
  // coordinator's address) as the leader's value. Errors: CANCELLED after
  // Cancel(); UNAVAILABLE when etcd fails (retry); FAILED_PRECONDITION when
  // the lease was lost while waiting.
  absl::Status Campaign(const std::string& value);

  // Makes a Campaign running on another thread return CANCELLED (shutdown of
  // a standby).
  void Cancel();

  // The fence for state writes; valid after a successful Campaign.
  LeaderFence fence() const;

  // Notified once the lease is gone: etcd said it expired, or no renewal
  // succeeded for `ttl`.
  const absl::Notification& lost() const { return lost_; }

  // The value (address) of the current leader, whoever it is. Errors:
  // NOT_FOUND when there is none; UNAVAILABLE when etcd does not answer.
  absl::StatusOr<std::string> CurrentLeader();

  int64_t lease_id() const { return lease_id_; }

 private:
  LeaderElection(EtcdConnection* conn, std::string name, absl::Duration ttl,
                 int64_t lease_id);
  void KeepAliveLoop();
  // One renewal: true when etcd renewed the lease; false on a failed call;
  // sets lost_ when etcd says the lease is gone.
  bool RenewOnce();

  EtcdConnection* const conn_;
  const std::string name_;
  const absl::Duration ttl_;
  const int64_t lease_id_;
  absl::Notification stop_;
  absl::Notification lost_;
  mutable absl::Mutex mu_;
  grpc::ClientContext* campaign_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool leader_ ABSL_GUARDED_BY(mu_) = false;
  v3electionpb::LeaderKey leader_key_ ABSL_GUARDED_BY(mu_);
  std::thread keepalive_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_ETCD_LEADER_ELECTION_H_
