#include "coordinator/sched/scheduler.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr int64_t kGiB = int64_t{1} << 30;

// A node of `count` free GPUs of `gib` GiB each, no NVLink.
NodeState Node(std::string name, int count, int64_t gib = 80) {
  NodeState node;
  node.name = std::move(name);
  for (int i = 0; i < count; ++i) {
    GpuState gpu;
    gpu.index = i;
    gpu.uuid = absl::StrCat("GPU-", node.name, "-", i);
    gpu.memory_total_bytes = gib * kGiB;
    node.gpus.push_back(gpu);
  }
  return node;
}

// Marks GPU `index` of `node` as holding one task of `gib` GiB.
void Use(NodeState& node, int index, int64_t gib) {
  node.gpus[index].reserved_bytes += gib * kGiB;
  node.gpus[index].task_count += 1;
}

// Joins each island's GPUs by NVLink, all-to-all.
void Link(NodeState& node, const std::vector<std::vector<int>>& islands) {
  for (const std::vector<int>& island : islands) {
    for (int a : island) {
      for (int b : island) {
        if (a != b) node.gpus[a].nvlink_peers.push_back(b);
      }
    }
  }
}

JobRequest Experiment(int64_t id, double fraction) {
  JobRequest job;
  job.job_id = id;
  job.submit_seq = id;
  job.kind = JobKind::kExperiment;
  job.gpu_fraction = fraction;
  return job;
}

JobRequest ExperimentGiB(int64_t id, int64_t gib) {
  JobRequest job = Experiment(id, 1.0);
  job.gpu_memory_bytes = gib * kGiB;
  return job;
}

JobRequest Gang(int64_t id, int nodes, int gpus_per_node) {
  JobRequest job;
  job.job_id = id;
  job.submit_seq = id;
  job.kind = JobKind::kGang;
  job.nodes = nodes;
  job.gpus_per_node = gpus_per_node;
  job.total_gpus = nodes * gpus_per_node;
  return job;
}

JobRequest GangTotal(int64_t id, int total_gpus) {
  JobRequest job = Gang(id, 0, 0);
  job.total_gpus = total_gpus;
  return job;
}

// "a[0,1] b[2]": where a placement went, in rank order.
std::string Where(const Decision& decision) {
  std::vector<std::string> parts;
  for (const NodeAssignment& node : decision.placement.nodes) {
    parts.push_back(absl::StrCat(node.node, "[",
                                 absl::StrJoin(node.gpu_indices, ","), "]"));
  }
  return absl::StrJoin(parts, " ");
}

std::vector<Decision> ScheduleOn(const std::vector<NodeState>& nodes,
                                 const std::vector<JobRequest>& queue,
                                 SchedulerConfig config = {}) {
  ClusterSnapshot cluster;
  cluster.nodes = nodes;
  return Scheduler(config).Schedule(cluster, queue);
}

TEST(ReservationBytesTest, ReservationBytes_FractionOrBytes_RoundsUp) {
  // 0.25 of 80 GiB = 20 GiB exactly.
  EXPECT_EQ(ReservationBytes(Experiment(1, 0.25), 80 * kGiB), 20 * kGiB);
  // 0.5 of 3 bytes = 1.5, rounded up to 2.
  EXPECT_EQ(ReservationBytes(Experiment(1, 0.5), 3), 2);
  // 0.2 of 80 GiB = 16 GiB exactly, though 0.2 is not exact in binary.
  EXPECT_EQ(ReservationBytes(Experiment(1, 0.2), 80 * kGiB), 16 * kGiB);
  // Whole GPU: all of it.
  EXPECT_EQ(ReservationBytes(Experiment(1, 1.0), 80 * kGiB), 80 * kGiB);
  // Bytes win over the fraction and do not depend on the GPU.
  EXPECT_EQ(ReservationBytes(ExperimentGiB(1, 10), 80 * kGiB), 10 * kGiB);
  EXPECT_EQ(ReservationBytes(ExperimentGiB(1, 10), 40 * kGiB), 10 * kGiB);
}

