// Tier 1 tests of the experiment records kept by the coordinator core: metric
// reports (auth, validation, cap, queries), attempt history with exit codes
// and GPU-hours, and the per-job checkpoint directory. A FakeClock, a
// MemoryStateStore and fake agent connections; no network, no sleeps.

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/metric_rules.h"
#include "common/testing/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::AllOf;
using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

constexpr int64_t kGiB = int64_t{1} << 30;

using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

v1::RegisterNode NodeReg(const std::string& name, int gpus) {
  return ::trainctl::coord::testing::FakeNodeRegistration(name, gpus, /*cpu_count=*/8);
}

v1::AgentMessage Status(const v1::StartTask& start, v1::TaskState state,
                        int exit_code = 0) {
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = start.task();
  st->mutable_task()->set_pid(100);
  st->set_state(state);
  st->set_exit_code(exit_code);
  st->set_log_path(absl::StrCat("/var/log/trainctl/job-", start.task().job_id(),
                                "/attempt-", start.task().attempt(), "/rank-0.log"));
  return msg;
}

v1::MetricPoint Point(const std::string& key, double value, int64_t step) {
  v1::MetricPoint p;
  p.set_key(key);
  p.set_value(value);
  p.set_step(step);
  return p;
}

class ExperimentRecordTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  void Restart() {
    core_.reset();
    CoordinatorConfig config;
    config.checkpoint_root = "/shared/ckpt/";
    config.limits.max_metric_points_per_job = 5;
    config.hooks.on_attempt_ended = [this](const v1::UsageRecord& r) { ended_.push_back(r); };
    auto core = Coordinator::Create(config, &store_, &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
    conn_ = std::make_unique<FakeConnection>();
    TC_ASSERT_OK(core_->RegisterAgent(NodeReg("a", 1), conn_.get()));
  }

  int64_t SubmitRunning(v1::JobSpec spec) {
    spec.add_command("python");
    auto id = core_->SubmitJob(spec, "");
    EXPECT_THAT(id, ::trainctl::testing::IsOk());
    Agent(Status(conn_->Starts().back(), v1::TASK_STATE_RUNNING));
    return *id;
  }

  void Agent(const v1::AgentMessage& msg) {
    TC_ASSERT_OK(core_->HandleAgentMessage("a", conn_.get(), msg));
  }

  // A report as the job's current rank 0 sends it (its launch env's token).
  v1::ReportMetricsRequest FromRank0(std::vector<v1::MetricPoint> points) {
    const v1::StartTask start = conn_->Starts().back();
    v1::ReportMetricsRequest req;
    req.set_job_id(start.task().job_id());
    req.set_attempt(start.task().attempt());
    req.set_rank(0);
    req.set_token(start.env().at("TRAINCTL_TOKEN"));
    for (auto& p : points) *req.add_points() = p;
    return req;
  }

  v1::GetMetricsResponse Metrics(int64_t id, const std::string& key = "") {
    v1::GetMetricsRequest req;
    req.set_job_id(id);
    req.set_key(key);
    auto r = core_->GetMetrics(req);
    EXPECT_THAT(r, ::trainctl::testing::IsOk());
    return *r;
  }

  // What the accounting hook was handed, in order.
  std::vector<v1::UsageRecord> ended_;
  FakeClock clock_;
  MemoryStateStore store_;
  std::unique_ptr<Coordinator> core_;
  std::unique_ptr<FakeConnection> conn_;
};

