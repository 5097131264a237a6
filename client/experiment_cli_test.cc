// Tier 2 tests of the CLI's experiment-record commands (`trainctl report`,
// `metrics`, `sweep compare`, `sweep describe --metric`, the records part of
// `describe`) against a strict mock stub, a fake clock and a fake environment.

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/cli.h"
#include "client/testing/cli_harness.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::DoAll;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Invoke;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;
using ::testing::StrictMock;

class ExperimentCliTest : public CliHarness<> {
 protected:
  // `trainctl report` reads its environment from env_.
  ExperimentCliTest() {
    options_.getenv = [this](const char* name) -> const char* {
      auto it = env_.find(name);
      return it == env_.end() ? nullptr : it->second.c_str();
    };
  }

  // The launch environment of rank 0 of job 7, attempt 1.
  void InTask() {
    env_ = {{"TRAINCTL_JOB_ID", "7"},
            {"TRAINCTL_ATTEMPT", "1"},
            {"TRAINCTL_TOKEN", "secret"},
            {"RANK", "0"}};
  }

  std::map<std::string, std::string> env_;
};

TEST_F(ExperimentCliTest, Report_InTask_SendsPointsWithEnvIdentity) {
  InTask();
  v1::ReportMetricsRequest sent;
  EXPECT_CALL(stub_, ReportMetrics(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"report", "loss=0.25", "samples_per_s=1.2e4", "--step", "1200"}), 0)
      << err_.str();
  EXPECT_EQ(sent.job_id(), 7);
  EXPECT_EQ(sent.attempt(), 1);
  EXPECT_EQ(sent.rank(), 0);
  EXPECT_EQ(sent.token(), "secret");
  ASSERT_EQ(sent.points_size(), 2);
  EXPECT_EQ(sent.points(0).key(), "loss");
  EXPECT_EQ(sent.points(0).value(), 0.25);
  EXPECT_EQ(sent.points(1).value(), 12000);
  EXPECT_EQ(sent.points(1).step(), 1200);
  EXPECT_EQ(out_.str(), "");
}

