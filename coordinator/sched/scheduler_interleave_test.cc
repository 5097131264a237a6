// Interleave packing in sched::Scheduler (PolicyConfig.interleave): which
// waiting gang may share the GPUs of running gangs, and how packed groups
// live with reservation and preemption. Profiles are the Muri traces' 4-GPU
// rows (ms per iteration on resources 0..2; interleave_test.cc checks their
// arithmetic): gpt2 + shufflenet interleave (1024.7 ms together vs 1338.8
// apart), resnet18 + bert do not (1191.1 vs 1127.7).

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/testing/decision_of.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched {
namespace {

using ::testing::ElementsAre;
using ::trainctl::sched::testing::Of;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kGpuBytes = int64_t{80} << 30;

InterleaveProfile Gpt2() { return {{0.6, 413, 20}, 433 * 1.015}; }
InterleaveProfile Shufflenet() { return {{703, 62, 17}, 886 * 1.015}; }
InterleaveProfile Resnet18() { return {{723, 113, 73}, 921 * 1.015}; }
InterleaveProfile Bert() { return {{0.5, 163, 18}, 190 * 1.015}; }

NodeState Node(std::string name, int count) {
  NodeState node;
  node.name = std::move(name);
  for (int i = 0; i < count; ++i) {
    GpuState gpu;
    gpu.index = i;
    gpu.memory_total_bytes = kGpuBytes;
    node.gpus.push_back(gpu);
  }
  return node;
}

JobRequest Gang(int64_t id, int total_gpus, InterleaveProfile profile = {}) {
  JobRequest job;
  job.job_id = id;
  job.submit_seq = id;
  job.kind = JobKind::kGang;
  job.total_gpus = total_gpus;
  job.interleave = std::move(profile);
  return job;
}

// A running gang on GPUs `indices` of node `n`; each running job adds its
// reservation and task to the GPUs (two jobs sharing GPUs count twice).
RunningJob& AddRunning(ClusterSnapshot& cluster, int n, std::vector<int> indices,
                       int64_t id, InterleaveProfile profile = {}) {
  NodeState& node = cluster.nodes[n];
  for (int g : indices) {
    node.gpus[g].reserved_bytes += kGpuBytes;
    node.gpus[g].task_count += 1;
  }
  RunningJob& r = cluster.running.emplace_back();
  r.job_id = id;
  r.submit_seq = id;
  r.placement.nodes.push_back({node.name, std::move(indices)});
  r.placement.reserved_bytes_per_gpu = kGpuBytes;
  r.interleave = std::move(profile);
  return r;
}

std::vector<int> Gpus(const Placement& p) {
  std::vector<int> out;
  for (const NodeAssignment& a : p.nodes) {
    out.insert(out.end(), a.gpu_indices.begin(), a.gpu_indices.end());
  }
  return out;
}

TEST(SchedulerInterleaveTest, Schedule_ComplementaryGang_SharesRunningGpus) {
  // One node of 4 GPUs, all held by running gang 1 (shufflenet). Gang 2
  // (gpt2, 4 GPUs) finds no free GPU and nothing it may preempt (job 1 is
  // not preemptible). Together they take 1024.7 ms per iteration of each,
  // apart 1338.8 ms: worth it, so 2 is placed on job 1's GPUs 0-3.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  AddRunning(cluster, 0, {0, 1, 2, 3}, 1, Shufflenet());
  const std::vector<Decision> d =
      Scheduler().Schedule(cluster, {Gang(2, 4, Gpt2())});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_THAT(Of(d, 2).packed_with, ElementsAre(1));
  ASSERT_EQ(Of(d, 2).placement.nodes.size(), 1u);
  EXPECT_EQ(Of(d, 2).placement.nodes[0].node, "a");
  EXPECT_THAT(Gpus(Of(d, 2).placement), ElementsAre(0, 1, 2, 3));
  EXPECT_THAT(Of(d, 2).reason, HasSubstr("interleaved with job 1"));
}

TEST(SchedulerInterleaveTest, Schedule_NoProfileOrBadMatch_Waits) {
  // Same node, gang 1 running (resnet18). Gang 2 has no profile: never
  // packed. Gang 3 (bert) has one, but resnet18 + bert take 1191.1 ms
  // together vs 1127.7 apart: not worth it. Gang 4 (gpt2, 2 GPUs) asks for
  // 2 GPUs, job 1 holds 4: only equal GPU counts share. All wait.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  AddRunning(cluster, 0, {0, 1, 2, 3}, 1, Resnet18());
  const std::vector<Decision> d = Scheduler().Schedule(
      cluster, {Gang(2, 4), Gang(3, 4, Bert()), Gang(4, 2, Gpt2())});
  for (int64_t id : {2, 3, 4}) {
    EXPECT_EQ(Of(d, id).outcome, Outcome::kRetryLater) << "job " << id;
    EXPECT_THAT(Of(d, id).packed_with, IsEmpty());
  }
}

TEST(SchedulerInterleaveTest, Schedule_RunningJobWithoutProfile_IsNeverAHost) {
  // Job 1 runs without a profile: whatever it does on its GPUs is unknown,
  // so gang 2 (gpt2) does not join it. With packing disabled, gang 3
  // (gpt2) does not join shufflenet job 4 on node b either.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  cluster.nodes.push_back(Node("b", 4));
  AddRunning(cluster, 0, {0, 1, 2, 3}, 1);
  AddRunning(cluster, 1, {0, 1, 2, 3}, 4, Shufflenet());
  SchedulerConfig config;
  const std::vector<Decision> on =
      Scheduler(config).Schedule(cluster, {Gang(2, 4, Gpt2())});
  // On: job 2 skips job 1 and joins job 4 on b.
  EXPECT_EQ(Of(on, 2).outcome, Outcome::kPlaced);
  EXPECT_THAT(Of(on, 2).packed_with, ElementsAre(4));
  EXPECT_EQ(Of(on, 2).placement.nodes[0].node, "b");
  config.policy.interleave.enabled = false;
  const std::vector<Decision> off =
      Scheduler(config).Schedule(cluster, {Gang(3, 4, Gpt2())});
  EXPECT_EQ(Of(off, 3).outcome, Outcome::kRetryLater);
}

TEST(SchedulerInterleaveTest, Schedule_GroupFull_NextJobWaits) {
  // max_jobs 2: gang 2 (gpt2) joins shufflenet job 1, making a group of 2;
  // gang 3 (gpt2) finds the group full and waits. This call's packing
  // counts: job 3 sees job 2 on those GPUs.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  AddRunning(cluster, 0, {0, 1, 2, 3}, 1, Shufflenet());
  SchedulerConfig config;
  config.policy.interleave.max_jobs = 2;
  const std::vector<Decision> d = Scheduler(config).Schedule(
      cluster, {Gang(2, 4, Gpt2()), Gang(3, 4, Gpt2())});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 3).outcome, Outcome::kRetryLater);
}

