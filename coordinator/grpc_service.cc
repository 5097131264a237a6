#include "coordinator/grpc_service.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"

namespace trainctl::coord {
namespace {

constexpr absl::Duration kDefaultWait = absl::Seconds(30);
constexpr absl::Duration kMaxWait = absl::Seconds(300);
// Agents send log chunks of up to 2 MiB; leave room.
constexpr int kMaxMessageBytes = 16 << 20;

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

// ---------------------------------------------------------------- user API

class GrpcCoordinatorServices::UserApi : public v1::Coordinator::CallbackService {
 public:
  explicit UserApi(Coordinator* core) : core_(core) {}

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<int64_t> id = core_->SubmitJob(req->spec(), req->request_id());
    if (id.ok()) resp->set_job_id(*id);
    reactor->Finish(ToGrpcStatus(id.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* req,
                                   v1::GetJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<v1::Job> job = core_->GetJob(req->job_id());
    if (job.ok()) *resp->mutable_job() = std::move(*job);
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (req->limit() < 0) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "limit: must not be negative"));
      return reactor;
    }
    std::vector<v1::JobState> states;
    for (int s : req->states()) states.push_back(static_cast<v1::JobState>(s));
    for (v1::Job& job : core_->ListJobs(states, req->limit(), req->sweep_id())) {
      *resp->add_jobs() = std::move(job);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* req,
                                      v1::CancelJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<v1::Job> job = core_->CancelJob(req->job_id());
    if (job.ok()) *resp->mutable_job() = std::move(*job);
    reactor->Finish(ToGrpcStatus(job.status()));
    return reactor;
  }

  grpc::ServerUnaryReactor* WaitJob(grpc::CallbackServerContext* ctx,
                                    const v1::WaitJobRequest* req,
                                    v1::WaitJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (req->timeout_ms() < 0) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   "timeout_ms: must not be negative"));
      return reactor;
    }
    const absl::Duration timeout =
        req->timeout_ms() == 0
            ? kDefaultWait
            : std::min(absl::Milliseconds(req->timeout_ms()), kMaxWait);
    core_->WaitJobAsync(req->job_id(), timeout,
                        [reactor, resp](absl::StatusOr<v1::Job> job) {
                          if (job.ok()) {
                            resp->set_done(IsFinal(job->state()));
                            *resp->mutable_job() = std::move(*job);
                          }
                          reactor->Finish(ToGrpcStatus(job.status()));
                        });
    return reactor;
  }

  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx,
                                      const v1::ListNodesRequest* req,
                                      v1::ListNodesResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    for (v1::NodeView& view : core_->ListNodes()) *resp->add_nodes() = std::move(view);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetLogs(grpc::CallbackServerContext* ctx,
                                    const v1::GetLogsRequest* req,
                                    v1::GetLogsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    core_->GetLogsAsync(req->job_id(), req->rank(), req->offset(), req->max_bytes(),
                        [reactor, resp](absl::StatusOr<v1::GetLogsResponse> r) {
                          if (r.ok()) *resp = std::move(*r);
                          reactor->Finish(ToGrpcStatus(r.status()));
                        });
    return reactor;
  }

  grpc::ServerUnaryReactor* GetJobUsage(grpc::CallbackServerContext* ctx,
                                        const v1::GetJobUsageRequest* req,
                                        v1::GetJobUsageResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<std::vector<v1::JobUsage>> usage = core_->GetJobUsage(
        {req->job_ids().begin(), req->job_ids().end()}, req->max_samples());
    if (usage.ok()) {
      for (v1::JobUsage& u : *usage) *resp->add_jobs() = std::move(u);
    }
    reactor->Finish(ToGrpcStatus(usage.status()));
    return reactor;
  }

 private:
  Coordinator* const core_;
};

// ---------------------------------------------------------------- rendezvous

class GrpcCoordinatorServices::RendezvousApi : public v1::Rendezvous::CallbackService {
 public:
  explicit RendezvousApi(Coordinator* core) : core_(core) {}

