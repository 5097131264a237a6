#include "coordinator/rendezvous.h"

#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::trainctl::testing::StatusIs;

const absl::Time kT0 = absl::FromUnixSeconds(1000);
const std::string kId(kNcclUniqueIdBytes, '\x07');

class RendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_.Open(1, 0, "tok", {"node-a", "node-a", "node-b", "node-b"});
  }
  // Starts a fetch of `rank`; the result lands in results_[rank].
  void Fetch(int rank, absl::Duration timeout = absl::Seconds(120)) {
    table_.FetchAsync(1, 0, rank, "tok", kT0, timeout,
                      [this, rank](absl::StatusOr<std::string> r) {
                        results_[rank] = std::move(r);
                      });
  }
  RendezvousTable table_;
  std::map<int, absl::StatusOr<std::string>> results_;
};

TEST_F(RendezvousTest, FetchAsync_BeforePublish_ReturnsWhenPublished) {
  Fetch(1);
  Fetch(2);
  EXPECT_TRUE(results_.empty());
  TC_ASSERT_OK(table_.Publish(1, 0, 0, "tok", kId));
  EXPECT_EQ(*results_[1], kId);
  EXPECT_EQ(*results_[2], kId);
  // A late rank gets it at once.
  Fetch(3);
  EXPECT_EQ(*results_[3], kId);
}

TEST_F(RendezvousTest, Expire_RanksMissing_DeadlineExceededNamesThem) {
  Fetch(1, absl::Seconds(120));
  table_.Expire(kT0 + absl::Seconds(119));
  EXPECT_TRUE(results_.empty());
  table_.Expire(kT0 + absl::Seconds(120));
  // Rank 1 arrived; ranks 0, 2 and 3 never did.
  EXPECT_THAT(results_[1],
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr("rank 0 (node-a) did not publish"),
                             HasSubstr("within 2m"),
                             HasSubstr("never arrived: 0 (node-a), 2 (node-b), 3 (node-b)"),
                             Not(HasSubstr("1 (node-a)")))));
}

TEST_F(RendezvousTest, Publish_WrongRankSizeOrToken_Refused) {
  EXPECT_THAT(table_.Publish(1, 0, 1, "tok", kId),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only rank 0")));
  EXPECT_THAT(table_.Publish(1, 0, 0, "tok", "short"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("128 bytes")));
  EXPECT_THAT(table_.Publish(1, 0, 0, "other", kId),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("TRAINCTL_TOKEN")));
  EXPECT_THAT(table_.Publish(2, 0, 0, "tok", kId),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("not running")));
  TC_ASSERT_OK(table_.Publish(1, 0, 0, "tok", kId));
  TC_EXPECT_OK(table_.Publish(1, 0, 0, "tok", kId));  // Idempotent.
  EXPECT_THAT(table_.Publish(1, 0, 0, "tok", std::string(128, 'z')),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("one communicator")));
}

TEST_F(RendezvousTest, Close_Waiting_AbortedAndGroupGone) {
  Fetch(2);
  table_.Close(1, 0, "cancelled by user");
  EXPECT_THAT(results_[2], StatusIs(absl::StatusCode::kAborted,
                                    HasSubstr("cancelled by user")));
  EXPECT_EQ(table_.OpenGroups(), 0);
  Fetch(3);
  EXPECT_THAT(results_[3], StatusIs(absl::StatusCode::kNotFound, HasSubstr("job 1")));
}

TEST_F(RendezvousTest, FetchAsync_RankOutOfRange_InvalidArgument) {
  Fetch(4);
  EXPECT_THAT(results_[4], StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("rank: must be in [0, 4)")));
}

TEST_F(RendezvousTest, FetchIdsAsync_RelayedRanks_CountAsArrived) {
  // A node relay on node-b fetches once for ranks 2 and 3; nobody else comes.
  RendezvousTable::FetchOptions relay;
  relay.relayed_ranks = {2, 3};
  absl::StatusOr<std::vector<std::string>> got;
  table_.FetchIdsAsync(1, 0, 2, "tok", kT0, absl::Seconds(60), relay,
                       [&](absl::StatusOr<std::vector<std::string>> r) { got = r; });
  table_.Expire(kT0 + absl::Seconds(60));
  // Ranks 2 and 3 arrived through the relay; 0 and 1 never did.
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kDeadlineExceeded,
                            AllOf(HasSubstr("never arrived: 0 (node-a), 1 (node-a)"),
                                  Not(HasSubstr("2 (node-b)")))));
}

