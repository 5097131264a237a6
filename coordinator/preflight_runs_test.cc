#include "coordinator/preflight_runs.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

// A 2-node gang of job 7, attempt `attempt`, placed (SCHEDULED, ranks
// STARTING on a and b).
v1::Job PlacedGang(int attempt = 0) {
  v1::Job job;
  job.set_id(7);
  job.set_kind(v1::JOB_KIND_GANG);
  job.set_state(v1::JOB_STATE_SCHEDULED);
  job.set_attempt(attempt);
  job.set_attempt_token("attempt-secret");
  job.mutable_spec()->set_nodes(2);
  job.mutable_spec()->set_gpus_per_node(1);
  for (int r = 0; r < 2; ++r) {
    v1::Task* t = job.add_tasks();
    t->set_rank(r);
    t->set_node(r == 0 ? "a" : "b");
    t->set_state(v1::TASK_STATE_STARTING);
  }
  return job;
}

PreflightConfig Config(int max_failures = 3) {
  PreflightConfig c;
  c.auto_enabled = true;
  c.timeout = absl::Seconds(60);
  c.max_failures = max_failures;
  return c;
}

// Rank `rank`'s probe exited with `exit_code` and, when `busbw` > 0, a result
// line.
void ProbeExit(v1::Job& job, int rank, int exit_code, double busbw) {
  v1::Task& t = *job.mutable_tasks(rank);
  t.set_state(v1::TASK_STATE_EXITED);
  t.set_exit_code(exit_code);
  v1::TaskStatus st;
  st.set_state(v1::TASK_STATE_EXITED);
  st.set_exit_code(exit_code);
  if (busbw > 0) {
    st.mutable_preflight_result()->set_comm_ready_ms(100);
    st.mutable_preflight_result()->set_busbw_gbps(busbw);
  }
  PreflightRuns::RecordResult(job, t, st);
}

TEST(PreflightRunsTest, Wanted_ByModeNodesAndAgents) {
  const PreflightRuns runs(Config());
  v1::Job job = PlacedGang();
  EXPECT_TRUE(runs.Wanted(job, 2, /*agents_run_probes=*/true));
  EXPECT_FALSE(runs.Wanted(job, 1, true));   // AUTO probes only across nodes
  EXPECT_FALSE(runs.Wanted(job, 2, false));  // an agent predates probe tasks
  job.mutable_spec()->set_preflight(v1::PREFLIGHT_MODE_ON);
  EXPECT_TRUE(runs.Wanted(job, 1, true));
  job.mutable_spec()->set_preflight(v1::PREFLIGHT_MODE_OFF);
  EXPECT_FALSE(runs.Wanted(job, 2, true));
  PreflightConfig off = Config();
  off.auto_enabled = false;
  EXPECT_FALSE(PreflightRuns(off).Wanted(PlacedGang(), 2, true));
}

TEST(PreflightRunsTest, Begin_ProbesAreTasksOfTheirOwnWithTheirOwnToken) {
  PreflightRuns runs(Config());
  v1::Job job = PlacedGang(/*attempt=*/3);
  const PreflightRuns::Opening o = runs.Begin(job, kT0);
  EXPECT_EQ(o.run, 1);
  EXPECT_THAT(o.rank_hosts, ElementsAre("a", "b"));
  EXPECT_NE(o.token, job.attempt_token());
  EXPECT_EQ(job.preflight().probe_run(), 1);
  EXPECT_THAT(job.reason(), HasSubstr("pre-flight 1"));

  v1::StartTask start;
  start.mutable_task()->set_job_id(7);
  start.mutable_task()->set_attempt(3);
  start.add_argv("python");
  (*start.mutable_env())["TRAINCTL_TOKEN"] = "attempt-secret";
  runs.MakeProbeStart(job, start);
  EXPECT_EQ(start.task().attempt(), 3);  // the job's attempt, not a made-up one
  EXPECT_EQ(start.task().probe_run(), 1);
  EXPECT_TRUE(start.argv().empty());
  EXPECT_EQ(start.env().at("TRAINCTL_TOKEN"), o.token);
  EXPECT_EQ(start.env().at("TRAINCTL_PREFLIGHT"), "1");
  EXPECT_EQ(start.preflight().timeout_ms(), 45000);  // 3/4 of 60 s
}

TEST(PreflightRunsTest, OneRankErrors_TheOthersAreStoppedNotBlamed) {
  PreflightRuns runs(Config());
  v1::Job job = PlacedGang();
  runs.Begin(job, kT0);
  job.mutable_tasks(1)->set_state(v1::TASK_STATE_RUNNING);
  ProbeExit(job, 0, /*exit_code=*/1, /*busbw=*/0);  // no result line

  const PreflightRuns::Progress p = PreflightRuns::OnProbeEnded(job);
  EXPECT_TRUE(p.judge);
  EXPECT_THAT(p.stop_ranks, ElementsAre(1));
  const v1::PreflightRun& run = job.preflight().runs(0);
  EXPECT_EQ(run.ranks(0).status(), v1::PREFLIGHT_RANK_STATUS_ERROR);
  EXPECT_THAT(run.ranks(0).detail(), HasSubstr("without a result"));
  EXPECT_EQ(run.ranks(1).status(), v1::PREFLIGHT_RANK_STATUS_STOPPED);

  const PreflightRuns::Verdict v = runs.Judge(job, kT0 + absl::Seconds(2));
  EXPECT_EQ(v.verdict, v1::PREFLIGHT_VERDICT_FAILED);
  EXPECT_EQ(v.to, v1::JOB_STATE_PENDING);
  EXPECT_THAT(v.why, HasSubstr("placing the gang again without a"));
  ASSERT_EQ(job.preflight().excluded_size(), 1);
  EXPECT_EQ(job.preflight().excluded(0).node(), "a");
  EXPECT_EQ(job.preflight().requeues(), 1);
}