TEST(SchedulerInterleaveTest, Schedule_HeldGpus_AreNotShared) {
  // Nodes a and b of 4 GPUs. Shufflenet gang 1 runs on a (4 GPUs), job 5
  // on b's GPUs 0-1; neither is preemptible. Gang 10 (8 GPUs) waits for
  // both nodes and takes the head-of-queue reservation on a and b. Gang 11
  // (gpt2, 4 GPUs) would interleave with job 1, but its GPUs are held:
  // sharing them would slow job 1 and so delay gang 10. It waits.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  cluster.nodes.push_back(Node("b", 4));
  AddRunning(cluster, 0, {0, 1, 2, 3}, 1, Shufflenet());
  AddRunning(cluster, 1, {0, 1}, 5);
  const std::vector<Decision> d = Scheduler().Schedule(
      cluster, {Gang(10, 8), Gang(11, 4, Gpt2())});
  EXPECT_EQ(Of(d, 10).outcome, Outcome::kRetryLater);
  EXPECT_EQ(Of(d, 11).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 11).packed_with, IsEmpty());
  // Without gang 10 there is no reservation and 11 joins job 1.
  const std::vector<Decision> alone =
      Scheduler().Schedule(cluster, {Gang(11, 4, Gpt2())});
  EXPECT_THAT(Of(alone, 11).packed_with, ElementsAre(1));
}

TEST(SchedulerInterleaveTest, Schedule_PreemptingAPackedGroup_StopsEveryMember) {
  // Jobs 1 (shufflenet) and 2 (gpt2) share node a's 4 GPUs, both
  // preemptible with 60000 GPU-s attained (LAS level 3: 52000 <= 60000 <
  // 208000). Gang 3 (4 GPUs, level 0) ranks above both. Stopping job 2
  // alone leaves job 1 on the GPUs (1 task, 80 GiB reserved each), so the
  // GPUs free up only when both stop: 3 preempts {1, 2}.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  for (auto [id, profile] : {std::pair{1, Shufflenet()}, {2, Gpt2()}}) {
    RunningJob& r = AddRunning(cluster, 0, {0, 1, 2, 3}, id, profile);
    r.preemptible = true;
    r.attained_gpu_s = 60000;
  }
  const std::vector<Decision> d = Scheduler().Schedule(cluster, {Gang(3, 4)});
  EXPECT_EQ(Of(d, 3).outcome, Outcome::kPreempting);
  EXPECT_THAT(Of(d, 3).preempt, ElementsAre(1, 2));
  EXPECT_THAT(Gpus(Of(d, 3).placement), ElementsAre(0, 1, 2, 3));
}

TEST(SchedulerInterleaveTest, Schedule_FreeGpus_PlacedAloneFirst) {
  // Node a has 4 free GPUs and node b runs shufflenet job 1. Gang 2 (gpt2)
  // fits on a's free GPUs: free GPUs come first, packing only for a job
  // that would otherwise wait.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  cluster.nodes.push_back(Node("b", 4));
  AddRunning(cluster, 1, {0, 1, 2, 3}, 1, Shufflenet());
  const std::vector<Decision> d =
      Scheduler().Schedule(cluster, {Gang(2, 4, Gpt2())});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_THAT(Of(d, 2).packed_with, IsEmpty());
  EXPECT_EQ(Of(d, 2).placement.nodes[0].node, "a");
}

}  // namespace
}  // namespace trainctl::sched
