// Policy rules of sched::Scheduler beyond placement: named queues with DRF
// fair share, quotas, reservation + backfill with time limits, preemption
// without ping-pong, LAS order, PACK/SPREAD, strict FIFO and Explain().
// Each test narrates the arithmetic (Mesos DRF test style) so it can be
// checked by hand.

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

constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kGpuBytes = 80 * kGiB;

NodeState Node(std::string name, int count) {
  NodeState node;
  node.name = std::move(name);
  for (int i = 0; i < count; ++i) {
    GpuState gpu;
    gpu.index = i;
    gpu.uuid = absl::StrCat("GPU-", node.name, "-", i);
    gpu.memory_total_bytes = kGpuBytes;
    node.gpus.push_back(gpu);
  }
  return node;
}

JobRequest Gang(int64_t id, int total_gpus) {
  JobRequest job;
  job.job_id = id;
  job.submit_seq = id;
  job.kind = JobKind::kGang;
  job.total_gpus = total_gpus;
  return job;
}

JobRequest GangOn(int64_t id, int nodes, int per_node) {
  JobRequest job = Gang(id, nodes * per_node);
  job.nodes = nodes;
  job.gpus_per_node = per_node;
  return job;
}

// Adds a running job holding whole GPUs `indices` of node `n` of `cluster`
// (marks them reserved) and returns it for further fields.
RunningJob& AddRunning(ClusterSnapshot& cluster, int n, std::vector<int> indices,
                int64_t id) {
  NodeState& node = cluster.nodes[n];
  for (int g : indices) {
    node.gpus[g].reserved_bytes = kGpuBytes;
    node.gpus[g].task_count = 1;
  }
  RunningJob& r = cluster.running.emplace_back();
  r.job_id = id;
  r.submit_seq = id;
  r.placement.nodes.push_back({node.name, std::move(indices)});
  r.placement.reserved_bytes_per_gpu = kGpuBytes;
  return r;
}

// ------------------------------------------------------------ queues, DRF

TEST(SchedulerPolicyTest, Schedule_TwoQueues_LowerWeightedDominantShareFirst) {
  // One node of 8 GPUs. Running: queue "a" holds 2 GPUs, queue "b" 3 GPUs;
  // 2 more GPUs are busy with work the scheduler knows no owner of. 1 free.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("n", 8));
  AddRunning(cluster, 0, {0, 1}, 100).queue = "a";
  AddRunning(cluster, 0, {2, 3, 4}, 101).queue = "b";
  for (int g : {5, 6}) {
    cluster.nodes[0].gpus[g].reserved_bytes = kGpuBytes;
    cluster.nodes[0].gpus[g].task_count = 1;
  }
  JobRequest from_a = Gang(1, 1);
  from_a.queue = "a";
  JobRequest from_b = Gang(2, 1);
  from_b.queue = "b";

  // Equal weights: a's dominant share 2/8 = 0.25 < b's 3/8 = 0.375, so a's
  // job goes first and takes the free GPU even though b's is not later.
  SchedulerConfig equal;
  equal.policy.queues = {{"a", 1.0}, {"b", 1.0}};
  std::vector<Decision> d = Scheduler(equal).Schedule(cluster, {from_b, from_a});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kRetryLater);

  // b weighs 2: b's weighted share 0.375 / 2 = 0.1875 < a's 0.25 / 1.
  SchedulerConfig weighted;
  weighted.policy.queues = {{"a", 1.0}, {"b", 2.0}};
  d = Scheduler(weighted).Schedule(cluster, {from_a, from_b});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kRetryLater);
}

TEST(SchedulerPolicyTest, Schedule_SameQueue_PriorityThenSubmitOrder) {
  // One free GPU; three 1-GPU jobs in one queue: job 3 has priority 1, so it
  // wins over the earlier jobs 1 and 2.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("n", 1));
  JobRequest high = Gang(3, 1);
  high.priority = 1;
  SchedulerConfig config;
  config.policy.preemption = false;
  std::vector<Decision> d =
      Scheduler(config).Schedule(cluster, {Gang(1, 1), Gang(2, 1), high});
  EXPECT_EQ(d[0].job_id, 3);
  EXPECT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_EQ(d[1].job_id, 1);
  EXPECT_EQ(d[2].job_id, 2);
}