TEST(SchedulerTest, Schedule_SecondExperiment_PacksOntoPartlyUsedGpu) {
  // Node a: two free 80 GiB GPUs.
  // Job 1 (0.5 = 40 GiB): both GPUs would keep 40 GiB; tie -> GPU 0.
  // Job 2 (0.25 = 20 GiB): GPU 0 would keep 40 - 20 = 20 GiB, GPU 1 would
  // keep 80 - 20 = 60 GiB. Best fit -> GPU 0; GPU 1 stays whole for a gang.
  std::vector<Decision> d =
      ScheduleOn({Node("a", 2)}, {Experiment(1, 0.5), Experiment(2, 0.25)});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[0]), "a[0]");
  EXPECT_EQ(d[0].placement.reserved_bytes_per_gpu, 40 * kGiB);
  EXPECT_EQ(d[1].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[1]), "a[0]");
  EXPECT_EQ(d[1].placement.reserved_bytes_per_gpu, 20 * kGiB);
}

TEST(SchedulerTest, Schedule_ExperimentWithExistingTasks_PacksOntoUsedGpu) {
  // Node a: GPU 0 free, GPU 1 already holds 50 GiB (snapshot, not this call).
  // A 20 GiB job keeps 60 GiB on GPU 0 or 10 GiB on GPU 1 -> GPU 1.
  NodeState a = Node("a", 2);
  Use(a, 1, 50);
  std::vector<Decision> d = ScheduleOn({a}, {Experiment(1, 0.25)});
  EXPECT_EQ(Where(d[0]), "a[1]");
}

TEST(SchedulerTest,
     Schedule_FourQuarterExperiments_ShareOneGpuFifthGoesElsewhere) {
  // Node a: two free 80 GiB GPUs; five 0.25 jobs of 20 GiB each.
  // Jobs 1-4 fill GPU 0: 20, 40, 60, 80 GiB reserved, 0 left.
  // Job 5 no longer fits GPU 0 (80 + 20 > 80) -> GPU 1.
  std::vector<JobRequest> queue;
  for (int id = 1; id <= 5; ++id) queue.push_back(Experiment(id, 0.25));
  std::vector<Decision> d = ScheduleOn({Node("a", 2)}, queue);
  ASSERT_EQ(d.size(), 5u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(d[i].outcome, Outcome::kPlaced);
    EXPECT_EQ(Where(d[i]), "a[0]") << "job " << d[i].job_id;
  }
  EXPECT_EQ(d[4].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[4]), "a[1]");
}

TEST(SchedulerTest, Schedule_FiveFifthGpuExperiments_FillOneGpuExactly) {
  // Five 0.2 jobs reserve 16 GiB each: 5 x 16 = 80 GiB, exactly one GPU.
  // None may spill onto GPU 1 through rounding.
  std::vector<JobRequest> queue;
  for (int id = 1; id <= 5; ++id) queue.push_back(Experiment(id, 0.2));
  std::vector<Decision> d = ScheduleOn({Node("a", 2)}, queue);
  for (const Decision& decision : d) {
    EXPECT_EQ(Where(decision), "a[0]") << "job " << decision.job_id;
    EXPECT_EQ(decision.placement.reserved_bytes_per_gpu, 16 * kGiB);
  }
}

TEST(SchedulerTest, Schedule_MemorySizedExperiments_PackByBytes) {
  // Node a: GPU 0 of 40 GiB, GPU 1 of 80 GiB (sizes differ on purpose).
  NodeState a = Node("a", 2);
  a.gpus[0].memory_total_bytes = 40 * kGiB;
  // Job 1 (30 GiB): GPU 0 keeps 10, GPU 1 keeps 50 -> GPU 0.
  // Job 2 (30 GiB): GPU 0 has 10 free, too little -> GPU 1 (50 left).
  // Job 3 (30 GiB): GPU 0 10 free, GPU 1 50 free -> GPU 1 (20 left).
  // Job 4 (30 GiB): 10 and 20 GiB free -> waits.
  std::vector<Decision> d =
      ScheduleOn({a}, {ExperimentGiB(1, 30), ExperimentGiB(2, 30),
                       ExperimentGiB(3, 30), ExperimentGiB(4, 30)});
  EXPECT_EQ(Where(d[0]), "a[0]");
  EXPECT_EQ(Where(d[1]), "a[1]");
  EXPECT_EQ(Where(d[2]), "a[1]");
  EXPECT_EQ(d[2].placement.reserved_bytes_per_gpu, 30 * kGiB);
  EXPECT_EQ(d[3].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[3].reason,
            "waiting for 30.0 GiB free on one GPU "
            "(now at most 20.0 GiB free on any GPU)");
}

