#ifndef TRAINCTL_WORKER_NCCL_TESTING_FAKE_RENDEZVOUS_H_
#define TRAINCTL_WORKER_NCCL_TESTING_FAKE_RENDEZVOUS_H_

// Test double of the coordinator's `Rendezvous` gRPC service for one job
// attempt, served on a free loopback port. Test-only, header-only.

#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl::worker::testing {

// Checks the token, stores rank 0's id, and long-polls fetchers on a condition
// until it is published or their timeout_ms passes (then DEADLINE_EXCEEDED
// with a message like the coordinator's). Can be told to answer UNAVAILABLE
// to the next few calls, as a restarting coordinator would. Thread-safe.
class FakeRendezvousService final : public v1::Rendezvous::Service {
 public:
  explicit FakeRendezvousService(std::string token) : token_(std::move(token)) {}

  grpc::Status PublishUniqueId(grpc::ServerContext*,
                               const v1::PublishUniqueIdRequest* request,
                               v1::PublishUniqueIdResponse*) override {
    absl::MutexLock lock(&mu_);
    if (unavailable_left_ > 0) {
      --unavailable_left_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
    }
    if (request->token() != token_) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "token does not match the job attempt");
    }
    id_ = request->unique_id();
    published_ = true;
    return grpc::Status::OK;
  }

  grpc::Status FetchUniqueId(grpc::ServerContext*,
                             const v1::FetchUniqueIdRequest* request,
                             v1::FetchUniqueIdResponse* response) override {
    absl::MutexLock lock(&mu_);
    ++fetch_calls_;
    if (unavailable_left_ > 0) {
      --unavailable_left_;
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting");
    }
    if (request->token() != token_) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          "token does not match the job attempt");
    }
    ++waiting_;
    const bool published = mu_.AwaitWithTimeout(
        absl::Condition(&published_),
        absl::Milliseconds(request->timeout_ms()));
    --waiting_;
    if (!published) {
      return grpc::Status(
          grpc::StatusCode::DEADLINE_EXCEEDED,
          absl::StrFormat("rank 0 of job %d never published its id",
                          request->job_id()));
    }
    response->set_unique_id(id_);
    return grpc::Status::OK;
  }

  // Blocks until `n` fetchers are parked in the long-poll; false after 10 s.
  bool AwaitWaiting(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return waiting_ >= n;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }

  void FailNextCallsUnavailable(int n) {
    absl::MutexLock lock(&mu_);
    unavailable_left_ = n;
  }

  int fetch_calls() {
    absl::MutexLock lock(&mu_);
    return fetch_calls_;
  }

 private:
  const std::string token_;
  absl::Mutex mu_;
  bool published_ ABSL_GUARDED_BY(mu_) = false;
  std::string id_ ABSL_GUARDED_BY(mu_);
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  int unavailable_left_ ABSL_GUARDED_BY(mu_) = 0;
  int fetch_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

// FakeRendezvousService served on 127.0.0.1:<free port>.
class FakeRendezvousServer {
 public:
  explicit FakeRendezvousServer(std::string token) : service_(std::move(token)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~FakeRendezvousServer() { Shutdown(); }

  // False when the server could not start.
  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string address() const { return absl::StrFormat("127.0.0.1:%d", port_); }
  FakeRendezvousService& service() { return service_; }

  void Shutdown() {
    if (server_ != nullptr) {
      server_->Shutdown();
      server_.reset();
    }
  }

 private:
  FakeRendezvousService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace trainctl::worker::testing

#endif  // TRAINCTL_WORKER_NCCL_TESTING_FAKE_RENDEZVOUS_H_
