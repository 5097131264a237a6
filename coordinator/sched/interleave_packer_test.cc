// InterleavePacker: when a waiting gang shares the GPUs of running jobs
// (their profiles interleave, the GPU count matches, no GPU is held), what
// the decision says, and when packing stays off. Profiles are the Muri
// traces' 4-GPU rows (interleave_test.cc checks their arithmetic): gpt2 and
// shufflenet interleave, resnet18 and bert do not.

#include "coordinator/sched/interleave_packer.h"

#include <vector>

#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::internal {
namespace {

using ::testing::ElementsAre;
using ::trainctl::sched::testing::AddRunning;
using ::trainctl::sched::testing::Gang;
using ::trainctl::sched::testing::GpuIndices;
using ::trainctl::sched::testing::Node;

InterleaveProfile Gpt2() { return {{0.6, 413, 20}, 433 * 1.015}; }
InterleaveProfile Shufflenet() { return {{703, 62, 17}, 886 * 1.015}; }
InterleaveProfile Resnet18() { return {{723, 113, 73}, 921 * 1.015}; }
InterleaveProfile Bert() { return {{0.5, 163, 18}, 190 * 1.015}; }

// Node "a" of 4 GPUs, all held by running gang 100 with `profile`.
ClusterSnapshot FullNodeRunning(InterleaveProfile profile, int gpus = 4) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4)};
  std::vector<int> indices;
  for (int g = 0; g < gpus; ++g) indices.push_back(g);
  AddRunning(cluster, 0, indices, 100).interleave = std::move(profile);
  return cluster;
}

JobRequest GangWith(int64_t id, int gpus, InterleaveProfile profile) {
  JobRequest job = Gang(id, gpus);
  job.interleave = std::move(profile);
  return job;
}

TEST(InterleavePackerTest, TryPack_SharesTheGpusOfAJobItInterleavesWith) {
  const ClusterSnapshot cluster = FullNodeRunning(Gpt2());
  SchedulerConfig config;
  const std::vector<JobRequest> queue = {GangWith(1, 4, Shufflenet())};
  PassState state(cluster, config, true);
  InterleavePacker packer(state);
  packer.Init(queue);
  ASSERT_TRUE(packer.active());
  Decision decision;
  ASSERT_TRUE(packer.TryPack(queue[0], /*hold_taken=*/false, decision));
  EXPECT_EQ(decision.outcome, Outcome::kPlaced);
  EXPECT_THAT(decision.packed_with, ElementsAre(100));
  EXPECT_THAT(GpuIndices(decision.placement), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(decision.reason,
            "interleaved with job 100 on their GPUs (multi-resource packing)");
  EXPECT_EQ(state.nodes()[0].gpus[0].task_count, 2);
}

TEST(InterleavePackerTest, TryPack_RefusesProfilesThatDoNotInterleave) {
  const ClusterSnapshot cluster = FullNodeRunning(Resnet18());
  SchedulerConfig config;
  const std::vector<JobRequest> queue = {GangWith(1, 4, Bert())};
  PassState state(cluster, config, true);
  InterleavePacker packer(state);
  packer.Init(queue);
  Decision decision;
  EXPECT_FALSE(packer.TryPack(queue[0], false, decision));
  EXPECT_TRUE(decision.packed_with.empty());
  EXPECT_EQ(state.nodes()[0].gpus[0].task_count, 1);
}

TEST(InterleavePackerTest, TryPack_NeedsTheGroupsGpuCountAndNoHeldGpu) {
  SchedulerConfig config;
  {
    // The running gang has 2 GPUs; the waiting one wants 4.
    const ClusterSnapshot cluster = FullNodeRunning(Gpt2(), /*gpus=*/2);
    const std::vector<JobRequest> queue = {GangWith(1, 4, Shufflenet())};
    PassState state(cluster, config, true);
    InterleavePacker packer(state);
    packer.Init(queue);
    Decision decision;
    EXPECT_FALSE(packer.TryPack(queue[0], false, decision));
  }
  const ClusterSnapshot cluster = FullNodeRunning(Gpt2());
  const std::vector<JobRequest> queue = {GangWith(1, 4, Shufflenet())};
  PassState state(cluster, config, true);
  state.Hold(0, 3);
  InterleavePacker packer(state);
  packer.Init(queue);
  Decision decision;
  EXPECT_FALSE(packer.TryPack(queue[0], /*hold_taken=*/true, decision));
}

TEST(InterleavePackerTest, StaysOffWithoutAProfiledGangOrWhenDisabled) {
  const ClusterSnapshot cluster = FullNodeRunning(Gpt2());
  SchedulerConfig config;
  {
    const std::vector<JobRequest> queue = {Gang(1, 4)};  // No profile.
    PassState state(cluster, config, true);
    InterleavePacker packer(state);
    packer.Init(queue);
    EXPECT_FALSE(packer.active());
    Decision decision;
    EXPECT_FALSE(packer.TryPack(queue[0], false, decision));
  }
  config.policy.interleave.enabled = false;
  const std::vector<JobRequest> queue = {GangWith(1, 4, Shufflenet())};
  PassState state(cluster, config, true);
  InterleavePacker packer(state);
  packer.Init(queue);
  EXPECT_FALSE(packer.active());
}

}  // namespace
}  // namespace trainctl::sched::internal