// ------------------------------------------------------------ quotas

TEST(SchedulerPolicyTest, Schedule_UserOverQuota_WaitsNamingQuotaAndTakesNoHold) {
  // 8 free GPUs of 16; alice may hold 4 and holds 3 (job 100). Her 2-GPU job
  // would make 5 > 4: it waits, and takes no reservation, so bob's 8-GPU job
  // after it is still placed.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 8));
  cluster.nodes.push_back(Node("b", 8));
  AddRunning(cluster, 0, {0, 1, 2}, 100).user = "alice";
  SchedulerConfig config;
  config.policy.user_gpu_quota = {{"alice", 4}};
  JobRequest alice = Gang(1, 2);
  alice.user = "alice";
  JobRequest bob = Gang(2, 8);
  bob.user = "bob";
  std::vector<Decision> d = Scheduler(config).Schedule(cluster, {alice, bob});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kRetryLater);
  EXPECT_EQ(Of(d, 1).reason,
            "over quota: user alice: quota 4 GPUs, 3 GPUs in use, this job "
            "needs 2 GPUs");
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
}

TEST(SchedulerPolicyTest, Schedule_ProjectQuotaWildcard_CountsThisCallsPlacements) {
  // Every project may hold 2 GPUs ("*"). Project x's three 1-GPU jobs: the
  // first two are placed (1, then 2 held), the third would make 3 > 2.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 8));
  SchedulerConfig config;
  config.policy.project_gpu_quota = {{"*", 2}};
  std::vector<JobRequest> queue;
  for (int64_t id : {1, 2, 3}) {
    queue.push_back(Gang(id, 1));
    queue.back().project = "x";
  }
  std::vector<Decision> d = Scheduler(config).Schedule(cluster, queue);
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 3).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 3).reason, HasSubstr("project x: quota 2 GPUs, 2 GPUs in use"));
}

// ------------------------------------------------------------ group limits

TEST(SchedulerPolicyTest, Schedule_GroupLimit_PlacesAtMostLimitCountingThisCall) {
  // A job array of 10 one-GPU tasks throttled to 3 (%3) on 8 free GPUs: the
  // first 3 in queue order are placed, the other 7 wait naming the limit.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 8));
  std::vector<JobRequest> queue;
  for (int64_t id = 1; id <= 10; ++id) {
    queue.push_back(Gang(id, 1));
    queue.back().group_limit.group = "array:1";
    queue.back().group_limit.max_running = 3;
  }
  std::vector<Decision> d = Scheduler().Schedule(cluster, queue);
  int placed = 0;
  for (const Decision& x : d) placed += x.outcome == Outcome::kPlaced ? 1 : 0;
  EXPECT_EQ(placed, 3);
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 3).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 4).outcome, Outcome::kRetryLater);
  EXPECT_EQ(Of(d, 4).reason,
            "group array:1: 3 of at most 3 jobs running (its throttle)");
}

TEST(SchedulerPolicyTest, Schedule_GroupLimit_CountsRunningJobsAndSparesOthers) {
  // Group g (limit 2) already runs job 100; job 1 of g fills the limit, job 2
  // of g waits, job 3 of no group and job 4 of group h are placed: the limit
  // takes no reservation and blocks nothing else.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 8));
  AddRunning(cluster, 0, {0}, 100).group = "g";
  std::vector<JobRequest> queue;
  for (int64_t id : {1, 2}) {
    queue.push_back(Gang(id, 1));
    queue.back().group_limit.group = "g";
    queue.back().group_limit.max_running = 2;
  }
  queue.push_back(Gang(3, 4));
  queue.push_back(Gang(4, 1));
  queue.back().group_limit.group = "h";
  queue.back().group_limit.max_running = 1;
  std::vector<Decision> d = Scheduler().Schedule(cluster, queue);
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 2).reason, HasSubstr("2 of at most 2"));
  EXPECT_EQ(Of(d, 3).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 4).outcome, Outcome::kPlaced);
}

