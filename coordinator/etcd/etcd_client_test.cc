// The etcd backend and the leader election against a real etcd (skipped
// where etcd is not installed; .ci/run installs it).

#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "common/testing/status_matchers.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/etcd/etcd_state_store.h"
#include "coordinator/etcd/leader_election.h"
#include "coordinator/etcd/testing/etcd_server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::IsOk;
using ::trainctl::testing::StatusIs;

class EtcdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = testing::EtcdServer::Start(
        ::testing::TempDir() + "/etcd-" +
        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    if (absl::IsNotFound(server.status())) GTEST_SKIP() << server.status();
    ASSERT_THAT(server, IsOk());
    server_ = std::move(*server);
    auto conn = ConnectEtcd(server_->endpoint(), absl::Seconds(20));
    ASSERT_THAT(conn, IsOk());
    conn_ = std::move(*conn);
  }
  std::unique_ptr<testing::EtcdServer> server_;
  std::unique_ptr<EtcdConnection> conn_;
};

v1::Job MakeJob(int64_t id) {
  v1::Job job;
  job.set_id(id);
  job.set_state(v1::JOB_STATE_PENDING);
  job.mutable_spec()->add_command("true");
  return job;
}

TEST_F(EtcdTest, Load_ReadsEveryJobInIdOrderAcrossPages) {
  EtcdStateStore store(conn_.get(), "/t/", std::nullopt, /*page_size=*/3);
  for (int64_t id : {10, 2, 7, 1, 100, 3, 9}) TC_ASSERT_OK(store.PutJob(MakeJob(id)));
  v1::Node node;
  node.set_name("n1");
  TC_ASSERT_OK(store.PutNode(node));
  auto state = store.Load();
  ASSERT_THAT(state, IsOk());
  std::vector<int64_t> ids;
  for (const v1::Job& j : state->jobs) ids.push_back(j.id());
  EXPECT_THAT(ids, ElementsAre(1, 2, 3, 7, 9, 10, 100));
  ASSERT_THAT(state->nodes, SizeIs(1));
  EXPECT_EQ(state->nodes[0].name(), "n1");
  // Another prefix is another cluster.
  EtcdStateStore other(conn_.get(), "/other/", std::nullopt);
  EXPECT_THAT(other.Load()->jobs, SizeIs(0));
}

TEST_F(EtcdTest, Campaign_SecondCandidateWaitsUntilTheLeaderResigns) {
  auto a = LeaderElection::Create(conn_.get(), "/t/leader", absl::Seconds(2));
  ASSERT_THAT(a, IsOk());
  TC_ASSERT_OK((*a)->Campaign("10.0.0.1:50051"));
  EXPECT_EQ(*(*a)->CurrentLeader(), "10.0.0.1:50051");
  EtcdStateStore a_store(conn_.get(), "/t/", (*a)->fence());
  TC_ASSERT_OK(a_store.PutJob(MakeJob(1)));
  TC_ASSERT_OK(a_store.PutRecord("audit", "01", "event"));

  auto b = LeaderElection::Create(conn_.get(), "/t/leader", absl::Seconds(2));
  ASSERT_THAT(b, IsOk());
  absl::Notification b_elected;
  absl::Status b_status;
  std::thread campaign([&] {
    b_status = (*b)->Campaign("10.0.0.2:50051");
    b_elected.Notify();
  });
  // B must not win while A holds the lease (A renews every 0.67 s).
  EXPECT_FALSE(b_elected.WaitForNotificationWithTimeout(absl::Seconds(3)));
  const LeaderFence stale = (*a)->fence();
  a->reset();  // clean shutdown: resign + revoke
  EXPECT_TRUE(b_elected.WaitForNotificationWithTimeout(absl::Seconds(10)));
  campaign.join();
  TC_ASSERT_OK(b_status);
  EXPECT_EQ(*(*b)->CurrentLeader(), "10.0.0.2:50051");

  // The deposed leader's fenced writes no longer land.
  EtcdStateStore deposed(conn_.get(), "/t/", stale);
  v1::Job job = MakeJob(1);
  job.set_state(v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(deposed.PutJob(job),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no longer the leader")));
  EXPECT_THAT(deposed.DeleteRecordsBefore("audit", "99"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("nothing was deleted")));
  EtcdStateStore b_store(conn_.get(), "/t/", (*b)->fence());
  EXPECT_THAT(*b_store.ReadRecords("audit", {}), SizeIs(1));
  EXPECT_EQ(*b_store.DeleteRecordsBefore("audit", "99"), 1);
  auto state = b_store.Load();
  ASSERT_THAT(state, IsOk());
  ASSERT_THAT(state->jobs, SizeIs(1));
  EXPECT_EQ(state->jobs[0].state(), v1::JOB_STATE_PENDING);
  TC_EXPECT_OK(b_store.PutJob(job));
}

TEST_F(EtcdTest, LeaseRevokedBehindOurBack_IsNoticedAndFencesWrites) {
  auto a = LeaderElection::Create(conn_.get(), "/t/leader", absl::Seconds(2));
  ASSERT_THAT(a, IsOk());
  TC_ASSERT_OK((*a)->Campaign("a"));
  EtcdStateStore store(conn_.get(), "/t/", (*a)->fence());
  TC_ASSERT_OK(store.PutJob(MakeJob(5)));

  etcdserverpb::LeaseRevokeRequest req;
  req.set_id((*a)->lease_id());
  etcdserverpb::LeaseRevokeResponse resp;
  grpc::ClientContext ctx;
  SetEtcdDeadline(&ctx);
  ASSERT_TRUE(conn_->lease->LeaseRevoke(&ctx, req, &resp).ok());

  EXPECT_TRUE((*a)->lost().WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_THAT(store.PutJob(MakeJob(6)), StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  EXPECT_THAT((*a)->CurrentLeader(), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(EtcdTest, Cancel_EndsAWaitingCampaign) {
  auto a = LeaderElection::Create(conn_.get(), "/t/leader", absl::Seconds(2));
  auto b = LeaderElection::Create(conn_.get(), "/t/leader", absl::Seconds(2));
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  TC_ASSERT_OK((*a)->Campaign("a"));
  absl::Status b_status;
  std::thread campaign([&] { b_status = (*b)->Campaign("b"); });
  (*b)->Cancel();
  campaign.join();
  EXPECT_THAT(b_status, StatusIs(absl::StatusCode::kCancelled, ::testing::_));
  EXPECT_EQ(*(*a)->CurrentLeader(), "a");
}

TEST(LeaderElectionTest, ShortLease_IsInvalidArgument) {
  EXPECT_THAT(LeaderElection::Create(nullptr, "x", absl::Seconds(1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least 2s")));
  EXPECT_THAT(LeaderElection::Create(nullptr, "", absl::Seconds(5)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("name")));
}

TEST(PrefixRangeEndTest, IncrementsLastByte) {
  EXPECT_EQ(PrefixRangeEnd("/t/jobs/"), "/t/jobs0");
  EXPECT_EQ(PrefixRangeEnd(std::string("a\xff", 2)), "b");
}

}  // namespace
}  // namespace trainctl::coord