TEST_F(ExperimentRecordTest, ReportMetrics_Rank0_StoredWithLastMinMaxPerKey) {
  const int64_t id = SubmitRunning(v1::JobSpec());
  TC_ASSERT_OK(core_->ReportMetrics(FromRank0({Point("loss", 2.0, 1), Point("acc", 0.5, 1)})));
  clock_.Advance(absl::Seconds(3));
  auto second = core_->ReportMetrics(FromRank0({Point("loss", 0.5, 2), Point("loss", 1.0, 3)}));
  TC_ASSERT_OK(second);
  EXPECT_EQ(second->stored_points(), 4);

  v1::GetMetricsResponse all = Metrics(id);
  // Series by key: acc, loss. loss went 2.0, 0.5, 1.0: last 1.0 at step 3.
  ASSERT_THAT(all.series(), SizeIs(2));
  const v1::MetricSeries& loss = all.series(1);
  EXPECT_EQ(loss.key(), "loss");
  EXPECT_EQ(loss.count(), 3);
  EXPECT_EQ(loss.last(), 1.0);
  EXPECT_EQ(loss.last_step(), 3);
  EXPECT_EQ(loss.min(), 0.5);
  EXPECT_EQ(loss.max(), 2.0);
  ASSERT_THAT(loss.points(), SizeIs(3));
  // Stamped by the coordinator: receive time (3 s later), attempt and rank.
  EXPECT_EQ(loss.points(1).time_ms() - loss.points(0).time_ms(), 3000);
  EXPECT_EQ(loss.points(1).attempt(), 0);
  // 5 allowed, 4 stored.
  EXPECT_EQ(all.points_left(), 1);
  EXPECT_EQ(core_->GetJob(id)->metric_points(), 4);

  v1::GetMetricsResponse acc = Metrics(id, "acc");
  ASSERT_THAT(acc.series(), SizeIs(1));
  EXPECT_EQ(acc.series(0).last(), 0.5);
}

TEST_F(ExperimentRecordTest, ReportMetrics_MissingOrWrongToken_Refused) {
  const int64_t id = SubmitRunning(v1::JobSpec());
  v1::ReportMetricsRequest req = FromRank0({Point("loss", 1, 1)});
  req.clear_token();
  EXPECT_THAT(core_->ReportMetrics(req),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("TRAINCTL_TOKEN")));
  req.set_token("0123456789abcdef0123456789abcdef");
  EXPECT_THAT(core_->ReportMetrics(req),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("token")));
  req = FromRank0({Point("loss", 1, 1)});
  req.set_job_id(id + 100);
  EXPECT_THAT(core_->ReportMetrics(req),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does not exist")));
  EXPECT_THAT(Metrics(id).series(), SizeIs(0));
}

TEST_F(ExperimentRecordTest, ReportMetrics_OldAttempt_PermissionDenied) {
  v1::JobSpec spec;
  spec.set_max_restarts(1);
  const int64_t id = SubmitRunning(spec);
  const v1::ReportMetricsRequest old = FromRank0({Point("loss", 1, 1)});
  // Attempt 0 fails; attempt 1 starts with a new token.
  Agent(Status(conn_->Starts().back(), v1::TASK_STATE_EXITED, 1));
  ASSERT_THAT(conn_->Starts(), SizeIs(2));
  EXPECT_THAT(core_->ReportMetrics(old),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("current attempt (1)")));
  TC_ASSERT_OK(core_->ReportMetrics(FromRank0({Point("loss", 1, 1)})));
  EXPECT_EQ(Metrics(id).series(0).points(0).attempt(), 1);
}

TEST_F(ExperimentRecordTest, ReportMetrics_BadPoints_InvalidArgumentNamingField) {
  SubmitRunning(v1::JobSpec());
  EXPECT_THAT(core_->ReportMetrics(FromRank0({})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("points")));
  EXPECT_THAT(core_->ReportMetrics(FromRank0({Point("loss", 1, 1), Point("bad key", 1, 1)})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("points[1].key")));
  EXPECT_THAT(core_->ReportMetrics(FromRank0({Point("loss", std::nan(""), 1)})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  EXPECT_THAT(core_->ReportMetrics(FromRank0({Point("loss", 1, -1)})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("points[0].step")));
  v1::ReportMetricsRequest rank = FromRank0({Point("loss", 1, 1)});
  rank.set_rank(1);
  EXPECT_THAT(core_->ReportMetrics(rank),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank")));
}

TEST_F(ExperimentRecordTest, ReportMetrics_NegativeThroughput_RefusedOtherNegativesKept) {
  SubmitRunning(v1::JobSpec());
  // samples_per_s feeds the auto-packer; a negative one is an error the
  // reporter sees, not a point silently left out of packing.
  EXPECT_THAT(core_->ReportMetrics(FromRank0({Point("loss", 1, 1),
                                              Point(kThroughputMetricKey, -5, 1)})),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("points[1].value"), HasSubstr("samples_per_s"))));
  // Any other key may be negative (a log-likelihood, a reward).
  TC_ASSERT_OK(core_->ReportMetrics(FromRank0({Point("reward", -5, 1)})));
  TC_ASSERT_OK(core_->ReportMetrics(FromRank0({Point(kThroughputMetricKey, 0, 2)})));
}

TEST_F(ExperimentRecordTest, ReportMetrics_PastCap_ResourceExhaustedAlsoAfterRestart) {
  const int64_t id = SubmitRunning(v1::JobSpec());
  // Cap 5: 3 + 2 fit; one more does not.
  TC_ASSERT_OK(core_->ReportMetrics(
      FromRank0({Point("loss", 1, 1), Point("loss", 1, 2), Point("loss", 1, 3)})));
  TC_ASSERT_OK(core_->ReportMetrics(FromRank0({Point("loss", 1, 4), Point("loss", 1, 5)})));
  EXPECT_THAT(core_->ReportMetrics(FromRank0({Point("loss", 1, 6)})),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("cap of 5")));
  // The count comes back from the store after a coordinator restart.
  const v1::ReportMetricsRequest again = FromRank0({Point("loss", 1, 6)});
  Restart();
  EXPECT_THAT(core_->ReportMetrics(again),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("stored 5")));
  EXPECT_EQ(Metrics(id).series(0).count(), 5);
}

