#include "worker/nccl/rendezvous_relay.h"

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "common/testing/status_matchers.h"
#include "coordinator/rendezvous.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::trainctl::testing::StatusIs;

const absl::Time kT0 = absl::FromUnixSeconds(5000);
const std::string kId(128, '\x42');

// The coordinator as a list of calls the test answers by hand.
class ScriptedUpstream : public RendezvousUpstream {
 public:
  void FetchAsync(const v1::FetchUniqueIdRequest& request, UniqueIdsDone done) override {
    fetches.push_back(request);
    pending.push_back(std::move(done));
  }
  void PublishAsync(const v1::PublishUniqueIdRequest& request,
                    absl::AnyInvocable<void(absl::Status)> done) override {
    publishes.push_back(request);
    done(absl::OkStatus());
  }
  // Answers the oldest pending fetch.
  void Answer(absl::StatusOr<std::vector<std::string>> ids) {
    UniqueIdsDone done = std::move(pending.front());
    pending.pop_front();
    done(std::move(ids));
  }
  std::vector<v1::FetchUniqueIdRequest> fetches;
  std::vector<v1::PublishUniqueIdRequest> publishes;
  std::deque<UniqueIdsDone> pending;
};

// The real coordinator table behind the relay (what the coordinator's
// Rendezvous service does with each call), so the timeout message is the
// coordinator's own.
class TableUpstream : public RendezvousUpstream {
 public:
  explicit TableUpstream(coord::RendezvousTable* table) : table_(table) {}
  void FetchAsync(const v1::FetchUniqueIdRequest& r, UniqueIdsDone done) override {
    ++fetches;
    coord::RendezvousTable::FetchOptions o;
    o.relayed_ranks.assign(r.relayed_ranks().begin(), r.relayed_ranks().end());
    o.id_count = r.id_count();
    o.arrivals_only = r.arrivals_only();
    table_->FetchIdsAsync(r.job_id(), r.attempt(), r.rank(), r.token(), kT0,
                          absl::Milliseconds(r.timeout_ms()), o, std::move(done));
  }
  void PublishAsync(const v1::PublishUniqueIdRequest& r,
                    absl::AnyInvocable<void(absl::Status)> done) override {
    done(table_->Publish(r.job_id(), r.attempt(), r.rank(), r.token(), r.unique_id(),
                         r.id_index(), r.id_count()));
  }
  int fetches = 0;

 private:
  coord::RendezvousTable* table_;
};

v1::FetchUniqueIdRequest FetchOf(int rank, const std::string& token = "tok",
                                 int64_t timeout_ms = 60000) {
  v1::FetchUniqueIdRequest r;
  r.set_job_id(9);
  r.set_attempt(1);
  r.set_rank(rank);
  r.set_token(token);
  r.set_timeout_ms(timeout_ms);
  return r;
}

TEST(RendezvousRelayTest, FetchAsync_EightLocalRanks_ExactlyOneUpstreamFetch) {
  ScriptedUpstream upstream;
  RendezvousRelay relay(&upstream);
  // This node runs ranks 8-15 of job 9 attempt 1.
  for (int r = 8; r < 16; ++r) relay.AddRank(9, 1, "tok", r);
  std::map<int, absl::StatusOr<std::vector<std::string>>> got;
  for (int r = 8; r < 16; ++r) {
    relay.FetchAsync(FetchOf(r), kT0, [&got, r](auto ids) { got[r] = ids; });
  }
  // One call went to the coordinator, naming the rank that came first.
  ASSERT_EQ(upstream.fetches.size(), 1u);
  EXPECT_THAT(upstream.fetches[0].relayed_ranks(), ElementsAre(8));
  EXPECT_TRUE(got.empty());
  upstream.Answer(std::vector<std::string>{kId});
  for (int r = 8; r < 16; ++r) {
    ASSERT_TRUE(got[r].ok()) << r;
    EXPECT_THAT(*got[r], ElementsAre(kId));
  }
  // A rank restarting its fetch later is answered from what the relay holds.
  relay.FetchAsync(FetchOf(12), kT0, [&got](auto ids) { got[99] = ids; });
  EXPECT_THAT(*got[99], ElementsAre(kId));
  EXPECT_EQ(upstream.fetches.size(), 1u);
  EXPECT_EQ(relay.Stats().upstream_fetches, 1);
  EXPECT_EQ(relay.Stats().local_fetches, 9);
  // No report was needed: the id came before arrival_report_delay.
  relay.Tick(kT0 + absl::Seconds(5));
  EXPECT_EQ(upstream.fetches.size(), 1u);
}