TEST_F(ExperimentCliTest, Report_OutsideTask_UsageErrorBeforeAnyRpc) {
  // StrictMock: no RPC may be made.
  EXPECT_EQ(Run({"report", "loss=1"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("TRAINCTL_JOB_ID is not set"));
  InTask();
  EXPECT_EQ(Run({"report", "loss"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("loss: expected KEY=NUMBER"));
  EXPECT_EQ(Run({"report", "loss=abc"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("loss=abc: expected KEY=NUMBER"));
}

TEST_F(ExperimentCliTest, Report_CoordinatorRestarting_RetriedUntilStored) {
  InTask();
  ::testing::InSequence seq;
  EXPECT_CALL(stub_, ReportMetrics(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connect failed")));
  v1::ReportMetricsRequest sent;
  EXPECT_CALL(stub_, ReportMetrics(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"report", "loss=0.5", "--step", "7"}), 0) << err_.str();
  EXPECT_THAT(err_.str(), HasSubstr("retrying the report"));
  ASSERT_EQ(sent.points_size(), 1);
  EXPECT_EQ(sent.points(0).step(), 7);
}

TEST_F(ExperimentCliTest, Report_WrongToken_ServerMessageExits1) {
  InTask();
  EXPECT_CALL(stub_, ReportMetrics(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                                    "token: not the token of job 7 attempt 1")));
  EXPECT_EQ(Run({"report", "loss=1"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("trainctl: error: token: not the token of job 7"));
}

v1::GetMetricsResponse TwoSeries() {
  return Proto<v1::GetMetricsResponse>(R"pb(
    series { key: "acc" count: 2 last: 0.91 last_step: 200 min: 0.5 max: 0.91
             points { key: "acc" value: 0.5 step: 100 } points { key: "acc" value: 0.91 step: 200 } }
    series { key: "loss" count: 3 last: 0.25 last_step: 300 min: 0.25 max: 2.5 }
  )pb");
}

TEST_F(ExperimentCliTest, Metrics_Table_LastMinMaxPerKeySummaryOnly) {
  v1::GetMetricsRequest asked;
  EXPECT_CALL(stub_, GetMetrics(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&asked), SetArgPointee<2>(TwoSeries()),
                      Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"metrics", "7"}), 0) << err_.str();
  EXPECT_EQ(asked.job_id(), 7);
  EXPECT_TRUE(asked.summary_only());
  EXPECT_THAT(Lines(out_.str()), ElementsAre("KEY   POINTS  LAST  STEP  MIN   MAX",
                                             "acc   2       0.91  200   0.5   0.91",
                                             "loss  3       0.25  300   0.25  2.5"));
}

TEST_F(ExperimentCliTest, Metrics_JsonWithKey_FullHistoryParsesBack) {
  v1::GetMetricsRequest asked;
  EXPECT_CALL(stub_, GetMetrics(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&asked), SetArgPointee<2>(TwoSeries()),
                      Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"metrics", "7", "--key", "acc", "-o", "json"}), 0);
  EXPECT_EQ(asked.key(), "acc");
  EXPECT_FALSE(asked.summary_only());
  v1::GetMetricsResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok());
  ASSERT_EQ(parsed.series(0).points_size(), 2);
  EXPECT_EQ(parsed.series(0).points(1).step(), 200);
}

TEST_F(ExperimentCliTest, Metrics_NoneReported_SaysHowToReport) {
  EXPECT_CALL(stub_, GetMetrics(_, _, _)).WillOnce(Return(grpc::Status::OK));
  EXPECT_EQ(Run({"metrics", "7"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("job 7 has reported no metrics"));
}

// Three trials of sweep "sw": 10 (lr 1e-3, val_loss last 0.4, best 0.3),
// 11 (lr 3e-4, last 0.2), 12 (lr 1e-4, nothing reported yet).
class SweepCompareTest : public ExperimentCliTest {
 protected:
  void SetUp() override {
    EXPECT_CALL(stub_, ListJobs(_, _, _))
        .WillRepeatedly(DoAll(SetArgPointee<2>(Proto<v1::ListJobsResponse>(R"pb(
                                jobs { id: 12 spec { sweep_id: "sw" params { key: "lr" value: "1e-4" } }
                                       state: JOB_STATE_PENDING }
                                jobs { id: 11 spec { sweep_id: "sw" params { key: "lr" value: "3e-4" } }
                                       state: JOB_STATE_RUNNING metric_points: 4 gpu_hours: 0.5 }
                                jobs { id: 10 spec { sweep_id: "sw" params { key: "lr" value: "1e-3" } }
                                       state: JOB_STATE_SUCCEEDED metric_points: 9 gpu_hours: 1.25 }
                              )pb")),
                              Return(grpc::Status::OK)));
    EXPECT_CALL(stub_, GetMetrics(_, _, _))
        .WillRepeatedly(Invoke([](grpc::ClientContext*, const v1::GetMetricsRequest& req,
                                  v1::GetMetricsResponse* resp) {
          EXPECT_EQ(req.key(), "val_loss");
          EXPECT_TRUE(req.summary_only());
          v1::MetricSeries* s = resp->add_series();
          s->set_key("val_loss");
          if (req.job_id() == 10) {
            s->set_last(0.4), s->set_min(0.3), s->set_max(0.9), s->set_last_step(500);
          } else {
            s->set_last(0.2), s->set_min(0.2), s->set_max(0.8), s->set_last_step(200);
          }
          return grpc::Status::OK;
        }));
  }
};

TEST_F(SweepCompareTest, SweepCompare_LastValue_BestFirstUnreportedLast) {
  ASSERT_EQ(Run({"sweep", "compare", "sw", "--metric", "val_loss"}), 0) << err_.str();
  EXPECT_THAT(Lines(out_.str()),
              ElementsAre("#  JOB  STATE      lr    VAL_LOSS  STEP  GPU-H",
                          "1  11   running    3e-4  0.2       200   0.50",
                          "2  10   succeeded  1e-3  0.4       500   1.25",
                          "-  12   pending    1e-4  -         -     0.00"));
  EXPECT_THAT(err_.str(), HasSubstr("1 trial(s) have not reported val_loss yet"));
}

TEST_F(SweepCompareTest, SweepCompare_MaxModeJson_ParsesBackRanked) {
  ASSERT_EQ(Run({"sweep", "compare", "sw", "--metric", "val_loss", "--mode", "max",
                 "--scope", "best", "-o", "json"}),
            0);
  v1::SweepComparison parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok());
  // Best by max over each trial's history: 10 reached 0.9, 11 only 0.8.
  ASSERT_EQ(parsed.trials_size(), 3);
  EXPECT_EQ(parsed.trials(0).job_id(), 10);
  EXPECT_EQ(parsed.trials(0).value(), 0.9);
  // States spelled as describe -o json and REST spell them.
  EXPECT_EQ(parsed.trials(0).state(), "JOB_STATE_SUCCEEDED");
  EXPECT_EQ(parsed.trials(0).params().at("lr"), "1e-3");
  EXPECT_EQ(parsed.trials(2).job_id(), 12);
  EXPECT_FALSE(parsed.trials(2).has_metric());
}

TEST_F(ExperimentCliTest, SweepCompare_UnknownMetric_ListsTheReportedOnes) {
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(Proto<v1::ListJobsResponse>(R"pb(
                              jobs { id: 10 spec { sweep_id: "sw" } state: JOB_STATE_SUCCEEDED
                                     metric_points: 9 }
                            )pb")),
                            Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetMetrics(_, _, _))
      .WillRepeatedly(Invoke([](grpc::ClientContext*, const v1::GetMetricsRequest& req,
                                v1::GetMetricsResponse* resp) {
        if (req.key().empty()) {
          resp->add_series()->set_key("loss");
          resp->add_series()->set_key("val_loss");
        }
        return grpc::Status::OK;
      }));
  EXPECT_EQ(Run({"sweep", "compare", "sw", "--metric", "nope"}), 2);
  EXPECT_THAT(err_.str(),
              HasSubstr("no trial of sweep sw reported nope; its trials reported: loss, val_loss"));
}

TEST_F(SweepCompareTest, SweepDescribe_Metric_AddsBestTrials) {
  ASSERT_EQ(Run({"sweep", "describe", "sw", "--metric", "val_loss", "--scope", "best"}), 0)
      << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("Best trials by val_loss (min, best value):\n"
                                    "#  JOB  STATE      lr    VAL_LOSS (MIN)  STEP  GPU-H\n"
                                    "1  11   running    3e-4  0.2             200   0.50\n"
                                    "2  10   succeeded  1e-3  0.3             500   1.25\n"));
}

TEST_F(ExperimentCliTest, Sweep_EarlyStop_EveryTrialCarriesAshaConfig) {
  std::vector<v1::SubmitJobRequest> sent;
  EXPECT_CALL(stub_, SubmitJobs(_, _, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, const v1::SubmitJobsRequest& r,
                           v1::SubmitJobsResponse* resp) {
        for (const v1::JobSpec& spec : r.specs()) {
          *sent.emplace_back().mutable_spec() = spec;
          resp->add_job_ids(static_cast<int64_t>(sent.size()));
        }
        return grpc::Status::OK;
      }));
  ASSERT_EQ(Run({"sweep", "--sweep-id", "sw", "--grid", "lr=1,2", "--early-stop",
                 "acc:max", "--grace-steps", "5", "--reduction-factor", "4", "--",
                 "train", "{lr}"}),
            0)
      << err_.str();
  ASSERT_EQ(sent.size(), 2u);
  for (const v1::SubmitJobRequest& r : sent) {
    EXPECT_EQ(r.spec().early_stop().metric(), "acc");
    EXPECT_EQ(r.spec().early_stop().mode(), "max");
    EXPECT_EQ(r.spec().early_stop().grace_steps(), 5);
    EXPECT_EQ(r.spec().early_stop().reduction_factor(), 4);
  }
  EXPECT_EQ(Run({"sweep", "--grid", "lr=1", "--early-stop", "acc:best", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--early-stop acc:best"));
}

TEST_F(ExperimentCliTest, SweepCompare_NoMetric_UsageError) {
  EXPECT_EQ(Run({"sweep", "compare", "sw"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--metric"));
}

TEST_F(ExperimentCliTest, Describe_Records_CheckpointAttemptsGpuHoursMetrics) {
  v1::GetJobResponse job = Proto<v1::GetJobResponse>(R"pb(
    job {
      id: 7 state: JOB_STATE_SUCCEEDED attempt: 1 kind: JOB_KIND_EXPERIMENT
      spec { command: "python" max_restarts: 1 }
      checkpoint_dir: "/shared/ckpt/7" gpu_hours: 1.5 metric_points: 5
      attempts { attempt: 0 start_time_ms: 1699990000000 end_time_ms: 1699991800000
                 outcome: ATTEMPT_OUTCOME_RESTARTED gpus: 1 gpu_hours: 0.5
                 reason: "attempt 0 failed: rank 0 on a exited with code 3; restarting"
                 ranks { rank: 0 node: "a" state: "EXITED" exit_code: 3
                         log_path: "/logs/job-7/attempt-0/rank-0.log" } }
      attempts { attempt: 1 start_time_ms: 1699991800000 end_time_ms: 1699995400000
                 outcome: ATTEMPT_OUTCOME_SUCCEEDED gpus: 1 gpu_hours: 1
                 ranks { rank: 0 node: "a" state: "EXITED"
                         log_path: "/logs/job-7/attempt-1/rank-0.log" } }
    })pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(job), Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetMetrics(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(TwoSeries()), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"describe", "7"}), 0) << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("Checkpoint:  /shared/ckpt/7\n"));
  EXPECT_THAT(out, HasSubstr("GPU-hours:   1.50\n"));
  EXPECT_THAT(out, HasSubstr("Metrics:     5 points (`trainctl metrics 7`)\n"));
  EXPECT_THAT(out, HasSubstr("ATTEMPT  OUTCOME    STARTED"));
  // Attempt 0 ran 30 min on 1 GPU and exited 3; its log path is on node a.
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       "0 +restarted +[0-9-]+ [0-9:]+ +30m0s +1 +0.50 +0:3 +"
                       "a:/logs/job-7/attempt-0/rank-0.log +attempt 0 failed"));
  EXPECT_THAT(out, ::testing::ContainsRegex("1 +succeeded .* 1h0m +1 +1.00 +0:0 "));
  EXPECT_THAT(out, HasSubstr("loss  3       0.25  300   0.25  2.5\n"));
}

}  // namespace
}  // namespace trainctl::cli
