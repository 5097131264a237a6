#include "worker/nccl/rendezvous_client.h"

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/nccl_roots.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "trainctl/v1/service.grpc.pb.h"
#include "worker/nccl/rank_env.h"
#include "worker/nccl/testing/fake_rendezvous.h"

namespace trainctl::worker {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::IsOk;
using ::trainctl::testing::StatusIs;

constexpr char kToken[] = "tok-42-0";

// Runs FakeRendezvousService on a free loopback port.
class RendezvousClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok());
    address_ = server_.address();
  }

  std::unique_ptr<GrpcRendezvousClient> NewClient() {
    GrpcRendezvousOptions options;
    // Fast retries keep the UNAVAILABLE test short.
    options.initial_backoff = absl::Milliseconds(1);
    options.max_backoff = absl::Milliseconds(4);
    auto client = GrpcRendezvousClient::Create(address_, options);
    EXPECT_THAT(client, IsOk());
    return std::move(client).value();
  }

  RankEnv Env(int rank, std::string token = kToken) {
    RankEnv env;
    env.coordinator = address_;
    env.job_id = 42;
    env.attempt = 0;
    env.token = std::move(token);
    env.rank = rank;
    env.world_size = 4;
    env.local_rank = rank;
    env.local_world_size = 4;
    return env;
  }

  static std::string TestId() {
    std::string id(kNcclUniqueIdBytes, '\0');
    for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 7);
    return id;
  }

  testing::FakeRendezvousServer server_{kToken};
  testing::FakeRendezvousService& service_ = server_.service();
  std::string address_;
};

TEST_F(RendezvousClientTest, Exchange_Rank0PublishesOthersFetch_AllGetSameId) {
  const std::string id = TestId();
  auto client = NewClient();
  std::vector<absl::StatusOr<std::string>> got(4);
  std::vector<std::thread> fetchers;
  for (int rank = 1; rank < 4; ++rank) {
    fetchers.emplace_back([&, rank] {
      got[rank] = ExchangeUniqueId(
          Env(rank), *client,
          []() -> absl::StatusOr<std::string> {
            return absl::InternalError("only rank 0 makes the id");
          },
          absl::Seconds(30));
    });
  }
  // Ranks 1..3 are parked in the long-poll before rank 0 publishes.
  ASSERT_TRUE(service_.AwaitWaiting(3));
  got[0] = ExchangeUniqueId(Env(0), *client, [&] { return absl::StatusOr<std::string>(id); },
                            absl::Seconds(30));
  for (auto& t : fetchers) t.join();
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_THAT(got[rank], IsOk()) << "rank " << rank;
    EXPECT_EQ(*got[rank], id) << "rank " << rank;
  }
}

TEST_F(RendezvousClientTest, Fetch_NeverPublished_DeadlineExceededWithServerMessage) {
  auto client = NewClient();
  absl::StatusOr<std::string> id = client->Fetch(Env(2), absl::Milliseconds(50));
  EXPECT_THAT(id, StatusIs(absl::StatusCode::kDeadlineExceeded,
                           HasSubstr("rank 0 of job 42 never published")));
  // The rank's own context is there too.
  EXPECT_THAT(id, StatusIs(absl::StatusCode::kDeadlineExceeded,
                           HasSubstr("rank 2 of job 42 attempt 0")));
}

TEST_F(RendezvousClientTest, Fetch_WrongToken_PermissionDeniedPassesThrough) {
  auto client = NewClient();
  EXPECT_THAT(client->Fetch(Env(1, "wrong"), absl::Seconds(5)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("token does not match")));
  // Not retried: one call reached the server.
  EXPECT_EQ(service_.fetch_calls(), 1);
}

TEST_F(RendezvousClientTest, Publish_WrongToken_PermissionDenied) {
  auto client = NewClient();
  EXPECT_THAT(client->Publish(Env(0, "wrong"), TestId()),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("token does not match")));
}

TEST_F(RendezvousClientTest, Fetch_CoordinatorBrieflyUnavailable_Retries) {
  auto client = NewClient();
  TC_ASSERT_OK(client->Publish(Env(0), TestId()));
  // Two UNAVAILABLE answers, then the id.
  service_.FailNextCallsUnavailable(2);
  absl::StatusOr<std::string> id = client->Fetch(Env(1), absl::Seconds(30));
  ASSERT_THAT(id, IsOk());
  EXPECT_EQ(*id, TestId());
  EXPECT_EQ(service_.fetch_calls(), 3);
}

