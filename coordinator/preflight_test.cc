#include "coordinator/preflight.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

v1::PreflightRank Ok(int rank, const std::string& node, double busbw,
                     double ready_ms = 100) {
  v1::PreflightRank r;
  r.set_rank(rank);
  r.set_node(node);
  r.set_status(v1::PREFLIGHT_RANK_STATUS_OK);
  r.set_busbw_gbps(busbw);
  r.set_comm_ready_ms(ready_ms);
  return r;
}

v1::PreflightRank With(v1::PreflightRank r, v1::PreflightRankStatus status,
                       const std::string& detail = "") {
  r.set_status(status);
  r.set_detail(detail);
  return r;
}

TEST(EvaluatePreflight, AllRanksEqual_Passes) {
  // Two nodes, 40 GB/s each: every rank's peers' median is 40, floor 20.
  PreflightDecision d = EvaluatePreflight(
      {Ok(0, "a", 40, 120), Ok(1, "b", 40, 150)}, /*single_node=*/false, {});
  EXPECT_TRUE(d.passed);
  EXPECT_TRUE(d.excluded.empty());
  ASSERT_EQ(d.links.size(), 1u);
  EXPECT_EQ(d.links[0].link_class(), v1::LINK_CLASS_NETWORK);
  EXPECT_DOUBLE_EQ(d.links[0].median_busbw_gbps(), 40);
  EXPECT_DOUBLE_EQ(d.comm_ready_max_ms, 150);
  EXPECT_THAT(d.reason, HasSubstr("passed: 2 ranks on 2 nodes"));
}

TEST(EvaluatePreflight, OneSlowNode_IsExcluded) {
  // Network busbw 100, 100, 30. Rank 2's peers' median is 100, floor 50:
  // 30 < 50, slow. Rank 0's peers are {100, 30}, median 65, floor 32.5:
  // 100 passes (and so does rank 1).
  PreflightDecision d = EvaluatePreflight(
      {Ok(0, "a", 100), Ok(1, "b", 100), Ok(2, "c", 30)}, false, {});
  EXPECT_FALSE(d.passed);
  ASSERT_EQ(d.excluded.size(), 1u);
  EXPECT_EQ(d.excluded[0].first, "c");
  EXPECT_THAT(d.excluded[0].second, HasSubstr("rank 2 is slow"));
  EXPECT_THAT(d.excluded[0].second, HasSubstr("30.00 GB/s < 50% of its peers' median 100.00"));
  EXPECT_TRUE(d.ranks[2].blamed());
  EXPECT_FALSE(d.ranks[0].blamed());
}

TEST(EvaluatePreflight, JustAtTheFloor_Passes) {
  // 50 vs peers' median 100: exactly 50 %, not below it.
  EXPECT_TRUE(EvaluatePreflight({Ok(0, "a", 100), Ok(1, "b", 50)}, false, {}).passed);
}

TEST(EvaluatePreflight, SlowIntraNodeFigure_ComparedWithinItsClass) {
  // 2 nodes x 2 ranks. Network figures all 20 (fine); intra-node (NVLink)
  // 300, 300 on a, 90, 90 on b. Rank 2's intra peers {300, 300, 90}: median
  // 300, floor 150 > 90, slow; so is rank 3. Node b goes, once.
  std::vector<v1::PreflightRank> ranks = {Ok(0, "a", 20), Ok(1, "a", 20),
                                          Ok(2, "b", 20), Ok(3, "b", 20)};
  ranks[0].set_intra_node_busbw_gbps(300);
  ranks[1].set_intra_node_busbw_gbps(300);
  ranks[2].set_intra_node_busbw_gbps(90);
  ranks[3].set_intra_node_busbw_gbps(90);
  PreflightDecision d = EvaluatePreflight(ranks, false, {});
  EXPECT_FALSE(d.passed);
  ASSERT_EQ(d.excluded.size(), 1u);
  EXPECT_EQ(d.excluded[0].first, "b");
  EXPECT_THAT(d.excluded[0].second, HasSubstr("intra-node busbw 90.00"));
  ASSERT_EQ(d.links.size(), 2u);  // intra-node and network
}