TEST(RendezvousRelayTest, FetchAsync_TwoAttempts_OneUpstreamFetchEach) {
  ScriptedUpstream upstream;
  RendezvousRelay relay(&upstream);
  relay.AddRank(9, 1, "tok", 8);
  relay.AddRank(9, 1, "tok", 9);
  relay.AddRank(9, 2, "tok2", 8);
  relay.FetchAsync(FetchOf(8), kT0, [](auto) {});
  relay.FetchAsync(FetchOf(9), kT0, [](auto) {});
  v1::FetchUniqueIdRequest next = FetchOf(8, "tok2");
  next.set_attempt(2);
  relay.FetchAsync(next, kT0, [](auto) {});
  EXPECT_EQ(upstream.fetches.size(), 2u);
}

TEST(RendezvousRelayTest, FetchAsync_WrongToken_RefusedLocally) {
  ScriptedUpstream upstream;
  RendezvousRelay relay(&upstream);
  relay.AddRank(9, 1, "tok", 8);
  absl::StatusOr<std::vector<std::string>> got;
  relay.FetchAsync(FetchOf(8, "another-users-guess"), kT0, [&](auto ids) { got = ids; });
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kPermissionDenied,
                            HasSubstr("wrong TRAINCTL_TOKEN for job 9 attempt 1")));
  v1::PublishUniqueIdRequest pub;
  pub.set_job_id(9);
  pub.set_attempt(1);
  pub.set_token("nope");
  pub.set_unique_id(kId);
  absl::Status published;
  relay.PublishAsync(pub, [&](absl::Status s) { published = s; });
  EXPECT_THAT(published, StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  // Nothing reached the coordinator.
  EXPECT_TRUE(upstream.fetches.empty());
  EXPECT_TRUE(upstream.publishes.empty());
  EXPECT_EQ(relay.Stats().refused, 2);
}

TEST(RendezvousRelayTest, FetchAsync_HeldIdsOfOneToken_NotGivenToAnother) {
  // An attempt the agent does not know (it restarted under running tasks):
  // each token is its own group, and the coordinator judges each.
  ScriptedUpstream upstream;
  RendezvousRelay relay(&upstream);
  absl::StatusOr<std::vector<std::string>> a, b;
  relay.FetchAsync(FetchOf(3, "right"), kT0, [&](auto ids) { a = ids; });
  relay.FetchAsync(FetchOf(4, "wrong"), kT0, [&](auto ids) { b = ids; });
  ASSERT_EQ(upstream.fetches.size(), 2u);
  upstream.Answer(std::vector<std::string>{kId});
  upstream.Answer(absl::PermissionDeniedError("wrong TRAINCTL_TOKEN"));
  EXPECT_TRUE(a.ok());
  EXPECT_THAT(b, StatusIs(absl::StatusCode::kPermissionDenied, ::testing::_));
  EXPECT_EQ(relay.Groups(), 0);  // nothing kept for attempts not started here
}