TEST_F(ExperimentRecordTest, ReportMetrics_StoreFails_UnavailableAndNothingCounted) {
  const int64_t id = SubmitRunning(v1::JobSpec());
  store_.SetFailing(true);
  EXPECT_THAT(core_->ReportMetrics(FromRank0({Point("loss", 1, 1)})),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("not stored")));
  store_.SetFailing(false);
  EXPECT_EQ(Metrics(id).points_left(), 5);
}

TEST_F(ExperimentRecordTest, CheckpointDir_RestartedAttempt_GetsSameDirectory) {
  v1::JobSpec spec;
  spec.set_max_restarts(1);
  const int64_t id = SubmitRunning(spec);
  const std::string want = absl::StrCat("/shared/ckpt/", id);
  EXPECT_EQ(conn_->Starts()[0].env().at("TRAINCTL_CHECKPOINT_DIR"), want);
  Agent(Status(conn_->Starts()[0], v1::TASK_STATE_EXITED, 1));
  ASSERT_THAT(conn_->Starts(), SizeIs(2));
  EXPECT_EQ(conn_->Starts()[1].task().attempt(), 1);
  EXPECT_EQ(conn_->Starts()[1].env().at("TRAINCTL_CHECKPOINT_DIR"), want);
  EXPECT_EQ(core_->GetJob(id)->checkpoint_dir(), want);
}

TEST_F(ExperimentRecordTest, Attempts_FailThenSucceed_OutcomesExitCodesGpuHours) {
  v1::JobSpec spec;
  spec.set_max_restarts(1);
  const int64_t id = SubmitRunning(spec);
  // Attempt 0 holds 1 GPU for 30 min, then exits 3: 0.5 GPU-hours.
  clock_.Advance(absl::Minutes(30));
  Agent(Status(conn_->Starts()[0], v1::TASK_STATE_EXITED, 3));
  // Attempt 1 runs 1 h and succeeds: 1.0 GPU-hours.
  Agent(Status(conn_->Starts()[1], v1::TASK_STATE_RUNNING));
  clock_.Advance(absl::Hours(1));
  Agent(Status(conn_->Starts()[1], v1::TASK_STATE_EXITED, 0));

  const v1::Job job = *core_->GetJob(id);
  ASSERT_THAT(job.attempts(), SizeIs(2));
  const v1::AttemptRecord& first = job.attempts(0);
  EXPECT_EQ(first.outcome(), v1::ATTEMPT_OUTCOME_RESTARTED);
  EXPECT_THAT(first.reason(), HasSubstr("exited with code 3"));
  ASSERT_THAT(first.ranks(), SizeIs(1));
  EXPECT_EQ(first.ranks(0).exit_code(), 3);
  EXPECT_EQ(first.ranks(0).state(), "EXITED");
  EXPECT_EQ(first.ranks(0).node(), "a");
  EXPECT_THAT(first.ranks(0).log_path(), HasSubstr("attempt-0"));
  EXPECT_EQ(first.gpus(), 1.0);
  EXPECT_THAT(first.gpu_hours(), DoubleNear(0.5, 1e-9));
  EXPECT_EQ(job.attempts(1).outcome(), v1::ATTEMPT_OUTCOME_SUCCEEDED);
  EXPECT_THAT(job.attempts(1).gpu_hours(), DoubleNear(1.0, 1e-9));
  EXPECT_THAT(job.gpu_hours(), DoubleNear(1.5, 1e-9));
  // The record survives a coordinator restart.
  Restart();
  EXPECT_THAT(core_->GetJob(id)->attempts(), SizeIs(2));
  EXPECT_THAT(core_->GetJob(id)->gpu_hours(), DoubleNear(1.5, 1e-9));
}