  grpc::ServerUnaryReactor* PublishUniqueId(grpc::CallbackServerContext* ctx,
                                            const v1::PublishUniqueIdRequest* req,
                                            v1::PublishUniqueIdResponse*) override {
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(ToGrpcStatus(core_->PublishUniqueId(*req)));
    return reactor;
  }

  grpc::ServerUnaryReactor* FetchUniqueId(grpc::CallbackServerContext* ctx,
                                          const v1::FetchUniqueIdRequest* req,
                                          v1::FetchUniqueIdResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    core_->FetchUniqueIdAsync(*req, [reactor, resp](absl::StatusOr<std::string> id) {
      if (id.ok()) resp->set_unique_id(std::move(*id));
      reactor->Finish(ToGrpcStatus(id.status()));
    });
    return reactor;
  }

 private:
  Coordinator* const core_;
};

// ---------------------------------------------------------------- agent stream

namespace {

// One agent's stream. Reads are handled one at a time, in order; writes are
// queued (one outstanding StartWrite at a time, as gRPC requires). Deletes
// itself in OnDone, after telling the core it is gone.
class AgentStream : public grpc::ServerBidiReactor<v1::AgentMessage,
                                                   v1::CoordinatorMessage>,
                    public AgentConnection {
 public:
  explicit AgentStream(Coordinator* core) : core_(core) { StartRead(&in_); }

  void Send(const v1::CoordinatorMessage& msg) override {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    out_.push_back(msg);
    if (!writing_) {
      writing_ = true;
      StartWrite(&out_.front());
    }
  }

  void Close(const absl::Status& status) override { FinishOnce(ToGrpcStatus(status)); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      FinishOnce(grpc::Status::OK);
      return;
    }
    if (node_.empty()) {
      if (!in_.has_register_()) {
        FinishOnce(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                "the first message must be `register`"));
        return;
      }
      // Set before registering: once registered, messages may arrive.
      node_ = in_.register_().node().name();
      absl::Status registered = core_->RegisterAgent(in_.register_(), this);
      if (!registered.ok()) {
        node_.clear();
        FinishOnce(ToGrpcStatus(registered));
        return;
      }
    } else {
      absl::Status s = core_->HandleAgentMessage(node_, this, in_);
      if (absl::IsFailedPrecondition(s)) {
        FinishOnce(ToGrpcStatus(s));
        return;
      }
      if (!s.ok()) TC_LOG_WARN("node {}: {}", node_, s.ToString());
    }
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    out_.pop_front();
    if (ok && !out_.empty() && !finished_) {
      StartWrite(&out_.front());
    } else {
      writing_ = false;
    }
  }

  void OnDone() override {
    if (!node_.empty()) core_->AgentDisconnected(node_, this);
    delete this;
  }

 private:
  void FinishOnce(const grpc::Status& status) {
    absl::MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  Coordinator* const core_;
  // Set once registered; read only by the reactor's own callbacks.
  std::string node_;
  v1::AgentMessage in_;
  absl::Mutex mu_;
  std::deque<v1::CoordinatorMessage> out_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

class GrpcCoordinatorServices::AgentApi : public v1::AgentService::CallbackService {
 public:
  explicit AgentApi(Coordinator* core) : core_(core) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* Connect(
      grpc::CallbackServerContext*) override {
    return new AgentStream(core_);
  }

 private:
  Coordinator* const core_;
};

// ---------------------------------------------------------------- server

GrpcCoordinatorServices::GrpcCoordinatorServices(Coordinator* core)
    : user_(std::make_unique<UserApi>(core)),
      agent_(std::make_unique<AgentApi>(core)),
      rendezvous_(std::make_unique<RendezvousApi>(core)) {}

GrpcCoordinatorServices::~GrpcCoordinatorServices() = default;

void GrpcCoordinatorServices::RegisterWith(grpc::ServerBuilder& builder) {
  builder.RegisterService(user_.get());
  builder.RegisterService(agent_.get());
  builder.RegisterService(rendezvous_.get());
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartCoordinatorServer(
    GrpcCoordinatorServices& services, const std::string& listen, int* bound_port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), bound_port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  services.RegisterWith(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  return server;
}

}  // namespace trainctl::coord