TEST(RendezvousRelayTest, PublishAsync_Rank0_RelayedAndAnswersLocalWaiters) {
  ScriptedUpstream upstream;
  RendezvousRelay relay(&upstream);
  for (int r = 0; r < 2; ++r) relay.AddRank(9, 1, "tok", r);
  absl::StatusOr<std::vector<std::string>> got;
  relay.FetchAsync(FetchOf(1), kT0, [&](auto ids) { got = ids; });
  v1::PublishUniqueIdRequest pub;
  pub.set_job_id(9);
  pub.set_attempt(1);
  pub.set_rank(0);
  pub.set_token("tok");
  pub.set_unique_id(kId);
  absl::Status published = absl::UnknownError("not called");
  relay.PublishAsync(pub, [&](absl::Status s) { published = s; });
  TC_EXPECT_OK(published);
  ASSERT_EQ(upstream.publishes.size(), 1u);
  // Rank 1, on rank 0's node, has the id before the coordinator answers.
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(*got, ElementsAre(kId));
}

TEST(RendezvousRelayTest, Timeout_ThroughRelay_CoordinatorNamesRanksThatNeverArrived) {
  // 4 ranks: 0, 1 on node-a (no relay; they never come), 2, 3 on node-b.
  coord::RendezvousTable table;
  table.Open(9, 1, "tok", {"node-a", "node-a", "node-b", "node-b"});
  TableUpstream upstream(&table);
  RendezvousRelay relay(&upstream);
  relay.AddRank(9, 1, "tok", 2);
  relay.AddRank(9, 1, "tok", 3);
  absl::StatusOr<std::vector<std::string>> r2, r3;
  relay.FetchAsync(FetchOf(2), kT0, [&](auto ids) { r2 = ids; });
  // Rank 3 comes after the relay's fetch went out: reported once the fetch
  // has waited arrival_report_delay.
  relay.FetchAsync(FetchOf(3), kT0, [&](auto ids) { r3 = ids; });
  EXPECT_EQ(upstream.fetches, 1);
  relay.Tick(kT0 + absl::Milliseconds(500));
  EXPECT_EQ(upstream.fetches, 1);
  relay.Tick(kT0 + absl::Seconds(1));
  EXPECT_EQ(upstream.fetches, 2);  // the arrivals_only report
  table.Expire(kT0 + absl::Seconds(60));
  for (const auto* r : {&r2, &r3}) {
    EXPECT_THAT(*r, StatusIs(absl::StatusCode::kDeadlineExceeded,
                             AllOf(HasSubstr("rank 0 (node-a) did not publish"),
                                   HasSubstr("never arrived: 0 (node-a), 1 (node-a)"),
                                   Not(HasSubstr("2 (node-b)")),
                                   Not(HasSubstr("3 (node-b)")))));
  }
}

TEST(RendezvousRelayTest, Timeout_LocalRankMissing_IsNamed) {
  coord::RendezvousTable table;
  table.Open(9, 1, "tok", {"node-a", "node-b", "node-b"});
  TableUpstream upstream(&table);
  RendezvousRelay relay(&upstream);
  relay.AddRank(9, 1, "tok", 1);
  relay.AddRank(9, 1, "tok", 2);
  absl::StatusOr<std::vector<std::string>> r1;
  relay.FetchAsync(FetchOf(1), kT0, [&](auto ids) { r1 = ids; });
  table.Expire(kT0 + absl::Seconds(60));
  // Rank 2 was started on node-b but never asked the relay.
  EXPECT_THAT(r1, StatusIs(absl::StatusCode::kDeadlineExceeded,
                           AllOf(HasSubstr("never arrived: 0 (node-a), 2 (node-b)"),
                                 Not(HasSubstr("1 (node-b)")))));
}