TEST_F(RendezvousTest, FetchIdsAsync_ArrivalsOnly_MarksRanksAndDoesNotWait) {
  RendezvousTable::FetchOptions first;
  first.relayed_ranks = {2};
  absl::StatusOr<std::vector<std::string>> waiting;
  table_.FetchIdsAsync(1, 0, 2, "tok", kT0, absl::Seconds(60), first,
                       [&](absl::StatusOr<std::vector<std::string>> r) { waiting = r; });
  // Rank 3 reached the relay after its fetch went out: reported, not waiting.
  RendezvousTable::FetchOptions late;
  late.relayed_ranks = {3};
  late.arrivals_only = true;
  absl::StatusOr<std::vector<std::string>> report;
  table_.FetchIdsAsync(1, 0, 3, "tok", kT0, absl::Seconds(60), late,
                       [&](absl::StatusOr<std::vector<std::string>> r) { report = r; });
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->empty());  // not published yet
  table_.Expire(kT0 + absl::Seconds(60));
  EXPECT_THAT(waiting, StatusIs(absl::StatusCode::kDeadlineExceeded,
                                AllOf(HasSubstr("never arrived: 0 (node-a), 1 (node-a)"),
                                      Not(HasSubstr("3 (node-b)")))));
}

TEST_F(RendezvousTest, FetchIdsAsync_RelayedRankOutOfRange_InvalidArgument) {
  RendezvousTable::FetchOptions relay;
  relay.relayed_ranks = {2, 9};
  absl::StatusOr<std::vector<std::string>> got;
  table_.FetchIdsAsync(1, 0, 2, "tok", kT0, absl::Seconds(60), relay,
                       [&](absl::StatusOr<std::vector<std::string>> r) { got = r; });
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("relayed_ranks: must be in [0, 4), got 9")));
}

TEST(RendezvousScalableTest, TwoIds_FetchReturnsOnceBothRootsPublished) {
  // 8 ranks, 2 ids: NCCL's roots are ranks 0 and 4.
  RendezvousTable table;
  table.Open(3, 0, "tok", std::vector<std::string>(8, "node"));
  RendezvousTable::FetchOptions two;
  two.id_count = 2;
  std::optional<absl::StatusOr<std::vector<std::string>>> got;
  table.FetchIdsAsync(3, 0, 5, "tok", kT0, absl::Seconds(60), two,
                      [&](absl::StatusOr<std::vector<std::string>> r) { got = r; });
  const std::string id0(kNcclUniqueIdBytes, 'a'), id1(kNcclUniqueIdBytes, 'b');
  EXPECT_THAT(table.Publish(3, 0, 1, "tok", id1, 1, 2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("published by rank 4")));
  TC_ASSERT_OK(table.Publish(3, 0, 4, "tok", id1, 1, 2));
  EXPECT_FALSE(got.has_value());  // still waiting for id 0
  TC_ASSERT_OK(table.Publish(3, 0, 0, "tok", id0, 0, 2));
  ASSERT_TRUE(got.has_value() && got->ok());
  EXPECT_EQ(**got, (std::vector<std::string>{id0, id1}));
}

TEST(RendezvousScalableTest, IdCountDisagrees_InvalidArgument) {
  RendezvousTable table;
  table.Open(3, 0, "tok", std::vector<std::string>(8, "node"));
  TC_ASSERT_OK(table.Publish(3, 0, 0, "tok", kId, 0, 2));
  absl::StatusOr<std::string> got;
  // An older client (id_count unset = 1) against an attempt using 2 ids.
  table.FetchAsync(3, 0, 1, "tok", kT0, absl::Seconds(60),
                   [&](absl::StatusOr<std::string> r) { got = r; });
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("TRAINCTL_NCCL_UNIQUE_IDS")));
  EXPECT_THAT(table.Publish(3, 0, 0, "tok", kId, 0, 9),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("id_count")));
}

