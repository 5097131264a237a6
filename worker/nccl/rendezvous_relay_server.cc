#include "worker/nccl/rendezvous_relay_server.h"

#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"
#include "worker/nccl/rendezvous_client.h"

namespace trainctl::worker {

// ------------------------------------------------------------- upstream

class GrpcRendezvousUpstream::Impl {
 public:
  Impl(std::shared_ptr<grpc::Channel> channel, absl::Duration grace)
      : stub_(v1::Rendezvous::NewStub(std::move(channel))), grace_(grace) {}

  ~Impl() { CancelAll(); }

  void CancelAll() {
    // TryCancel outside the lock: gRPC may run a call's callback inline, and
    // the callback takes the lock. The copies keep the contexts alive.
    std::vector<std::shared_ptr<Call>> calls;
    {
      absl::MutexLock lock(&mu_);
      calls.reserve(in_flight_.size());
      for (auto& [raw, call] : in_flight_) calls.push_back(call);
    }
    for (const std::shared_ptr<Call>& call : calls) call->ctx.TryCancel();
    calls.clear();
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* unfinished) { return *unfinished == 0; },
        &unfinished_calls_));
  }

  void Fetch(const v1::FetchUniqueIdRequest& request, UniqueIdsDone done) {
    auto owned = std::make_shared<FetchCall>();
    FetchCall* call = owned.get();
    call->req = request;
    call->done = std::move(done);
    const absl::Duration wait = request.timeout_ms() > 0
                                    ? absl::Milliseconds(request.timeout_ms())
                                    : absl::Seconds(120);
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + wait + grace_));
    Started(std::move(owned));
    stub_->async()->FetchUniqueId(
        &call->ctx, &call->req, &call->resp, [this, call](grpc::Status status) {
          absl::StatusOr<std::vector<std::string>> ids;
          if (!status.ok()) {
            ids = FromGrpcStatus(status);
          } else if (call->resp.unique_ids_size() > 0) {
            ids = std::vector<std::string>(call->resp.unique_ids().begin(),
                                           call->resp.unique_ids().end());
          } else if (!call->resp.unique_id().empty()) {
            ids = std::vector<std::string>{call->resp.unique_id()};
          } else {
            ids = std::vector<std::string>{};  // an arrivals report, not yet published
          }
          call->done(std::move(ids));
          Finished(call);
        });
  }

  void Publish(const v1::PublishUniqueIdRequest& request,
               absl::AnyInvocable<void(absl::Status)> done) {
    auto owned = std::make_shared<PublishCall>();
    PublishCall* call = owned.get();
    call->req = request;
    call->done = std::move(done);
    call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    Started(std::move(owned));
    stub_->async()->PublishUniqueId(&call->ctx, &call->req, &call->resp,
                                    [this, call](grpc::Status status) {
                                      call->done(FromGrpcStatus(status));
                                      Finished(call);
                                    });
  }

 private:
  // One call in flight; its context must outlive the call's callback.
  struct Call {
    virtual ~Call() = default;
    grpc::ClientContext ctx;
  };
  struct FetchCall : Call {
    v1::FetchUniqueIdRequest req;
    v1::FetchUniqueIdResponse resp;
    UniqueIdsDone done;
  };
  struct PublishCall : Call {
    v1::PublishUniqueIdRequest req;
    v1::PublishUniqueIdResponse resp;
    absl::AnyInvocable<void(absl::Status)> done;
  };

  void Started(std::shared_ptr<Call> call) {
    absl::MutexLock lock(&mu_);
    Call* raw = call.get();
    in_flight_.emplace(raw, std::move(call));
    ++unfinished_calls_;
  }

  // The end of a call's callback. The context (which holds a reference to
  // the channel) is destroyed before CancelAll may return: were the owner to
  // drop the channel first, its last reference would go on gRPC's callback
  // thread, and gRPC would free the completion queue that thread polls.
  void Finished(Call* call) {
    std::shared_ptr<Call> owned;
    {
      absl::MutexLock lock(&mu_);
      auto node = in_flight_.extract(call);
      owned = std::move(node.mapped());
    }
    owned.reset();  // unless CancelAll holds a copy, which it drops itself
    absl::MutexLock lock(&mu_);
    --unfinished_calls_;
  }

  const std::unique_ptr<v1::Rendezvous::Stub> stub_;
  const absl::Duration grace_;
  absl::Mutex mu_;
  // The calls in flight, by address.
  absl::flat_hash_map<Call*, std::shared_ptr<Call>> in_flight_ ABSL_GUARDED_BY(mu_);
  // Calls started whose callback has not yet finished (Finished).
  int unfinished_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

