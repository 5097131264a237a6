// Tier 3, security: a real gRPC server on loopback with real TLS (a CA, the
// coordinator's certificate and per-node client certificates made by
// deploy/make_certs.sh in a temporary directory at test time; no key is ever
// committed) and a tokens file with two users and an admin. A table of
// forbidden calls, each refused with UNAUTHENTICATED or PERMISSION_DENIED and
// changing nothing, then the allowed calls. The agent side is a raw
// AgentService stream, so the test controls the identity it claims.

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "coordinator/audit_log.h"
#include "coordinator/auth.h"
#include "coordinator/coordinator.h"
#include "coordinator/grpc_service.h"
#include "coordinator/state_store.h"
#include "coordinator/token_store.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace trainctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr char kAlice[] = "alice-token-5f0c2a9e41d7";
constexpr char kBob[] = "bob-token-8d1e7b3c60a2f";
constexpr char kOps[] = "ops-token-c4a91f27e0b35";
constexpr absl::Duration kRpcDeadline = absl::Seconds(20);

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Certificates for the whole suite: made once (OpenSSL key generation is the
// slow part).
class SecurityTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new std::string(::testing::TempDir() + "/security-certs");
    std::filesystem::remove_all(*certs_);
    const std::string script = TRAINCTL_SOURCE_DIR "/deploy/make_certs.sh";
    ASSERT_EQ(std::system(absl::StrCat(script, " ", *certs_,
                                       " node-a node-b > /dev/null")
                              .c_str()),
              0);
    // A second CA, whose certificates the coordinator must not trust.
    ASSERT_EQ(std::system(absl::StrCat(script, " ", *certs_,
                                       "/rogue node-a > /dev/null")
                              .c_str()),
              0);
  }
  static void TearDownTestSuite() { delete certs_; }

  void SetUp() override {
    ASSERT_FALSE(HasFatalFailure());
    auto tokens = coord::TokenAuthenticator::FromText(absl::StrCat(
        "tokens { token: \"", kAlice, "\" user: \"alice\" }\n",
        "tokens { token: \"", kBob, "\" user: \"bob\" role: ROLE_USER }\n",
        "tokens { token: \"", kOps, "\" user: \"ops\" role: ROLE_ADMIN }\n"));
    ASSERT_TRUE(tokens.ok()) << tokens.status();
    tokens_ = std::move(*tokens);

    auto core = coord::Coordinator::Create({}, &store_, &clock_);
    ASSERT_TRUE(core.ok()) << core.status();
    core_ = std::move(*core);
    auto token_store = coord::TokenStore::Open(&store_);
    ASSERT_TRUE(token_store.ok()) << token_store.status();
    token_store_ = std::move(*token_store);
    auto audit = coord::AuditLog::Open(&store_);
    ASSERT_TRUE(audit.ok()) << audit.status();
    audit_ = std::move(*audit);
    coord::SecurityConfig security;
    security.tokens = tokens_.get();
    security.token_store = token_store_.get();
    security.audit = audit_.get();
    security.require_agent_cert = true;
    security.clock = &clock_;
    services_ = std::make_unique<coord::GrpcCoordinatorServices>(core_.get(), security);
    auto creds = coord::MakeServerTlsCredentials(
        {Cert("coordinator.crt"), Cert("coordinator.key"), Cert("ca.crt")});
    ASSERT_TRUE(creds.ok()) << creds.status();
    int port = 0;
    auto server =
        coord::StartCoordinatorServer(*services_, "127.0.0.1:0", &port, *creds);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    address_ = absl::StrCat("127.0.0.1:", port);

    // Users and ranks: server TLS only (no client certificate).
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(Cert("ca.crt"));
    user_channel_ = grpc::CreateChannel(address_, grpc::SslCredentials(ssl));
    users_ = v1::Coordinator::NewStub(user_channel_);
    ranks_ = v1::Rendezvous::NewStub(user_channel_);
  }

  void TearDown() override {
    for (auto& a : agents_) {
      if (a->finished) continue;
      a->ctx.TryCancel();
      a->stream->Finish().ok();
    }
    agents_.clear();
    if (server_) server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  }

  static std::string Cert(const std::string& name) { return *certs_ + "/" + name; }

  // A client context with a deadline and, when `token` is not null, the
  // bearer token.
  static std::unique_ptr<grpc::ClientContext> As(const char* token) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
    if (token != nullptr) ctx->AddMetadata("authorization", absl::StrCat("Bearer ", token));
    return ctx;
  }

  grpc::Status Submit(const char* token, int64_t* id, const std::string& user = "",
                      const std::string& request_id = "", const std::string& name = "") {
    v1::SubmitJobRequest req;
    req.mutable_spec()->set_name(name);
    req.mutable_spec()->add_command("true");
    req.mutable_spec()->set_gpus(1);
    req.mutable_spec()->set_user(user);
    req.set_request_id(request_id);
    v1::SubmitJobResponse resp;
    grpc::Status s = users_->SubmitJob(As(token).get(), req, &resp);
    *id = resp.job_id();
    return s;
  }

  // A two-task job array from one spec (SubmitJobArray).
  grpc::Status SubmitArray(const char* token, const std::string& user = "",
                           const std::string& request_id = "") {
    v1::SubmitJobArrayRequest req;
    req.mutable_spec()->add_command("true");
    req.mutable_spec()->set_gpus(1);
    req.mutable_spec()->set_user(user);
    req.add_task_ids(0);
    req.add_task_ids(1);
    req.set_request_id(request_id);
    v1::SubmitJobsResponse resp;
    return users_->SubmitJobArray(As(token).get(), req, &resp);
  }

  grpc::Status GetJob(const char* token, int64_t id, v1::Job* job = nullptr) {
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::GetJobResponse resp;
    grpc::Status s = users_->GetJob(As(token).get(), req, &resp);
    if (job != nullptr) *job = resp.job();
    return s;
  }

  grpc::Status CancelJob(const char* token, int64_t id) {
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::CancelJobResponse resp;
    return users_->CancelJob(As(token).get(), req, &resp);
  }

  grpc::Status WaitJob(const char* token, int64_t id, v1::WaitJobResponse* resp) {
    v1::WaitJobRequest req;
    req.set_job_id(id);
    req.set_timeout_ms(1);
    return users_->WaitJob(As(token).get(), req, resp);
  }

  grpc::Status GetLogs(const char* token, int64_t id) {
    v1::GetLogsRequest req;
    req.set_job_id(id);
    v1::GetLogsResponse resp;
    return users_->GetLogs(As(token).get(), req, &resp);
  }

  grpc::Status ListJobs(const char* token, std::vector<int64_t>* ids,
                        bool all_users = false, const std::string& user = "") {
    v1::ListJobsRequest req;
    req.set_all_users(all_users);
    req.set_user(user);
    v1::ListJobsResponse resp;
    grpc::Status s = users_->ListJobs(As(token).get(), req, &resp);
    ids->clear();
    for (const v1::Job& j : resp.jobs()) ids->push_back(j.id());
    return s;
  }

  // GetJobUsage of `ids` (empty: every job with a history the caller may
  // see); the ids answered go to `*got`.
  grpc::Status GetJobUsage(const char* token, const std::vector<int64_t>& ids,
                           std::vector<int64_t>* got = nullptr) {
    v1::GetJobUsageRequest req;
    for (int64_t id : ids) req.add_job_ids(id);
    v1::GetJobUsageResponse resp;
    grpc::Status s = users_->GetJobUsage(As(token).get(), req, &resp);
    if (got != nullptr) {
      got->clear();
      for (const v1::JobUsage& u : resp.jobs()) got->push_back(u.job_id());
    }
    return s;
  }

  // CreateToken for `user` as `token`'s caller; the response in *made.
  grpc::Status CreateToken(const char* token, const std::string& user,
                           v1::CreateTokenResponse* made, int64_t expires_s = 0) {
    v1::CreateTokenRequest req;
    req.set_user(user);
    req.set_expires_s(expires_s);
    return users_->CreateToken(As(token).get(), req, made);
  }

  grpc::Status RevokeToken(const char* token, const std::string& id) {
    v1::RevokeTokenRequest req;
    req.set_id(id);
    v1::RevokeTokenResponse resp;
    return users_->RevokeToken(As(token).get(), req, &resp);
  }

  // "who action target" of each audit event, oldest first.
  grpc::Status Audit(const char* token, std::vector<std::string>* events) {
    v1::ListAuditResponse resp;
    grpc::Status s = users_->ListAudit(As(token).get(), v1::ListAuditRequest(), &resp);
    events->clear();
    for (const v1::AuditEvent& e : resp.events()) {
      events->push_back(absl::StrCat(e.who(), " ", e.action(), " ", e.target()));
    }
    return s;
  }

  grpc::Status ListNodes(const char* token) {
    v1::ListNodesResponse resp;
    return users_->ListNodes(As(token).get(), v1::ListNodesRequest(), &resp);
  }

  // Drains node "n1" (it need not exist: the role is checked first).
  grpc::Status DrainNode(const char* token) {
    v1::UpdateNodesRequest req;
    req.add_nodes("n1");
    req.set_action(v1::NODE_ACTION_DRAIN);
    req.set_reason("maintenance");
    v1::UpdateNodesResponse resp;
    return users_->UpdateNodes(As(token).get(), req, &resp);
  }

  // A raw agent stream with the given client certificate ("" for none) of
  // the given CA directory.
  struct RawAgent {
    grpc::ClientContext ctx;
    std::unique_ptr<v1::AgentService::Stub> stub;
    std::unique_ptr<grpc::ClientReaderWriter<v1::AgentMessage, v1::CoordinatorMessage>>
        stream;
    bool finished = false;  // Finish() was called (it may be called once)
  };
  RawAgent* Connect(const std::string& cert_node, const std::string& ca_dir = "") {
    const std::string dir = ca_dir.empty() ? *certs_ : ca_dir;
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(Cert("ca.crt"));
    if (!cert_node.empty()) {
      ssl.pem_cert_chain = ReadFile(dir + "/nodes/" + cert_node + ".crt");
      ssl.pem_private_key = ReadFile(dir + "/nodes/" + cert_node + ".key");
    }
    auto agent = std::make_unique<RawAgent>();
    agent->ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(60)));
    agent->stub = v1::AgentService::NewStub(
        grpc::CreateChannel(address_, grpc::SslCredentials(ssl)));
    agent->stream = agent->stub->Connect(&agent->ctx);
    agents_.push_back(std::move(agent));
    return agents_.back().get();
  }

  // Sends RegisterNode for `name` (2 fake GPUs); returns the status the
  // stream ends with, or OK once the RegisterAck arrived.
  static grpc::Status Register(RawAgent* agent, const std::string& name) {
    v1::AgentMessage msg;
    v1::Node* node = msg.mutable_register_()->mutable_node();
    node->set_name(name);
    node->set_address("127.0.0.1");
    node->set_cpu_count(4);
    node->set_port_min(29500);
    node->set_port_max(29599);
    node->set_fake_gpus(true);
    for (int i = 0; i < 2; ++i) {
      v1::Gpu* gpu = node->add_gpus();
      gpu->set_index(i);
      gpu->set_uuid(absl::StrCat("GPU-", name, "-", i));
      gpu->set_name("Fake H100");
      gpu->set_memory_total_bytes(int64_t{80} << 30);
    }
    agent->stream->Write(msg);
    v1::CoordinatorMessage reply;
    if (agent->stream->Read(&reply) && reply.has_register_ack()) return grpc::Status::OK;
    agent->finished = true;
    return agent->stream->Finish();
  }

  static std::string* certs_;
  FakeClock clock_{absl::FromUnixSeconds(1'700'000'000)};
  coord::MemoryStateStore store_;
  std::unique_ptr<coord::TokenAuthenticator> tokens_;
  std::unique_ptr<coord::TokenStore> token_store_;
  std::unique_ptr<coord::AuditLog> audit_;
  std::unique_ptr<coord::Coordinator> core_;
  std::unique_ptr<coord::GrpcCoordinatorServices> services_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  std::shared_ptr<grpc::Channel> user_channel_;
  std::unique_ptr<v1::Coordinator::Stub> users_;
  std::unique_ptr<v1::Rendezvous::Stub> ranks_;
  std::vector<std::unique_ptr<RawAgent>> agents_;
};

std::string* SecurityTest::certs_ = nullptr;

TEST_F(SecurityTest, ForbiddenCalls_AreRefused_AndChangeNothing) {
  int64_t alice_job = 0;
  ASSERT_TRUE(Submit(kAlice, &alice_job, "", "alice-req-1").ok());

  struct Forbidden {
    const char* what;
    std::function<grpc::Status()> call;
    grpc::StatusCode code;
    const char* message;
  };
  int64_t unused = 0;
  v1::WaitJobResponse wait;
  const std::vector<Forbidden> table = {
      {"submit without a token", [&] { return Submit(nullptr, &unused); },
       grpc::StatusCode::UNAUTHENTICATED, "no credentials"},
      {"submit with a wrong token", [&] { return Submit("not-a-token-at-all-xyz", &unused); },
       grpc::StatusCode::UNAUTHENTICATED, "unknown or revoked token"},
      {"list without a token",
       [&] {
         std::vector<int64_t> ids;
         return ListJobs(nullptr, &ids);
       },
       grpc::StatusCode::UNAUTHENTICATED, "no credentials"},
      {"nodes without a token", [&] { return ListNodes(nullptr); },
       grpc::StatusCode::UNAUTHENTICATED, "no credentials"},
      {"get without a token", [&] { return GetJob(nullptr, alice_job); },
       grpc::StatusCode::UNAUTHENTICATED, "no credentials"},
      {"cancel with a wrong token",
       [&] { return CancelJob("alice-token-5f0c2a9e41d8", alice_job); },
       grpc::StatusCode::UNAUTHENTICATED, "unknown or revoked token"},
      {"get another user's job", [&] { return GetJob(kBob, alice_job); },
       grpc::StatusCode::PERMISSION_DENIED, "user bob may not read job"},
      {"cancel another user's job", [&] { return CancelJob(kBob, alice_job); },
       grpc::StatusCode::PERMISSION_DENIED, "user bob may not cancel job"},
      {"logs of another user's job", [&] { return GetLogs(kBob, alice_job); },
       grpc::StatusCode::PERMISSION_DENIED, "may not read the logs of job"},
      {"wait for another user's job", [&] { return WaitJob(kBob, alice_job, &wait); },
       grpc::StatusCode::PERMISSION_DENIED, "may not wait for job"},
      {"submit as another user", [&] { return Submit(kBob, &unused, "alice"); },
       grpc::StatusCode::PERMISSION_DENIED, "spec.user"},
      {"reuse another user's request id",
       [&] { return Submit(kBob, &unused, "", "alice-req-1"); },
       grpc::StatusCode::PERMISSION_DENIED, "may not reuse the request_id"},
      {"submit an array without a token", [&] { return SubmitArray(nullptr); },
       grpc::StatusCode::UNAUTHENTICATED, "no credentials"},
      {"submit an array as another user", [&] { return SubmitArray(kBob, "alice"); },
       grpc::StatusCode::PERMISSION_DENIED, "spec.user"},
      {"reuse another user's request id for an array",
       [&] { return SubmitArray(kBob, "", "alice-req-1"); },
       grpc::StatusCode::PERMISSION_DENIED, "may not reuse the request_id"},
      {"usage without a token", [&] { return GetJobUsage(nullptr, {}); },
       grpc::StatusCode::UNAUTHENTICATED, "no credentials"},
      {"usage of another user's job", [&] { return GetJobUsage(kBob, {alice_job}); },
       grpc::StatusCode::PERMISSION_DENIED, "user bob may not read the usage of job"},
      {"drain a node without a token", [&] { return DrainNode(nullptr); },
       grpc::StatusCode::UNAUTHENTICATED, "no credentials"},
      {"drain a node as a user", [&] { return DrainNode(kBob); },
       grpc::StatusCode::PERMISSION_DENIED, "user bob may not drain, resume or down nodes"},
  };
  for (const Forbidden& f : table) {
    grpc::Status s = f.call();
    EXPECT_EQ(s.error_code(), f.code) << f.what << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(f.message)) << f.what;
  }

  // An admin's drain passes the role check (and finds no node n1).
  EXPECT_EQ(DrainNode(kOps).error_code(), grpc::StatusCode::NOT_FOUND);

  // Nothing changed: alice's job is still pending (no node) and hers; no
  // other job was accepted.
  v1::Job job;
  ASSERT_TRUE(GetJob(kOps, alice_job, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.spec().user(), "alice");
  std::vector<int64_t> all;
  ASSERT_TRUE(ListJobs(kOps, &all, /*all_users=*/true).ok());
  EXPECT_THAT(all, ElementsAre(alice_job));
}

TEST_F(SecurityTest, OwnJobs_Allowed_ListShowsOwnOnly_AdminSeesAllWhenAsked) {
  int64_t a1 = 0, a2 = 0, b1 = 0;
  ASSERT_TRUE(Submit(kAlice, &a1).ok());
  ASSERT_TRUE(Submit(kAlice, &a2, "alice").ok());  // naming oneself is fine
  ASSERT_TRUE(Submit(kBob, &b1).ok());
  int64_t on_behalf = 0;
  ASSERT_TRUE(Submit(kOps, &on_behalf, "bob").ok());  // admin submits for bob

  // spec.user comes from the token.
  v1::Job job;
  ASSERT_TRUE(GetJob(kAlice, a1, &job).ok());
  EXPECT_EQ(job.spec().user(), "alice");

  std::vector<int64_t> ids;
  ASSERT_TRUE(ListJobs(kAlice, &ids).ok());
  EXPECT_THAT(ids, UnorderedElementsAre(a1, a2));
  ASSERT_TRUE(ListJobs(kBob, &ids).ok());
  EXPECT_THAT(ids, UnorderedElementsAre(b1, on_behalf));
  // An admin sees their own jobs by default (none), every user's with
  // all_users, one user's by name; a user may do neither.
  ASSERT_TRUE(ListJobs(kOps, &ids).ok());
  EXPECT_THAT(ids, UnorderedElementsAre());
  ASSERT_TRUE(ListJobs(kOps, &ids, /*all_users=*/true).ok());
  EXPECT_THAT(ids, UnorderedElementsAre(a1, a2, b1, on_behalf));
  ASSERT_TRUE(ListJobs(kOps, &ids, false, "bob").ok());
  EXPECT_THAT(ids, UnorderedElementsAre(b1, on_behalf));
  grpc::Status denied = ListJobs(kAlice, &ids, /*all_users=*/true);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), HasSubstr("all_users"));
  EXPECT_EQ(ListJobs(kAlice, &ids, false, "bob").error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(ListNodes(kBob).ok());

  // The owner cancels and waits for its own job; the admin cancels bob's.
  ASSERT_TRUE(CancelJob(kAlice, a1).ok());
  v1::WaitJobResponse wait;
  ASSERT_TRUE(WaitJob(kAlice, a1, &wait).ok());
  EXPECT_TRUE(wait.done());
  EXPECT_EQ(wait.job().state(), v1::JOB_STATE_CANCELLED);
  ASSERT_TRUE(CancelJob(kOps, b1).ok());
  ASSERT_TRUE(GetJob(kBob, b1, &job).ok());
  EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED);
  // A retried submit of alice's with her own request id is the same job.
  int64_t first = 0, again = 0;
  ASSERT_TRUE(Submit(kAlice, &first, "", "retry-1").ok());
  ASSERT_TRUE(Submit(kAlice, &again, "", "retry-1").ok());
  EXPECT_EQ(first, again);
}

