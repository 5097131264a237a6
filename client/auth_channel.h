#ifndef TRAINCTL_CLIENT_AUTH_CHANNEL_H_
#define TRAINCTL_CLIENT_AUTH_CHANNEL_H_

// The CLI's channel to the coordinator: server TLS when a CA is given, and the
// user's bearer token on every call.

#include <memory>
#include <string>

#include "client/cli.h"
#include "grpcpp/grpcpp.h"

namespace trainctl::cli {

// A channel to `target` (GrpcTargetFor(connection.address)): TLS verified
// against connection.ca_pem when set, else plaintext; a non-empty
// connection.token is added to every call as `authorization: Bearer <token>`
// (by a client interceptor, so it is sent on plaintext loopback channels too,
// where gRPC drops call credentials). With TLS and several coordinators
// listed, the name checked in each one's certificate is the first listed
// host (FirstHost).
std::shared_ptr<grpc::Channel> MakeCoordinatorChannel(const Connection& connection,
                                                      const std::string& target);

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_AUTH_CHANNEL_H_
