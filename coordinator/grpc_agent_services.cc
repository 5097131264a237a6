#include "coordinator/grpc_agent_services.h"

#include <atomic>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "coordinator/agent_writes.h"
#include "coordinator/grpc_service.h"
#include "coordinator/grpc_write_queue.h"

namespace trainctl::coord {
namespace {

// ---------------------------------------------------------------- rendezvous

class RendezvousApi : public v1::Rendezvous::CallbackService {
 public:
  explicit RendezvousApi(Coordinator* core) : core_(core) {}

  grpc::ServerUnaryReactor* PublishUniqueId(grpc::CallbackServerContext* ctx,
                                            const v1::PublishUniqueIdRequest* req,
                                            v1::PublishUniqueIdResponse*) override {
    return Answer(ctx, [&] { return core_->PublishUniqueId(*req); });
  }

  grpc::ServerUnaryReactor* FetchUniqueId(grpc::CallbackServerContext* ctx,
                                          const v1::FetchUniqueIdRequest* req,
                                          v1::FetchUniqueIdResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    core_->FetchUniqueIdsAsync(
        *req, [reactor, resp](absl::StatusOr<std::vector<std::string>> ids) {
          if (ids.ok() && !ids->empty()) {
            resp->set_unique_id(ids->front());
            // One id: unique_id alone, as older clients read it.
            if (ids->size() > 1) {
              for (std::string& id : *ids) resp->add_unique_ids(std::move(id));
            }
          }
          reactor->Finish(ToGrpcStatus(ids.status()));
        });
    return reactor;
  }

 private:
  Coordinator* const core_;
};

// ---------------------------------------------------------------- agent stream


// One agent's stream. Reads are handled one at a time, in order; writes are
// queued (QueuedWriteReactor), and starts queued behind a write in flight
// go as one start_task_batch to an agent that takes them
// (coordinator/agent_writes.h). Deletes itself in OnDone, after telling the
// core it is gone.
class AgentStream : public QueuedWriteReactor<v1::AgentMessage, v1::CoordinatorMessage>,
                    public AgentConnection {
 public:
  // `cert_name`: the node its verified client certificate names; empty
  // when none is required. A non-OK `refuse` ends the stream at once with it.
  AgentStream(Coordinator* core, SessionRelay* sessions, std::string cert_name,
              const grpc::Status& refuse)
      : core_(core), sessions_(sessions), cert_name_(std::move(cert_name)) {
    if (!refuse.ok()) {
      FinishNow(refuse);
      return;
    }
    StartRead(&in_);
  }

  void Send(v1::CoordinatorMessage msg) override { Queue(std::move(msg)); }

  void Close(const absl::Status& status) override { FinishNow(ToGrpcStatus(status)); }

  void OnReadDone(bool ok) override {
    if (!ok) {
      FinishNow(grpc::Status::OK);
      return;
    }
    if (node_.empty()) {
      if (!in_.has_register_()) {
        FinishNow(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                "the first message must be `register`"));
        return;
      }
      if (!cert_name_.empty()) {
        absl::Status s = CheckNodeIdentity(cert_name_, in_.register_().node().name());
        if (!s.ok()) {
          TC_LOG_WARN("refused an agent: {}", std::string(s.message()));
          FinishNow(ToGrpcStatus(s));
          return;
        }
      }
      // Set before registering: once registered, messages may arrive.
      node_ = in_.register_().node().name();
      batch_starts_ = in_.register_().accepts_start_task_batch();
      absl::Status registered = core_->RegisterAgent(in_.register_(), this);
      if (!registered.ok()) {
        node_.clear();
        FinishNow(ToGrpcStatus(registered));
        return;
      }
      sessions_->AgentConnected(node_, this);
    } else if (in_.has_session()) {
      // Session traffic goes to the relay, never through the core.
      // Moved out of the read buffer (refilled by the next read anyway).
      sessions_->FromAgent(node_, std::move(*in_.mutable_session()));
    } else {
      absl::Status s = core_->HandleAgentMessage(node_, this, in_);
      if (absl::IsFailedPrecondition(s)) {
        FinishNow(ToGrpcStatus(s));
        return;
      }
      if (!s.ok()) TC_LOG_WARN("node {}: {}", node_, s.ToString());
    }
    StartRead(&in_);
  }

  void OnDone() override {
    if (!node_.empty()) {
      sessions_->AgentGone(node_, this);
      core_->AgentDisconnected(node_, this);
    }
    delete this;
  }

 private:
  // Merges the starts at the front of the queue for an agent that takes
  // batches.
  void BeforeWrite(std::deque<v1::CoordinatorMessage>& queue) override {
    if (batch_starts_) CoalesceLeadingStarts(queue);
  }

  Coordinator* const core_;
  SessionRelay* const sessions_;
  const std::string cert_name_;
  // Set once registered; read only by the reactor's own callbacks.
  std::string node_;
  v1::AgentMessage in_;
  // RegisterNode.accepts_start_task_batch of the agent on this stream; set
  // before it registers, read by the writes that follow.
  std::atomic<bool> batch_starts_ = false;
};

class AgentApi : public v1::AgentService::CallbackService {
 public:
  AgentApi(Coordinator* core, bool require_cert, SessionRelay* sessions)
      : core_(core), require_cert_(require_cert), sessions_(sessions) {}

  grpc::ServerBidiReactor<v1::AgentMessage, v1::CoordinatorMessage>* Connect(
      grpc::CallbackServerContext* ctx) override {
    if (!require_cert_) return new AgentStream(core_, sessions_, "", grpc::Status::OK);
    // With GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY the common name is
    // present only when the peer sent a certificate that the CA verified.
    std::string cert_name;
    std::shared_ptr<const grpc::AuthContext> auth = ctx->auth_context();
    if (auth != nullptr) {
      std::vector<grpc::string_ref> cn =
          auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
      if (!cn.empty()) cert_name.assign(cn.front().data(), cn.front().size());
    }
    if (cert_name.empty()) {
      TC_LOG_WARN("refused an agent without a client certificate from {}",
                  ctx->peer());
      return new AgentStream(
          core_, sessions_, "",
          grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                       "agents must present a client certificate signed by the "
                       "coordinator's CA (trainctl-agent --tls-cert/--tls-key/"
                       "--tls-ca; deploy/make_certs.sh makes them)"));
    }
    return new AgentStream(core_, sessions_, std::move(cert_name), grpc::Status::OK);
  }

 private:
  Coordinator* const core_;
  const bool require_cert_;
  SessionRelay* const sessions_;
};

}  // namespace

std::unique_ptr<grpc::Service> MakeAgentService(Coordinator* core, bool require_cert,
                                                SessionRelay* sessions) {
  return std::make_unique<AgentApi>(core, require_cert, sessions);
}

std::unique_ptr<grpc::Service> MakeRendezvousService(Coordinator* core) {
  return std::make_unique<RendezvousApi>(core);
}

}  // namespace trainctl::coord