TEST(SchedulerPolicyTest, Schedule_GroupLimitOnFullCluster_NeverExceedsLimit) {
  // A full cluster's tail takes the fast path for plain jobs; group-limited
  // jobs must still be counted: 2 free GPUs, limit 1, 50 tasks -> 1 placed.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  AddRunning(cluster, 0, {0, 1}, 100);
  std::vector<JobRequest> queue;
  queue.push_back(Gang(1, 4));  // blocked: takes the hold on node a
  for (int64_t id = 2; id <= 51; ++id) {
    queue.push_back(Gang(id, 1));
    queue.back().group_limit.group = "array:2";
    queue.back().group_limit.max_running = 1;
    queue.back().preemptible = true;
    queue.back().time_limit_s = 1;
  }
  std::vector<Decision> d = Scheduler().Schedule(cluster, queue);
  int placed = 0;
  for (const Decision& x : d) placed += x.outcome == Outcome::kPlaced ? 1 : 0;
  EXPECT_LE(placed, 1);
}

// ------------------------------------------------------------ backfill

// Node "a" of 8 GPUs: job 100 holds 0-3 for 1 h more, job 101 holds 4-5 for
// 2 h more; GPUs 6-7 are free. Gang 1 needs all 8: it reserves node a; it
// can start when both end, in 2 h = 7200 s.
ClusterSnapshot BackfillCluster() {
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 8));
  AddRunning(cluster, 0, {0, 1, 2, 3}, 100).remaining_s = 3600;
  AddRunning(cluster, 0, {4, 5}, 101).remaining_s = 7200;
  return cluster;
}

TEST(SchedulerPolicyTest, Schedule_HeadOfQueueGang_ReservesWithEtaFromTimeLimits) {
  std::vector<Decision> d = Scheduler().Schedule(BackfillCluster(), {Gang(1, 8)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_DOUBLE_EQ(d[0].eta_s, 7200);
  EXPECT_THAT(d[0].reason,
              HasSubstr("holds a reservation on node a, estimated start in "
                        "2h00m"));
}

TEST(SchedulerPolicyTest, Schedule_Backfill_OnlyJobsThatCannotDelayTheReservation) {
  // After gang 1 (ETA 7200 s, 0 GPU-s attained: LAS level 0) come five
  // 1-GPU jobs for the 2 free GPUs:
  //   2: time limit 1800 s <= 7200: ends before the gang can start: placed;
  //   3: time limit 9000 s > 7200: would delay it: waits;
  //   4: no limit, not preemptible: waits;
  //   5: preemptible, 3250 GPU-s attained >= 3250: level 1, deeper than
  //      the gang's, so the gang may preempt it when its turn comes: placed;
  //   6: preemptible but level 0 like the gang: jobs of one level do not
  //      preempt each other, so it could hold the gang back: waits.
  // LAS order puts job 6 (level 0) before job 5 (level 1).
  JobRequest short_job = Gang(2, 1);
  short_job.time_limit_s = 1800;
  JobRequest long_job = Gang(3, 1);
  long_job.time_limit_s = 9000;
  JobRequest demoted = Gang(5, 1);
  demoted.preemptible = true;
  demoted.attained_gpu_s = 3250;
  JobRequest same_level = Gang(6, 1);
  same_level.preemptible = true;
  std::vector<Decision> d = Scheduler().Schedule(
      BackfillCluster(),
      {Gang(1, 8), short_job, long_job, Gang(4, 1), demoted, same_level});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 3).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 3).reason, HasSubstr("job 1"));
  EXPECT_THAT(Of(d, 3).reason, HasSubstr("estimated in 2h00m"));
  EXPECT_EQ(Of(d, 4).outcome, Outcome::kRetryLater);
  EXPECT_EQ(Of(d, 5).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 6).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 6).reason, HasSubstr("reserved node a"));

  // With overtake_preemption (the rule of before) the gang may preempt any
  // preemptible job submitted after it: job 6 takes the second free GPU
  // (job 2 the first) and job 5, after it, finds none left.
  SchedulerConfig overtake;
  overtake.policy.overtake_preemption = true;
  d = Scheduler(overtake).Schedule(
      BackfillCluster(),
      {Gang(1, 8), short_job, long_job, Gang(4, 1), demoted, same_level});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 6).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 5).outcome, Outcome::kRetryLater);
}

