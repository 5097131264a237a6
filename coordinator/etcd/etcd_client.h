#ifndef TRAINCTL_COORDINATOR_ETCD_ETCD_CLIENT_H_
#define TRAINCTL_COORDINATOR_ETCD_ETCD_CLIENT_H_

// A connection to an etcd v3 cluster through its own gRPC API (KV, Lease,
// Election services; https://etcd.io/docs/v3.4/learning/api/), with stubs
// generated from etcd's protos at build time (coordinator/etcd/CMakeLists.txt).
// Shared by the etcd state store and the leader election.

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "etcd/etcdserver/api/v3election/v3electionpb/v3election.grpc.pb.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace trainctl::coord {

// Deadline of one etcd call (a write waits for a Raft commit; 5 s covers a
// leader change inside etcd, whose default election timeout is 1 s).
inline constexpr absl::Duration kEtcdCallTimeout = absl::Seconds(5);

// One channel to etcd and a stub per service. Thread-safe (gRPC stubs are).
struct EtcdConnection {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<etcdserverpb::KV::Stub> kv;
  std::unique_ptr<etcdserverpb::Lease::Stub> lease;
  std::unique_ptr<v3electionpb::Election::Stub> election;
};

// Connects to `endpoints` ("127.0.0.1:2379" or a comma-separated list of
// members, tried in order) and waits up to `timeout` for the channel to be
// ready. Errors: INVALID_ARGUMENT for a malformed list; UNAVAILABLE when no
// member answered in time.
absl::StatusOr<std::unique_ptr<EtcdConnection>> ConnectEtcd(
    absl::string_view endpoints, absl::Duration timeout);

// A client context with a deadline of `timeout` from now.
void SetEtcdDeadline(grpc::ClientContext* ctx,
                     absl::Duration timeout = kEtcdCallTimeout);

// Maps a failed etcd call to an absl::Status: UNAVAILABLE for transport
// failures and deadlines (the write may not have happened), the gRPC code
// otherwise; the message starts with `what`.
absl::Status EtcdError(const grpc::Status& status, absl::string_view what);

// The end of the key range holding every key that starts with `prefix`
// (etcd's "prefix + 1" range_end: the last byte incremented).
std::string PrefixRangeEnd(absl::string_view prefix);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_ETCD_ETCD_CLIENT_H_