// Tokens with a lifecycle: an admin makes one for alice, it works next to
// the tokens file; once revoked, the next call with it is refused; the
// trail shows who did both. Users may do none of it.
TEST_F(SecurityTest, StoreToken_CreatedWorks_RevokedRefusedNextCall_Audited) {
  v1::CreateTokenResponse made;
  ASSERT_TRUE(CreateToken(kOps, "alice", &made).ok());
  ASSERT_EQ(made.secret().size(), 64u);
  int64_t job = 0;
  ASSERT_TRUE(Submit(made.secret().c_str(), &job).ok());
  v1::Job got;
  ASSERT_TRUE(GetJob(kAlice, job, &got).ok());  // her file token sees it: same user
  EXPECT_EQ(got.spec().user(), "alice");

  // Users may not manage tokens or read the trail.
  v1::CreateTokenResponse unused;
  std::vector<std::string> events;
  EXPECT_EQ(CreateToken(kBob, "bob", &unused).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(CreateToken(made.secret().c_str(), "ops", &unused).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(RevokeToken(kBob, made.token().id()).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  v1::ListTokensResponse listed;
  EXPECT_EQ(users_->ListTokens(As(kBob).get(), v1::ListTokensRequest(), &listed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  grpc::Status denied = Audit(kAlice, &events);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), HasSubstr("only an admin"));

  // The admin lists it (never the secret) and revokes it.
  ASSERT_TRUE(users_->ListTokens(As(kOps).get(), v1::ListTokensRequest(), &listed).ok());
  ASSERT_EQ(listed.tokens_size(), 1);
  EXPECT_EQ(listed.tokens(0).id(), made.token().id());
  EXPECT_EQ(listed.SerializeAsString().find(made.secret()), std::string::npos);
  ASSERT_TRUE(RevokeToken(kOps, made.token().id()).ok());
  ASSERT_TRUE(RevokeToken(kOps, made.token().id()).ok());  // idempotent
  grpc::Status refused = GetJob(made.secret().c_str(), job);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(refused.error_message(), HasSubstr("revoked at"));
  EXPECT_THAT(refused.error_message(), HasSubstr("by ops"));
  EXPECT_EQ(refused.error_message().find(made.secret()), std::string::npos);
  EXPECT_TRUE(GetJob(kAlice, job).ok());  // the file token still works

  ASSERT_TRUE(Audit(kOps, &events).ok());
  EXPECT_THAT(events, ElementsAre("ops token.create " + made.token().id(),
                                  "ops token.revoke " + made.token().id()));
}

// A made token's lifetime and the audit trail run on the core's clock (the
// one jobs' times come from): the token works until its expiry and is
// refused after it, moved by the test's FakeClock, with no waiting.
TEST_F(SecurityTest, StoreToken_ExpiresByTheCoresClock) {
  v1::CreateTokenResponse made;
  ASSERT_TRUE(CreateToken(kOps, "carol", &made, /*expires_s=*/3600).ok());
  EXPECT_EQ(made.token().expires_ms(), absl::ToUnixMillis(clock_.Now() + absl::Hours(1)));
  std::vector<int64_t> ids;
  clock_.Advance(absl::Minutes(59));
  EXPECT_TRUE(ListJobs(made.secret().c_str(), &ids).ok());
  clock_.Advance(absl::Minutes(2));
  grpc::Status expired = ListJobs(made.secret().c_str(), &ids);
  EXPECT_EQ(expired.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(expired.error_message(), HasSubstr("expired at"));
  v1::ListAuditResponse audit;
  ASSERT_TRUE(users_->ListAudit(As(kOps).get(), v1::ListAuditRequest(), &audit).ok());
  ASSERT_EQ(audit.events_size(), 1);
  EXPECT_EQ(audit.events(0).time_ms(), absl::ToUnixMillis(absl::FromUnixSeconds(1'700'000'000)));
}

// An admin acting on another user's jobs is recorded; users acting on their
// own are not.
TEST_F(SecurityTest, AdminSubmitsAndCancelsAsAnotherUser_Audited) {
  int64_t own = 0, for_bob = 0;
  ASSERT_TRUE(Submit(kAlice, &own).ok());
  ASSERT_TRUE(CancelJob(kAlice, own).ok());
  ASSERT_TRUE(Submit(kOps, &for_bob, "bob").ok());
  ASSERT_TRUE(CancelJob(kOps, for_bob).ok());
  ASSERT_TRUE(SubmitArray(kOps, "alice").ok());
  std::vector<std::string> events;
  ASSERT_TRUE(Audit(kOps, &events).ok());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], absl::StrCat("ops job.submit_as ", for_bob));
  EXPECT_EQ(events[1], absl::StrCat("ops job.cancel_as ", for_bob));
  EXPECT_THAT(events[2], HasSubstr("ops job.submit_as "));
  EXPECT_THAT(events[2], HasSubstr("(2 jobs)"));
}

TEST_F(SecurityTest, GetJobUsage_AllJobs_UserSeesOwnOnly_AdminSeesAll) {
  // Two 1-GPU jobs of two users run on node-a; one sample (Tick) gives each
  // a utilization history.
  RawAgent* agent = Connect("node-a");
  ASSERT_TRUE(Register(agent, "node-a").ok());
  int64_t job_a = 0, job_b = 0;
  ASSERT_TRUE(Submit(kAlice, &job_a, "", "", "alice-secret-project").ok());
  ASSERT_TRUE(Submit(kBob, &job_b, "", "", "bob-run").ok());
  core_->Tick();
  std::vector<int64_t> got;
  ASSERT_TRUE(GetJobUsage(kOps, {}, &got).ok());
  EXPECT_THAT(got, ElementsAre(job_a, job_b));

  // `trainctl top` of alice: her job only, by listing or by id.
  ASSERT_TRUE(GetJobUsage(kAlice, {}, &got).ok());
  EXPECT_THAT(got, ElementsAre(job_a));
  ASSERT_TRUE(GetJobUsage(kAlice, {job_a}, &got).ok());
  EXPECT_THAT(got, ElementsAre(job_a));
  ASSERT_TRUE(GetJobUsage(kBob, {}, &got).ok());
  EXPECT_THAT(got, ElementsAre(job_b));
  // One job of another user among the ids refuses the whole call.
  grpc::Status s = GetJobUsage(kBob, {job_b, job_a}, &got);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(got, ::testing::IsEmpty());
  ASSERT_TRUE(GetJobUsage(kOps, {job_b, job_a}, &got).ok());
  EXPECT_THAT(got, ElementsAre(job_b, job_a));
}

TEST_F(SecurityTest, AgentWithoutClientCertificate_IsUnauthenticated) {
  RawAgent* agent = Connect("");
  grpc::Status s = Register(agent, "node-a");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("client certificate"));
}

TEST_F(SecurityTest, AgentWithAnotherNodesCertificate_IsPermissionDenied) {
  // node-b's certificate claiming to be node-a.
  RawAgent* agent = Connect("node-b");
  grpc::Status s = Register(agent, "node-a");
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("names node \"node-b\""));
  // Nothing registered.
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(users_->ListNodes(As(kOps).get(), {}, &nodes).ok());
  EXPECT_EQ(nodes.nodes_size(), 0);
}

TEST_F(SecurityTest, AgentWithCertificateOfAnotherCa_FailsTheHandshake) {
  RawAgent* agent = Connect("node-a", *certs_ + "/rogue");
  grpc::Status s = Register(agent, "node-a");
  // The TLS handshake fails before any RPC: gRPC reports UNAVAILABLE.
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(users_->ListNodes(As(kOps).get(), {}, &nodes).ok());
  EXPECT_EQ(nodes.nodes_size(), 0);
}

TEST_F(SecurityTest, PlaintextClient_CannotTalkToTheTlsPort) {
  auto stub = v1::Coordinator::NewStub(
      grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  v1::ListJobsResponse resp;
  grpc::Status s = stub->ListJobs(As(kOps).get(), {}, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
}

TEST_F(SecurityTest, Rendezvous_OwnAttemptToken_Works_AnotherJobsIsDenied) {
  // node-a with its own certificate registers; two 1-GPU jobs of two users
  // land on it, each attempt with its own TRAINCTL_TOKEN.
  RawAgent* agent = Connect("node-a");
  ASSERT_TRUE(Register(agent, "node-a").ok());
  int64_t job_a = 0, job_b = 0;
  ASSERT_TRUE(Submit(kAlice, &job_a, "", "", "alice-secret-project").ok());
  ASSERT_TRUE(Submit(kBob, &job_b, "", "", "bob-run").ok());
  std::map<int64_t, std::string> token_of;
  v1::CoordinatorMessage msg;
  while (token_of.size() < 2 && agent->stream->Read(&msg)) {
    if (!msg.has_start_task()) continue;
    token_of[msg.start_task().task().job_id()] =
        msg.start_task().env().at("TRAINCTL_TOKEN");
  }
  ASSERT_EQ(token_of.size(), 2u);
  ASSERT_NE(token_of[job_a], token_of[job_b]);

  // Rank 0 of job A publishes with A's token: allowed, and A reads it back.
  const std::string id(128, 'x');
  v1::PublishUniqueIdRequest publish;
  publish.set_job_id(job_a);
  publish.set_rank(0);
  publish.set_token(token_of[job_a]);
  publish.set_unique_id(id);
  v1::PublishUniqueIdResponse published;
  grpc::Status s = ranks_->PublishUniqueId(As(nullptr).get(), publish, &published);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::FetchUniqueIdRequest fetch;
  fetch.set_job_id(job_a);
  fetch.set_rank(0);
  fetch.set_token(token_of[job_a]);
  fetch.set_timeout_ms(1000);
  v1::FetchUniqueIdResponse fetched;
  s = ranks_->FetchUniqueId(As(nullptr).get(), fetch, &fetched);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(fetched.unique_id(), id);

  // Job B's attempt token cannot read job A's ncclUniqueId, nor a user token.
  fetch.set_token(token_of[job_b]);
  s = ranks_->FetchUniqueId(As(nullptr).get(), fetch, &fetched);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("wrong TRAINCTL_TOKEN"));
  fetch.set_token(kAlice);
  s = ranks_->FetchUniqueId(As(kAlice).get(), fetch, &fetched);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();
  // Nor can it publish a forged id for job B's rank 0 with A's token.
  publish.set_job_id(job_b);
  s = ranks_->PublishUniqueId(As(nullptr).get(), publish, &published);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::PERMISSION_DENIED) << s.error_message();

  // The cluster view: bob sees both tasks, but only his own job's name; the
  // admin sees both names.
  auto names = [&](const char* token) {
    v1::ListNodesResponse nodes;
    EXPECT_TRUE(users_->ListNodes(As(token).get(), {}, &nodes).ok());
    std::map<int64_t, std::string> out;
    for (const v1::NodeView& n : nodes.nodes()) {
      for (const v1::GpuTasks& g : n.gpu_tasks()) {
        for (const v1::GpuTaskRef& t : g.tasks()) out[t.job_id()] = t.job_name();
      }
    }
    return out;
  };
  EXPECT_EQ(names(kBob), (std::map<int64_t, std::string>{{job_a, ""}, {job_b, "bob-run"}}));
  EXPECT_EQ(names(kOps), (std::map<int64_t, std::string>{
                             {job_a, "alice-secret-project"}, {job_b, "bob-run"}}));
}

}  // namespace
}  // namespace trainctl