TEST(SchedulerTest, Schedule_WholeGpuExperiment_PrefersNodeWithFewestFreeGpus) {
  // Node a: 2 whole free GPUs. Node b: 2 GPUs, GPU 0 busy -> 1 whole free.
  // A whole-GPU job leaves 0 GiB on any free GPU (a tie), so it goes to the
  // node with fewer whole free GPUs: b, keeping a whole for a gang.
  NodeState b = Node("b", 2);
  Use(b, 0, 10);
  std::vector<Decision> d = ScheduleOn({Node("a", 2), b}, {Experiment(1, 1.0)});
  EXPECT_EQ(Where(d[0]), "b[1]");
  EXPECT_EQ(d[0].placement.reserved_bytes_per_gpu, 80 * kGiB);
}

TEST(SchedulerTest, Schedule_MaxTasksPerGpu_CapsSharing) {
  // max 2 tasks per GPU; three 0.1 jobs (8 GiB each) on node a of 2 GPUs.
  // Jobs 1, 2 -> GPU 0 (16 GiB used, 2 tasks). Job 3 would fit GPU 0 by
  // memory (64 GiB free) but it runs 2 tasks already -> GPU 1.
  SchedulerConfig config;
  config.max_tasks_per_gpu = 2;
  std::vector<Decision> d = ScheduleOn(
      {Node("a", 2)},
      {Experiment(1, 0.1), Experiment(2, 0.1), Experiment(3, 0.1)}, config);
  EXPECT_EQ(Where(d[0]), "a[0]");
  EXPECT_EQ(Where(d[1]), "a[0]");
  EXPECT_EQ(Where(d[2]), "a[1]");
}

TEST(SchedulerTest, Schedule_MaxTasksPerGpuReached_WaitsAndSaysWhy) {
  // One GPU, max 2 tasks: the third 0.1 job waits though 64 GiB are free.
  SchedulerConfig config;
  config.max_tasks_per_gpu = 2;
  std::vector<Decision> d = ScheduleOn(
      {Node("a", 1)},
      {Experiment(1, 0.1), Experiment(2, 0.1), Experiment(3, 0.1)}, config);
  EXPECT_EQ(d[2].outcome, Outcome::kRetryLater);
  EXPECT_THAT(d[2].reason, HasSubstr("already runs 2 tasks, the limit"));
}

TEST(SchedulerTest, Schedule_GangTooBigForFreeGpus_PlacesNothing) {
  // Nodes a, b: 4 GPUs each; b's GPU 0 is busy, so b has 3 free.
  // Gang 2 x 4 needs 4 free on each of 2 nodes; only a qualifies. It must
  // not start on a alone: no placement at all.
  NodeState b = Node("b", 4);
  Use(b, 0, 10);
  std::vector<Decision> d = ScheduleOn({Node("a", 4), b}, {Gang(1, 2, 4)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_THAT(d[0].placement.nodes, IsEmpty());
  EXPECT_EQ(d[0].reason,
            "waiting for 4 free GPUs on each of 2 nodes "
            "(now only 1 node has 4 or more free GPUs)");
}

TEST(SchedulerTest, Schedule_GangFitsOneNode_UsesFewestNodes) {
  // Node a: 8 GPUs, 0-3 busy -> 4 free. Nodes b, c: 2 free GPUs each.
  // total_gpus = 4: K = 1 fits on a, so it is not split as 2 + 2 on b, c.
  NodeState a = Node("a", 8);
  for (int i = 0; i < 4; ++i) Use(a, i, 80);
  std::vector<Decision> d =
      ScheduleOn({a, Node("b", 2), Node("c", 2)}, {GangTotal(1, 4)});
  EXPECT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[0]), "a[4,5,6,7]");
  EXPECT_EQ(d[0].placement.reserved_bytes_per_gpu, 80 * kGiB);
}

TEST(SchedulerTest, Schedule_NodesTimesGpusPerNode_PicksBestFitNodes) {
  // Node a: 8 free. Node b: 8 GPUs, 4 busy -> 4 free. Node c: 4 free.
  // Gang 2 x 4 leaves a with 4, b with 0, c with 0 -> b and c (by name),
  // so node a stays whole for an 8-GPU job.
  NodeState b = Node("b", 8);
  for (int i = 0; i < 4; ++i) Use(b, i, 80);
  std::vector<Decision> d =
      ScheduleOn({Node("a", 8), b, Node("c", 4)}, {Gang(1, 2, 4)});
  EXPECT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[0]), "b[4,5,6,7] c[0,1,2,3]");
}

