#ifndef TRAINCTL_WORKER_NCCL_RENDEZVOUS_RELAY_SERVER_H_
#define TRAINCTL_WORKER_NCCL_RENDEZVOUS_RELAY_SERVER_H_

// The gRPC ends of the node relay (rendezvous_relay.h): the coordinator's
// Rendezvous service as its upstream, and the same service served to the
// node's ranks on a local unix socket.

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "worker/nccl/rendezvous_relay.h"

namespace grpc {
class Channel;
class Server;
}  // namespace grpc

namespace trainctl::worker {

// RendezvousUpstream over the coordinator's `Rendezvous` gRPC service, with
// the callback API (no thread per call). Thread-safe. The destructor cancels
// the calls in flight and waits for their callbacks (CancelAll).
class GrpcRendezvousUpstream : public RendezvousUpstream {
 public:
  // `channel` to the coordinator (the agent's own, with its credentials).
  // A fetch's gRPC deadline is its timeout_ms (0: 120 s) plus
  // `deadline_grace`, so the coordinator's DEADLINE_EXCEEDED (naming the
  // missing ranks) arrives first; a publish's is 60 s.
  explicit GrpcRendezvousUpstream(std::shared_ptr<grpc::Channel> channel,
                                  absl::Duration deadline_grace = absl::Seconds(5));
  ~GrpcRendezvousUpstream() override;

  void FetchAsync(const v1::FetchUniqueIdRequest& request, UniqueIdsDone done) override;
  void PublishAsync(const v1::PublishUniqueIdRequest& request,
                    absl::AnyInvocable<void(absl::Status)> done) override;

  // Cancels every call in flight (their `done` get CANCELLED) and returns
  // once all their callbacks have run and each call's context (with its
  // reference to the channel) is destroyed: call it before destroying what
  // the callbacks reach (the relay), since a long-poll may otherwise last its
  // whole timeout. After it returns, dropping the channel cannot happen on
  // one of gRPC's callback threads.
  void CancelAll();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Serves `relay` as the `Rendezvous` service on a unix socket. The socket
// file gets mode 0666: tasks run under their users' accounts, and each call
// is authorized by its TRAINCTL_TOKEN (the relay refuses a token that is not
// its attempt's; the coordinator checks the others), so reaching the socket
// grants nothing by itself. Calls RendezvousRelay::Tick every 100 ms.
class RendezvousRelayServer {
 public:
  // Listens on `socket_path` (a stale socket file there is replaced; its
  // directory must exist). Errors: INVALID_ARGUMENT when the path is empty
  // or longer than a unix socket address allows (107 bytes);
  // FAILED_PRECONDITION when something other than a socket is at the path;
  // UNAVAILABLE when the server cannot listen there.
  static absl::StatusOr<std::unique_ptr<RendezvousRelayServer>> Start(
      const std::string& socket_path, RendezvousRelay* relay);

  // Stops serving (calls in flight are cancelled), stops the ticks and
  // removes the socket file.
  ~RendezvousRelayServer();

  // "unix:<path>", as a rank's client dials it.
  const std::string& target() const { return target_; }

 private:
  class Service;
  RendezvousRelayServer(std::string path, RendezvousRelay* relay);

  const std::string path_;
  const std::string target_;
  RendezvousRelay* const relay_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  absl::Notification stop_;
  std::thread ticker_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_NCCL_RENDEZVOUS_RELAY_SERVER_H_
