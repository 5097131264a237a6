// Preemption: which running jobs a blocked job may stop (preemptible, ranked
// below it), how few it stops, what stopping them changes in the pass, and
// the bookkeeping behind "waits for the job it was preempted for".

#include "coordinator/sched/preemption.h"

#include <cstdint>
#include <optional>
#include <vector>

#include "coordinator/sched/gang_placer.h"
#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/queue_ranking.h"
#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::internal {
namespace {

using ::testing::ElementsAre;
using ::trainctl::sched::testing::AddRunning;
using ::trainctl::sched::testing::Gang;
using ::trainctl::sched::testing::Node;

// The phases Preemption works with, over one snapshot, with the running
// jobs' usage counted as the pass counts it.
struct Pass {
  Pass(const ClusterSnapshot& cluster, const SchedulerConfig& config,
       const std::vector<JobRequest>& queue)
      : state(cluster, config, /*indexed=*/true),
        ranking(config.policy, state.total_gpus(), state.total_bytes(),
                state.shape().max_gpu_memory_bytes),
        gangs(state),
        preemption(state, ranking, queue) {
    for (const RunningJob& r : cluster.running) {
      ranking.AddUsage(QueueName(r.queue), r.user, r.project,
                       state.UsageOf(r.placement), +1);
    }
  }
  // TryPreempt for `job`, fitting as GangPlacer says.
  std::optional<std::vector<int64_t>> TryPreempt(const JobRequest& job) {
    return preemption.TryPreempt(job, /*honor_hold=*/false,
                                 [&] { return gangs.Fits(job, false); });
  }

  PassState state;
  QueueRanking ranking;
  GangPlacer gangs;
  Preemption preemption;
};

TEST(PreemptionTest, TryPreempt_StopsTheLowestRankedJobAndFreesItsGpus) {
  // a: job 100 (priority 0) on GPUs 0-1, job 101 (priority -1) on 2-3, both
  // preemptible. A priority-1 gang of 2 needs one of them gone: 101.
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4)};
  AddRunning(cluster, 0, {0, 1}, 100).preemptible = true;
  RunningJob& low = AddRunning(cluster, 0, {2, 3}, 101);
  low.preemptible = true;
  low.priority = -1;
  SchedulerConfig config;
  JobRequest head = Gang(1, 2);
  head.priority = 1;
  const std::vector<JobRequest> queue = {head};
  Pass pass(cluster, config, queue);
  const double share_before = pass.ranking.DominantShare("default");

  std::optional<std::vector<int64_t>> victims = pass.TryPreempt(head);
  ASSERT_TRUE(victims.has_value());
  EXPECT_THAT(*victims, ElementsAre(101));
  EXPECT_THAT(pass.preemption.last_victims(), ElementsAre(1));
  EXPECT_TRUE(pass.state.evicted(1));
  EXPECT_FALSE(pass.state.evicted(0));
  EXPECT_EQ(pass.state.GangFreeCount(0, false), 2);
  EXPECT_DOUBLE_EQ(pass.ranking.DominantShare("default"), share_before / 2);
}

TEST(PreemptionTest, TryPreempt_SparesVictimsItTurnsOutNotToNeed) {
  // Lowest rank first: 100 (priority -2, 1 GPU), then 102 (priority -1,
  // submitted last, 2 GPUs). Stopping both frees 3; 102 alone frees the 2
  // the gang needs, so 100 keeps running.
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4)};
  RunningJob& r100 = AddRunning(cluster, 0, {0}, 100);
  r100.preemptible = true;
  r100.priority = -2;
  RunningJob& r101 = AddRunning(cluster, 0, {1}, 101);
  r101.preemptible = true;
  r101.priority = -1;
  RunningJob& r102 = AddRunning(cluster, 0, {2, 3}, 102);
  r102.preemptible = true;
  r102.priority = -1;
  SchedulerConfig config;
  const JobRequest head = Gang(1, 2);
  const std::vector<JobRequest> queue = {head};
  Pass pass(cluster, config, queue);
  std::optional<std::vector<int64_t>> victims = pass.TryPreempt(head);
  ASSERT_TRUE(victims.has_value());
  EXPECT_THAT(*victims, ElementsAre(102));
  EXPECT_FALSE(pass.state.evicted(0));
  EXPECT_EQ(pass.state.nodes()[0].gpus[0].task_count, 1);
}

TEST(PreemptionTest, TryPreempt_NeverStopsANonPreemptibleOrEqualRankedJob) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 2)};
  AddRunning(cluster, 0, {0}, 100).priority = -1;       // Not preemptible.
  AddRunning(cluster, 0, {1}, 101).preemptible = true;  // Same rank.
  SchedulerConfig config;
  const JobRequest head = Gang(1, 1);
  const std::vector<JobRequest> queue = {head};
  Pass pass(cluster, config, queue);
  EXPECT_FALSE(pass.preemption.MayPreempt(head, cluster.running[0]));
  EXPECT_FALSE(pass.preemption.MayPreempt(head, cluster.running[1]));
  EXPECT_FALSE(pass.preemption.AnyMayBePreempted(head));
  EXPECT_EQ(pass.TryPreempt(head), std::nullopt);
  EXPECT_EQ(pass.state.GangFreeCount(0, false), 0);
}

TEST(PreemptionTest, AFailedSearchCountsAgainstMaxPreemptionSearches) {
  // 8 GPUs cannot come out of a 2-GPU node: the search fails, and with a
  // budget of one search the next job does not search at all.
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 2), Node("b", 8)};
  AddRunning(cluster, 0, {0, 1}, 100).preemptible = true;
  AddRunning(cluster, 1, {0, 1, 2, 3, 4, 5, 6, 7}, 101);
  SchedulerConfig config;
  config.policy.max_preemption_searches = 1;
  JobRequest big = Gang(1, 8);
  big.nodes = 1;
  big.gpus_per_node = 8;
  big.priority = 1;
  JobRequest small = Gang(2, 2);
  small.priority = 1;
  const std::vector<JobRequest> queue = {big, small};
  Pass pass(cluster, config, queue);
  EXPECT_TRUE(pass.preemption.SearchesLeft());
  EXPECT_EQ(pass.TryPreempt(big), std::nullopt);
  EXPECT_FALSE(pass.preemption.SearchesLeft());
  EXPECT_EQ(pass.TryPreempt(small), std::nullopt);
  EXPECT_FALSE(pass.state.evicted(0));
}

TEST(PreemptionTest, WaitsForPreemptor_UntilThePreemptorIsPlaced) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 1)};
  SchedulerConfig config;
  const std::vector<JobRequest> queue = {Gang(1, 1), Gang(2, 1)};
  Pass pass(cluster, config, queue);
  EXPECT_TRUE(pass.preemption.WaitsForPreemptor(1));
  EXPECT_FALSE(pass.preemption.WaitsForPreemptor(99));  // Not queued.
  pass.preemption.MarkPlaced(1);
  EXPECT_FALSE(pass.preemption.WaitsForPreemptor(1));
  EXPECT_TRUE(pass.preemption.WaitsForPreemptor(2));
}

}  // namespace
}  // namespace trainctl::sched::internal