TEST(SchedulerTest, Schedule_TotalGpusNoNodeLargeEnough_SplitsEvenly) {
  // Nodes a, b: 4 free GPUs each. 8 GPUs: K = 1 needs 8 on one node (no);
  // K = 2 needs 4 on each of 2 nodes (yes).
  std::vector<Decision> d =
      ScheduleOn({Node("a", 4), Node("b", 4)}, {GangTotal(1, 8)});
  EXPECT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[0]), "a[0,1,2,3] b[0,1,2,3]");
}

TEST(SchedulerTest, Schedule_TotalGpus_UsesEqualSharesNotLargestChunks) {
  // Nodes a, b: 4 free; c: 2 free. 6 GPUs: K = 1 (6 on a node) no;
  // K = 2 (3 each) yes on a and b. Never 4 + 2: ranks get equal shares.
  std::vector<Decision> d =
      ScheduleOn({Node("a", 4), Node("b", 4), Node("c", 2)}, {GangTotal(1, 6)});
  EXPECT_EQ(Where(d[0]), "a[0,1,2] b[0,1,2]");
}

TEST(SchedulerTest, Schedule_NvlinkIslands_PrefersSmallestIslandThatFits) {
  // Node a, 8 GPUs in NVLink islands {0,1,2,3}, {4,5}, {6,7}; GPU 6 busy.
  // Free per island: 4, 2, 1.
  NodeState a = Node("a", 8);
  Link(a, {{0, 1, 2, 3}, {4, 5}, {6, 7}});
  Use(a, 6, 80);
  // Job 1 (1 x 2): islands with >= 2 free: {0..3} (4), {4,5} (2) -> {4,5}.
  // Job 2 (1 x 3): only {0..3} has 3 free -> 0, 1, 2.
  // Job 3 (1 x 2): free are 3 and 7, in different islands: no island has
  // 2, so the lowest indices: 3, 7.
  std::vector<Decision> d =
      ScheduleOn({a}, {Gang(1, 1, 2), Gang(2, 1, 3), Gang(3, 1, 2)});
  EXPECT_EQ(Where(d[0]), "a[4,5]");
  EXPECT_EQ(Where(d[1]), "a[0,1,2]");
  EXPECT_EQ(Where(d[2]), "a[3,7]");
}

