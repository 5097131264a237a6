#include "coordinator/experiment_store.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;

v1::Job Trial(int64_t id, const std::string& sweep) {
  v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_sweep_id(sweep);
  v1::EarlyStop* c = job.mutable_spec()->mutable_early_stop();
  c->set_metric("val_loss");
  c->set_mode("min");
  c->set_grace_steps(10);
  c->set_reduction_factor(3);
  return job;
}

v1::MetricPoint Point(const std::string& key, int64_t step, double value) {
  v1::MetricPoint p;
  p.set_key(key);
  p.set_step(step);
  p.set_value(value);
  return p;
}

TEST(ExperimentStoreTest, Reserve_StopsAtTheCapAndCountsNothingThen) {
  ExperimentStore s(/*max_points_per_job=*/5);
  EXPECT_EQ(*s.Reserve(1, 3), 3);
  absl::StatusOr<int64_t> over = s.Reserve(1, 3);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("cap of 5"));
  EXPECT_EQ(s.Points(1), 3);
  EXPECT_EQ(s.PointsLeft(1), 2);
  s.Unreserve(1, 3);  // the store refused them
  EXPECT_EQ(s.Points(1), 0);
  EXPECT_EQ(s.PointsLeft(2), 5);  // another job has its own cap
}

TEST(ExperimentStoreTest, OnReport_StopsTheWorstTrialAtARung) {
  ExperimentStore s(100);
  v1::Job a = Trial(1, "sw"), b = Trial(2, "sw"), c = Trial(3, "sw");
  EXPECT_FALSE(s.OnReport(a, {Point("val_loss", 10, 0.40)}).stop_reason.has_value());
  EXPECT_FALSE(s.OnReport(b, {Point("val_loss", 12, 0.30)}).stop_reason.has_value());
  // Other keys are not judged.
  EXPECT_FALSE(s.OnReport(c, {Point("loss", 10, 9.0)}).recorded);
  ExperimentStore::EarlyStop stop = s.OnReport(c, {Point("val_loss", 10, 0.35)});
  EXPECT_TRUE(stop.recorded);
  ASSERT_TRUE(stop.stop_reason.has_value());
  EXPECT_THAT(*stop.stop_reason, HasSubstr("stopped early (ASHA): val_loss 0.35 at step 10"));
  EXPECT_EQ(c.rung_values().at(10), 0.35);
}

TEST(ExperimentStoreTest, LoadRungs_ARestartKeepsTheRungs) {
  ExperimentStore before(100);
  v1::Job a = Trial(1, "sw"), b = Trial(2, "sw");
  before.OnReport(a, {Point("val_loss", 10, 0.40)});
  before.OnReport(b, {Point("val_loss", 10, 0.30)});
  ExperimentStore after(100);  // a new coordinator loads the stored jobs
  after.LoadRungs(a);
  after.LoadRungs(b);
  v1::Job c = Trial(3, "sw");
  EXPECT_TRUE(after.OnReport(c, {Point("val_loss", 10, 0.35)}).stop_reason.has_value());
}

TEST(ExperimentStoreTest, CheckReport_NamesThePointAndWantsAToken) {
  v1::ReportMetricsRequest req;
  EXPECT_EQ(ExperimentStore::CheckReport(req, 10).code(), absl::StatusCode::kInvalidArgument);
  *req.add_points() = Point("loss", 1, 0.5);
  *req.add_points() = Point("bad key!", 2, 0.4);
  EXPECT_THAT(ExperimentStore::CheckReport(req, 10).message(), HasSubstr("points[1]"));
  req.mutable_points(1)->set_key("loss");
  EXPECT_EQ(ExperimentStore::CheckReport(req, 10).code(), absl::StatusCode::kUnauthenticated);
  req.set_token("t");
  EXPECT_TRUE(ExperimentStore::CheckReport(req, 10).ok());
  EXPECT_THAT(ExperimentStore::CheckReport(req, 1).message(), HasSubstr("need 1 to 1 points"));
}

TEST(ExperimentStoreTest, Summarize_OneSeriesPerKeyWithLastMinMax) {
  v1::GetMetricsResponse resp;
  ExperimentStore::Summarize({Point("acc", 1, 0.5), Point("acc", 2, 0.7), Point("loss", 1, 2.0),
                              Point("loss", 2, 1.0), Point("loss", 3, 1.5)},
                             /*summary_only=*/true, &resp);
  ASSERT_EQ(resp.series_size(), 2);
  EXPECT_EQ(resp.series(1).key(), "loss");
  EXPECT_EQ(resp.series(1).count(), 3);
  EXPECT_EQ(resp.series(1).last(), 1.5);
  EXPECT_EQ(resp.series(1).last_step(), 3);
  EXPECT_EQ(resp.series(1).min(), 1.0);
  EXPECT_EQ(resp.series(1).max(), 2.0);
  EXPECT_EQ(resp.series(1).points_size(), 0);  // summary only
}

TEST(AttemptRecordTest, AnAttemptIsOpenedAtPlacementAndClosedWithItsGpuHours) {
  v1::Job job;
  job.set_attempt(0);
  RecordAttemptEdge(job, v1::JOB_STATE_PENDING, v1::JOB_STATE_SCHEDULED, 1000, 2.0);
  ASSERT_EQ(job.attempts_size(), 1);
  // Running for half an hour on 2 GPUs: 1 GPU-hour so far, as a reader sees.
  v1::Job now = job;
  CountRunningGpuHours(now, 1000 + 1800 * 1000);
  EXPECT_DOUBLE_EQ(now.gpu_hours(), 1.0);
  RecordAttemptEdge(job, v1::JOB_STATE_SCHEDULED, v1::JOB_STATE_RUNNING, 2000, 0);
  EXPECT_EQ(job.attempts(0).end_time_ms(), 0);  // still running
  v1::Task* t = job.add_tasks();
  t->set_rank(0);
  t->set_state(v1::TASK_STATE_EXITED);
  t->set_exit_code(3);
  job.set_reason("rank 0 exited with code 3");
  RecordAttemptEdge(job, v1::JOB_STATE_RUNNING, v1::JOB_STATE_FAILED, 1000 + 3600 * 1000, 0);
  const v1::AttemptRecord& r = job.attempts(0);
  EXPECT_EQ(r.outcome(), v1::ATTEMPT_OUTCOME_FAILED);
  EXPECT_EQ(r.reason(), "rank 0 exited with code 3");
  ASSERT_EQ(r.ranks_size(), 1);
  EXPECT_EQ(r.ranks(0).state(), "EXITED");
  EXPECT_EQ(r.ranks(0).exit_code(), 3);
  EXPECT_DOUBLE_EQ(r.gpu_hours(), 2.0);
  EXPECT_DOUBLE_EQ(job.gpu_hours(), 2.0);
  CountRunningGpuHours(job, 1000 + 7200 * 1000);  // ended: nothing more counts
  EXPECT_DOUBLE_EQ(job.gpu_hours(), 2.0);
}

}  // namespace
}  // namespace trainctl::coord
