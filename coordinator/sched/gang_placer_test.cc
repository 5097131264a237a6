// GangPlacer: where a gang goes (PACK best fit, SPREAD across nodes, one
// NVLink island), what placing it changes, and the sentence of a gang that
// waits. Every case runs on the free-capacity index and on the linear scan,
// which must agree.

#include "coordinator/sched/gang_placer.h"

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::SizeIs;
using ::trainctl::sched::testing::AddRunning;
using ::trainctl::sched::testing::Gang;
using ::trainctl::sched::testing::GangOn;
using ::trainctl::sched::testing::GpuIndices;
using ::trainctl::sched::testing::kGpuBytes;
using ::trainctl::sched::testing::Node;
using ::trainctl::sched::testing::NodeNames;

constexpr bool kIndexedAndLinear[] = {true, false};

TEST(GangPlacerTest, Spread_PutsRanksOnDifferentNodes_PackKeepsThemOnOne) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4), Node("b", 4)};
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    GangPlacer gangs(state);
    JobRequest spread = Gang(1, 4);
    spread.placement = GangPlacement::kSpread;
    Placement where;
    ASSERT_TRUE(gangs.Place(spread, /*honor_hold=*/false, where));
    EXPECT_THAT(NodeNames(where), ElementsAre("a", "b"));
    EXPECT_THAT(GpuIndices(where), ElementsAre(0, 1, 0, 1));

    PassState fresh(cluster, config, indexed);
    GangPlacer packer(fresh);
    Placement packed;
    ASSERT_TRUE(packer.Place(Gang(2, 4), /*honor_hold=*/false, packed));
    EXPECT_THAT(NodeNames(packed), ElementsAre("a"));
    EXPECT_THAT(GpuIndices(packed), ElementsAre(0, 1, 2, 3));
  }
}

TEST(GangPlacerTest, Pack_TakesTheNodeWithFewestFreeGpusThatFit) {
  // a: 4 free; b: 2 free (2 running). A gang of 2 fills b, keeping a whole.
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4), Node("b", 4)};
  AddRunning(cluster, 1, {0, 1}, 100);
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    GangPlacer gangs(state);
    std::optional<GangPlan> plan = gangs.Find(Gang(1, 2), false);
    ASSERT_TRUE(plan.has_value());
    ASSERT_THAT(plan->nodes, SizeIs(1));
    EXPECT_EQ(plan->nodes[0].first, 1);
    EXPECT_THAT(plan->nodes[0].second, ElementsAre(2, 3));
  }
}

TEST(GangPlacerTest, Place_PicksTheNvlinkIslandThatHasEnoughFreeGpus) {
  // Islands {0,1} and {2,3}; GPU 0 is busy. Lowest indexes would be 1 and
  // 2, across islands; the gang gets 2 and 3 instead.
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4)};
  for (int g = 0; g < 4; ++g) {
    cluster.nodes[0].gpus[g].nvlink_peers = {g ^ 1};
  }
  AddRunning(cluster, 0, {0}, 100);
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    GangPlacer gangs(state);
    Placement where;
    ASSERT_TRUE(gangs.Place(Gang(1, 2), false, where));
    EXPECT_THAT(GpuIndices(where), ElementsAre(2, 3));
  }
}

TEST(GangPlacerTest, Place_TakesTheGpusWholeSoTheNextGangGoesElsewhere) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 2), Node("b", 2)};
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    GangPlacer gangs(state);
    Placement first;
    ASSERT_TRUE(gangs.Place(Gang(1, 2), false, first));
    EXPECT_TRUE(first.whole_gpus);
    EXPECT_EQ(first.reserved_bytes_per_gpu, kGpuBytes);
    EXPECT_EQ(state.nodes()[0].gpus[0].reserved_bytes, kGpuBytes);
    EXPECT_EQ(state.GangFreeCount(0, false), 0);
    Placement second;
    ASSERT_TRUE(gangs.Place(Gang(2, 2), false, second));
    EXPECT_THAT(NodeNames(second), ElementsAre("b"));
    Placement third;
    EXPECT_FALSE(gangs.Place(Gang(3, 1), false, third));
    EXPECT_TRUE(third.nodes.empty());
  }
}

TEST(GangPlacerTest, HeldGpusAreSkippedOnlyWhenHonoringTheHold) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4)};
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    state.HoldNode(0);
    GangPlacer gangs(state);
    EXPECT_FALSE(gangs.Fits(Gang(1, 1), /*honor_hold=*/true));
    EXPECT_TRUE(gangs.Fits(Gang(1, 1), /*honor_hold=*/false));
  }
}

TEST(GangPlacerTest, WaitReason_SaysWhatTheGangNeedsAndTheMostAnyNodeHas) {
  // a: 2 of 4 free, b: 1 of 4 free; the gang wants 4 on one node.
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4), Node("b", 4)};
  AddRunning(cluster, 0, {0, 1}, 100);
  AddRunning(cluster, 1, {0, 1, 2}, 101);
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    GangPlacer gangs(state);
    const JobRequest job = GangOn(1, 1, 4);
    const GangFacts f = gangs.WaitFacts(job, /*hold_taken=*/false);
    EXPECT_FALSE(f.blocked_by_hold);
    EXPECT_EQ(f.max_free, 2);
    EXPECT_EQ(f.big_enough, 0);
    EXPECT_EQ(gangs.WaitReason(job, f),
              "waiting for 4 free GPUs on one node (now at most 2 free GPUs "
              "on any node)");
  }
}

TEST(GangPlacerTest, PossibleLayouts_LeavesOutLayoutsNoNodeCouldHold) {
  // 6 GPUs as 1x6, 2x3, 3x2, 6x1 (at most 3 nodes here); no node has 6.
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4), Node("b", 4), Node("c", 4)};
  SchedulerConfig config;
  PassState state(cluster, config, true);
  GangPlacer gangs(state);
  const Layouts layouts = gangs.PossibleLayouts(Gang(1, 6));
  ASSERT_THAT(layouts, SizeIs(2));
  EXPECT_EQ(layouts[0].nodes, 2);
  EXPECT_EQ(layouts[0].per_node, 3);
  EXPECT_EQ(layouts[1].nodes, 3);
  EXPECT_EQ(layouts[1].per_node, 2);
}

}  // namespace
}  // namespace trainctl::sched::internal
