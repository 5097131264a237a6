// Reservation: what the head-of-queue hold covers, its estimated start, which
// later jobs may still use held GPUs (those that cannot delay the head), and
// the sentence of a job that waits behind it.

#include "coordinator/sched/reservation.h"

#include <cstdint>

#include "coordinator/sched/gang_placer.h"
#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/testing/pass_fixtures.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::sched::internal {
namespace {

using ::trainctl::sched::testing::AddRunning;
using ::trainctl::sched::testing::Experiment;
using ::trainctl::sched::testing::Gang;
using ::trainctl::sched::testing::GangOn;
using ::trainctl::sched::testing::kGiB;
using ::trainctl::sched::testing::kGpuBytes;
using ::trainctl::sched::testing::Node;

// a: 4 GPUs, all busy until a job with no time limit ends; b: 4 GPUs, 2 of
// them busy for another 100 s. The head wants 4 GPUs on one node.
ClusterSnapshot TwoBusyNodes() {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("a", 4), Node("b", 4)};
  AddRunning(cluster, 0, {0, 1, 2, 3}, 100).remaining_s = -1;
  AddRunning(cluster, 1, {0, 1}, 101).remaining_s = 100;
  return cluster;
}

TEST(ReservationTest, Take_HoldsTheNodeThatDrainsSoonestAndEstimatesTheStart) {
  const ClusterSnapshot cluster = TwoBusyNodes();
  SchedulerConfig config;
  PassState state(cluster, config, /*indexed=*/true);
  GangPlacer gangs(state);
  Reservation hold(state);
  const JobRequest head = GangOn(1, 1, 4);
  EXPECT_FALSE(hold.taken());
  const int64_t version = state.state_version();
  hold.Take(head, [&] { return gangs.Fits(head, /*honor_hold=*/false); });
  EXPECT_TRUE(hold.taken());
  EXPECT_EQ(hold.holder_job_id(), 1);
  // b has more whole free GPUs now (2 against 0): it is held, all of it.
  EXPECT_EQ(hold.description(), "node b");
  for (int g = 0; g < 4; ++g) {
    EXPECT_FALSE(state.IsHeld(0, g));
    EXPECT_TRUE(state.IsHeld(1, g));
  }
  EXPECT_DOUBLE_EQ(hold.eta_s(), 100);
  EXPECT_GT(state.state_version(), version);
  // The estimate freed job 101's GPUs only to look: they are taken again.
  EXPECT_EQ(state.nodes()[1].gpus[0].reserved_bytes, kGpuBytes);
  EXPECT_EQ(state.GangFreeCount(1, /*honor_hold=*/false), 2);
}

TEST(ReservationTest, TheHoldBlocksASmallJobThatWouldDelayTheHead) {
  const ClusterSnapshot cluster = TwoBusyNodes();
  SchedulerConfig config;
  PassState state(cluster, config, /*indexed=*/true);
  GangPlacer gangs(state);
  Reservation hold(state);
  const JobRequest head = GangOn(1, 1, 4);
  hold.Take(head, [&] { return gangs.Fits(head, false); });

  // No time limit: it might run past the head's start; it may not use b.
  JobRequest small = Gang(2, 1);
  EXPECT_FALSE(hold.MayUse(small));
  EXPECT_FALSE(gangs.Fits(small, /*honor_hold=*/!hold.MayUse(small)));
  // Ends (60 s) before the head's estimated start (100 s): it may backfill.
  small.time_limit_s = 60;
  EXPECT_TRUE(hold.MayUse(small));
  EXPECT_TRUE(gangs.Fits(small, /*honor_hold=*/!hold.MayUse(small)));
  // Runs longer than that: blocked again.
  small.time_limit_s = 600;
  EXPECT_FALSE(hold.MayUse(small));
}

TEST(ReservationTest, APreemptibleJobTheHeadOutranksMayUseTheHold) {
  const ClusterSnapshot cluster = TwoBusyNodes();
  SchedulerConfig config;
  PassState state(cluster, config, /*indexed=*/true);
  GangPlacer gangs(state);
  Reservation hold(state);
  const JobRequest head = GangOn(1, 1, 4);
  hold.Take(head, [&] { return gangs.Fits(head, false); });
  JobRequest low = Gang(2, 1);
  low.preemptible = true;
  low.priority = -1;  // The head could preempt it when its turn comes.
  EXPECT_TRUE(hold.MayUse(low));
  low.priority = 0;  // Same priority and level: it could not.
  EXPECT_FALSE(hold.MayUse(low));
}

TEST(ReservationTest, BlockedReason_NamesTheHolderAndTheEstimateWhenKnown) {
  ClusterSnapshot cluster = TwoBusyNodes();
  SchedulerConfig config;
  {
    PassState state(cluster, config, true);
    GangPlacer gangs(state);
    Reservation hold(state);
    const JobRequest head = GangOn(1, 1, 4);
    hold.Take(head, [&] { return gangs.Fits(head, false); });
    EXPECT_EQ(hold.BlockedReason(),
              "waiting for job 1, earlier in the queue, which has reserved "
              "node b until enough of it drains (estimated in 2m)");
  }
  cluster.running[1].remaining_s = -1;  // No time limit: no estimate.
  PassState state(cluster, config, true);
  GangPlacer gangs(state);
  Reservation hold(state);
  const JobRequest head = GangOn(1, 1, 4);
  hold.Take(head, [&] { return gangs.Fits(head, false); });
  EXPECT_LT(hold.eta_s(), 0);
  EXPECT_EQ(hold.BlockedReason(),
            "waiting for job 1, earlier in the queue, which has reserved "
            "node b until enough of it drains");
}

TEST(ReservationTest, Take_ForAnExperimentHoldsTheLargestGpuItFits) {
  ClusterSnapshot cluster;
  cluster.nodes = {Node("small", 1, 40 * kGiB), Node("big", 1)};
  AddRunning(cluster, 0, {0}, 100).remaining_s = 30;
  AddRunning(cluster, 1, {0}, 101).remaining_s = 90;
  SchedulerConfig config;
  for (bool indexed : {true, false}) {
    PassState state(cluster, config, indexed);
    Reservation hold(state);
    const JobRequest head = Experiment(1, 0.5);
    hold.Take(head, [] { return true; });
    EXPECT_EQ(hold.description(), "GPU 0 on big");
    EXPECT_TRUE(state.IsHeld(1, 0));
    EXPECT_FALSE(state.IsHeld(0, 0));
    EXPECT_DOUBLE_EQ(hold.eta_s(), 90);
  }
}

}  // namespace
}  // namespace trainctl::sched::internal
