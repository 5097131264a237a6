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
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "worker/agent.h"
#include "worker/lease.h"

namespace trainctl::worker {

// PEM files of the agent's --tls-cert, --tls-key and --tls-ca.
struct AgentTlsFiles {
  std::string cert;  // this node's client certificate (CN = node name)
  std::string key;   // its private key
  std::string ca;    // CA that signed the coordinator's certificate
};

// Mutual-TLS channel credentials: verifies the coordinator against `ca` and
// presents the node's certificate.
// Errors: NOT_FOUND naming the file that cannot be read; INVALID_ARGUMENT
// when one is not PEM.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeAgentTlsCredentials(
    const AgentTlsFiles& files);

// A channel to the coordinator at `address` (one, or a comma-separated list
// of the HA leader and standbys) with `credentials` (null: plaintext) and the
// agent's channel settings: the session's, and the rendezvous relay's.
std::shared_ptr<grpc::Channel> CoordinatorChannel(
    const std::string& address, std::shared_ptr<grpc::ChannelCredentials> credentials);

// Runs the agent's session until Shutdown(). Thread-safe.
class GrpcAgentSession {
 public:
  // `agent` is not owned and must outlive the session. `credentials` null
  // means a plaintext channel (insecure mode); MakeAgentTlsCredentials gives
  // mutual TLS. `report_linger`: how long a task status may wait for the
  // ones that follow it before it is written (OutboxQueue); zero writes each
  // as soon as the stream is free.
  GrpcAgentSession(Agent* agent, std::string coordinator_address,
                   std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr,
                   absl::Duration report_linger = absl::ZeroDuration());

  // Connects, serves, reconnects; returns after Shutdown().
  void Run();
  // Ends Run() (cancels the stream in flight).
  void Shutdown();
  // Blocks until the first registration was acknowledged or `timeout`
  // passed; true if registered.
  bool WaitRegistered(absl::Duration timeout);
  // Why Run() returned by itself: ALREADY_EXISTS when the coordinator
  // refused the node name because another connected agent holds it (a
  // second agent on the same host, or two hosts given one --node-name);
  // retrying cannot help. OK otherwise.
  absl::Status FatalError() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One stream's life; returns when it ends.
  void ServeOnce(grpc::ClientContext& ctx);
  // Until Shutdown(): fences when the lease has ended.
  void Watchdog();

  Agent* const agent_;
  const std::string address_;
  const absl::Duration report_linger_;
  std::shared_ptr<grpc::Channel> channel_;
  absl::Notification shutdown_;
  absl::Notification registered_;
  mutable absl::Mutex mu_;
  grpc::ClientContext* current_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Status fatal_ ABSL_GUARDED_BY(mu_);
  AgentLease lease_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_AGENT_CLIENT_H_