TEST(SchedulerTest, Schedule_LostNode_CountsForFeasibilityButGetsNothing) {
  // Node a (8 GPUs) is lost; node b (4 GPUs) is up.
  // Gang 1 x 8 could fit a when it returns -> waits, not infeasible.
  // Experiment goes to b, never to the lost a.
  NodeState a = Node("a", 8);
  a.schedulable = false;
  std::vector<Decision> d = ScheduleOn({a, Node("b", 4)}, {Gang(1, 1, 8)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[0].reason,
            "waiting for 8 free GPUs on one node "
            "(now at most 4 free GPUs on any node; 1 of 2 nodes is lost)");

  d = ScheduleOn({a, Node("b", 4)}, {Experiment(2, 1.0)});
  EXPECT_EQ(Where(d[0]), "b[0]");
}

TEST(SchedulerTest, Schedule_GangLargerThanCluster_IsInfeasible) {
  // Two nodes of 4 GPUs = 8 GPUs; a gang of 16 can never run.
  std::vector<Decision> d = ScheduleOn({Node("a", 4), Node("b", 4)},
                                       {GangTotal(1, 16), Gang(2, 4, 4)});
  EXPECT_EQ(d[0].outcome, Outcome::kInfeasible);
  EXPECT_EQ(d[0].reason, "needs 16 GPUs but the cluster has 8");
  EXPECT_EQ(d[1].outcome, Outcome::kInfeasible);
  EXPECT_EQ(d[1].reason, "needs 16 GPUs but the cluster has 8");
}

TEST(SchedulerTest, Schedule_MoreGpusPerNodeThanAnyNode_IsInfeasible) {
  // Largest node has 8 GPUs (16 in the cluster), the gang wants 9 on one.
  std::vector<Decision> d =
      ScheduleOn({Node("a", 8), Node("b", 8)}, {Gang(1, 1, 9)});
  EXPECT_EQ(d[0].outcome, Outcome::kInfeasible);
  EXPECT_EQ(d[0].reason, "needs 9 GPUs on one node but the largest node has 8");
}

TEST(SchedulerTest, Schedule_MoreNodesThanClusterHasLargeEnough_IsInfeasible) {
  // Nodes a, b: 4 GPUs; c: 2 GPUs (10 GPUs). 3 x 3 = 9 GPUs fits the total
  // but only a and b have 3 or more GPUs.
  std::vector<Decision> d =
      ScheduleOn({Node("a", 4), Node("b", 4), Node("c", 2)}, {Gang(1, 3, 3)});
  EXPECT_EQ(d[0].outcome, Outcome::kInfeasible);
  EXPECT_EQ(d[0].reason,
            "needs 3 GPUs on each of 3 nodes but only 2 nodes have 3 or more "
            "GPUs");
}

TEST(SchedulerTest, Schedule_TotalGpusWithNoEvenLayout_IsInfeasible) {
  // Nodes a, b: 4 GPUs; c: 1 GPU (9 GPUs). total 9: K = 1 needs 9 on one
  // node (largest 4); K = 3 needs 3 on each of 3 nodes (only 2 have 3);
  // K = 9 needs 9 nodes (there are 3). No layout can ever work.
  std::vector<Decision> d =
      ScheduleOn({Node("a", 4), Node("b", 4), Node("c", 1)}, {GangTotal(1, 9)});
  EXPECT_EQ(d[0].outcome, Outcome::kInfeasible);
  EXPECT_THAT(d[0].reason, HasSubstr("needs 9 GPUs split evenly"));
  EXPECT_THAT(d[0].reason, HasSubstr("9 GPUs on one node or 3 GPUs on each "
                                     "of 3 nodes"));
}

TEST(SchedulerTest, Schedule_ExperimentLargerThanEveryGpu_IsInfeasible) {
  // Largest GPU 80 GiB (another is 40 GiB); the job asks for 100 GiB.
  std::vector<Decision> d =
      ScheduleOn({Node("a", 1, 40), Node("b", 1, 80)}, {ExperimentGiB(1, 100)});
  EXPECT_EQ(d[0].outcome, Outcome::kInfeasible);
  EXPECT_EQ(d[0].reason,
            "needs 100.0 GiB of GPU memory but the largest GPU has 80.0 GiB");
}

// Unlike GPUs: a gang placed over an 80 GiB and a 40 GiB node holds each GPU
// whole; its placement says so, and a running gang's GPUs are counted whole
// (not at the smaller GPU's size) when freed for preemption or quotas.
TEST(SchedulerTest, Schedule_GangOverUnlikeGpus_HoldsEachGpuWhole) {
  std::vector<Decision> d = ScheduleOn({Node("big", 1, 80), Node("small", 1, 40)},
                                       {Gang(1, 2, 1), Experiment(2, 0.5)});
  ASSERT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_TRUE(d[0].placement.whole_gpus);
  GpuState big;
  big.memory_total_bytes = 80 * kGiB;
  EXPECT_EQ(PlacementBytesOn(d[0].placement, big), 80 * kGiB);
  // No room left on either GPU for the half-GPU experiment.
  EXPECT_NE(d[1].outcome, Outcome::kPlaced);

  // The next pass, from the running gang's record: the 80 GiB GPU is full.
  ClusterSnapshot cluster;
  cluster.nodes = {Node("big", 1, 80), Node("small", 1, 40)};
  Use(cluster.nodes[0], 0, 80);
  Use(cluster.nodes[1], 0, 40);
  RunningJob gang;
  gang.job_id = 1;
  gang.preemptible = true;
  gang.placement = d[0].placement;
  cluster.running.push_back(gang);
  // 60 GiB: fits only the 80 GiB GPU, and only once all of it is freed.
  JobRequest urgent = ExperimentGiB(3, 60);
  urgent.priority = 10;
  std::vector<Decision> next = Scheduler(SchedulerConfig{}).Schedule(cluster, {urgent});
  // Preempting the gang frees the whole 80 GiB GPU (not 40 GiB of it).
  EXPECT_EQ(next[0].outcome, Outcome::kPreempting) << next[0].reason;
}

TEST(SchedulerTest, Schedule_NoNodeWithTheFeature_IsInfeasibleNamingIt) {
  JobRequest image = Experiment(1, 1.0);
  image.constraints.needs_container_runtime = true;
  JobRequest limits = Experiment(2, 1.0);
  limits.constraints.needs_cgroup_limits = true;
  std::vector<Decision> d = ScheduleOn({Node("a", 2)}, {image, limits});
  EXPECT_EQ(d[0].outcome, Outcome::kInfeasible);
  EXPECT_THAT(d[0].reason, ::testing::HasSubstr("no node has a container runtime"));
  EXPECT_EQ(d[1].outcome, Outcome::kInfeasible);
  EXPECT_THAT(d[1].reason, ::testing::HasSubstr("no node gives tasks cgroups"));
  NodeState with = Node("b", 1);
  with.cgroups = true;
  with.container_runtime = true;
  d = ScheduleOn({Node("a", 2), with}, {image, limits});
  EXPECT_EQ(Where(d[0]), "b[0]");
  EXPECT_NE(d[1].outcome, Outcome::kInfeasible);
}

TEST(SchedulerTest, Schedule_ExperimentFitsOnlyLostNodeGpu_WaitsNotInfeasible) {
  // The 80 GiB GPU is on lost node b; up node a has 40 GiB. A 60 GiB job
  // fits the cluster, just not now.
  NodeState b = Node("b", 1, 80);
  b.schedulable = false;
  std::vector<Decision> d =
      ScheduleOn({Node("a", 1, 40), b}, {ExperimentGiB(1, 60)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[0].reason,
            "waiting for 60.0 GiB free on one GPU (now at most 40.0 GiB free "
            "on any GPU; 1 of 2 nodes is lost)");
}

TEST(SchedulerTest, Schedule_OddNumbers_AreInfeasibleNotCrashes) {
  JobRequest zero_fraction = Experiment(1, 0.0);
  JobRequest big_fraction = Experiment(2, 1.5);
  JobRequest negative_bytes = Experiment(3, 0.5);
  negative_bytes.gpu_memory_bytes = -1;
  JobRequest zero_per_node = Gang(4, 2, 0);
  JobRequest zero_total = GangTotal(5, 0);
  JobRequest negative_nodes = Gang(6, -1, 4);
  std::vector<Decision> d =
      ScheduleOn({Node("a", 4)}, {zero_fraction, big_fraction, negative_bytes,
                                  zero_per_node, zero_total, negative_nodes});
  ASSERT_EQ(d.size(), 6u);
  for (const Decision& decision : d) {
    EXPECT_EQ(decision.outcome, Outcome::kInfeasible) << decision.job_id;
    EXPECT_THAT(decision.placement.nodes, IsEmpty());
  }
  EXPECT_THAT(d[0].reason, HasSubstr("GPU fraction of 0"));
  EXPECT_THAT(d[1].reason, HasSubstr("GPU fraction of 1.5"));
  EXPECT_THAT(d[2].reason, HasSubstr("-1 bytes of GPU memory"));
  EXPECT_THAT(d[3].reason, HasSubstr("0 GPUs per node"));
  EXPECT_THAT(d[4].reason, HasSubstr("0 GPUs"));
  EXPECT_THAT(d[5].reason, HasSubstr("-1 nodes"));
}

TEST(SchedulerTest, Schedule_EmptyCluster_EveryJobRetriesLater) {
  // No node yet: even a huge gang may fit the cluster once nodes join.
  std::vector<Decision> d = ScheduleOn(
      {}, {Experiment(1, 0.5), GangTotal(2, 1024), ExperimentGiB(3, 500)});
  ASSERT_EQ(d.size(), 3u);
  for (const Decision& decision : d) {
    EXPECT_EQ(decision.outcome, Outcome::kRetryLater);
    EXPECT_EQ(decision.reason, "no nodes have registered yet");
  }
}

TEST(SchedulerTest, Schedule_Priority_HigherFirstThenSubmitOrder) {
  // One GPU. Job 1 (priority 0, seq 1), job 2 (priority 5, seq 3),
  // job 3 (priority 5, seq 2). Order: 3, 2, 1; job 3 gets the GPU.
  JobRequest low = Experiment(1, 1.0);
  JobRequest high_late = Experiment(2, 1.0);
  high_late.priority = 5;
  high_late.submit_seq = 3;
  JobRequest high_early = Experiment(3, 1.0);
  high_early.priority = 5;
  high_early.submit_seq = 2;
  std::vector<Decision> d =
      ScheduleOn({Node("a", 1)}, {low, high_late, high_early});
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].job_id, 3);
  EXPECT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_EQ(d[1].job_id, 2);
  EXPECT_EQ(d[1].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[2].job_id, 1);
  EXPECT_EQ(d[2].outcome, Outcome::kRetryLater);
}