TEST(SchedulerPolicyTest, Schedule_StreamOfSmallJobs_GangIsNotStarved) {
  // Node a, 4 GPUs, each held by a 1-GPU job without a time limit. Gang 1
  // (4 GPUs) waits; every time a small job ends, a new 1-GPU job arrives.
  // Without the reservation each freed GPU would go to the newcomer and the
  // gang would wait forever; with it the freed GPUs stay idle for the gang,
  // which starts once all four have ended.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  for (int g = 0; g < 4; ++g) AddRunning(cluster, 0, {g}, 100 + g);
  const Scheduler scheduler;
  int64_t next_id = 2;
  for (int round = 0; round < 4; ++round) {
    // Small job 100 + round ends: its GPU is free.
    cluster.nodes[0].gpus[round].reserved_bytes = 0;
    cluster.nodes[0].gpus[round].task_count = 0;
    cluster.running.erase(cluster.running.begin());
    std::vector<Decision> d =
        scheduler.Schedule(cluster, {Gang(1, 4), Gang(next_id++, 1)});
    if (round < 3) {
      EXPECT_EQ(Of(d, 1).outcome, Outcome::kRetryLater) << "round " << round;
      EXPECT_EQ(d[1].outcome, Outcome::kRetryLater) << "round " << round;
    } else {
      EXPECT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
    }
  }
}

TEST(SchedulerPolicyTest, Schedule_ReservationMinWait_YoungGangReservesOnlyAfterTheAge) {
  // reservation_min_wait_s = 3600 s (Slurm's bf_min_age_reserve). Node a,
  // 8 GPUs: job 100 holds GPUs 0-3 (3600 s left), job 101 GPUs 4-5 (7200 s
  // left); GPUs 6 and 7 are free. Gang 1 (8 GPUs, level 0) cannot start;
  // job 2 (1 GPU, level 0, no time limit, not preemptible) comes after it.
  // - Gang 1 has waited 1800 s < 3600 s: too young to reserve. It takes no
  //   reservation (eta_s stays -1) and job 2 takes a free GPU (6, best fit
  //   on the only node).
  // - Gang 1 has waited 3600 s >= 3600 s: it reserves node a (ETA
  //   max(3600, 7200) = 7200 s) and job 2, which could delay it, waits.
  // So the gang's wait grows by at most the age: once it is 3600 s old it
  //   reserves exactly as with reservation_min_wait_s = 0.
  SchedulerConfig config;
  config.policy.reservation_min_wait_s = 3600;
  const Scheduler scheduler(config);
  JobRequest gang = Gang(1, 8);
  gang.standing.waited_s = 1800;
  std::vector<Decision> d = scheduler.Schedule(BackfillCluster(), {gang, Gang(2, 1)});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kRetryLater);
  EXPECT_DOUBLE_EQ(Of(d, 1).eta_s, -1);
  EXPECT_THAT(Of(d, 1).reason,
              HasSubstr("reserves GPUs once it has waited 1h00m (waited 30m)"));
  ASSERT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_THAT(Of(d, 2).placement.nodes[0].gpu_indices, ElementsAre(6));

  gang.standing.waited_s = 3600;
  d = scheduler.Schedule(BackfillCluster(), {gang, Gang(2, 1)});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kRetryLater);
  EXPECT_DOUBLE_EQ(Of(d, 1).eta_s, 7200);
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 2).reason, HasSubstr("job 1"));
}