TEST(PreflightRunsTest, WaitsForEveryProbe_ThenPasses) {
  PreflightRuns runs(Config());
  v1::Job job = PlacedGang();
  runs.Begin(job, kT0);
  ProbeExit(job, 0, 0, 40);
  EXPECT_FALSE(PreflightRuns::OnProbeEnded(job).judge);  // rank 1 still runs
  ProbeExit(job, 1, 0, 41);
  EXPECT_TRUE(PreflightRuns::OnProbeEnded(job).judge);
  const PreflightRuns::Verdict v = runs.Judge(job, kT0 + absl::Seconds(1));
  EXPECT_EQ(v.verdict, v1::PREFLIGHT_VERDICT_PASSED);
  EXPECT_EQ(v.run, 1);
  EXPECT_EQ(job.preflight().probe_run(), 0);  // the tasks become the job's
  EXPECT_EQ(job.preflight().runs(0).end_time_ms(), absl::ToUnixMillis(kT0) + 1000);
  EXPECT_TRUE(runs.TakeDue(kT0 + absl::Hours(1)).empty());  // judged: no deadline
}

TEST(PreflightRunsTest, AtMaxFailures_TheJobFails) {
  PreflightRuns runs(Config(/*max_failures=*/1));
  v1::Job job = PlacedGang();
  runs.Begin(job, kT0);
  ProbeExit(job, 0, 0, 100);
  ProbeExit(job, 1, 0, 10);  // below half of its peer: slow
  const PreflightRuns::Verdict v = runs.Judge(job, kT0);
  EXPECT_EQ(v.to, v1::JOB_STATE_FAILED);
  EXPECT_THAT(v.why, HasSubstr("--preflight-max-failures 1"));
}

TEST(PreflightRunsTest, PastTheDeadline_RunningRanksAreMissing) {
  PreflightRuns runs(Config());
  v1::Job job = PlacedGang();
  runs.Begin(job, kT0);
  ProbeExit(job, 0, 0, 40);
  EXPECT_TRUE(runs.TakeDue(kT0 + absl::Seconds(59)).empty());
  EXPECT_THAT(runs.TakeDue(kT0 + absl::Seconds(60)), ElementsAre(7));
  EXPECT_TRUE(runs.TakeDue(kT0 + absl::Seconds(61)).empty());  // taken once
  runs.MarkMissing(job);
  EXPECT_EQ(job.preflight().runs(0).ranks(1).status(), v1::PREFLIGHT_RANK_STATUS_MISSING);
  EXPECT_EQ(runs.Judge(job, kT0).verdict, v1::PREFLIGHT_VERDICT_FAILED);
  EXPECT_EQ(job.preflight().excluded(0).node(), "b");  // the hung one
}

TEST(PreflightRunsTest, LeavingMidRun_AbortsItOnce) {
  PreflightRuns runs(Config());
  v1::Job job = PlacedGang();
  runs.Begin(job, kT0);
  bool aborted = false;
  EXPECT_EQ(runs.Leave(job, "cancelled", 5, &aborted), 1);
  EXPECT_TRUE(aborted);
  EXPECT_EQ(job.preflight().runs(0).verdict(), v1::PREFLIGHT_VERDICT_ABORTED);
  EXPECT_EQ(job.preflight().runs(0).reason(), "cancelled");
  // probe_run stays, so the probes' exits still match their tasks.
  EXPECT_EQ(job.preflight().probe_run(), 1);
  EXPECT_TRUE(runs.TakeDue(kT0 + absl::Hours(1)).empty());
  EXPECT_EQ(runs.Leave(job, "again", 6, &aborted), 1);
  EXPECT_FALSE(aborted);

  v1::Job plain = PlacedGang();
  EXPECT_EQ(runs.Leave(plain, "cancelled", 5, &aborted), std::nullopt);
}

// Coordinators before probe_run stored the probes' made-up attempt number:
// such a job is recognized at load as caught mid-run, its tasks the last
// run's probes.
TEST(PreflightRunsTest, CaughtMidRun_AlsoAsStoredByOlderCoordinators) {
  PreflightRuns runs(Config());
  v1::Job job = PlacedGang();
  runs.Begin(job, kT0);
  v1::Job legacy = job;
  EXPECT_TRUE(PreflightRuns::CaughtMidRun(job));

  legacy.mutable_preflight()->set_probe_run(0);
  legacy.mutable_preflight()->set_legacy_probe_attempt(1000000001);
  EXPECT_TRUE(PreflightRuns::CaughtMidRun(legacy));
  EXPECT_EQ(legacy.preflight().probe_run(), 1);
  EXPECT_EQ(legacy.preflight().legacy_probe_attempt(), 0);

  v1::Job plain = PlacedGang();
  EXPECT_FALSE(PreflightRuns::CaughtMidRun(plain));
}

}  // namespace
}  // namespace trainctl::coord