TEST(RendezvousRelayTest, RemoveRank_LastLocalRank_DropsGroupAndAbortsWaiters) {
  ScriptedUpstream upstream;
  RendezvousRelay relay(&upstream);
  relay.AddRank(9, 1, "tok", 8);
  relay.AddRank(9, 1, "tok", 9);
  absl::StatusOr<std::vector<std::string>> got;
  relay.FetchAsync(FetchOf(8), kT0, [&](auto ids) { got = ids; });
  relay.RemoveRank(9, 1, 9);
  EXPECT_EQ(relay.Groups(), 1);
  relay.RemoveRank(9, 1, 8);
  EXPECT_EQ(relay.Groups(), 0);
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kAborted, HasSubstr("no rank left")));
  upstream.Answer(std::vector<std::string>{kId});  // late answer: ignored
}

TEST(RendezvousRelayTest, FetchAsync_UpstreamError_NextFetchAsksAgain) {
  ScriptedUpstream upstream;
  RendezvousRelay relay(&upstream);
  relay.AddRank(9, 1, "tok", 8);
  absl::StatusOr<std::vector<std::string>> got;
  relay.FetchAsync(FetchOf(8), kT0, [&](auto ids) { got = ids; });
  upstream.Answer(absl::UnavailableError("coordinator restarting"));
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kUnavailable, ::testing::_));
  relay.FetchAsync(FetchOf(8), kT0, [&](auto ids) { got = ids; });
  EXPECT_EQ(upstream.fetches.size(), 2u);
  upstream.Answer(std::vector<std::string>{kId});
  EXPECT_TRUE(got.ok());
}

TEST(RendezvousRelayTest, FetchAsync_TwoIds_AllRelayedInOrder) {
  coord::RendezvousTable table;
  table.Open(9, 1, "tok", std::vector<std::string>(4, "node"));
  TableUpstream upstream(&table);
  RendezvousRelay relay(&upstream);
  for (int r = 0; r < 4; ++r) relay.AddRank(9, 1, "tok", r);
  absl::StatusOr<std::vector<std::string>> got;
  v1::FetchUniqueIdRequest fetch = FetchOf(3);
  fetch.set_id_count(2);
  relay.FetchAsync(fetch, kT0, [&](auto ids) { got = ids; });
  const std::string id0(128, 'a'), id1(128, 'b');
  for (auto [rank, index, id] : {std::tuple{2, 1, id1}, std::tuple{0, 0, id0}}) {
    v1::PublishUniqueIdRequest pub;
    pub.set_job_id(9);
    pub.set_attempt(1);
    pub.set_rank(rank);
    pub.set_token("tok");
    pub.set_unique_id(id);
    pub.set_id_index(index);
    pub.set_id_count(2);
    relay.PublishAsync(pub, [](absl::Status s) { TC_EXPECT_OK(s); });
  }
  ASSERT_TRUE(got.ok());
  EXPECT_THAT(*got, ElementsAre(id0, id1));
  EXPECT_EQ(upstream.fetches, 1);
}

// A probe and the job's rank of the same attempt register as two groups:
// TRAINCTL_PREFLIGHT gives the probe's run; a malformed value registers
// nothing (the task then asks the coordinator itself).
TEST(RendezvousRelayTest, RelayRankFromEnv_ReadsTheProbeRun) {
  google::protobuf::Map<std::string, std::string> env;
  env["TRAINCTL_JOB_ID"] = "9";
  env["TRAINCTL_ATTEMPT"] = "2";
  env["RANK"] = "3";
  env["TRAINCTL_TOKEN"] = "tok";
  std::optional<RelayRank> r = RelayRankFromEnv(env);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->probe_run, 0);
  env["TRAINCTL_PREFLIGHT"] = "1";
  r = RelayRankFromEnv(env);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->attempt, 2);
  EXPECT_EQ(r->probe_run, 1);
  env["TRAINCTL_PREFLIGHT"] = "x";
  EXPECT_FALSE(RelayRankFromEnv(env).has_value());
  env.erase("TRAINCTL_PREFLIGHT");
  env.erase("RANK");
  EXPECT_FALSE(RelayRankFromEnv(env).has_value());
}

}  // namespace
}  // namespace trainctl::worker