TEST(SchedulerPolicyTest, Schedule_ReservationMinWait_FirstOldEnoughJobHoldsIt) {
  // Same node, age 3600 s. Queue (LAS level 0, submit order): gang 1 (8
  // GPUs, waited 60 s: young), gang 2 (4 GPUs, waited 7200 s: old enough),
  // then 1-GPU job 3. Gang 1 takes no reservation; gang 2 is the first
  // blocked job old enough, so it holds it (node a; ETA 3600 s, when job
  // 100 ends and 2 + 4 = 6 >= 4 GPUs are free), and job 3, which could
  // delay it, waits for it instead of taking free GPU 6.
  SchedulerConfig config;
  config.policy.reservation_min_wait_s = 3600;
  JobRequest young = Gang(1, 8);
  young.standing.waited_s = 60;
  JobRequest old = Gang(2, 4);
  old.standing.waited_s = 7200;
  std::vector<Decision> d =
      Scheduler(config).Schedule(BackfillCluster(), {young, old, Gang(3, 1)});
  EXPECT_DOUBLE_EQ(Of(d, 1).eta_s, -1);
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kRetryLater);
  EXPECT_DOUBLE_EQ(Of(d, 2).eta_s, 3600);
  EXPECT_EQ(Of(d, 3).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 3).reason, HasSubstr("job 2"));
}

TEST(SchedulerPolicyTest, Schedule_StrictFifo_NothingOvertakesTheBlockedHead) {
  // One node of 4 GPUs, 2 free. Gang 1 (4 GPUs) waits; with backfill off
  // the 1-GPU job 2 after it waits too, although a GPU is free.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  AddRunning(cluster, 0, {0, 1}, 100);
  SchedulerConfig fifo;
  fifo.policy.backfill = false;
  std::vector<Decision> d =
      Scheduler(fifo).Schedule(cluster, {Gang(1, 4), Gang(2, 1)});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kRetryLater);
  EXPECT_THAT(Of(d, 2).reason, HasSubstr("strict FIFO"));
}

// ------------------------------------------------------------ preemption

TEST(SchedulerPolicyTest, Schedule_HigherPriority_PreemptsOnlyTheVictimsItNeeds) {
  // Node a, 4 GPUs: job 100 (priority 0, preemptible) on GPU 0, job 101
  // (priority 0, not preemptible) on 1, job 102 (priority -1, preemptible)
  // on 2; GPU 3 free. Gang 1 (priority 5, 2 GPUs) needs one more GPU.
  // Victims are tried lowest priority first: 102 (priority -1) frees GPU 2,
  // enough; 100 is spared and 101 may not be preempted.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  AddRunning(cluster, 0, {0}, 100).preemptible = true;
  AddRunning(cluster, 0, {1}, 101);
  RunningJob& low = AddRunning(cluster, 0, {2}, 102);
  low.preemptible = true;
  low.priority = -1;
  JobRequest urgent = Gang(1, 2);
  urgent.priority = 5;
  std::vector<Decision> d = Scheduler().Schedule(cluster, {urgent});
  ASSERT_EQ(d[0].outcome, Outcome::kPreempting);
  EXPECT_THAT(d[0].preempt, ElementsAre(102));
  ASSERT_EQ(d[0].placement.nodes.size(), 1u);
  EXPECT_THAT(d[0].placement.nodes[0].gpu_indices, ElementsAre(2, 3));
}

TEST(SchedulerPolicyTest, Schedule_AfterPreempting_VictimsGpuIsNotGivenToLaterJobs) {
  // Node a, 1 GPU of 80 GiB, held whole by job 100 (preemptible). Job 1
  // (priority 5) asks for 40 GiB: job 100 is preempted, and job 1 takes 40
  // GiB of the GPU once job 100 has stopped. Job 2 (20 GiB) comes next in the
  // same pass: 40 GiB would be left after the preemption, but job 100 still
  // runs until its tasks stop, so job 2 waits (it was once placed there,
  // next to a job that still held the whole GPU).
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 1));
  AddRunning(cluster, 0, {0}, 100).preemptible = true;
  JobRequest urgent;
  urgent.job_id = 1;
  urgent.submit_seq = 1;
  urgent.priority = 5;
  urgent.gpu_memory_bytes = 40 * kGiB;
  JobRequest small;
  small.job_id = 2;
  small.submit_seq = 2;
  small.gpu_memory_bytes = 20 * kGiB;
  std::vector<Decision> d = Scheduler().Schedule(cluster, {urgent, small});
  ASSERT_EQ(Of(d, 1).outcome, Outcome::kPreempting);
  EXPECT_THAT(Of(d, 1).preempt, ElementsAre(100));
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kRetryLater);
}