TEST_F(ExperimentRecordTest, GpuHours_RunningQuarterGpu_CountsUpToNow) {
  v1::JobSpec spec;
  spec.set_gpu_fraction(0.25);
  const int64_t id = SubmitRunning(spec);
  // A quarter of a GPU for 2 h so far: 0.5 GPU-hours, attempt still open.
  clock_.Advance(absl::Hours(2));
  const v1::Job job = *core_->GetJob(id);
  ASSERT_THAT(job.attempts(), SizeIs(1));
  EXPECT_EQ(job.attempts(0).end_time_ms(), 0);
  EXPECT_THAT(job.attempts(0).gpus(), DoubleNear(0.25, 1e-6));
  EXPECT_THAT(job.gpu_hours(), DoubleNear(0.5, 1e-6));
  EXPECT_THAT(core_->ListJobs({}, 0)[0].gpu_hours(), DoubleNear(0.5, 1e-6));
}

// A 2 x 2 gang holds 4 whole GPUs, however its ranks are laid out (one
// process per GPU, or one per node owning both): 4 GPUs, 4 GPU-hours an hour.
TEST_F(ExperimentRecordTest, GpuCount_TwoByTwoGang_CountsEveryGpu) {
  struct Layout {
    int tasks_per_node;
    v1::PreflightMode preflight;
    // Node c's GPUs, GiB (b has 80): a gang may mix GPU sizes.
    int64_t c_gib;
  };
  for (const Layout& l : {Layout{0, v1::PREFLIGHT_MODE_OFF, 80}, Layout{1, v1::PREFLIGHT_MODE_OFF, 80},
                          Layout{0, v1::PREFLIGHT_MODE_ON, 80}, Layout{0, v1::PREFLIGHT_MODE_OFF, 40},
                          Layout{1, v1::PREFLIGHT_MODE_ON, 40}}) {
    SCOPED_TRACE(absl::StrCat(l.tasks_per_node, " ", l.preflight, " ", l.c_gib));
    const int tasks_per_node = l.tasks_per_node;
    const v1::PreflightMode preflight = l.preflight;
    Restart();
    FakeConnection b;
    TC_ASSERT_OK(core_->RegisterAgent(NodeReg("b", 2), &b));
    FakeConnection c;
    TC_ASSERT_OK(core_->RegisterAgent(
        ::trainctl::coord::testing::FakeNodeRegistration("c", 2, 8, l.c_gib * kGiB), &c));
    v1::JobSpec spec;
    spec.add_command("python");
    spec.set_nodes(2);
    spec.set_gpus_per_node(2);
    spec.set_tasks_per_node(tasks_per_node);
    spec.set_preflight(preflight);
    spec.set_allow_mixed_gpu_types(true);
    auto id = core_->SubmitJob(spec, "");
    TC_ASSERT_OK(id);
    clock_.Advance(absl::Hours(1));
    TC_ASSERT_OK(core_->CancelJob(*id));
    const v1::Job job = *core_->GetJob(*id);
    ASSERT_THAT(job.attempts(), SizeIs(1));
    EXPECT_EQ(job.attempts(0).gpus(), 4.0);
    EXPECT_THAT(job.attempts(0).gpu_hours(), DoubleNear(4.0, 1e-9));
    // Accounting gets the ended attempt: 2 GPUs on each node, 4 GPU-hours.
    ASSERT_THAT(ended_, ::testing::Not(::testing::IsEmpty()));
    const v1::UsageRecord& r = ended_.back();
    EXPECT_EQ(r.job_id(), *id);
    EXPECT_EQ(r.gpus(), 4.0);
    EXPECT_THAT(r.gpu_seconds_allocated(), DoubleNear(4 * 3600.0, 1e-6));
    EXPECT_EQ(r.end_time_ms() - r.start_time_ms(), 3600 * 1000);
    EXPECT_EQ(r.outcome(), v1::ATTEMPT_OUTCOME_CANCELLED);
    ASSERT_THAT(r.slices(), SizeIs(2));
    EXPECT_EQ(r.slices(0).gpus() + r.slices(1).gpus(), 4.0);
    EXPECT_EQ(r.slices(0).gpus(), 2.0);
  }
}

