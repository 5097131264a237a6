#include "worker/nccl/rendezvous_relay_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <memory>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "worker/nccl/rendezvous_client.h"
#include "worker/nccl/testing/fake_rendezvous.h"

namespace trainctl::worker {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

RankEnv EnvOf(int rank, const std::string& token = "tok") {
  RankEnv env;
  env.job_id = 5;
  env.attempt = 0;
  env.token = token;
  env.rank = rank;
  env.world_size = 4;
  env.local_rank = rank;
  env.local_world_size = 4;
  return env;
}

class RelayServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(coordinator_.ok());
    char tmpl[] = "/tmp/tc-relay-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    upstream_ = std::make_unique<GrpcRendezvousUpstream>(grpc::CreateChannel(
        coordinator_.address(), grpc::InsecureChannelCredentials()));
    relay_ = std::make_unique<RendezvousRelay>(upstream_.get());
    for (int r = 0; r < 4; ++r) relay_->AddRank(5, 0, "tok", r);
    auto server = RendezvousRelayServer::Start(dir_ + "/rendezvous.sock", relay_.get());
    TC_ASSERT_OK(server.status());
    server_ = std::move(*server);
  }
  void TearDown() override {
    server_.reset();
    upstream_->CancelAll();
    relay_.reset();
    upstream_.reset();
    rmdir(dir_.c_str());
  }

  testing::FakeRendezvousServer coordinator_{"tok"};
  std::string dir_;
  std::unique_ptr<GrpcRendezvousUpstream> upstream_;
  std::unique_ptr<RendezvousRelay> relay_;
  std::unique_ptr<RendezvousRelayServer> server_;
};

TEST_F(RelayServerTest, FourRanksOverUnixSocket_OneCoordinatorFetch) {
  auto client = GrpcRendezvousClient::Create(server_->target());
  TC_ASSERT_OK(client.status());
  std::vector<absl::StatusOr<std::string>> got(4);
  std::vector<std::thread> ranks;
  for (int r = 1; r < 4; ++r) {
    ranks.emplace_back([&, r] { got[r] = (*client)->Fetch(EnvOf(r), absl::Seconds(30)); });
  }
  // The relay's one fetch is parked at the coordinator before rank 0 publishes.
  ASSERT_TRUE(coordinator_.service().AwaitWaiting(1));
  const std::string id(kNcclUniqueIdBytes, '\x11');
  TC_ASSERT_OK((*client)->Publish(EnvOf(0), id));
  for (std::thread& t : ranks) t.join();
  for (int r = 1; r < 4; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status();
    EXPECT_EQ(*got[r], id);
  }
  EXPECT_EQ(coordinator_.service().fetch_calls(), 1);
  EXPECT_EQ(relay_->Stats().upstream_fetches, 1);
  EXPECT_EQ(relay_->Stats().local_fetches, 3);
}

TEST_F(RelayServerTest, WrongToken_PermissionDeniedFromRelay) {
  auto client = GrpcRendezvousClient::Create(server_->target());
  TC_ASSERT_OK(client.status());
  EXPECT_THAT((*client)->Fetch(EnvOf(1, "guess"), absl::Seconds(5)),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("rendezvous relay")));
  EXPECT_EQ(coordinator_.service().fetch_calls(), 0);
}

TEST_F(RelayServerTest, SocketFile_IsASocketAnyLocalAccountMayDial) {
  struct stat st;
  ASSERT_EQ(stat((dir_ + "/rendezvous.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  // Reaching it grants nothing by itself: every call carries the token.
  EXPECT_EQ(st.st_mode & 0777, 0666u);
}

TEST_F(RelayServerTest, CancelAll_FetchWaitingAtCoordinator_EndsAtOnce) {
  // A relay fetch parked in the coordinator's long-poll (rank 0 never
  // publishes): shutting the agent down must not wait out its timeout.
  auto client = GrpcRendezvousClient::Create(server_->target());
  TC_ASSERT_OK(client.status());
  absl::StatusOr<std::string> got;
  // (3 s: the fake coordinator holds its thread for the long-poll.)
  std::thread rank([&] { got = (*client)->Fetch(EnvOf(1), absl::Seconds(3)); });
  ASSERT_TRUE(coordinator_.service().AwaitWaiting(1));
  server_.reset();  // the rank's call ends ABORTED
  upstream_->CancelAll();
  rank.join();
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kAborted, HasSubstr("shutting down")));
}

TEST(GrpcRendezvousUpstreamTest, DestroyedAtOnceAfterCancelAll_EveryCallbackRanOnce) {
  // The agent's shutdown order: CancelAll, then destroy the upstream (and
  // with it the last reference to its channel). gRPC runs the calls'
  // callbacks on its own threads; a callback still finishing after CancelAll
  // returned would drop the channel's last reference there, and gRPC then
  // frees the completion queue that thread is running on (an abort in
  // grpc_cq_internal_unref). Many rounds, so that a narrow window is hit.
  testing::FakeRendezvousServer coordinator("tok");
  ASSERT_TRUE(coordinator.ok());
  std::atomic<int> callbacks{0};
  constexpr int kRounds = 500;
  for (int round = 0; round < kRounds; ++round) {
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateChannel(coordinator.address(), grpc::InsecureChannelCredentials());
    auto upstream = std::make_unique<GrpcRendezvousUpstream>(channel);
    v1::FetchUniqueIdRequest fetch;
    fetch.set_job_id(5);
    fetch.set_token("tok");
    fetch.set_rank(1);
    fetch.set_timeout_ms(200);  // the fake's long-poll ends soon after
    upstream->FetchAsync(fetch, [&](absl::StatusOr<std::vector<std::string>> ids) {
      EXPECT_FALSE(ids.ok());
      callbacks.fetch_add(1);
    });
    upstream->CancelAll();
    EXPECT_EQ(callbacks.load(), round + 1) << "CancelAll returned before the callback ran";
    // Only this test and the upstream's stub hold the channel: no call's
    // context is left to drop it on a gRPC thread.
    EXPECT_EQ(channel.use_count(), 2) << "round " << round;
    upstream.reset();
    channel.reset();
  }
  EXPECT_EQ(callbacks.load(), kRounds);
}

TEST(RelayServerStartTest, PathTooLong_InvalidArgument) {
  RendezvousRelay relay(nullptr);
  EXPECT_THAT(RendezvousRelayServer::Start("/tmp/" + std::string(200, 'x'), &relay).status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unix socket")));
}

}  // namespace
}  // namespace trainctl::worker