TEST(SchedulerPolicyTest, Schedule_EqualPriorityEarlierRunningJob_IsNotPreempted) {
  // Job 100 runs (preemptible, priority 0, submitted before job 1, same LAS
  // level): job 1 at priority 0 does not outrank it and waits.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 1));
  AddRunning(cluster, 0, {0}, 100).submit_seq = 0;
  cluster.running[0].preemptible = true;
  std::vector<Decision> d = Scheduler().Schedule(cluster, {Gang(1, 1)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
}

TEST(SchedulerPolicyTest, Schedule_PreemptedJob_WaitsUntilItsPreemptorIsPlaced) {
  // Job 7 was preempted for job 1. While job 1 is in the queue (not placed,
  // here because node a is busy), job 7 is not placed even where it fits
  // (node b): no ping-pong. Once job 1 is gone from the queue, job 7 runs.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  cluster.nodes.push_back(Node("b", 1));
  AddRunning(cluster, 0, {0, 1, 2, 3}, 100);
  JobRequest victim = Gang(7, 1);
  victim.standing.preempted_for = 1;
  SchedulerConfig config;
  config.policy.backfill = true;
  std::vector<Decision> d = Scheduler(config).Schedule(cluster, {Gang(1, 4), victim});
  EXPECT_EQ(Of(d, 7).outcome, Outcome::kRetryLater);
  EXPECT_EQ(Of(d, 7).reason, "was preempted for job 1 and waits until it starts");
  d = Scheduler(config).Schedule(cluster, {victim});
  EXPECT_EQ(Of(d, 7).outcome, Outcome::kPlaced);
}

TEST(SchedulerPolicyTest, Schedule_ReservationHolder_PreemptsBackfillOnlyAcrossLevels) {
  // Gang 1 (4 GPUs, 0 GPU-s: LAS level 0) is first in the queue;
  // preemptible job 5, submitted after it, runs on GPU 0 of node a and GPUs
  // 1-3 are free.
  // - Job 5 at 3250 GPU-s (>= 3250, the first threshold: level 1, deeper
  //   than the gang): the gang preempts it and takes the whole node.
  // - Job 5 at 3249 GPU-s (level 0, like the gang): same level, no
  //   preemption; the gang waits for GPU 0.
  // - The same with overtake_preemption: job 5 overtook the gang (submitted
  //   later, started first), so the gang preempts it.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  RunningJob& backfill = AddRunning(cluster, 0, {0}, 5);
  backfill.preemptible = true;
  backfill.attained_gpu_s = 3250;
  std::vector<Decision> d = Scheduler().Schedule(cluster, {Gang(1, 4)});
  ASSERT_EQ(d[0].outcome, Outcome::kPreempting);
  EXPECT_THAT(d[0].preempt, ElementsAre(5));

  cluster.running[0].attained_gpu_s = 3249;
  d = Scheduler().Schedule(cluster, {Gang(1, 4)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);

  SchedulerConfig overtake;
  overtake.policy.overtake_preemption = true;
  d = Scheduler(overtake).Schedule(cluster, {Gang(1, 4)});
  ASSERT_EQ(d[0].outcome, Outcome::kPreempting);
  EXPECT_THAT(d[0].preempt, ElementsAre(5));
}

// ------------------------------------------------------------ LAS

TEST(SchedulerPolicyTest, Schedule_Las_LessAttainedServiceFirst) {
  // One free GPU. Job 1 (submitted first) has attained 4000 GPU-s >= 3250:
  // LAS level 1. Job 2 has 0: level 0, so it goes first under LAS, and job
  // 1 first under FIFO.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 1));
  JobRequest served = Gang(1, 1);
  served.attained_gpu_s = 4000;
  std::vector<Decision> d = Scheduler().Schedule(cluster, {served, Gang(2, 1)});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  SchedulerConfig fifo;
  fifo.policy.order = QueueOrder::kFifo;
  d = Scheduler(fifo).Schedule(cluster, {served, Gang(2, 1)});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
}

TEST(SchedulerPolicyTest, Schedule_Las_NewJobPreemptsDemotedPreemptibleJob) {
  // Job 100 runs on the only GPU with 8000 GPU-s attained (>= 7200: level 2)
  // and is preemptible; job 1 (submitted later, level 0) preempts it, as in
  // Tiresias. Under FIFO order it may not (it neither outranks nor was
  // overtaken by job 100).
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 1));
  RunningJob& old = AddRunning(cluster, 0, {0}, 100);
  old.submit_seq = 0;
  old.preemptible = true;
  old.attained_gpu_s = 8000;
  std::vector<Decision> d = Scheduler().Schedule(cluster, {Gang(1, 1)});
  EXPECT_EQ(d[0].outcome, Outcome::kPreempting);
  SchedulerConfig fifo;
  fifo.policy.order = QueueOrder::kFifo;
  d = Scheduler(fifo).Schedule(cluster, {Gang(1, 1)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
}

TEST(SchedulerPolicyTest, Schedule_LasLadder_RanksAcrossTheTailOfAttainedService) {
  // One free GPU; two waiting 1-GPU jobs. Job 1 (submitted first) has
  // attained 250000 GPU-s, job 2 60000 GPU-s.
  // Default ladder 3250, 13000, 52000, 208000, 832000, 3328000 (x4 each):
  //   job 1: 250000 >= 208000 -> level 4; job 2: 60000 >= 52000 -> level 3.
  //   Job 2 has less attained service: it goes first.
  // Tiresias's thresholds 3250, 7200: both are >= 7200 -> level 2, the last;
  //   submit order decides and job 1 goes first.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 1));
  JobRequest long_served = Gang(1, 1);
  long_served.attained_gpu_s = 250000;
  JobRequest less_served = Gang(2, 1);
  less_served.attained_gpu_s = 60000;
  EXPECT_THAT(PolicyConfig().las_thresholds_gpu_s,
              ElementsAre(3250, 13000, 52000, 208000, 832000, 3328000));
  std::vector<Decision> d =
      Scheduler().Schedule(cluster, {long_served, less_served});
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kRetryLater);

  SchedulerConfig tiresias;
  tiresias.policy.las_thresholds_gpu_s = {3250, 7200};
  d = Scheduler(tiresias).Schedule(cluster, {long_served, less_served});
  EXPECT_EQ(Of(d, 1).outcome, Outcome::kPlaced);
  EXPECT_EQ(Of(d, 2).outcome, Outcome::kRetryLater);
}

TEST(SchedulerPolicyTest, Schedule_LasSameLevel_DoesNotPreemptByDefault) {
  // Job 100 (submitted after job 1, preemptible) runs on the only GPU with
  // 20000 GPU-s attained: level 2 (>= 13000, < 52000). Job 1 waits with
  // 14000 GPU-s: level 2 too. Same priority, same level: no preemption
  // (they would swap at every scheduling event); job 1 waits until job 100
  // ends or reaches 52000 GPU-s (level 3, then job 1 preempts it).
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 1));
  RunningJob& running = AddRunning(cluster, 0, {0}, 100);
  running.preemptible = true;
  running.attained_gpu_s = 20000;
  JobRequest waiting = Gang(1, 1);
  waiting.attained_gpu_s = 14000;
  std::vector<Decision> d = Scheduler().Schedule(cluster, {waiting});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);

  cluster.running[0].attained_gpu_s = 52000;
  d = Scheduler().Schedule(cluster, {waiting});
  ASSERT_EQ(d[0].outcome, Outcome::kPreempting);
  EXPECT_THAT(d[0].preempt, ElementsAre(100));
}