TEST(SchedulerTest, Schedule_WaitingGang_SmallJobBackfillsOutsideReservation) {
  // Node a: 4 GPUs, GPU 0 holds a 40 GiB task -> 3 whole free.
  // Node b: 2 free GPUs (too small for the gang).
  // Job 1, gang 1 x 4: no node has 4 free -> waits and reserves a (the
  // node with the most GPUs that can hold 4).
  // Job 2 (0.25 = 20 GiB): best fit alone would be a's GPU 0 (40 - 20 = 20
  // left), delaying the gang. With the reservation -> b's GPU 0.
  NodeState a = Node("a", 4);
  Use(a, 0, 40);
  std::vector<Decision> d =
      ScheduleOn({a, Node("b", 2)}, {Gang(1, 1, 4), Experiment(2, 0.25)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[1].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[1]), "b[0]");

  // Without the gang the same job packs onto a's GPU 0.
  d = ScheduleOn({a, Node("b", 2)}, {Experiment(2, 0.25)});
  EXPECT_EQ(Where(d[0]), "a[0]");
}

TEST(SchedulerTest, Schedule_WaitingGang_SmallJobWaitsRatherThanTakeItsGpus) {
  // Node a: 4 GPUs, GPU 0 busy -> 3 free; the only node.
  // Job 1, gang 1 x 4: waits, reserves a.
  // Job 2, gang 1 x 2, would fit a's 3 free GPUs but they are reserved:
  // it waits too, and says for whom.
  NodeState a = Node("a", 4);
  Use(a, 0, 40);
  std::vector<Decision> d = ScheduleOn({a}, {Gang(1, 1, 4), Gang(2, 1, 2)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[0].reason,
            "waiting for 4 free GPUs on one node "
            "(now at most 3 free GPUs on any node)");
  EXPECT_EQ(d[1].outcome, Outcome::kRetryLater);
  EXPECT_THAT(d[1].placement.nodes, IsEmpty());
  EXPECT_EQ(d[1].reason,
            "waiting for job 1, earlier in the queue, which has reserved "
            "node a until enough of it drains");
}

TEST(SchedulerTest, Schedule_TwoWaitingGangs_OnlyTheFirstReserves) {
  // Node a: 4 GPUs, GPU 0 busy -> 3 free. Node b: 4 GPUs, 0-1 busy -> 2 free.
  // Job 1, gang 1 x 4: waits; reserves a (4 GPUs, tie; more free now: 3 > 2).
  // Job 2, gang 1 x 4: waits too, but one reservation per call: b stays open.
  // Job 3, whole GPU: a is reserved -> b's GPU 2.
  NodeState a = Node("a", 4);
  Use(a, 0, 80);
  NodeState b = Node("b", 4);
  Use(b, 0, 80);
  Use(b, 1, 80);
  std::vector<Decision> d =
      ScheduleOn({a, b}, {Gang(1, 1, 4), Gang(2, 1, 4), Experiment(3, 1.0)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[1].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[2].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[2]), "b[2]");
}

TEST(SchedulerTest, Schedule_WaitingExperiment_ReservesLargestGpu) {
  // Node a: GPU 0 80 GiB with 60 used (20 free); GPU 1 40 GiB with 30 used.
  // Job 1 (50 GiB) fits neither now -> waits, reserves GPU 0 (largest).
  // Job 2 (15 GiB) fits only GPU 0 (20 free), which is reserved -> waits.
  // Job 3 (10 GiB) fits GPU 1 (10 free) -> placed.
  NodeState a = Node("a", 2);
  a.gpus[1].memory_total_bytes = 40 * kGiB;
  Use(a, 0, 60);
  Use(a, 1, 30);
  std::vector<Decision> d = ScheduleOn(
      {a}, {ExperimentGiB(1, 50), ExperimentGiB(2, 15), ExperimentGiB(3, 10)});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[1].outcome, Outcome::kRetryLater);
  EXPECT_THAT(d[1].reason, HasSubstr("job 1"));
  EXPECT_THAT(d[1].reason, HasSubstr("GPU 0 on a"));
  EXPECT_EQ(d[2].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[2]), "a[1]");
}

