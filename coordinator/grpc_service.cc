#include "coordinator/grpc_service.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/env_names.h"
#include "common/logging.h"
#include "coordinator/grpc_agent_services.h"
#include "coordinator/grpc_streams.h"
#include "coordinator/job_spec.h"
#include "coordinator/session_relay.h"

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

namespace {

// The audit trail's name of a node action: "node.drain", "node.resume",
// "node.down".
std::string NodeActionName(v1::NodeAction action) {
  switch (action) {
    case v1::NODE_ACTION_DRAIN:
      return "node.drain";
    case v1::NODE_ACTION_DOWN:
      return "node.down";
    default:
      return "node.resume";
  }
}

// What an audit event of a node action says besides its name and nodes:
// the reason, the deadline, the verify jobs.
std::string NodeActionDetail(const v1::UpdateNodesRequest& req,
                             const v1::UpdateNodesResponse& resp) {
  std::vector<std::string> parts;
  if (!req.reason().empty()) parts.push_back(absl::StrCat("reason: ", req.reason()));
  if (req.deadline_s() > 0) parts.push_back(absl::StrCat("deadline ", req.deadline_s(), " s"));
  for (const auto& [node, job] : resp.verify_jobs()) {
    parts.push_back(absl::StrCat("verify ", node, " with job ", job));
  }
  std::sort(parts.begin() + (req.reason().empty() ? 0 : 1) + (req.deadline_s() > 0 ? 1 : 0),
            parts.end());
  return absl::StrJoin(parts, "; ");
}

// The caller of a user API call: AnonymousPrincipal() without a tokens file,
// else the owner of the bearer token in the `authorization` metadata: a
// token of the file, or else a valid token of `store` (when not null) at
// `now`. Errors: UNAUTHENTICATED (see BearerToken, TokenStore::Authenticate).
absl::StatusOr<Principal> CallerOf(const TokenAuthenticator* tokens,
                                   const TokenStore* store,
                                   const grpc::CallbackServerContext* ctx,
                                   absl::Time now) {
  if (tokens == nullptr) return AnonymousPrincipal();
  const auto& metadata = ctx->client_metadata();
  auto it = metadata.find("authorization");
  absl::string_view header;
  if (it != metadata.end()) header = absl::string_view(it->second.data(), it->second.size());
  if (store == nullptr) return tokens->Authenticate(header);
  absl::StatusOr<absl::string_view> token = BearerToken(header);
  if (!token.ok()) return token.status();
  if (std::optional<Principal> who = tokens->Find(*token)) return *std::move(who);
  return store->Authenticate(*token, now);
}

// `job` as the user API shows it: the values of its environment variables
// whose names look secret (LooksSecret: HF_TOKEN, AWS_SECRET_ACCESS_KEY) are
// "****", as `trainctl describe` shows them, so that a token exported from
// the submitter's shell is not read back in clear over REST or from a
// terminal log. The tasks get the real values (StartTask).
v1::Job Shown(v1::Job job) {
  for (auto* env : {job.mutable_spec()->mutable_env(), job.mutable_spec()->mutable_exported_env()}) {
    for (auto& [name, value] : *env) {
      if (LooksSecret(name)) value = "****";
    }
  }
  return job;
}

}  // namespace

// ---------------------------------------------------------------- user API

// Every call first authenticates its caller (CallerOf) and, for calls on one
// job, checks the caller may act on it (CheckJobAccess) before the core
// acts: a refused call changes nothing.
class GrpcCoordinatorServices::UserApi : public v1::Coordinator::CallbackService {
 public:
  UserApi(Coordinator* core, const SecurityConfig& security, const Clock* clock,
          SessionRelay* sessions)
      : core_(core),
        clock_(clock),
        tokens_(security.tokens),
        token_store_(security.token_store),
        audit_(security.audit),
        accounting_(security.accounting),
        sessions_(sessions) {}