// A whole-GPU experiment counts its GPU; a fraction its share of the GPU.
TEST_F(ExperimentRecordTest, GpuCount_WholeAndFractionalExperiments) {
  v1::JobSpec whole;
  const int64_t w = SubmitRunning(whole);
  EXPECT_EQ(core_->GetJob(w)->attempts(0).gpus(), 1.0);
  TC_ASSERT_OK(core_->CancelJob(w));
  // Its process exits, freeing the GPU.
  Agent(Status(conn_->Starts().back(), v1::TASK_STATE_EXITED, 143));
  v1::JobSpec half;
  half.set_gpu_fraction(0.5);
  const int64_t h = SubmitRunning(half);
  ASSERT_THAT(core_->GetJob(h)->attempts(), SizeIs(1));
  EXPECT_THAT(core_->GetJob(h)->attempts(0).gpus(), DoubleNear(0.5, 1e-6));
}

TEST_F(ExperimentRecordTest, EarlyStop_WorseTrialAtRung_CancelledWithReason) {
  // Two trials of sweep "sw" on one GPU (half a GPU each), ASHA on val_loss
  // with rungs at steps 10, 20, 40 (eta 2).
  v1::JobSpec spec;
  spec.set_gpu_fraction(0.5);
  spec.set_sweep_id("sw");
  v1::EarlyStop* es = spec.mutable_early_stop();
  es->set_metric("val_loss");
  es->set_mode("min");
  es->set_grace_steps(10);
  es->set_reduction_factor(2);
  const int64_t good = SubmitRunning(spec);
  const v1::ReportMetricsRequest from_good = FromRank0({Point("val_loss", 0.3, 10)});
  const int64_t bad = SubmitRunning(spec);
  const v1::ReportMetricsRequest from_bad = FromRank0({Point("val_loss", 0.9, 12)});

  TC_ASSERT_OK(core_->ReportMetrics(from_good));
  // The second trial reaches rung 10 with 0.9, worse than the first's 0.3:
  // the report is stored and the trial stopped.
  TC_ASSERT_OK(core_->ReportMetrics(from_bad));
  const v1::Job stopped = *core_->GetJob(bad);
  EXPECT_EQ(stopped.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(stopped.reason(), HasSubstr("stopped early (ASHA): val_loss 0.9 at step 10"));
  EXPECT_EQ(stopped.rung_values().at(10), 0.9);
  // Its own outcome, not a user's cancel.
  EXPECT_EQ(stopped.stopped_early_at_step(), 10);
  ASSERT_GT(stopped.attempts_size(), 0);
  EXPECT_EQ(stopped.attempts(stopped.attempts_size() - 1).outcome(),
            v1::ATTEMPT_OUTCOME_STOPPED_EARLY);
  EXPECT_EQ(Metrics(bad).series(0).count(), 1);
  EXPECT_EQ(core_->GetJob(good)->state(), v1::JOB_STATE_RUNNING);

  // The rungs come back after a restart. Rung 10 holds {0.3, 0.9}: the
  // cutoff is their median, 0.6, so a third trial at 0.7 is stopped and a
  // fourth at 0.5 continues.
  Restart();
  const int64_t third = SubmitRunning(spec);
  TC_ASSERT_OK(core_->ReportMetrics(FromRank0({Point("val_loss", 0.7, 10)})));
  EXPECT_EQ(core_->GetJob(third)->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(core_->GetJob(third)->reason(), HasSubstr("cutoff 0.6"));
  Agent(Status(conn_->Starts().back(), v1::TASK_STATE_EXITED, 143));
  const int64_t fourth = SubmitRunning(spec);
  TC_ASSERT_OK(core_->ReportMetrics(FromRank0({Point("val_loss", 0.5, 10)})));
  EXPECT_EQ(core_->GetJob(fourth)->state(), v1::JOB_STATE_RUNNING);
}

TEST_F(ExperimentRecordTest, SubmitJob_EarlyStopWithoutSweep_InvalidArgument) {
  v1::JobSpec spec;
  spec.add_command("python");
  spec.mutable_early_stop()->set_metric("loss");
  EXPECT_THAT(core_->SubmitJob(spec, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("early_stop")));
}

}  // namespace
}  // namespace trainctl::coord