TEST(SchedulerTest, Schedule_ManyJobsOneCall_PlacementsNeverOverlap) {
  // Nodes a, b: 4 GPUs each (8 in all).
  // Job 1, 4 GPUs: K = 1 on a or b, tie -> a[0-3].
  // Job 2, 2 GPUs: only b has free GPUs -> b[0,1].
  // Jobs 3, 4 (whole GPU) -> b[2], b[3]. Job 5 (whole GPU): nothing left.
  std::vector<Decision> d =
      ScheduleOn({Node("a", 4), Node("b", 4)},
                 {GangTotal(1, 4), GangTotal(2, 2), Experiment(3, 1.0),
                  Experiment(4, 1.0), Experiment(5, 1.0)});
  EXPECT_EQ(Where(d[0]), "a[0,1,2,3]");
  EXPECT_EQ(Where(d[1]), "b[0,1]");
  EXPECT_EQ(Where(d[2]), "b[2]");
  EXPECT_EQ(Where(d[3]), "b[3]");
  EXPECT_EQ(d[4].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[4].reason,
            "waiting for a whole free GPU (now at most 0.0 GiB free on any "
            "GPU)");
  // Each GPU was handed out at most once.
  absl::flat_hash_map<std::string, int> uses;
  for (const Decision& decision : d) {
    for (const NodeAssignment& node : decision.placement.nodes) {
      for (int gpu : node.gpu_indices) {
        EXPECT_EQ(++uses[absl::StrCat(node.node, "/", gpu)], 1)
            << node.node << " GPU " << gpu;
      }
    }
  }
  EXPECT_EQ(uses.size(), 8u);
}

