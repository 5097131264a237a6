#ifndef TRAINCTL_COORDINATOR_GRPC_AGENT_SERVICES_H_
#define TRAINCTL_COORDINATOR_GRPC_AGENT_SERVICES_H_

// The transport of the services the cluster's own processes call, as
// opposed to users (grpc_service.h): the agents' stream (AgentService.
// Connect: registration checked against the client certificate's node
// name, heartbeats and task status to the core, session traffic to the
// SessionRelay, writes queued one at a time with starts batched) and the
// ranks' NCCL rendezvous (Rendezvous: PublishUniqueId, FetchUniqueId). No
// policy here: requests go to the Coordinator core and the relay.

#include <memory>

#include "coordinator/coordinator.h"
#include "coordinator/session_relay.h"
#include "grpcpp/grpcpp.h"

namespace trainctl::coord {

// AgentService for `core` and `sessions` (neither owned; both outlive the
// service). With `require_cert`, a stream needs a client certificate
// verified against the server's CA (UNAUTHENTICATED without one) and may
// register only the node the certificate names (PERMISSION_DENIED).
std::unique_ptr<grpc::Service> MakeAgentService(Coordinator* core, bool require_cert,
                                                SessionRelay* sessions);

// The Rendezvous service for `core` (not owned): ranks publish and fetch
// their job attempt's ncclUniqueIds through it.
std::unique_ptr<grpc::Service> MakeRendezvousService(Coordinator* core);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_GRPC_AGENT_SERVICES_H_
