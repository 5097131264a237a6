// FreeCapacityIndex on its own: best-fit GPU lookups per memory size, the
// per-count node buckets, held GPUs, the task limit, and re-indexing a node
// after it changed.

#include "coordinator/sched/free_capacity_index.h"

#include <optional>
#include <utility>
#include <vector>

#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::internal {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::trainctl::sched::testing::Experiment;
using ::trainctl::sched::testing::kGiB;
using ::trainctl::sched::testing::Node;

HeldGpus NoneHeld(const std::vector<NodeState>& nodes) {
  HeldGpus held;
  for (const NodeState& node : nodes)
    held.emplace_back(node.gpus.size(), false);
  return held;
}

TEST(FreeCapacityIndexTest, BestExperimentGpu_LeastRoomLeftAcrossMemorySizes) {
  // b's 40 GiB GPU has 30 GiB free; a's 80 GiB GPUs 80 and 25 GiB. A 20 GiB
  // experiment fits all three; a's GPU 1 leaves the least room (5 GiB).
  std::vector<NodeState> nodes = {Node("a", 2), Node("b", 1, 40 * kGiB)};
  nodes[0].gpus[1].reserved_bytes = 55 * kGiB;
  nodes[0].gpus[1].task_count = 1;
  nodes[1].gpus[0].reserved_bytes = 10 * kGiB;
  nodes[1].gpus[0].task_count = 1;
  const HeldGpus held = NoneHeld(nodes);
  FreeCapacityIndex index(/*max_tasks_per_gpu=*/8);
  index.Build(nodes, held);
  ASSERT_EQ(index.classes().size(), 2u);
  JobRequest job = Experiment(1, 1.0);
  job.gpu_memory_bytes = 20 * kGiB;
  std::optional<GpuRef> best = index.BestExperimentGpu(job, false, held);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->node, 0);
  EXPECT_EQ(best->gpu, 1);
  // 26 GiB no longer fits a's GPU 1: b's GPU (4 GiB left) beats a's GPU 0.
  job.gpu_memory_bytes = 26 * kGiB;
  best = index.BestExperimentGpu(job, false, held);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->node, 1);
  // Nothing has 90 GiB.
  job.gpu_memory_bytes = 90 * kGiB;
  EXPECT_FALSE(index.BestExperimentGpu(job, false, held).has_value());
}

TEST(FreeCapacityIndexTest, HeldAndTaskLimitedGpusAreNotOffered) {
  std::vector<NodeState> nodes = {Node("a", 2)};
  nodes[0].gpus[1].reserved_bytes = 10 * kGiB;
  nodes[0].gpus[1].task_count = 1;
  HeldGpus held = NoneHeld(nodes);
  held[0][0] = true;
  FreeCapacityIndex index(/*max_tasks_per_gpu=*/1);
  index.Build(nodes, held);
  const JobRequest job = Experiment(1, 0.25);
  // GPU 0 is held and GPU 1 runs its one allowed task.
  EXPECT_FALSE(index.BestExperimentGpu(job, /*honor_hold=*/true, held));
  std::optional<GpuRef> best =
      index.BestExperimentGpu(job, /*honor_hold=*/false, held);
  ASSERT_TRUE(best.has_value());
  EXPECT_EQ(best->gpu, 0);
  // Wait reasons still see GPU 1's free bytes.
  EXPECT_EQ(*index.classes()[0].free_all.rbegin(), 80 * kGiB);
  EXPECT_EQ(index.classes()[0].free_all.size(), 2u);
}

TEST(FreeCapacityIndexTest, NodeChanged_MovesTheNodeBetweenCountBuckets) {
  std::vector<NodeState> nodes = {Node("a", 4), Node("b", 4)};
  HeldGpus held = NoneHeld(nodes);
  FreeCapacityIndex index(8);
  index.Build(nodes, held);
  EXPECT_THAT(index.Buckets(false)[4], ElementsAre(Pair(0, 0), Pair(1, 1)));
  nodes[1].gpus[2].reserved_bytes = 80 * kGiB;
  nodes[1].gpus[2].task_count = 1;
  held[1][0] = true;
  index.NodeChanged(nodes, held, 1);
  EXPECT_EQ(index.FreeCount(1, /*honor_hold=*/false), 3);
  EXPECT_EQ(index.FreeCount(1, /*honor_hold=*/true), 2);
  EXPECT_THAT(index.Buckets(false)[4], ElementsAre(Pair(0, 0)));
  EXPECT_THAT(index.Buckets(false)[3], ElementsAre(Pair(1, 1)));
  EXPECT_THAT(index.Buckets(true)[2], ElementsAre(Pair(1, 1)));
  EXPECT_THAT(index.Buckets(true)[3], IsEmpty());
  // 4 GPUs on each of 2 nodes no longer fits; 3 + 3 on two does.
  EXPECT_FALSE(index.AnyLayoutFits({Layout{2, 4}}, false));
  EXPECT_TRUE(index.AnyLayoutFits({Layout{2, 4}, Layout{2, 3}}, false));
}

TEST(FreeCapacityIndexTest, UnschedulableNodesAreNeverIndexed) {
  std::vector<NodeState> nodes = {Node("a", 2), Node("lost", 8)};
  nodes[1].schedulable = false;
  const HeldGpus held = NoneHeld(nodes);
  FreeCapacityIndex index(8);
  index.Build(nodes, held);
  EXPECT_EQ(index.FreeCount(1, false), 0);
  EXPECT_FALSE(index.AnyLayoutFits({Layout{1, 8}}, false));
  EXPECT_THAT(index.Buckets(false)[2], ElementsAre(Pair(0, 0)));
}

}  // namespace
}  // namespace trainctl::sched::internal
