#ifndef TRAINCTL_COORDINATOR_GRPC_SERVICE_H_
#define TRAINCTL_COORDINATOR_GRPC_SERVICE_H_

// The transport: binds the Coordinator core to gRPC's callback API (the
// user API here; the agent stream and the rendezvous in
// grpc_agent_services.h). Converts proto requests to core calls and
// absl::Status to grpc::Status (in one place, ToGrpcStatus); no policy here.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/accounting.h"
#include "coordinator/audit_log.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/session_relay.h"
#include "coordinator/token_store.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::coord {

// absl::Status -> grpc::Status, same code and message.
grpc::Status ToGrpcStatus(const absl::Status& status);

// Answers a unary call that the handler decides on its own thread: runs
// `fn`, which fills the response and returns the call's absl::Status, and
// finishes the call with it (ToGrpcStatus). For handlers that hand the
// answer to the core's callbacks, see SubmitJob or WaitJob.
template <typename Fn>
grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* ctx, Fn&& fn) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  reactor->Finish(ToGrpcStatus(std::forward<Fn>(fn)()));
  return reactor;
}

// Who the services let in (coordinator/auth.h has the rules). The default is
// insecure mode: anyone who reaches the port may do anything.
struct SecurityConfig {
  // User API: null means no authentication (every caller is
  // AnonymousPrincipal()); else every call needs `authorization: Bearer
  // <token>` with a token of this authenticator (UNAUTHENTICATED otherwise).
  // Not owned; must outlive the services.
  const TokenAuthenticator* tokens = nullptr;
  // Tokens made by `trainctl token create` (CreateToken, ListTokens,
  // RevokeToken). With `tokens` set, a call also authenticates with a valid
  // (not revoked, not expired) token of this store. Null: the token RPCs
  // answer FAILED_PRECONDITION. Not owned; must outlive the services.
  TokenStore* token_store = nullptr;
  // Where admin actions are recorded (token.create, token.revoke,
  // job.submit_as, job.cancel_as) and ListAudit reads. Null: nothing is
  // recorded and ListAudit answers FAILED_PRECONDITION. Not owned.
  AuditLog* audit = nullptr;
  // GetUsage and ListHistory read it. Null: they answer
  // FAILED_PRECONDITION. Not owned.
  Accounting* accounting = nullptr;
  // Agent stream: true means Connect needs a client certificate verified
  // against the server's CA (UNAUTHENTICATED without one), and the node may
  // register only under the certificate's common name (PERMISSION_DENIED
  // otherwise). Needs TLS credentials that request client certificates
  // (MakeServerTlsCredentials).
  bool require_agent_cert = false;
  // The time tokens' expiry is checked against, token lifetimes start from
  // and admin actions' audit events carry: the core's clock, so they agree
  // with the jobs' times (and tests move one FakeClock). Null: the system
  // clock (a RealClock of the services' own). Not owned.
  const Clock* clock = nullptr;
};

// PEM files of --tls-cert, --tls-key and --tls-ca.
struct TlsFiles {
  std::string cert;  // the coordinator's certificate (chain)
  std::string key;   // its private key
  std::string ca;    // CA that signs agents' client certificates
};

// TLS server credentials for one port shared by users, ranks and agents: a
// client certificate is requested and, when sent, verified against `ca`
// (GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY): a forged one fails the
// handshake. It is not required at the handshake, so users (bearer token)
// and ranks (TRAINCTL_TOKEN) connect with server TLS only; the agent stream
// checks per call that one was verified (SecurityConfig::require_agent_cert).
// Errors: NOT_FOUND naming the file that cannot be read; INVALID_ARGUMENT
// when one is not PEM.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerTlsCredentials(
    const TlsFiles& files);

// The three services over one Coordinator (not owned; must outlive them and
// the server they are registered with).
class GrpcCoordinatorServices {
 public:
  // `sessions`: the interactive sessions' timings (session_relay.h).
  explicit GrpcCoordinatorServices(Coordinator* core, SecurityConfig security = {},
                                   SessionRelay::Options sessions = {});
  ~GrpcCoordinatorServices();

  // Registers the services with `builder`.
  void RegisterWith(grpc::ServerBuilder& builder);

 private:
  class UserApi;
  // SecurityConfig::clock, or own_clock_.
  std::unique_ptr<Clock> own_clock_;
  const Clock* clock_;
  // Interactive sessions (session_relay.h), shared by the user API's
  // Session streams and the agents' streams; made first, destroyed last.
  std::unique_ptr<SessionRelay> sessions_;
  std::unique_ptr<UserApi> user_;
  // AgentService and Rendezvous (grpc_agent_services.h).
  std::unique_ptr<grpc::Service> agent_;
  std::unique_ptr<grpc::Service> rendezvous_;
};

// Builds and starts a server for `core` on `listen` ("host:port"; port 0
// picks a free one) with `credentials` (null: insecure, plaintext). Sets
// *bound_port to the port bound.
// Errors: UNAVAILABLE when the address cannot be bound.
absl::StatusOr<std::unique_ptr<grpc::Server>> StartCoordinatorServer(
    GrpcCoordinatorServices& services, const std::string& listen, int* bound_port,
    std::shared_ptr<grpc::ServerCredentials> credentials = nullptr);

// Stops `server` as trainctl-coordinator does on SIGTERM: no new calls, the
// calls in flight get `grace` to end, then they are cancelled; returns when
// every call has ended. Meanwhile `core` keeps ticking (every 50 ms): long
// polls (WaitJob, a followed StreamLogs waiting for output) end on the
// core's timers, so without ticks a cancelled one never finishes and the
// server would wait for it forever (a coordinator with a dashboard open on
// a running job hung on SIGTERM before this). Must not run beside another
// thread that calls core.Tick().
void ShutdownServer(grpc::Server& server, Coordinator& core, absl::Duration grace);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_GRPC_SERVICE_H_
