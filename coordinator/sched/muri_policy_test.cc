#include "coordinator/sched/muri_policy.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::muri {
namespace {

using ::testing::ElementsAre;
using ::testing::Optional;

MATCHER_P2(Share, node, gpus, "") {
  return arg.node == node && arg.gpus == gpus;
}

constexpr GpuCluster kTwoByFour{/*num_nodes=*/2, /*gpus_per_node=*/4};
constexpr GpuCluster kThreeByEight{/*num_nodes=*/3, /*gpus_per_node=*/8};

// --- YarnAllocator ---------------------------------------------------------

TEST(YarnAllocatorTest, TryPlace_SmallJobs_FirstNodeWithRoomInIndexOrder) {
  YarnAllocator alloc(kTwoByFour);
  // 3 GPUs -> node 0 (1 left); 2 GPUs -> node 1 (2 left); 1 GPU -> node 0.
  EXPECT_THAT(alloc.TryPlace(3), Optional(ElementsAre(Share(0, 3))));
  EXPECT_THAT(alloc.TryPlace(2), Optional(ElementsAre(Share(1, 2))));
  EXPECT_THAT(alloc.TryPlace(1), Optional(ElementsAre(Share(0, 1))));
  EXPECT_EQ(alloc.free_gpus(0), 0);
  EXPECT_EQ(alloc.free_gpus(1), 2);
}

TEST(YarnAllocatorTest, TryPlace_FragmentedFreeGpus_DoesNotFit) {
  YarnAllocator alloc(kTwoByFour);
  ASSERT_TRUE(alloc.TryPlace(2).has_value());
  ASSERT_TRUE(alloc.TryPlace(3).has_value());
  // Free: node 0 has 2, node 1 has 1 -> 3 free GPUs but no node with 3.
  EXPECT_EQ(alloc.total_free_gpus(), 3);
  EXPECT_EQ(alloc.TryPlace(3), std::nullopt);
  EXPECT_EQ(alloc.total_free_gpus(), 3);  // all or nothing
}

TEST(YarnAllocatorTest, TryPlace_MultiNodeJob_TakesWholeIdleNodes) {
  YarnAllocator alloc(kThreeByEight);
  ASSERT_THAT(alloc.TryPlace(1), Optional(ElementsAre(Share(0, 1))));
  // Node 0 is no longer idle: a 16-GPU job takes nodes 1 and 2.
  EXPECT_THAT(alloc.TryPlace(16),
              Optional(ElementsAre(Share(1, 8), Share(2, 8))));
}

TEST(YarnAllocatorTest, TryPlace_MultiNodeJobWithoutEnoughIdleNodes_Fails) {
  YarnAllocator alloc(kThreeByEight);
  ASSERT_TRUE(alloc.TryPlace(1).has_value());
  ASSERT_TRUE(alloc.TryPlace(8).has_value());  // node 1
  // 15 free GPUs, but only node 2 is idle.
  EXPECT_EQ(alloc.TryPlace(16), std::nullopt);
}

TEST(YarnAllocatorTest, TryPlace_NonMultipleOfNode_WholeNodesPlusRemainder) {
  YarnAllocator alloc(kThreeByEight);
  ASSERT_TRUE(alloc.TryPlace(4).has_value());  // node 0: 4 left
  // 12 = one idle node (1) + 4 on the first other node with room (0).
  EXPECT_THAT(alloc.TryPlace(12),
              Optional(ElementsAre(Share(0, 4), Share(1, 8))));
}

TEST(YarnAllocatorTest, Reserve_OverCommitted_ChangesNothing) {
  YarnAllocator alloc(kTwoByFour);
  EXPECT_TRUE(alloc.Reserve({{0, 3}}));
  EXPECT_FALSE(alloc.Reserve({{1, 2}, {0, 2}}));
  EXPECT_EQ(alloc.free_gpus(1), 4);
  EXPECT_EQ(alloc.free_gpus(0), 1);
}

// --- ScheduleShortestFirst -------------------------------------------------

TEST(ScheduleShortestFirstTest, Srtf_ShortestRemainingFirst_LongestPreempted) {
  // 4 GPUs on one node. Job 0 (4 GPUs, 100 s left) is running; job 1 (2
  // GPUs, 10 s) and job 2 (2 GPUs, 20 s) arrive. Order 1, 2, 0: jobs 1 and 2
  // fill the node, job 0 no longer fits and is preempted.
  std::vector<ShortestFirstJob> runnable = {
      {0, 4, 100, 400}, {1, 2, 10, 20}, {2, 2, 20, 40}};
  Decision d = ScheduleShortestFirst({1, 4}, ShortestKey::kRemainingTime,
                                     runnable, 3);
  EXPECT_EQ(runnable[0].job, 1);
  EXPECT_EQ(runnable[1].job, 2);
  EXPECT_EQ(runnable[2].job, 0);
  EXPECT_THAT(d.run, ElementsAre(false, true, true));
  EXPECT_THAT(d.placement[1], ElementsAre(Share(0, 2)));
}

TEST(ScheduleShortestFirstTest, Srsf_RanksByGpuTime_NotTime) {
  // Job 0: 1 GPU x 30 s = 30 GPU-s; job 1: 4 GPUs x 10 s = 40 GPU-s.
  // SRTF would put job 1 first; SRSF puts job 0 first.
  std::vector<ShortestFirstJob> runnable = {{1, 4, 10, 40}, {0, 1, 30, 30}};
  Decision d = ScheduleShortestFirst({1, 4}, ShortestKey::kRemainingGpuTime,
                                     runnable, 2);
  EXPECT_EQ(runnable[0].job, 0);
  // Job 0 takes 1 GPU, so the 4-GPU job 1 no longer fits on the node.
  EXPECT_THAT(d.run, ElementsAre(true, false));
}

TEST(ScheduleShortestFirstTest, Schedule_BigJobSkipped_SmallerLaterJobBackfills) {
  // 2 nodes x 4. Order: job 0 (3 GPUs), job 1 (8 GPUs: whole cluster, does
  // not fit after job 0), job 2 (4 GPUs: node 1 is idle) -> 0 and 2 run.
  std::vector<ShortestFirstJob> runnable = {
      {0, 3, 1, 3}, {1, 8, 2, 16}, {2, 4, 3, 12}};
  Decision d = ScheduleShortestFirst(kTwoByFour, ShortestKey::kRemainingTime,
                                     runnable, 3);
  EXPECT_THAT(d.run, ElementsAre(true, false, true));
  EXPECT_THAT(d.placement[2], ElementsAre(Share(1, 4)));
}

TEST(ScheduleShortestFirstTest, Schedule_EqualKeys_KeepPreviousOrder) {
  // Equal remaining time: the stable sort keeps the caller's order (2, 0, 1)
  // and only the first 4-GPU job fits.
  std::vector<ShortestFirstJob> runnable = {
      {2, 4, 5, 20}, {0, 4, 5, 20}, {1, 4, 5, 20}};
  Decision d = ScheduleShortestFirst({1, 4}, ShortestKey::kRemainingTime,
                                     runnable, 3);
  EXPECT_EQ(runnable[0].job, 2);
  EXPECT_THAT(d.run, ElementsAre(false, false, true));
}

// --- Tiresias --------------------------------------------------------------

TEST(TiresiasTest, QueueAfter_AtThreshold_DemotedOneStep) {
  TiresiasConfig config;  // 3250, 7200 GPU-s
  EXPECT_EQ(TiresiasQueueAfter(config, 0, 3249.999), 0);
  EXPECT_EQ(TiresiasQueueAfter(config, 0, 3250), 1);
  // Far past both thresholds: still one step per check.
  EXPECT_EQ(TiresiasQueueAfter(config, 0, 1e9), 1);
  EXPECT_EQ(TiresiasQueueAfter(config, 1, 7200), 2);
  EXPECT_EQ(TiresiasQueueAfter(config, 2, 1e9), 2);  // last queue keeps all
}

TEST(TiresiasTest, NextDemotion_FourGpus_CeilOfThresholdPerGpu) {
  TiresiasConfig config;
  // ceil(3250 / 4) = 813 s of wall service; 13 s done at t = 100 ->
  // (813 - 13) + 100 = 900.
  EXPECT_THAT(TiresiasNextDemotion(config, 0, 4, 13, 100), Optional(900.0));
  // Queue 1: ceil(7200 / 4) = 1800 -> (1800 - 813) + 1000 = 1987.
  EXPECT_THAT(TiresiasNextDemotion(config, 1, 4, 813, 1000), Optional(1987.0));
  EXPECT_EQ(TiresiasNextDemotion(config, 2, 4, 5000, 1000), std::nullopt);
}

TEST(TiresiasTest, Schedule_GpuCountingOnly_HigherQueueFirstThenFifo) {
  // 8 GPUs. Q0 = [2 (4 GPUs), 3 (8 GPUs)], Q1 = [0 (4 GPUs), 1 (2 GPUs)].
  // Walk: job 2 admitted (4 left); job 3 needs 8, skipped; job 0 admitted
  // (0 left); job 1 skipped. Job 1 was running: preempted.
  TiresiasQueues q = MakeTiresiasQueues(TiresiasConfig{});
  q.queues[0] = {2, 3};
  q.queues[1] = {0, 1};
  std::vector<TiresiasJob> jobs = {
      {4, true}, {2, true}, {4, false}, {8, false}};
  Decision d = ScheduleTiresias(8, q, jobs);
  EXPECT_THAT(d.run, ElementsAre(true, false, true, false));
  // Non-admitted jobs move behind admitted ones within their queue.
  EXPECT_THAT(q.queues[0], ElementsAre(2, 3));
  EXPECT_THAT(q.queues[1], ElementsAre(0, 1));
}

TEST(TiresiasTest, Schedule_PendingAheadOfAdmitted_MovesBehind) {
  // 4 GPUs; Q0 = [0 (8 GPUs, cannot fit), 1 (4 GPUs)] -> [1, 0].
  TiresiasQueues q = MakeTiresiasQueues(TiresiasConfig{});
  q.queues[0] = {0, 1};
  std::vector<TiresiasJob> jobs = {{8, false}, {4, false}};
  Decision d = ScheduleTiresias(4, q, jobs);
  EXPECT_THAT(d.run, ElementsAre(false, true));
  EXPECT_THAT(q.queues[0], ElementsAre(1, 0));
}

TEST(TiresiasTest, Move_Demoted_AppendedToTailOfNextQueue) {
  TiresiasQueues q = MakeTiresiasQueues(TiresiasConfig{});
  q.queues[0] = {4, 5};
  q.queues[1] = {7};
  TiresiasMove(q, 4, 0, 1);
  EXPECT_THAT(q.queues[0], ElementsAre(5));
  EXPECT_THAT(q.queues[1], ElementsAre(7, 4));
}

// --- FIFO (ours) -----------------------------------------------------------

TEST(ScheduleFifoTest, Fifo_HeadDoesNotFit_NothingOvertakes) {
  // 2 x 4. Job 0 runs on node 0 (3 GPUs). Job 1 (8 GPUs) waits; strict FIFO
  // keeps job 2 (1 GPU) behind it.
  std::vector<FifoJob> order = {
      {0, 3, GpuPlacement{{0, 3}}}, {1, 8, std::nullopt}, {2, 1, std::nullopt}};
  Decision d = ScheduleFifo(kTwoByFour, order, /*backfill=*/false, 3);
  EXPECT_THAT(d.run, ElementsAre(true, false, false));
  EXPECT_THAT(d.placement[0], ElementsAre(Share(0, 3)));
}

TEST(ScheduleFifoTest, FifoBackfill_HeadDoesNotFit_LaterJobStarts) {
  std::vector<FifoJob> order = {
      {0, 3, GpuPlacement{{0, 3}}}, {1, 8, std::nullopt}, {2, 1, std::nullopt}};
  Decision d = ScheduleFifo(kTwoByFour, order, /*backfill=*/true, 3);
  EXPECT_THAT(d.run, ElementsAre(true, false, true));
  // Job 2 goes to the first node with a free GPU: node 0 (1 left).
  EXPECT_THAT(d.placement[2], ElementsAre(Share(0, 1)));
}

}  // namespace
}  // namespace trainctl::sched::muri
