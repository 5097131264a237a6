#ifndef TRAINCTL_COORDINATOR_ETCD_HA_LEADER_H_
#define TRAINCTL_COORDINATOR_ETCD_HA_LEADER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/etcd/leader_election.h"

namespace trainctl::coord {

// What a coordinator in HA mode holds while it is the leader. Destroy in
// member order reversed (store, election, connection): the election resigns
// on destruction so a standby takes over at once.
struct HaLeadership {
  std::unique_ptr<EtcdConnection> conn;
  std::unique_ptr<LeaderElection> election;
  // The state store, fenced by this leadership.
  std::unique_ptr<EtcdStateStore> store;
};

// Options of AcquireLeadership; see trainctl-coordinator --help.
struct HaOptions {
  // etcd members, "host:port[,host:port...]".
  std::string etcd_endpoints;
  // Key prefix of this cluster's state in etcd, e.g. "/trainctl/".
  std::string prefix = "/trainctl/";
  // Leader lease TTL: a dead leader is replaced after at most this long.
  absl::Duration lease = absl::Seconds(3);
  // This coordinator's address, published as the leader's value.
  std::string address;
};

// Connects to etcd and campaigns for leadership of the cluster under
// `options.prefix`, blocking while another coordinator leads (this one is a
// standby: it serves nothing meanwhile, so clients given the list of
// coordinators land on the leader). Returns once elected, with the fenced
// state store to load from and write to.
//
// Errors: CANCELLED when `shutdown` is notified first; UNAVAILABLE when
// etcd is unreachable for 30 s; INVALID_ARGUMENT for bad options.
absl::StatusOr<HaLeadership> AcquireLeadership(const HaOptions& options,
                                               const absl::Notification& shutdown);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_ETCD_HA_LEADER_H_