// ------------------------------------------------------------ pack / spread

TEST(SchedulerPolicyTest, Schedule_PackAndSpread_AsRayPlacementStrategies) {
  // Nodes a and b with 4 free GPUs each, c with 2 of 4 free.
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 4));
  cluster.nodes.push_back(Node("b", 4));
  cluster.nodes.push_back(Node("c", 4));
  AddRunning(cluster, 2, {0, 1}, 100);

  // PACK, 4 GPUs: one node (a: a and b tie on 4 free, name decides).
  std::vector<Decision> d = Scheduler().Schedule(cluster, {Gang(1, 4)});
  ASSERT_EQ(d[0].placement.nodes.size(), 1u);
  EXPECT_EQ(d[0].placement.nodes[0].node, "a");

  // SPREAD, 4 GPUs: 4 x 1 needs 4 nodes (there are 3); 2 x 2 on the
  // emptiest nodes, a and b.
  JobRequest spread = Gang(2, 4);
  spread.placement = GangPlacement::kSpread;
  d = Scheduler().Schedule(cluster, {spread});
  ASSERT_EQ(d[0].placement.nodes.size(), 2u);
  EXPECT_EQ(d[0].placement.nodes[0].node, "a");
  EXPECT_EQ(d[0].placement.nodes[1].node, "b");

  // 2 nodes x 2 GPUs: PACK takes the fullest node that fits first (c: 2
  // free), then a; SPREAD the emptiest, a and b.
  d = Scheduler().Schedule(cluster, {GangOn(3, 2, 2)});
  ASSERT_EQ(d[0].placement.nodes.size(), 2u);
  EXPECT_EQ(d[0].placement.nodes[0].node, "c");
  EXPECT_EQ(d[0].placement.nodes[1].node, "a");
  JobRequest spread_on = GangOn(4, 2, 2);
  spread_on.placement = GangPlacement::kSpread;
  d = Scheduler().Schedule(cluster, {spread_on});
  EXPECT_EQ(d[0].placement.nodes[0].node, "a");
  EXPECT_EQ(d[0].placement.nodes[1].node, "b");
}