TEST(SchedulerTest, Schedule_ExcludedNode_GangGoesElsewhere) {
  // Nodes a, b, c: 1 GPU each. A 2 x 1 gang with a excluded (its pre-flight
  // failed there) takes b and c, although a comes first by name.
  JobRequest gang = Gang(1, 2, 1);
  gang.constraints.excluded_nodes = {"a"};
  std::vector<Decision> d =
      ScheduleOn({Node("a", 1), Node("b", 1), Node("c", 1)}, {gang});
  ASSERT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[0]), "b[0] c[0]");
}

TEST(SchedulerTest, Schedule_ExcludedNodeLeavesTooFew_WaitsNotInfeasible) {
  // Nodes a, b: 1 GPU each; the 2 x 1 gang has b excluded: a alone cannot
  // hold it. It waits (never infeasible on account of an exclusion), and
  // another job can still use b.
  JobRequest gang = Gang(1, 2, 1);
  gang.constraints.excluded_nodes = {"b"};
  std::vector<Decision> d = ScheduleOn({Node("a", 1), Node("b", 1)},
                                       {gang, Experiment(2, 1.0)});
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  EXPECT_EQ(d[1].outcome, Outcome::kPlaced);
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 1), Node("b", 1)};
  std::optional<Explanation> why = Scheduler(SchedulerConfig{}).Explain(cluster, {gang}, 1);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(why->nodes,
              testing::Contains("b: excluded for this job by a pre-flight"));
}

TEST(SchedulerTest, Schedule_JobWithImage_OnlyOnNodesWithAContainerRuntime) {
  // Nodes a (no runtime) and b (podman): 1 GPU each. The job with an image
  // goes to b although a comes first; a job without one still takes a.
  NodeState a = Node("a", 1);
  NodeState b = Node("b", 1);
  b.container_runtime = true;
  JobRequest boxed = Experiment(1, 1.0);
  boxed.constraints.needs_container_runtime = true;
  std::vector<Decision> d = ScheduleOn({a, b}, {boxed, Experiment(2, 1.0)});
  ASSERT_EQ(d.size(), 2u);
  ASSERT_EQ(d[0].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[0]), "b[0]");
  ASSERT_EQ(d[1].outcome, Outcome::kPlaced);
  EXPECT_EQ(Where(d[1]), "a[0]");

  // The node with a runtime busy: it waits for it, and why names the node
  // without one.
  NodeState busy = b;
  Use(busy, 0, 80);
  d = ScheduleOn({a, busy}, {boxed});
  EXPECT_EQ(d[0].outcome, Outcome::kRetryLater);
  ClusterSnapshot cluster;
  cluster.nodes = {a, busy};
  std::optional<Explanation> why = Scheduler(SchedulerConfig{}).Explain(cluster, {boxed}, 1);
  ASSERT_TRUE(why.has_value());
  EXPECT_THAT(why->nodes,
              testing::Contains(testing::HasSubstr("a: no container runtime")));
  // No node with a runtime at all: infeasible, as a GPU count no node has
  // (refused at submit; a --hold job waits for one to join).
  d = ScheduleOn({a}, {boxed});
  EXPECT_EQ(d[0].outcome, Outcome::kInfeasible);
}

}  // namespace
}  // namespace trainctl::sched
