#ifndef TRAINCTL_COMMON_GRPC_TARGET_H_
#define TRAINCTL_COMMON_GRPC_TARGET_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainctl {

// Turns a coordinator address list as users give it ("head:50051", or
// "head-a:50051,head-b:50051" for a leader and its standbys) into a gRPC
// channel target.
//
// One address is returned unchanged (gRPC's DNS resolver handles it). Several
// are resolved now (getaddrinfo, first address of each) into one static
// address list, "ipv4:10.0.0.1:50051,10.0.0.2:50051" (or "ipv6:[..]:p,..."),
// which gRPC's default pick_first policy tries in order: a standby
// coordinator does not listen until it is elected leader (HA on etcd), so
// the channel lands on the leader and, when the leader dies, moves on to the
// next one that listens. Names are resolved once: a standby moved to another
// IP needs a restart of the client (like a static Slurm ControlMachine list).
//
// Errors: INVALID_ARGUMENT for an empty list, an empty entry, an entry
// without ":port", or a mix of IPv4 and IPv6 addresses; UNAVAILABLE when a
// name does not resolve.
absl::StatusOr<std::string> GrpcTargetFor(absl::string_view addresses);

// The host of the first entry of an address list ("head-a" of
// "head-a:50051,head-b:50051"; "::1" of "[::1]:50051"), or "" when it has no
// ":port". With TLS over a list, this is the name every coordinator's
// certificate is checked against (GRPC_SSL_TARGET_NAME_OVERRIDE_ARG): the
// static address list has no host name of its own.
std::string FirstHost(absl::string_view addresses);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_GRPC_TARGET_H_