  grpc::ServerBidiReactor<v1::SessionClientMessage, v1::SessionServerMessage>* Session(
      grpc::CallbackServerContext* ctx) override {
    return NewSessionStream(sessions_, Caller(ctx));
  }

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* ctx,
                                      const v1::SubmitJobRequest* req,
                                      v1::SubmitJobResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    v1::JobSpec spec = req->spec();
    std::optional<Principal> who = SubmitterOrFinish(ctx, reactor, &spec);
    if (!who) return reactor;
    // Answered when the job's write is durable, from the store's commit
    // thread: no server thread waits for the fsync (group commit).
    // A request id another user chose is refused by the core.
    core_->SubmitJobAsync(
        spec, req->request_id(),
        [this, reactor, resp, caller = *who, spec_user = spec.user()](absl::StatusOr<int64_t> id) {
          if (!id.ok()) {
            reactor->Finish(ToGrpcStatus(id.status()));
            return;
          }
          resp->set_job_id(*id);
          AuditSubmitAs(caller, spec_user, {*id},
                        [reactor] { reactor->Finish(grpc::Status::OK); });
        },
        {who->user, who->admin});
    return reactor;
  }

  // The caller, authenticated, with `spec` made theirs (ApplySubmitter);
  // nullopt once `reactor` is finished with why not.
  std::optional<Principal> SubmitterOrFinish(grpc::CallbackServerContext* ctx,
                                             grpc::ServerUnaryReactor* reactor,
                                             v1::JobSpec* spec) {
    absl::StatusOr<Principal> who = Caller(ctx);
    absl::Status s = who.ok() ? ApplySubmitter(*who, spec) : who.status();
    if (!s.ok()) {
      reactor->Finish(ToGrpcStatus(s));
      return std::nullopt;
    }
    return *std::move(who);
  }

  grpc::ServerUnaryReactor* SubmitJobs(grpc::CallbackServerContext* ctx,
                                       const v1::SubmitJobsRequest* req,
                                       v1::SubmitJobsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<Principal> who = Caller(ctx);
    if (!who.ok()) {
      reactor->Finish(ToGrpcStatus(who.status()));
      return reactor;
    }
    // The specs are moved out of the request, not copied: with an array's
    // exported environment in each of its specs the copy was a fifth of the
    // call's CPU. gRPC makes the request object per call (it is not a const
    // object, so changing it is defined) and only destroys it after Finish;
    // nothing here reads its specs again.
    google::protobuf::RepeatedPtrField<v1::JobSpec>& given =
        *const_cast<v1::SubmitJobsRequest*>(req)->mutable_specs();
    std::vector<v1::JobSpec> specs;
    specs.reserve(given.size());
    for (v1::JobSpec& spec : given) specs.push_back(std::move(spec));
    // Every job is the caller's, as with SubmitJob; a refused spec refuses
    // the call.
    for (size_t i = 0; i < specs.size(); ++i) {
      if (absl::Status s = ApplySubmitter(*who, &specs[i]); !s.ok()) {
        reactor->Finish(ToGrpcStatus(absl::Status(
            s.code(), absl::StrCat("specs[", i, "]: ", s.message()))));
        return reactor;
      }
    }
    // Answered when the jobs' write is durable (one commit for all of them),
    // from the store's commit thread. An admin's batch for other users is
    // one job.submit_as event naming the first such user.
    std::string spec_user;
    for (const v1::JobSpec& spec : specs) {
      if (spec.user() != who->user) {
        spec_user = spec.user();
        break;
      }
    }
    core_->SubmitJobsAsync(
        std::move(specs), req->request_id(),
        [this, reactor, resp, caller = *who,
         spec_user](absl::StatusOr<std::vector<int64_t>> ids) {
          FinishSubmitJobsAudited(caller, spec_user.empty() ? caller.user : spec_user,
                                  std::move(ids), reactor, resp);
        },
        {who->user, who->admin});
    return reactor;
  }

  // FinishSubmitJobs, after recording a job.submit_as event when an admin
  // submitted as `spec_user` (AuditSubmitAs).
  void FinishSubmitJobsAudited(const Principal& who, const std::string& spec_user,
                               absl::StatusOr<std::vector<int64_t>> ids,
                               grpc::ServerUnaryReactor* reactor, v1::SubmitJobsResponse* resp) {
    if (!ids.ok()) {
      FinishSubmitJobs(std::move(ids), reactor, resp);
      return;
    }
    std::vector<int64_t> audited = *ids;
    AuditSubmitAs(who, spec_user, std::move(audited),
                  [ids = std::move(ids), reactor, resp]() mutable {
                    FinishSubmitJobs(std::move(ids), reactor, resp);
                  });
  }

  // Answers SubmitJobs and SubmitJobArray with the jobs' ids, once stored
  // (a request id another user chose is refused by the core).
  static void FinishSubmitJobs(absl::StatusOr<std::vector<int64_t>> ids,
                               grpc::ServerUnaryReactor* reactor,
                               v1::SubmitJobsResponse* resp) {
    if (ids.ok()) {
      for (int64_t id : *ids) resp->add_job_ids(id);
    }
    reactor->Finish(ToGrpcStatus(ids.status()));
  }

  grpc::ServerUnaryReactor* SubmitJobArray(grpc::CallbackServerContext* ctx,
                                           const v1::SubmitJobArrayRequest* req,
                                           v1::SubmitJobsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    // Moved out of the request, as SubmitJobs' specs are.
    v1::JobSpec spec = std::move(*const_cast<v1::SubmitJobArrayRequest*>(req)->mutable_spec());
    std::optional<Principal> who = SubmitterOrFinish(ctx, reactor, &spec);
    if (!who) return reactor;
    const std::vector<int> task_ids(req->task_ids().begin(), req->task_ids().end());
    std::string spec_user = spec.user();
    core_->SubmitJobArrayAsync(
        std::move(spec), task_ids, req->max_running(), req->request_id(),
        [this, reactor, resp, caller = *who,
         spec_user = std::move(spec_user)](absl::StatusOr<std::vector<int64_t>> ids) {
          FinishSubmitJobsAudited(caller, spec_user, std::move(ids), reactor, resp);
        },
        {who->user, who->admin});
    return reactor;
  }

  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* ctx,
                                   const v1::GetJobRequest* req,
                                   v1::GetJobResponse* resp) override {
    return Answer(ctx, [&] {
      absl::StatusOr<v1::Job> job = AccessibleJob(ctx, req->job_id(), "read");
      if (job.ok()) *resp->mutable_job() = Shown(std::move(*job));
      return job.status();
    });
  }

  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* ctx,
                                     const v1::ListJobsRequest* req,
                                     v1::ListJobsResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      if (req->limit() < 0) return absl::InvalidArgumentError("limit: must not be negative");
      absl::StatusOr<Principal> who = Caller(ctx);
      if (!who.ok()) return who.status();
      std::vector<v1::JobState> states;
      for (int s : req->states()) states.push_back(static_cast<v1::JobState>(s));
      absl::StatusOr<std::string> owner = ListOwner(
          *who,
          // A named sweep or job array is read as GetJob reads a named job:
          // an admin sees every trial or task of it.
          req->all_users() ||
              (who->admin && (!req->sweep_id().empty() || req->array_job_id() != 0)),
          req->user());
      if (!owner.ok()) return owner.status();
      for (v1::Job& job : core_->ListJobs(states, req->limit(), req->sweep_id(), *owner,
                                          req->array_job_id())) {
        *resp->add_jobs() = Shown(std::move(job));
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* ctx,
                                      const v1::CancelJobRequest* req,
                                      v1::CancelJobResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      absl::StatusOr<v1::Job> job = AccessibleJob(ctx, req->job_id(), "cancel");
      if (!job.ok()) return job.status();
      const std::string owner = job->spec().user();
      job = core_->CancelJob(req->job_id());
      if (!job.ok()) return job.status();
      // An admin cancelling another user's job is recorded (not the
      // anonymous caller of a coordinator without authentication).
      absl::StatusOr<Principal> who = Caller(ctx);
      if (who.ok() && !who->user.empty() && owner != who->user) {
        AuditOrLog(*who, "job.cancel_as", absl::StrCat(req->job_id()),
                   absl::StrCat("cancelled user ", owner.empty() ? "(none)" : owner, "'s job"),
                   clock_->Now());
      }
      *resp->mutable_job() = Shown(std::move(*job));
      return absl::OkStatus();
    });
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
    if (absl::StatusOr<v1::Job> job = AccessibleJob(ctx, req->job_id(), "wait for");
        !job.ok()) {
      reactor->Finish(ToGrpcStatus(job.status()));
      return reactor;
    }
    core_->WaitJobAsync(req->job_id(), timeout,
                        [reactor, resp](absl::StatusOr<v1::Job> job) {
                          if (job.ok()) {
                            resp->set_done(IsFinal(job->state()));
                            *resp->mutable_job() = Shown(std::move(*job));
                          }
                          reactor->Finish(ToGrpcStatus(job.status()));
                        });
    return reactor;
  }

  grpc::ServerUnaryReactor* ListNodes(grpc::CallbackServerContext* ctx,
                                      const v1::ListNodesRequest* req,
                                      v1::ListNodesResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      // Any authenticated user may see the cluster; a non-admin sees the
      // names of its own jobs only (other tasks keep their job id and size).
      absl::StatusOr<Principal> who = Caller(ctx);
      if (!who.ok()) return who.status();
      absl::flat_hash_map<int64_t, bool> may_read;
      for (v1::NodeView& view : core_->ListNodes()) {
        if (!who->admin) {
          for (v1::GpuTasks& gpu : *view.mutable_gpu_tasks()) {
            for (v1::GpuTaskRef& task : *gpu.mutable_tasks()) {
              auto [it, inserted] = may_read.try_emplace(task.job_id(), false);
              if (inserted) {
                absl::StatusOr<v1::Job> job = core_->GetJob(task.job_id());
                it->second = job.ok() && CheckJobAccess(*who, *job, "read").ok();
              }
              if (!it->second) task.clear_job_name();
            }
          }
        }
        *resp->add_nodes() = std::move(view);
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* UpdateNodes(grpc::CallbackServerContext* ctx,
                                        const v1::UpdateNodesRequest* req,
                                        v1::UpdateNodesResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      absl::StatusOr<Principal> who = Admin(ctx, "drain, resume or down nodes");
      if (!who.ok()) return who.status();
      absl::StatusOr<v1::UpdateNodesResponse> updated = core_->UpdateNodes(*req, who->user);
      if (!updated.ok()) return updated.status();
      *resp = *std::move(updated);
      AuditOrLog(*who, NodeActionName(req->action()), absl::StrJoin(req->nodes(), ","),
                 NodeActionDetail(*req, *resp), clock_->Now());
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* WhyJob(grpc::CallbackServerContext* ctx,
                                   const v1::WhyJobRequest* req,
                                   v1::WhyJobResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      // Only who may read the job may ask why it waits.
      absl::StatusOr<v1::Job> job = AccessibleJob(ctx, req->job_id(), "read");
      if (!job.ok()) return job.status();
      absl::StatusOr<v1::WhyJobResponse> why = core_->WhyJob(req->job_id());
      if (why.ok()) *resp = std::move(*why);
      return why.status();
    });
  }

  grpc::ServerUnaryReactor* GetLogs(grpc::CallbackServerContext* ctx,
                                    const v1::GetLogsRequest* req,
                                    v1::GetLogsResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    if (absl::StatusOr<v1::Job> job = AccessibleJob(ctx, req->job_id(), "read the logs of");
        !job.ok()) {
      reactor->Finish(ToGrpcStatus(job.status()));
      return reactor;
    }
    core_->GetLogsAsync(req->job_id(), req->rank(), req->offset(), req->max_bytes(),
                        [reactor, resp](absl::StatusOr<v1::GetLogsResponse> r) {
                          if (r.ok()) *resp = std::move(*r);
                          reactor->Finish(ToGrpcStatus(r.status()));
                        });
    return reactor;
  }

  grpc::ServerUnaryReactor* ReportMetrics(grpc::CallbackServerContext* ctx,
                                          const v1::ReportMetricsRequest* req,
                                          v1::ReportMetricsResponse* resp) override {
    return Answer(ctx, [&] {
      // No bearer token: a training process proves itself with its
      // attempt's TRAINCTL_TOKEN, checked by the core (as the rendezvous
      // does).
      absl::StatusOr<v1::ReportMetricsResponse> r = core_->ReportMetrics(*req);
      if (r.ok()) *resp = std::move(*r);
      return r.status();
    });
  }

  grpc::ServerUnaryReactor* GetMetrics(grpc::CallbackServerContext* ctx,
                                       const v1::GetMetricsRequest* req,
                                       v1::GetMetricsResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      if (absl::StatusOr<v1::Job> job = AccessibleJob(ctx, req->job_id(), "read the metrics of");
          !job.ok()) {
        return job.status();
      }
      absl::StatusOr<v1::GetMetricsResponse> r = core_->GetMetrics(*req);
      if (r.ok()) *resp = std::move(*r);
      return r.status();
    });
  }

  grpc::ServerWriteReactor<v1::StreamLogsResponse>* StreamLogs(
      grpc::CallbackServerContext* ctx, const v1::StreamLogsRequest* req) override {
    // Bad input first: INVALID_ARGUMENT whoever asks.
    if (req->offset() < 0 || req->rank() < 0) {
      return NewRefusedLogStream(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                            req->rank() < 0 ? "rank: must not be negative"
                                                            : "offset: must not be negative"));
    }
    if (absl::StatusOr<v1::Job> job = AccessibleJob(ctx, req->job_id(), "read the logs of");
        !job.ok()) {
      return NewRefusedLogStream(ToGrpcStatus(job.status()));
    }
    return NewLogStream(core_, *req);
  }

  grpc::ServerUnaryReactor* GetJobUsage(grpc::CallbackServerContext* ctx,
                                        const v1::GetJobUsageRequest* req,
                                        v1::GetJobUsageResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      absl::StatusOr<Principal> who = Caller(ctx);
      if (!who.ok()) return who.status();
      // Each requested job as GetJob checks it (one refused refuses the
      // call); all jobs means the caller's own unless admin.
      for (int64_t id : req->job_ids()) {
        if (absl::StatusOr<v1::Job> job = AccessibleJob(ctx, id, "read the usage of");
            !job.ok()) {
          return job.status();
        }
      }
      const std::string owner = who->admin ? "" : who->user;
      absl::StatusOr<std::vector<v1::JobUsage>> usage = core_->GetJobUsage(
          {req->job_ids().begin(), req->job_ids().end()}, req->max_samples(), owner);
      if (usage.ok()) {
        for (v1::JobUsage& u : *usage) *resp->add_jobs() = std::move(u);
      }
      return usage.status();
    });
  }

  // ------------------------------------------------------------ tokens, audit

  grpc::ServerUnaryReactor* CreateToken(grpc::CallbackServerContext* ctx,
                                        const v1::CreateTokenRequest* req,
                                        v1::CreateTokenResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      absl::StatusOr<Principal> who = Admin(ctx, "create tokens");
      if (absl::Status s = who.ok() ? NeedTokenStore() : who.status(); !s.ok()) return s;
      const absl::Time now = clock_->Now();
      absl::StatusOr<TokenStore::Created> made = token_store_->Create(*req, who->user, now);
      if (!made.ok()) return made.status();
      AuditOrLog(*who, "token.create", made->info.id(),
                 absl::StrCat("user ", made->info.user(), ", role ",
                              made->info.role() == v1::ROLE_ADMIN ? "admin" : "user",
                              made->info.expires_ms() != 0
                                  ? absl::StrCat(", expires ", FormatTimeMs(made->info.expires_ms()))
                                  : ", never expires",
                              made->info.name().empty() ? "" : ", name " + made->info.name()),
                 now);
      *resp->mutable_token() = std::move(made->info);
      resp->set_secret(std::move(made->secret));
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* ListTokens(grpc::CallbackServerContext* ctx,
                                       const v1::ListTokensRequest* req,
                                       v1::ListTokensResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      absl::StatusOr<Principal> who = Admin(ctx, "list tokens");
      if (absl::Status s = who.ok() ? NeedTokenStore() : who.status(); !s.ok()) return s;
      for (v1::TokenInfo& t : token_store_->List(req->all(), clock_->Now())) {
        *resp->add_tokens() = std::move(t);
      }
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* RevokeToken(grpc::CallbackServerContext* ctx,
                                        const v1::RevokeTokenRequest* req,
                                        v1::RevokeTokenResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      absl::StatusOr<Principal> who = Admin(ctx, "revoke tokens");
      if (absl::Status s = who.ok() ? NeedTokenStore() : who.status(); !s.ok()) return s;
      const absl::Time now = clock_->Now();
      // Durable before the answer; refused from the next call on.
      bool newly = false;
      absl::StatusOr<v1::TokenInfo> revoked =
          token_store_->Revoke(req->id(), who->user, now, &newly);
      if (!revoked.ok()) return revoked.status();
      // A repeated revocation (idempotent) is not a new event.
      if (newly) {
        AuditOrLog(*who, "token.revoke", revoked->id(), absl::StrCat("user ", revoked->user()),
                   now);
      }
      *resp->mutable_token() = std::move(*revoked);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* ListAudit(grpc::CallbackServerContext* ctx,
                                      const v1::ListAuditRequest* req,
                                      v1::ListAuditResponse* resp) override {
    return Answer(ctx, [&]() -> absl::Status {
      absl::StatusOr<Principal> who = Admin(ctx, "read the audit trail");
      if (!who.ok()) return who.status();
      if (req->since_ms() < 0) return absl::InvalidArgumentError("since_ms: must not be negative");
      if (audit_ == nullptr) {
        return absl::FailedPreconditionError("this coordinator keeps no audit trail");
      }
      absl::StatusOr<std::vector<v1::AuditEvent>> events = audit_->List(
          req->since_ms() == 0 ? absl::InfinitePast() : absl::FromUnixMillis(req->since_ms()),
          req->limit());
      if (events.ok()) {
        for (v1::AuditEvent& e : *events) *resp->add_events() = std::move(e);
      }
      return events.status();
    });
  }

  grpc::ServerUnaryReactor* GetUsage(grpc::CallbackServerContext* ctx,
                                     const v1::GetUsageRequest* req,
                                     v1::GetUsageResponse* resp) override {
    auto* reactor = ctx->DefaultReactor();
    absl::StatusOr<Principal> who = Caller(ctx);
    absl::StatusOr<UsageQuery> q = UsageQueryOf(who, *req, clock_->Now());
    absl::StatusOr<v1::GetUsageResponse> r =
        q.ok() ? accounting_->Usage(*q) : absl::StatusOr<v1::GetUsageResponse>(q.status());
    if (r.ok()) *resp = std::move(*r);
    reactor->Finish(ToGrpcStatus(r.status()));
    return reactor;
  }

  grpc::ServerWriteReactor<v1::ListHistoryResponse>* ListHistory(
      grpc::CallbackServerContext* ctx, const v1::ListHistoryRequest* req) override {
    absl::StatusOr<Principal> who = Caller(ctx);
    absl::Status s = who.ok() ? absl::OkStatus() : who.status();
    if (s.ok() && accounting_ == nullptr) {
      s = absl::FailedPreconditionError("this coordinator keeps no accounting records");
    }
    HistoryQuery q;
    if (s.ok()) {
      const int64_t now_ms = absl::ToUnixMillis(clock_->Now());
      q.until_ms = req->until_ms() == 0 ? now_ms : req->until_ms();
      q.since_ms = req->since_ms() == 0 ? std::max<int64_t>(0, q.until_ms - 86400 * 1000)
                                        : req->since_ms();
      q.user = req->user();
      q.state = req->state();
      q.page_size = req->page_size() == 0 ? 1000 : req->page_size();
      // A user reads only their own history (an admin anyone's).
      if (!who->admin) q.user = who->user;
      s = Accounting::CheckHistory(q);
    }
    if (!s.ok()) return NewRefusedHistoryStream(ToGrpcStatus(s));
    return NewHistoryStream(accounting_, std::move(q));
  }

  // Records an admin action synchronously (AuditLog::Record, blocking until
  // durable), for handlers that run on a gRPC thread: the node admin calls
  // use it too. A failed write is logged by the audit log and does not undo
  // the action. No audit log configured: nothing.
  void AuditOrLog(const Principal& who, absl::string_view action, absl::string_view target,
                  absl::string_view detail, absl::Time now) {
    if (audit_ == nullptr) return;
    audit_->Record(who.user, action, target, detail, now).IgnoreError();
  }

 private:
  // The usage query of `req` for caller `who` at `now`: since 0 is 30 days
  // before until, until 0 is now; a non-admin sees only their own jobs.
  // Errors: `who`'s; FAILED_PRECONDITION without accounting; INVALID_ARGUMENT
  // naming "by".
  absl::StatusOr<UsageQuery> UsageQueryOf(const absl::StatusOr<Principal>& who,
                                          const v1::GetUsageRequest& req, absl::Time now) const {
    if (!who.ok()) return who.status();
    if (accounting_ == nullptr) {
      return absl::FailedPreconditionError("this coordinator keeps no accounting records");
    }
    absl::StatusOr<UsageBy> by = ParseUsageBy(req.by());
    if (!by.ok()) return by.status();
    UsageQuery q;
    q.by = *by;
    q.until_ms = req.until_ms() == 0 ? absl::ToUnixMillis(now) : req.until_ms();
    q.since_ms = req.since_ms() == 0 ? std::max<int64_t>(0, q.until_ms - int64_t{30} * 86400 * 1000)
                                     : req.since_ms();
    if (!who->admin) q.only_user = who->user;
    return q;
  }

  // OK when the token store is configured. Errors: FAILED_PRECONDITION.
  absl::Status NeedTokenStore() const {
    if (token_store_ != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError("this coordinator keeps no token store");
  }

  // The job, once the caller is authenticated and may `action` it.
  // Errors: UNAUTHENTICATED; NOT_FOUND; PERMISSION_DENIED.
  absl::StatusOr<v1::Job> AccessibleJob(const grpc::CallbackServerContext* ctx,
                                        int64_t job_id, absl::string_view action) {
    absl::StatusOr<Principal> who = Caller(ctx);
    if (!who.ok()) return who.status();
    absl::StatusOr<v1::Job> job = core_->GetJob(job_id);
    if (!job.ok()) return job.status();
    if (absl::Status s = CheckJobAccess(*who, *job, action); !s.ok()) return s;
    return job;
  }

  // CallerOf this call, at the real time.
  absl::StatusOr<Principal> Caller(const grpc::CallbackServerContext* ctx) const {
    return CallerOf(tokens_, token_store_, ctx, clock_->Now());
  }

  // The caller, when an admin (anyone without authentication) may `what`.
  // Errors: UNAUTHENTICATED; PERMISSION_DENIED for a non-admin.
  absl::StatusOr<Principal> Admin(const grpc::CallbackServerContext* ctx,
                                  absl::string_view what) const {
    absl::StatusOr<Principal> who = Caller(ctx);
    if (!who.ok() || who->admin) return who;
    return absl::PermissionDeniedError(absl::StrCat(
        "user ", who->user, " may not ", what, ": only an admin (role ROLE_ADMIN) may"));
  }

  // Records a `job.submit_as` event for each of `ids` when an admin
  // submitted `spec_user`'s jobs (an anonymous caller, without
  // authentication, is no one to record); then calls `finish`. Runs from
  // the store's commit thread, so the write is queued (RecordAsync).
  void AuditSubmitAs(const Principal& who, const std::string& spec_user,
                     std::vector<int64_t> ids, absl::AnyInvocable<void() &&> finish) {
    if (audit_ == nullptr || who.user.empty() || spec_user == who.user || ids.empty()) {
      std::move(finish)();
      return;
    }
    const std::string target =
        ids.size() == 1 ? absl::StrCat(ids.front())
                        : absl::StrCat(ids.front(), "..", ids.back(), " (", ids.size(), " jobs)");
    audit_->RecordAsync(who.user, "job.submit_as", target,
                        absl::StrCat("submitted as user ", spec_user), clock_->Now(),
                        [finish = std::move(finish)](absl::StatusOr<v1::AuditEvent>) mutable {
                          // Logged by the audit log either way; the jobs are
                          // in, so the call succeeds.
                          std::move(finish)();
                        });
  }

  Coordinator* const core_;
  const Clock* const clock_;
  const TokenAuthenticator* const tokens_;
  TokenStore* const token_store_;
  AuditLog* const audit_;
  const Accounting* const accounting_;
  SessionRelay* const sessions_;
};

// ---------------------------------------------------------------- server

namespace {

// The relay's reach into the core: jobs, cancels, the audit log.
SessionRelay::Hooks RelayHooks(Coordinator* core, AuditLog* audit, const Clock* clock) {
  SessionRelay::Hooks hooks;
  hooks.get_job = [core](int64_t id) { return core->GetJob(id); };
  hooks.idle_timeout = [core](const v1::JobSpec& spec) {
    return IdleTimeoutOf(spec, core->Policy());
  };
  hooks.end_job = [core](int64_t id, const std::string& reason) {
    absl::StatusOr<v1::Job> job = core->CancelJob(id, reason);
    if (!job.ok() && !absl::IsFailedPrecondition(job.status())) {
      TC_LOG_WARN("job {}: could not end it ({}): {}", id, reason, job.status().ToString());
    }
  };
  // Busy: a utilization sample since `since` at or above 5 % (GPU or SM).
  hooks.gpus_idle = [core](int64_t id, absl::Time since) {
    absl::StatusOr<std::vector<v1::JobUsage>> usage = core->GetJobUsage({id}, 0);
    if (!usage.ok() || usage->empty()) return true;
    const int64_t since_ms = absl::ToUnixMillis(since);
    for (const v1::JobUsageSample& s : usage->front().samples()) {
      if (s.time_ms() >= since_ms && (s.gpu_util_pct() >= 5 || s.sm_active_pct() >= 5)) {
        return false;
      }
    }
    return true;
  };
  if (audit != nullptr) {
    hooks.audit = [audit, clock](const Principal& who, const std::string& action,
                                 const std::string& target, const std::string& detail) {
      if (who.user.empty()) return;  // no authentication: no one to record
      audit->RecordAsync(who.user, action, target, detail, clock->Now(),
                         [](absl::StatusOr<v1::AuditEvent>) {});
    };
  }
  return hooks;
}

}  // namespace

GrpcCoordinatorServices::GrpcCoordinatorServices(Coordinator* core,
                                                 SecurityConfig security,
                                                 SessionRelay::Options sessions)
    : own_clock_(security.clock == nullptr ? std::make_unique<RealClock>() : nullptr),
      clock_(security.clock != nullptr ? security.clock : own_clock_.get()),
      sessions_(std::make_unique<SessionRelay>(RelayHooks(core, security.audit, clock_),
                                               sessions)),
      user_(std::make_unique<UserApi>(core, security, clock_, sessions_.get())),
      agent_(MakeAgentService(core, security.require_agent_cert, sessions_.get())),
      rendezvous_(MakeRendezvousService(core)) {
  // Interactive jobs that outlived a restart of ours: their idle clocks go on.
  sessions_->AdoptInteractiveJobs(
      core->ListJobs({v1::JOB_STATE_RUNNING}, std::numeric_limits<int>::max()));
}

GrpcCoordinatorServices::~GrpcCoordinatorServices() = default;

void GrpcCoordinatorServices::RegisterWith(grpc::ServerBuilder& builder) {
  builder.RegisterService(user_.get());
  builder.RegisterService(agent_.get());
  builder.RegisterService(rendezvous_.get());
}

namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view flag) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(flag, ": cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", path, " is not a PEM file"));
  }
  return text.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerTlsCredentials(
    const TlsFiles& files) {
  absl::StatusOr<std::string> cert = ReadPem(files.cert, "--tls-cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPem(files.key, "--tls-key");
  if (!key.ok()) return key.status();
  absl::StatusOr<std::string> ca = ReadPem(files.ca, "--tls-ca");
  if (!ca.ok()) return ca.status();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = *ca;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::unique_ptr<grpc::Server>> StartCoordinatorServer(
    GrpcCoordinatorServices& services, const std::string& listen, int* bound_port,
    std::shared_ptr<grpc::ServerCredentials> credentials) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(
      listen, credentials != nullptr ? credentials : grpc::InsecureServerCredentials(),
      bound_port);
  builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
  builder.SetMaxSendMessageSize(kMaxMessageBytes);
  services.RegisterWith(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *bound_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", listen));
  }
  return server;
}

void ShutdownServer(grpc::Server& server, Coordinator& core, absl::Duration grace) {
  absl::Notification done;
  std::thread shutdown([&] {
    server.Shutdown(absl::ToChronoTime(absl::Now() + grace));
    done.Notify();
  });
  while (!done.WaitForNotificationWithTimeout(absl::Milliseconds(50))) core.Tick();
  shutdown.join();
}

}  // namespace trainctl::coord