TEST(EvaluatePreflight, SingleNodeGang_IsIntraNodeClass) {
  PreflightDecision d = EvaluatePreflight({Ok(0, "a", 200), Ok(1, "a", 200)},
                                          /*single_node=*/true, {});
  EXPECT_TRUE(d.passed);
  ASSERT_EQ(d.links.size(), 1u);
  EXPECT_EQ(d.links[0].link_class(), v1::LINK_CLASS_INTRA_NODE);
}

TEST(EvaluatePreflight, ErrorBlamesItsNode_VictimsNot) {
  // Rank 1 on b errored; rank 0 timed out waiting for it; rank 2 was
  // stopped. Only b goes.
  PreflightDecision d = EvaluatePreflight(
      {With(Ok(0, "a", 0, 0), v1::PREFLIGHT_RANK_STATUS_TIMED_OUT),
       With(Ok(1, "b", 0), v1::PREFLIGHT_RANK_STATUS_ERROR, "NCCL error"),
       With(Ok(2, "c", 0), v1::PREFLIGHT_RANK_STATUS_STOPPED)},
      false, {});
  EXPECT_FALSE(d.passed);
  EXPECT_THAT(d.excluded, ElementsAre(Pair("b", HasSubstr("errored: NCCL error"))));
}

TEST(EvaluatePreflight, MissingAtDeadline_IsBlamed) {
  // A rank still RUNNING when judged (the deadline passed) counts as MISSING.
  PreflightDecision d = EvaluatePreflight(
      {Ok(0, "a", 10), With(Ok(1, "b", 0), v1::PREFLIGHT_RANK_STATUS_RUNNING)},
      false, {});
  EXPECT_FALSE(d.passed);
  EXPECT_THAT(d.excluded, ElementsAre(Pair("b", HasSubstr("did not finish"))));
  EXPECT_EQ(d.ranks[1].status(), v1::PREFLIGHT_RANK_STATUS_MISSING);
}

TEST(EvaluatePreflight, OnlyTimeouts_BlameRanksThatNeverGotACommunicator) {
  // a and b reached comm-ready (then timed out in the all-reduce); c never
  // did: c is the one the others waited for.
  PreflightDecision d = EvaluatePreflight(
      {With(Ok(0, "a", 0, 80), v1::PREFLIGHT_RANK_STATUS_TIMED_OUT),
       With(Ok(1, "b", 0, 90), v1::PREFLIGHT_RANK_STATUS_TIMED_OUT),
       With(Ok(2, "c", 0, 0), v1::PREFLIGHT_RANK_STATUS_TIMED_OUT)},
      false, {});
  EXPECT_THAT(d.excluded, ElementsAre(Pair("c", HasSubstr("before its communicator"))));
}

TEST(EvaluatePreflight, OnlyTimeoutsAllReady_BlamesAll) {
  PreflightDecision d = EvaluatePreflight(
      {With(Ok(0, "a", 0, 80), v1::PREFLIGHT_RANK_STATUS_TIMED_OUT),
       With(Ok(1, "b", 0, 90), v1::PREFLIGHT_RANK_STATUS_TIMED_OUT)},
      false, {});
  EXPECT_EQ(d.excluded.size(), 2u);
}

TEST(EvaluatePreflight, RatioZero_TurnsBandwidthRuleOff) {
  PreflightPolicy off;
  off.min_busbw_ratio = 0;
  EXPECT_TRUE(EvaluatePreflight({Ok(0, "a", 100), Ok(1, "b", 1)}, false, off).passed);
}

TEST(Median, OddEvenEmpty) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 2, 3}), 2.5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
}

}  // namespace
}  // namespace trainctl::coord
