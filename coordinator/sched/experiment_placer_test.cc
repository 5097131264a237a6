// ExperimentPlacer: which GPU an experiment gets (best fit), what placing it
// reserves, and the sentence of an experiment that waits. Every case runs
// on the free-capacity index and on the linear scan, which must agree.

#include "coordinator/sched/experiment_placer.h"

#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::internal {
namespace {

using ::testing::ElementsAre;
using ::trainctl::sched::testing::Experiment;
using ::trainctl::sched::testing::GpuIndices;
using ::trainctl::sched::testing::kGiB;
using ::trainctl::sched::testing::Node;

constexpr bool kIndexedAndLinear[] = {true, false};

// One node "a" of two 80 GiB GPUs; GPU 1 already runs one task holding
// `used_bytes`.
ClusterSnapshot OnePartlyUsedGpu(int64_t used_bytes) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 2)};
  cluster.nodes[0].gpus[1].reserved_bytes = used_bytes;
  cluster.nodes[0].gpus[1].task_count = 1;
  return cluster;
}

TEST(ExperimentPlacerTest,
     Place_FillsThePartlyUsedGpuFirstAndReservesItsShare) {
  // 25% of 80 GiB is 20 GiB: GPU 1 (60 GiB used) has exactly that left, so
  // GPU 0 stays whole for a gang.
  const ClusterSnapshot cluster = OnePartlyUsedGpu(60 * kGiB);
  SchedulerConfig config;
  for (bool indexed : {true, false}) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    ExperimentPlacer experiments(state);
    Placement where;
    ASSERT_TRUE(experiments.Place(Experiment(1, 0.25), false, where));
    EXPECT_THAT(GpuIndices(where), ElementsAre(1));
    EXPECT_EQ(where.nodes[0].node, "a");
    EXPECT_EQ(where.reserved_bytes_per_gpu, 20 * kGiB);
    EXPECT_FALSE(where.whole_gpus);
    EXPECT_EQ(state.nodes()[0].gpus[1].reserved_bytes, 80 * kGiB);
    EXPECT_EQ(state.nodes()[0].gpus[1].task_count, 2);
    // The next one no longer fits GPU 1 and takes GPU 0.
    Placement next;
    ASSERT_TRUE(experiments.Place(Experiment(2, 0.25), false, next));
    EXPECT_THAT(GpuIndices(next), ElementsAre(0));
  }
}

TEST(ExperimentPlacerTest, Find_SkipsAHeldGpuOnlyWhenHonoringTheHold) {
  const ClusterSnapshot cluster = OnePartlyUsedGpu(60 * kGiB);
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    state.Hold(0, 1);
    ExperimentPlacer experiments(state);
    std::optional<GpuRef> held = experiments.Find(Experiment(1, 0.25), false);
    ASSERT_TRUE(held.has_value());
    EXPECT_EQ(held->gpu, 1);
    std::optional<GpuRef> free = experiments.Find(Experiment(1, 0.25), true);
    ASSERT_TRUE(free.has_value());
    EXPECT_EQ(free->gpu, 0);
  }
}

TEST(ExperimentPlacerTest, WaitReason_NamesTheShareAndTheMostFreeOnAnyGpu) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 1)};
  cluster.nodes[0].gpus[0].reserved_bytes = 70 * kGiB;
  cluster.nodes[0].gpus[0].task_count = 1;
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    ExperimentPlacer experiments(state);
    const JobRequest job = Experiment(1, 0.25);
    Placement where;
    EXPECT_FALSE(experiments.Place(job, false, where));
    const ExperimentFacts f = experiments.WaitFacts(job, false);
    EXPECT_FALSE(f.task_limited);
    EXPECT_EQ(f.max_free, 10 * kGiB);
    EXPECT_EQ(experiments.WaitReason(job, f),
              "waiting for 25% of one GPU free (20.0 GiB on the largest GPU) "
              "(now at most 10.0 GiB free on any GPU)");
  }
}

TEST(ExperimentPlacerTest, WaitReason_SaysWhenTheTaskLimitIsWhatBlocks) {
  // Room for 20 GiB, but the GPU already runs max_tasks_per_gpu (1) tasks.
  const ClusterSnapshot cluster = OnePartlyUsedGpu(10 * kGiB);
  ClusterSnapshot one_gpu;
  one_gpu.nodes = {cluster.nodes[0]};
  one_gpu.nodes[0].gpus.erase(one_gpu.nodes[0].gpus.begin());
  SchedulerConfig config;
  config.max_tasks_per_gpu = 1;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(one_gpu, config, indexed);
    ExperimentPlacer experiments(state);
    JobRequest job = Experiment(1, 1.0);
    job.gpu_memory_bytes = 30 * kGiB;
    EXPECT_FALSE(experiments.Find(job, false).has_value());
    const ExperimentFacts f = experiments.WaitFacts(job, false);
    EXPECT_TRUE(f.task_limited);
    EXPECT_EQ(experiments.WaitReason(job, f),
              "waiting for 30.0 GiB free on one GPU (now every GPU with that "
              "much free memory already runs 1 tasks, the limit)");
  }
}

TEST(ExperimentPlacerTest, WaitFacts_ReportsAJobThatFitsButForTheHold) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 1)};
  SchedulerConfig config;
  for (bool indexed : kIndexedAndLinear) {
    SCOPED_TRACE(absl::StrCat("indexed=", indexed));
    PassState state(cluster, config, indexed);
    state.Hold(0, 0);
    ExperimentPlacer experiments(state);
    EXPECT_TRUE(experiments.WaitFacts(Experiment(1, 0.5), /*hold_taken=*/true)
                    .blocked_by_hold);
  }
}

}  // namespace
}  // namespace trainctl::sched::internal