TEST(RendezvousScalableTest, Expire_RootMissing_NamesUnpublishedRoots) {
  RendezvousTable table;
  table.Open(3, 0, "tok", {"a", "a", "a", "a", "b", "b", "b", "b"});
  RendezvousTable::FetchOptions two;
  two.id_count = 2;
  absl::StatusOr<std::vector<std::string>> got;
  table.FetchIdsAsync(3, 0, 1, "tok", kT0, absl::Seconds(10), two,
                      [&](absl::StatusOr<std::vector<std::string>> r) { got = r; });
  TC_ASSERT_OK(table.Publish(3, 0, 0, "tok", kId, 0, 2));
  table.Expire(kT0 + absl::Seconds(10));
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kDeadlineExceeded,
                            AllOf(HasSubstr("1 of 2 ncclUniqueIds not published"),
                                  HasSubstr("root ranks 4 (b)"))));
}

TEST(RendezvousFanoutTest, Publish_ManyWaiters_EachAnsweredOnceOverSeveralThreads) {
  constexpr int kRanks = 4 * RendezvousTable::kWaitersPerFanoutThread + 1;
  RendezvousTable table(/*fanout_threads=*/4);
  table.Open(7, 2, "tok", std::vector<std::string>(kRanks, "node"));
  absl::Mutex mu;
  std::vector<int> answers(kRanks, 0);
  std::set<std::thread::id> threads;
  for (int r = 1; r < kRanks; ++r) {
    table.FetchAsync(7, 2, r, "tok", kT0, absl::Seconds(60),
                     [&, r](absl::StatusOr<std::string> id) {
                       absl::MutexLock lock(&mu);
                       if (id.ok() && *id == kId) ++answers[r];
                       threads.insert(std::this_thread::get_id());
                     });
  }
  // Publish returns only after every waiter has its answer.
  TC_ASSERT_OK(table.Publish(7, 2, 0, "tok", kId));
  absl::MutexLock lock(&mu);
  for (int r = 1; r < kRanks; ++r) EXPECT_EQ(answers[r], 1) << "rank " << r;
  EXPECT_EQ(threads.size(), 4u);
  EXPECT_TRUE(threads.count(std::this_thread::get_id()));
}

TEST(RendezvousFanoutTest, Publish_FewWaiters_AnsweredOnThePublishingThread) {
  RendezvousTable table(/*fanout_threads=*/8);
  table.Open(7, 0, "tok", std::vector<std::string>(16, "node"));
  std::set<std::thread::id> threads;
  for (int r = 1; r < 16; ++r) {
    table.FetchAsync(7, 0, r, "tok", kT0, absl::Seconds(60),
                     [&](absl::StatusOr<std::string> id) {
                       ASSERT_TRUE(id.ok());
                       threads.insert(std::this_thread::get_id());
                     });
  }
  TC_ASSERT_OK(table.Publish(7, 0, 0, "tok", kId));
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(RendezvousTimingTest, TimeToPublish_MeasuredOnceFromTheOpenThatAskedForIt) {
  RendezvousTable table;
  table.Open(7, 0, "tok", {"a", "b"}, kT0);
  table.Open(8, 0, "tok", {"a", "b"});  // not timed (restored at start-up)
  TC_ASSERT_OK(table.Publish(7, 0, 0, "tok", kId));
  EXPECT_EQ(table.TakeTimeToPublish(7, 0, kT0 + absl::Milliseconds(250)),
            absl::Milliseconds(250));
  EXPECT_EQ(table.TakeTimeToPublish(7, 0, kT0 + absl::Seconds(1)), std::nullopt);
  EXPECT_EQ(table.TakeTimeToPublish(8, 0, kT0), std::nullopt);
  table.Open(9, 0, "tok", {"a"}, kT0);
  table.Close(9, 0, "cancelled");
  EXPECT_EQ(table.TakeTimeToPublish(9, 0, kT0), std::nullopt);
}

TEST(RendezvousTimingTest, CountFetch_DirectRelayedAndArrivalsOnly) {
  RendezvousTable table;
  RendezvousTable::FetchOptions direct;
  RendezvousTable::FetchOptions relayed;
  relayed.relayed_ranks = {1, 2, 3};
  RendezvousTable::FetchOptions arrivals = relayed;
  arrivals.arrivals_only = true;
  table.CountFetch(direct);
  table.CountFetch(relayed);
  table.CountFetch(arrivals);
  const RendezvousTable::FetchCounts c = table.fetch_counts();
  EXPECT_EQ(c.direct, 1);
  EXPECT_EQ(c.relayed, 1);
  EXPECT_EQ(c.ranks_relayed, 6);
}

}  // namespace
}  // namespace trainctl::coord
