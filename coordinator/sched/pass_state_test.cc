// PassState: the pass's working copy of the cluster. Freeing and re-taking a
// running job's GPUs, the hold's marks, usage of a placement, and the index
// kept equal to the linear counts through every change.

#include "coordinator/sched/pass_state.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using ::trainctl::sched::testing::AddRunning;
using ::trainctl::sched::testing::kGiB;
using ::trainctl::sched::testing::kGpuBytes;
using ::trainctl::sched::testing::Node;

TEST(PassStateTest, ApplyRunning_FreesAndRetakesARunningJobsGpus) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4), Node("b", 4)};
  AddRunning(cluster, 1, {1, 3}, 100);
  SchedulerConfig config;
  for (bool indexed : {true, false}) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    EXPECT_THAT(state.RunningGpus(0), ElementsAre(Pair(1, ElementsAre(1, 3))));
    EXPECT_EQ(state.GangFreeCount(1, false), 2);
    const int64_t capacity = state.capacity_version();
    state.ApplyRunning(0, -1);
    EXPECT_EQ(state.GangFreeCount(1, false), 4);
    EXPECT_EQ(state.nodes()[1].gpus[1].reserved_bytes, 0);
    EXPECT_EQ(state.nodes()[1].gpus[1].task_count, 0);
    // Freeing adds capacity: fit caches keyed on the version go stale.
    EXPECT_GT(state.capacity_version(), capacity);
    state.ApplyRunning(0, +1);
    EXPECT_EQ(state.GangFreeCount(1, false), 2);
    EXPECT_EQ(state.nodes()[1].gpus[3].reserved_bytes, kGpuBytes);
    // The snapshot itself is never changed.
    EXPECT_EQ(cluster.nodes[1].gpus[1].task_count, 1);
  }
}

TEST(PassStateTest, Hold_KeepsGpusFromAGangThatHonorsIt) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4)};
  SchedulerConfig config;
  for (bool indexed : {true, false}) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    const int64_t version = state.state_version();
    state.Hold(0, 2);
    EXPECT_TRUE(state.IsHeld(0, 2));
    EXPECT_FALSE(state.IsHeld(0, 1));
    EXPECT_GT(state.state_version(), version);
    EXPECT_EQ(state.GangFreeCount(0, /*honor_hold=*/true), 3);
    EXPECT_EQ(state.GangFreeCount(0, /*honor_hold=*/false), 4);
    state.HoldNode(0);
    EXPECT_EQ(state.GangFreeCount(0, /*honor_hold=*/true), 0);
  }
}

TEST(PassStateTest, UsageOf_CountsASharedGpuByItsShareOfMemory) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 2)};
  SchedulerConfig config;
  PassState state(cluster, config, true);
  Placement quarter;
  quarter.nodes.push_back({"a", {0}});
  quarter.reserved_bytes_per_gpu = 20 * kGiB;
  const Usage u = state.UsageOf(quarter);
  EXPECT_DOUBLE_EQ(u.gpus, 0.25);
  EXPECT_DOUBLE_EQ(u.bytes, 20.0 * kGiB);
  Placement whole;
  whole.nodes.push_back({"a", {0, 1}});
  whole.reserved_bytes_per_gpu = kGpuBytes;
  whole.whole_gpus = true;
  EXPECT_DOUBLE_EQ(state.UsageOf(whole).gpus, 2);
  EXPECT_DOUBLE_EQ(state.total_gpus(), 2);
}

TEST(PassStateTest, LostNodesCountForNothingButTheShape) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4), Node("lost", 8)};
  cluster.nodes[1].schedulable = false;
  SchedulerConfig config;
  for (bool indexed : {true, false}) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    EXPECT_EQ(state.GangFreeCount(1, false), 0);
    EXPECT_DOUBLE_EQ(state.total_gpus(), 4);
    EXPECT_EQ(state.shape().max_gpus_on_node, 8);
    EXPECT_EQ(state.NodeIndex("lost"), std::optional<int>(1));
    EXPECT_EQ(state.NodeIndex("gone"), std::nullopt);
  }
}

}  // namespace
}  // namespace trainctl::sched::internal
