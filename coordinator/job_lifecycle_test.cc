#include "coordinator/job_lifecycle.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using Kind = AttemptStep::Kind;

// A RUNNING gang of `ranks` ranks, all RUNNING.
v1::Job Gang(int ranks, int max_restarts) {
  v1::Job job;
  job.set_id(7);
  job.set_state(v1::JOB_STATE_RUNNING);
  job.set_world_size(ranks);
  job.mutable_spec()->set_max_restarts(max_restarts);
  for (int r = 0; r < ranks; ++r) {
    v1::Task* t = job.add_tasks();
    t->set_rank(r);
    t->set_node(r == 0 ? "node-a" : "node-b");
    t->set_state(v1::TASK_STATE_RUNNING);
  }
  return job;
}

void Exit(v1::Job& job, int rank, int code) {
  v1::Task* t = job.mutable_tasks(rank);
  t->set_state(v1::TASK_STATE_EXITED);
  t->set_exit_code(code);
}

TEST(JobLifecycleTest, RanksStillRunning_Wait) {
  v1::Job job = Gang(2, 0);
  Exit(job, 0, 0);
  EXPECT_EQ(DecideAttempt(job).kind, Kind::kWait);
  Exit(job, 1, 0);
  EXPECT_EQ(DecideAttempt(job).kind, Kind::kSucceed);
}

TEST(JobLifecycleTest, AFailedRank_RestartsWhileRestartsAreLeft) {
  v1::Job job = Gang(2, /*max_restarts=*/1);
  Exit(job, 1, 3);
  AttemptStep step = DecideAttempt(job);
  EXPECT_EQ(step.kind, Kind::kRestart);
  EXPECT_THAT(step.reason, HasSubstr("attempt 0 failed: rank 1 on node-b exited with code 3"));
  EXPECT_THAT(step.reason, HasSubstr("see `trainctl logs 7 --rank 1`"));
  EXPECT_THAT(step.reason, HasSubstr("restarting (1 of 1 restarts)"));
  job.set_attempt(1);
  step = DecideAttempt(job);
  EXPECT_EQ(step.kind, Kind::kFail);
  EXPECT_EQ(step.reason, "rank 1 on node-b exited with code 3; see `trainctl logs 7 --rank 1`");
}

TEST(JobLifecycleTest, PreemptionsAndPreflightRequeues_UseUpNoRestart) {
  v1::Job job = Gang(1, /*max_restarts=*/1);
  job.set_attempt(3);
  job.set_preemptions(2);
  job.mutable_preflight()->set_requeues(1);
  Exit(job, 0, 1);
  EXPECT_EQ(DecideAttempt(job).kind, Kind::kRestart);
}

TEST(JobLifecycleTest, OutOfMemoryOfAnAutoPackedTrial_RequeuesUnlessImpossible) {
  v1::Job job = Gang(1, 0);
  job.mutable_spec()->set_auto_pack(true);
  Exit(job, 0, 1);
  job.mutable_tasks(0)->set_out_of_memory(true);
  EXPECT_EQ(DecideAttempt(job).kind, Kind::kRequeueAfterOom);
  EXPECT_EQ(DecideAttempt(job, /*oom_requeue_possible=*/false).kind, Kind::kFail);
}

TEST(JobLifecycleTest, LateReportsAndPreflights_AreNotDecidedHere) {
  v1::Job job = Gang(1, 0);
  Exit(job, 0, 1);
  job.set_state(v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(DecideAttempt(job).kind, Kind::kWait);
  job.set_state(v1::JOB_STATE_SCHEDULED);
  job.mutable_preflight()->set_probe_run(1);
  EXPECT_EQ(DecideAttempt(job).kind, Kind::kJudgePreflight);
}

// The wait on_job_placed reports: from the submit for a first attempt,
// from the end of the attempt before for a later one.
TEST(JobLifecycleTest, QueueWait_FromSubmitOrTheLastAttemptsEnd) {
  v1::Job job;
  job.set_submit_time_ms(1000);
  EXPECT_EQ(QueueWaitMs(job, 4000), 3000);
  job.add_attempts()->set_end_time_ms(3500);
  EXPECT_EQ(QueueWaitMs(job, 4000), 500);
  EXPECT_EQ(QueueWaitMs(job, 3000), 0);  // a clock that went back: no wait
}

}  // namespace
}  // namespace trainctl::coord
