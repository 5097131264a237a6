#ifndef TRAINCTL_COORDINATOR_GRPC_SERVICE_H_
#define TRAINCTL_COORDINATOR_GRPC_SERVICE_H_

// The transport: binds the Coordinator core to gRPC's callback API (user API,
// agent stream, rendezvous). Converts proto requests to core calls and
// absl::Status to grpc::Status (in one place, ToGrpcStatus); no policy here.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/coordinator.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::coord {

// absl::Status -> grpc::Status, same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// The three services over one Coordinator (not owned; must outlive them and
// the server they are registered with).
class GrpcCoordinatorServices {
 public:
  explicit GrpcCoordinatorServices(Coordinator* core);
  ~GrpcCoordinatorServices();

  // Registers the services with `builder`.
  void RegisterWith(grpc::ServerBuilder& builder);

 private:
  class UserApi;
  class AgentApi;
  class RendezvousApi;
  std::unique_ptr<UserApi> user_;
  std::unique_ptr<AgentApi> agent_;
  std::unique_ptr<RendezvousApi> rendezvous_;
};

// Builds and starts a server for `core` on `listen` ("host:port"; port 0
// picks a free one). Sets *bound_port to the port bound.
// Errors: UNAVAILABLE when the address cannot be bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartCoordinatorServer(
    GrpcCoordinatorServices& services, const std::string& listen, int* bound_port);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_GRPC_SERVICE_H_