GrpcRendezvousUpstream::GrpcRendezvousUpstream(std::shared_ptr<grpc::Channel> channel,
                                               absl::Duration deadline_grace)
    : impl_(std::make_unique<Impl>(std::move(channel), deadline_grace)) {}

GrpcRendezvousUpstream::~GrpcRendezvousUpstream() = default;

void GrpcRendezvousUpstream::CancelAll() { impl_->CancelAll(); }

void GrpcRendezvousUpstream::FetchAsync(const v1::FetchUniqueIdRequest& request,
                                        UniqueIdsDone done) {
  impl_->Fetch(request, std::move(done));
}

void GrpcRendezvousUpstream::PublishAsync(const v1::PublishUniqueIdRequest& request,
                                          absl::AnyInvocable<void(absl::Status)> done) {
  impl_->Publish(request, std::move(done));
}

// ------------------------------------------------------------- server

namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace

class RendezvousRelayServer::Service : public v1::Rendezvous::CallbackService {
 public:
  explicit Service(RendezvousRelay* relay) : relay_(relay) {}

  grpc::ServerUnaryReactor* PublishUniqueId(grpc::CallbackServerContext* ctx,
                                            const v1::PublishUniqueIdRequest* req,
                                            v1::PublishUniqueIdResponse*) override {
    auto* reactor = ctx->DefaultReactor();
    relay_->PublishAsync(*req, [reactor](absl::Status s) { reactor->Finish(ToGrpc(s)); });
    return reactor;
  }

  grpc::ServerUnaryReactor* FetchUniqueId(grpc::CallbackServerContext* ctx,
                                          const v1::FetchUniqueIdRequest* req,
                                          v1::FetchUniqueIdResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    relay_->FetchAsync(*req, absl::Now(),
                       [reactor, resp](absl::StatusOr<std::vector<std::string>> ids) {
                         if (ids.ok() && !ids->empty()) {
                           resp->set_unique_id(ids->front());
                           if (ids->size() > 1) {
                             for (std::string& id : *ids) resp->add_unique_ids(std::move(id));
                           }
                         }
                         reactor->Finish(ToGrpc(ids.status()));
                       });
    return reactor;
  }

 private:
  RendezvousRelay* const relay_;
};

RendezvousRelayServer::RendezvousRelayServer(std::string path, RendezvousRelay* relay)
    : path_(std::move(path)), target_(absl::StrCat("unix:", path_)), relay_(relay) {}

absl::StatusOr<std::unique_ptr<RendezvousRelayServer>> RendezvousRelayServer::Start(
    const std::string& socket_path, RendezvousRelay* relay) {
  if (socket_path.empty() || socket_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rendezvous socket path: must be 1-", sizeof(sockaddr_un{}.sun_path) - 1,
        " bytes (a unix socket address), got ", socket_path.size(), ": ", socket_path));
  }
  struct stat st;
  if (lstat(socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "rendezvous socket path ", socket_path, " exists and is not a socket"));
    }
    unlink(socket_path.c_str());  // a previous agent's
  }
  std::unique_ptr<RendezvousRelayServer> self(
      new RendezvousRelayServer(socket_path, relay));
  self->service_ = std::make_unique<Service>(relay);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(self->target_, grpc::InsecureServerCredentials());
  builder.RegisterService(self->service_.get());
  self->server_ = builder.BuildAndStart();
  if (self->server_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on the rendezvous socket ", socket_path));
  }
  // Ranks run as their users' accounts; the token is the authorization.
  if (chmod(socket_path.c_str(), 0666) != 0) {
    return absl::UnavailableError(absl::StrCat("chmod 0666 ", socket_path, ": ",
                                               std::strerror(errno)));
  }
  RendezvousRelayServer* raw = self.get();
  self->ticker_ = std::thread([raw] {
    while (!raw->stop_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      raw->relay_->Tick(absl::Now());
    }
  });
  return self;
}

RendezvousRelayServer::~RendezvousRelayServer() {
  stop_.Notify();
  if (ticker_.joinable()) ticker_.join();
  // Waiting ranks get ABORTED (their clients then fail over or report it)
  // so that no call is left open for the shutdown to wait on.
  relay_->AbortAll("the node's agent is shutting down its rendezvous relay");
  if (server_ != nullptr) {
    server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    server_->Wait();
  }
  unlink(path_.c_str());
}

}  // namespace trainctl::worker