TEST_F(RendezvousClientTest, Fetch_NoCoordinator_UnavailableAtDeadline) {
  // Nothing listens here once the server is gone.
  server_.Shutdown();
  auto client = NewClient();
  EXPECT_THAT(client->Fetch(Env(1), absl::Milliseconds(200)),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("unreachable")));
}

TEST_F(RendezvousClientTest, Exchange_MadeIdWrongSize_Internal) {
  auto client = NewClient();
  EXPECT_THAT(ExchangeUniqueId(
                  Env(0), *client,
                  [] { return absl::StatusOr<std::string>(std::string(64, 'x')); },
                  absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("64 bytes")));
}

TEST_F(RendezvousClientTest, Exchange_FetchedIdWrongSize_Internal) {
  auto client = NewClient();
  // A publisher that bypasses ExchangeUniqueId's size check.
  TC_ASSERT_OK(client->Publish(Env(0), "short"));
  EXPECT_THAT(ExchangeUniqueId(
                  Env(1), *client,
                  []() -> absl::StatusOr<std::string> { return std::string(); },
                  absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("5-byte")));
}

TEST_F(RendezvousClientTest, Exchange_MakeIdFails_ErrorNamesRank) {
  auto client = NewClient();
  EXPECT_THAT(ExchangeUniqueId(
                  Env(0), *client,
                  []() -> absl::StatusOr<std::string> {
                    return absl::InternalError("ncclGetUniqueId: system error");
                  },
                  absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("rank 0 of job 42 attempt 0")));
}

TEST(GrpcRendezvousClient, Create_EmptyAddress_InvalidArgument) {
  EXPECT_THAT(GrpcRendezvousClient::Create(""),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("TRAINCTL_COORDINATOR")));
}

// ------------------------------------------------------------- RankEnvFromEnv

class FakeEnv {
 public:
  explicit FakeEnv(std::map<std::string, std::string> vars)
      : vars_(std::move(vars)) {}
  const char* operator()(const char* name) const {
    auto it = vars_.find(name);
    return it == vars_.end() ? nullptr : it->second.c_str();
  }
  std::map<std::string, std::string> vars_;
};

std::map<std::string, std::string> GoodVars() {
  return {{"TRAINCTL_COORDINATOR", "10.0.0.1:7070"},
          {"TRAINCTL_JOB_ID", "42"},
          {"TRAINCTL_ATTEMPT", "1"},
          {"TRAINCTL_TOKEN", "secret"},
          {"RANK", "3"},
          {"WORLD_SIZE", "8"},
          {"LOCAL_RANK", "3"},
          {"LOCAL_WORLD_SIZE", "4"}};
}

TEST(RankEnvFromEnv, AllSet_Parsed) {
  FakeEnv env(GoodVars());
  absl::StatusOr<RankEnv> got = RankEnvFromEnv(env);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->coordinator, "10.0.0.1:7070");
  EXPECT_EQ(got->job_id, 42);
  EXPECT_EQ(got->attempt, 1);
  EXPECT_EQ(got->token, "secret");
  EXPECT_EQ(got->rank, 3);
  EXPECT_EQ(got->world_size, 8);
  EXPECT_EQ(got->local_rank, 3);
  EXPECT_EQ(got->local_world_size, 4);
}

TEST(RankEnvFromEnv, Missing_FailedPreconditionNamesVariable) {
  for (const char* name : {"TRAINCTL_COORDINATOR", "TRAINCTL_JOB_ID",
                           "TRAINCTL_ATTEMPT", "TRAINCTL_TOKEN", "RANK",
                           "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
    auto vars = GoodVars();
    vars.erase(name);
    FakeEnv env(vars);
    EXPECT_THAT(RankEnvFromEnv(env),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         HasSubstr(absl::StrFormat(
                             "%s is not set: run this under trainctl submit",
                             name))))
        << name;
  }
}