// ------------------------------------------------------------ Explain

TEST(SchedulerPolicyTest, Explain_BlockedGang_NamesNodesReservationAndEta) {
  // Node a: 8 GPUs, 6 busy (ends in 1 h and 2 h as in BackfillCluster),
  // node b: 8 GPUs, 6 busy without a time limit. Gang 1 needs 4 on one node.
  ClusterSnapshot cluster = BackfillCluster();
  cluster.nodes.push_back(Node("b", 8));
  AddRunning(cluster, 1, {0, 1, 2, 3, 4, 5}, 102);
  std::optional<Explanation> e =
      Scheduler().Explain(cluster, {GangOn(1, 1, 4), GangOn(2, 1, 4)}, 2);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->position, 2);
  EXPECT_EQ(e->queue, "default");
  EXPECT_EQ(e->reservation_job, 1);
  // Gang 1 reserved node a (most GPUs, then name); 4 free after job 100 at 1 h.
  EXPECT_EQ(e->reservation, "node a");
  EXPECT_DOUBLE_EQ(e->reservation_eta_s, 3600);
  EXPECT_THAT(e->nodes, ElementsAre("a: 2 of 8 GPUs free, needs 4",
                                    "b: 2 of 8 GPUs free, needs 4"));
  EXPECT_FALSE(Scheduler().Explain(cluster, {Gang(1, 4)}, 99).has_value());
}

TEST(SchedulerPolicyTest, Explain_QuotaBlocked_SaysWhichQuota) {
  ClusterSnapshot cluster;
  cluster.nodes.push_back(Node("a", 8));
  SchedulerConfig config;
  config.policy.user_gpu_quota = {{"*", 1}};
  JobRequest job = Gang(1, 2);
  job.user = "carol";
  std::optional<Explanation> e = Scheduler(config).Explain(cluster, {job}, 1);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->quota, "user carol: quota 1 GPU, 0 GPUs in use, this job needs 2 GPUs");
}

}  // namespace
}  // namespace trainctl::sched
