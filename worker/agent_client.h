#ifndef TRAINCTL_WORKER_AGENT_CLIENT_H_
#define TRAINCTL_WORKER_AGENT_CLIENT_H_

// The agent's transport: one long-lived bidirectional stream to the
// coordinator (agents dial out), reconnecting with capped exponential backoff.
// Per stream: send RegisterNode, wait for the ack, then a heartbeat every
// interval while a reader thread hands coordinator messages to the Agent.
// When the agent fences (AgentConfig::fences), a watchdog thread checks the
// lease (lease.h) every 100 ms: when it ends unrenewed, the agent's tasks
// are killed (Agent::Fence) and the stream is cancelled, so the agent
// re-registers from scratch once the coordinator is reachable again.

#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "worker/agent.h"
#include "worker/lease.h"

namespace trainctl::worker {

// Runs the agent's session until Shutdown(). Thread-safe.
class GrpcAgentSession {
 public:
  // `agent` is not owned and must outlive the session.
  GrpcAgentSession(Agent* agent, std::string coordinator_address);

  // Connects, serves, reconnects; returns after Shutdown().
  void Run();
  // Ends Run() (cancels the stream in flight).
  void Shutdown();
  // Blocks until the first registration was acknowledged or `timeout`
  // passed; true if registered.
  bool WaitRegistered(absl::Duration timeout);

 private:
  // One stream's life; returns when it ends.
  void ServeOnce(grpc::ClientContext& ctx);
  // Until Shutdown(): fences when the lease has ended.
  void Watchdog();

  Agent* const agent_;
  const std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  absl::Notification shutdown_;
  absl::Notification registered_;
  absl::Mutex mu_;
  grpc::ClientContext* current_ ABSL_GUARDED_BY(mu_) = nullptr;
  AgentLease lease_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_AGENT_CLIENT_H_
