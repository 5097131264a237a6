#include "coordinator/draining_tasks.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;

DrainingTask Task(int64_t job, int attempt, int rank, const std::string& node,
                  int probe_run = 0) {
  DrainingTask d;
  d.job_id = job;
  d.attempt = attempt;
  d.probe_run = probe_run;
  d.task.set_rank(rank);
  d.task.set_node(node);
  return d;
}

TEST(DrainingTasksTest, OnlyTheNodeRunningATaskMayEndIt) {
  DrainingTasks d;
  d.Add(Task(1, 0, 0, "a"));
  d.Add(Task(1, 0, 1, "b"));
  EXPECT_TRUE(d.HoldsJob(1));
  EXPECT_FALSE(d.Ended({1, 0, 0, 0}, "b"));  // rank 0 runs on a, not b
  EXPECT_FALSE(d.Ended({1, 1, 0, 0}, "a"));  // another attempt
  EXPECT_TRUE(d.Ended({1, 0, 0, 0}, "a"));
  EXPECT_EQ(d.size(), 1u);
  EXPECT_TRUE(d.Ended({1, 0, 0, 1}, "b"));
  EXPECT_FALSE(d.HoldsJob(1));
}

// A pre-flight probe and the job's rank of the same attempt are two tasks:
// the probe's exit never frees the rank's GPUs, nor the other way round.
TEST(DrainingTasksTest, AProbesExitEndsOnlyTheProbe) {
  DrainingTasks d;
  d.Add(Task(1, 2, 0, "a", /*probe_run=*/1));
  d.Add(Task(1, 2, 0, "a"));
  EXPECT_FALSE(d.Ended({1, 2, /*probe_run=*/2, 0}, "a"));  // another run
  EXPECT_TRUE(d.Ended({1, 2, /*probe_run=*/1, 0}, "a"));
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.begin()->probe_run, 0);
  EXPECT_TRUE(d.Ended({1, 2, 0, 0}, "a"));
}

TEST(DrainingTasksTest, RemoveIf_DropsEveryMatchAndCountsThem) {
  DrainingTasks d;
  d.Add(Task(1, 0, 0, "a"));
  d.Add(Task(2, 0, 0, "b"));
  d.Add(Task(3, 0, 0, "a"));
  EXPECT_EQ(d.RemoveIf([](const DrainingTask& t) { return t.task.node() == "a"; }), 2);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d.begin()->job_id, 2);
}

TEST(DrainingTasksTest, VictimsAreTakenOnceByTheirPreemptor) {
  DrainingTasks d;
  d.AddVictim(9, 4);
  d.AddVictim(9, 5);
  d.AddVictim(8, 6);
  EXPECT_THAT(d.TakeVictims(9), ElementsAre(4, 5));
  EXPECT_TRUE(d.TakeVictims(9).empty());
  EXPECT_THAT(d.TakeVictims(8), ElementsAre(6));
}

}  // namespace
}  // namespace trainctl::coord