TEST(RankEnvFromEnv, Bad_FailedPreconditionNamesVariable) {
  struct Case {
    const char* name;
    const char* value;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {"RANK", "two", "RANK='two'"},
           {"RANK", "-1", "RANK='-1'"},
           {"RANK", "8", "RANK=8 is not below WORLD_SIZE=8"},
           {"WORLD_SIZE", "0", "WORLD_SIZE='0'"},
           {"TRAINCTL_JOB_ID", "42x", "TRAINCTL_JOB_ID='42x'"},
           {"LOCAL_RANK", "4", "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4"},
           {"LOCAL_WORLD_SIZE", "16", "LOCAL_WORLD_SIZE=16 is above"},
           {"TRAINCTL_TOKEN", "", "TRAINCTL_TOKEN is not set"},
       }) {
    auto vars = GoodVars();
    vars[c.name] = c.value;
    FakeEnv env(vars);
    EXPECT_THAT(RankEnvFromEnv(env),
                StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr(c.want)))
        << c.name << "=" << c.value;
  }
}

TEST(RankEnvFromEnv, RelaySocketAndUniqueIds_Parsed) {
  auto vars = GoodVars();
  vars["TRAINCTL_RENDEZVOUS_SOCKET"] = "/var/lib/trainctl/rendezvous.sock";
  vars["TRAINCTL_NCCL_UNIQUE_IDS"] = "2";
  FakeEnv env(vars);
  absl::StatusOr<RankEnv> got = RankEnvFromEnv(env);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(got->rendezvous_socket, "/var/lib/trainctl/rendezvous.sock");
  EXPECT_EQ(got->nccl_unique_ids, 2);
  // More ids than ranks: refused, naming the variable.
  vars["TRAINCTL_NCCL_UNIQUE_IDS"] = "9";
  FakeEnv too_many(vars);
  EXPECT_THAT(RankEnvFromEnv(too_many),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("TRAINCTL_NCCL_UNIQUE_IDS='9'")));
}

TEST(RendezvousAddress, NoSocketOrSocketMissing_Coordinator) {
  RankEnv env;
  env.coordinator = "head:50051";
  EXPECT_EQ(RendezvousAddress(env), "head:50051");
  env.rendezvous_socket = "/nonexistent/rendezvous.sock";
  EXPECT_EQ(RendezvousAddress(env), "head:50051");  // an agent without a relay
}

// K ids through an in-memory exchange: each root publishes its index, every
// rank gets all of them in index order.
class MemoryExchange : public UniqueIdExchange {
 public:
  absl::Status Publish(const RankEnv& env, absl::string_view id) override {
    absl::MutexLock lock(&mu_);
    published_[env.rank] = std::string(id);
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Fetch(const RankEnv&, absl::Duration) override {
    return absl::UnimplementedError("FetchAll only");
  }
  absl::StatusOr<std::vector<std::string>> FetchAll(const RankEnv& env,
                                                    absl::Duration) override {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> ids;
    for (int i = 0; i < env.nccl_unique_ids; ++i) {
      auto it = published_.find(NcclIdRootRank(i, env.world_size, env.nccl_unique_ids));
      if (it == published_.end()) return absl::DeadlineExceededError("not yet");
      ids.push_back(it->second);
    }
    return ids;
  }
  absl::Mutex mu_;
  std::map<int, std::string> published_;
};

TEST(ExchangeUniqueIds, TwoIdsOfSevenRanks_RootsPublishAllGetBoth) {
  MemoryExchange exchange;
  RankEnv env;
  env.world_size = 7;
  env.nccl_unique_ids = 2;  // NCCL's blocks 0-3 and 4-6: roots 0 and 4
  std::vector<int> made;
  for (int root : {4, 0}) {
    env.rank = root;
    auto ids = ExchangeUniqueIds(
        env, exchange,
        [&]() -> absl::StatusOr<std::string> {
          made.push_back(root);
          return std::string(kNcclUniqueIdBytes, static_cast<char>('a' + root));
        },
        absl::Seconds(1));
    if (root == 0) {
      ASSERT_THAT(ids, IsOk());
      EXPECT_EQ((*ids)[0][0], 'a');
      EXPECT_EQ((*ids)[1][0], 'e');
    }
  }
  env.rank = 5;  // not a root: makes nothing, gets both
  auto ids = ExchangeUniqueIds(
      env, exchange, [&]() -> absl::StatusOr<std::string> { return std::string(); },
      absl::Seconds(1));
  ASSERT_THAT(ids, IsOk());
  EXPECT_EQ(ids->size(), 2u);
  EXPECT_EQ(made, (std::vector<int>{4, 0}));
}

}  // namespace
}  // namespace trainctl::worker
