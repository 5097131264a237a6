// QueueRanking: the order jobs are decided in (priority, LAS level, submit
// order), queues' dominant shares, and the quota and group counts a user
// sees in a waiting job's reason.

#include "coordinator/sched/queue_ranking.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::internal {
namespace {

using ::trainctl::sched::testing::Experiment;
using ::trainctl::sched::testing::Gang;
using ::trainctl::sched::testing::kGiB;

// A cluster of 8 GPUs of 80 GiB for the shares' denominators.
constexpr double kTotalGpus = 8;
constexpr double kTotalBytes = 8 * 80.0 * (1 << 30);
constexpr int64_t kLargestGpu = 80 * kGiB;

TEST(QueueRankingTest, QuotaReason_GivesTheUsersArithmetic) {
  PolicyConfig policy;
  policy.user_gpu_quota = {{"alice", 4}};
  QueueRanking ranking(policy, kTotalGpus, kTotalBytes, kLargestGpu);
  ranking.AddUsage("default", "alice", "", Usage{3, 3 * 80.0 * (1 << 30)}, +1);
  JobRequest two = Gang(1, 2);
  two.user = "alice";
  EXPECT_EQ(ranking.QuotaReason(two),
            "user alice: quota 4 GPUs, 3 GPUs in use, this job needs 2 GPUs");
  JobRequest one = Gang(2, 1);
  one.user = "alice";
  EXPECT_EQ(ranking.QuotaReason(one), std::nullopt);
  JobRequest bob = Gang(3, 8);
  bob.user = "bob";  // No quota for bob, and no "*".
  EXPECT_EQ(ranking.QuotaReason(bob), std::nullopt);
}

TEST(QueueRankingTest, QuotaReason_ProjectFallbackQuotaCountsGpuShares) {
  PolicyConfig policy;
  policy.project_gpu_quota = {{"*", 1}};
  QueueRanking ranking(policy, kTotalGpus, kTotalBytes, kLargestGpu);
  ranking.AddUsage("default", "", "vision", Usage{0.75, 60.0 * (1 << 30)}, +1);
  JobRequest half = Experiment(1, 0.5);
  half.project = "vision";
  EXPECT_EQ(ranking.QuotaReason(half),
            "project vision: quota 1 GPU, 0.75 GPU in use, this job needs "
            "0.5 GPU");
  // Taking the usage off again makes room.
  ranking.AddUsage("default", "", "vision", Usage{0.75, 60.0 * (1 << 30)}, -1);
  EXPECT_EQ(ranking.QuotaReason(half), std::nullopt);
}

TEST(QueueRankingTest, OrderKey_PriorityThenLasLevelThenSubmitOrder) {
  PolicyConfig policy;
  policy.order = QueueOrder::kLas;
  policy.las_thresholds_gpu_s = {3600};
  QueueRanking ranking(policy, kTotalGpus, kTotalBytes, kLargestGpu);
  JobRequest fresh = Gang(5, 1);
  JobRequest served = Gang(1, 1);
  served.attained_gpu_s = 7200;  // Level 1: behind fresh despite its seq.
  JobRequest urgent = Gang(9, 1);
  urgent.priority = 1;
  urgent.attained_gpu_s = 7200;
  EXPECT_EQ(ranking.OrderKey(fresh), std::make_tuple(0, 0, int64_t{5}));
  EXPECT_EQ(ranking.OrderKey(served), std::make_tuple(0, 1, int64_t{1}));
  EXPECT_EQ(ranking.OrderKey(urgent), std::make_tuple(-1, 1, int64_t{9}));
  EXPECT_LT(ranking.OrderKey(urgent), ranking.OrderKey(fresh));
  EXPECT_LT(ranking.OrderKey(fresh), ranking.OrderKey(served));

  policy.order = QueueOrder::kFifo;  // No levels: submit order.
  EXPECT_LT(ranking.OrderKey(served), ranking.OrderKey(fresh));
}

TEST(QueueRankingTest, DominantShare_IsTheLargerOfGpuAndByteShares) {
  PolicyConfig policy;
  QueueRanking ranking(policy, kTotalGpus, kTotalBytes, kLargestGpu);
  EXPECT_EQ(ranking.DominantShare("idle"), 0);
  const int64_t before = ranking.usage_version();
  // 2 of 8 GPUs, little memory: GPU share 0.25 dominates.
  ranking.AddUsage("gpus", "", "", Usage{2, 40.0 * (1 << 30)}, +1);
  // Half a GPU but half the cluster's bytes: byte share 0.5 dominates.
  ranking.AddUsage("bytes", "", "", Usage{0.5, kTotalBytes / 2}, +1);
  EXPECT_DOUBLE_EQ(ranking.DominantShare("gpus"), 0.25);
  EXPECT_DOUBLE_EQ(ranking.DominantShare("bytes"), 0.5);
  EXPECT_EQ(ranking.usage_version(), before + 2);
}

TEST(QueueRankingTest, OrderEntries_SortsByKeyKeepingSubmitOrderInAClass) {
  std::vector<QueueEntry> jobs(5);
  // (neg_priority, level, seq, position): a requeued job (seq 1) arrives
  // last, a high-priority job in the middle.
  jobs[0].key = {0, 0, 2, 0};
  jobs[1].key = {0, 0, 3, 1};
  jobs[2].key = {-1, 0, 4, 2};
  jobs[3].key = {0, 0, 5, 3};
  jobs[4].key = {0, 0, 1, 4};
  for (size_t i = 0; i < jobs.size(); ++i) jobs[i].job_id = 100 + i;
  QueueRanking::OrderEntries(jobs);
  std::vector<int64_t> ids;
  for (const QueueEntry& e : jobs) ids.push_back(e.job_id);
  EXPECT_THAT(ids, ::testing::ElementsAre(102, 104, 100, 101, 103));
}

TEST(QueueRankingTest, GroupRunning_CountsTheGroupsJobs) {
  PolicyConfig policy;
  QueueRanking ranking(policy, kTotalGpus, kTotalBytes, kLargestGpu);
  EXPECT_EQ(ranking.GroupRunning("array:7"), 0);
  ranking.AddGroupRunning("array:7");
  ranking.AddGroupRunning("array:7");
  EXPECT_EQ(ranking.GroupRunning("array:7"), 2);
  EXPECT_EQ(ranking.GroupRunning("array:8"), 0);
}

}  // namespace
}  // namespace trainctl::sched::internal
