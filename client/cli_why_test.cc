// `trainctl why` and the scheduling flags of `trainctl submit` (--queue,
// --time-limit, --preemptible, --pack/--spread, --user, --project) against
// a strict mock stub and a FakeClock.

#include <sstream>
#include <string>
#include <vector>

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
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;
using ::testing::StrictMock;

class CliWhyTest : public CliHarness<> {
 protected:
  int Run(std::vector<std::string> args, std::string default_user = "") {
    options_.default_user = default_user;
    return CliHarness::Run(std::move(args));
  }
};

TEST_F(CliWhyTest, Submit_SchedulingFlags_MapToSpec) {
  ExpectSubmit();
  ASSERT_EQ(Run({"submit", "--gpus", "8", "--queue", "prod", "--time-limit",
                 "1h30m", "--preemptible", "--spread", "--project", "vision",
                 "--", "python", "ddp.py"},
                "alice"),
            0)
      << err_.str();
  const v1::JobSpec& spec = submitted_.spec();
  EXPECT_EQ(spec.queue(), "prod");
  EXPECT_EQ(spec.time_limit_ms(), 90 * 60 * 1000);
  EXPECT_TRUE(spec.preemptible());
  EXPECT_EQ(spec.placement(), v1::GANG_PLACEMENT_SPREAD);
  EXPECT_EQ(spec.project(), "vision");
  // --user defaults to the login name main.cc passes ($USER).
  EXPECT_EQ(spec.user(), "alice");

  ExpectSubmit();
  ASSERT_EQ(Run({"submit", "--gpus", "2", "--pack", "--user", "bob", "--",
                 "python", "ddp.py"},
                "alice"),
            0);
  EXPECT_EQ(submitted_.spec().user(), "bob");
  EXPECT_EQ(submitted_.spec().placement(), v1::GANG_PLACEMENT_PACK);
}

TEST_F(CliWhyTest, Submit_BadTimeLimitOrPackAndSpread_UsageErrorNamingFlag) {
  EXPECT_EQ(Run({"submit", "--time-limit", "90", "--", "python", "x.py"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--time-limit 90: expected a positive "
                                    "duration with a unit"));
  EXPECT_EQ(Run({"submit", "--gpus", "2", "--pack", "--spread", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--pack excludes --spread"));
}

TEST_F(CliWhyTest, Why_PendingGang_PrintsReasonQuotaReservationEtaAndNodes) {
  v1::WhyJobResponse response = Proto<v1::WhyJobResponse>(R"pb(
    job_id: 7
    state: JOB_STATE_PENDING
    summary: "waiting for job 5, earlier in the queue, which has reserved node a until enough of it drains (estimated in 25m)"
    queue: "default"
    position: 2
    nodes: "a: 2 of 8 GPUs free, needs 4"
    nodes: "b: lost"
    reservation_job_id: 5
    reservation: "node a"
    reservation_eta_ms: 1700001500000
  )pb");
  v1::WhyJobRequest request;
  EXPECT_CALL(stub_, WhyJob(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&request), SetArgPointee<2>(response),
                      Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"why", "7"}), 0) << err_.str();
  EXPECT_EQ(request.job_id(), 7);
  EXPECT_EQ(out_.str(),
            "Job 7 is pending in queue default (number 2 in the scheduling "
            "order).\n"
            "Why:          waiting for job 5, earlier in the queue, which has "
            "reserved node a until enough of it drains (estimated in 25m)\n"
            "Reservation:  job 5 holds node a, estimated start in 25m0s "
            "(2023-11-14 22:38:20 UTC)\n"
            "Nodes:\n"
            "  a: 2 of 8 GPUs free, needs 4\n"
            "  b: lost\n");
}

TEST_F(CliWhyTest, Why_HeadJobWithNothingReservable_SaysSoInsteadOfAnEmptyList) {
  // Pre-flight excluded node b; the 2-node gang is first in line but node a
  // alone can never take it, so the scheduler reserved no nodes.
  v1::WhyJobResponse response = Proto<v1::WhyJobResponse>(R"pb(
    job_id: 9
    state: JOB_STATE_PENDING
    summary: "waiting for 2 nodes with 1 free GPU each"
    queue: "default"
    position: 1
    nodes: "b: excluded for this job by pre-flight"
    reservation_job_id: 9
  )pb");
  EXPECT_CALL(stub_, WhyJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"why", "9"}), 0) << err_.str();
  EXPECT_THAT(out_.str(),
              HasSubstr("Reservation:  none: this job is first in line, but no "
                        "nodes it may use can take it even when they drain\n"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("holds ,")));
}

TEST_F(CliWhyTest, Why_NodeSelection_PrintsTheConstraintThatRulesNodesOut) {
  v1::WhyJobResponse response = Proto<v1::WhyJobResponse>(R"pb(
    job_id: 4
    state: JOB_STATE_PENDING
    summary: "waiting for 1 free GPU on one node (now at most 0 free GPUs on any node); its node selection rules out 1 of 2 nodes"
    queue: "default"
    position: 1
    constraints: "--gpu-type h100: rules out a (a100)"
    nodes: "a: ruled out by --gpu-type h100 (has a100)"
  )pb");
  EXPECT_CALL(stub_, WhyJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"why", "4"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("Constraint:   --gpu-type h100: rules out a (a100)\n"));
}

TEST_F(CliWhyTest, Why_QuotaAndJson_PrintsQuotaAndParsesBack) {
  v1::WhyJobResponse response = Proto<v1::WhyJobResponse>(R"pb(
    job_id: 8
    state: JOB_STATE_PENDING
    summary: "over quota: user alice: quota 8 GPUs, 6 GPUs in use, this job needs 4 GPUs"
    queue: "default"
    position: 1
    quota: "user alice: quota 8 GPUs, 6 GPUs in use, this job needs 4 GPUs"
  )pb");
  EXPECT_CALL(stub_, WhyJob(_, _, _))
      .Times(2)
      .WillRepeatedly(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"why", "8"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("Quota:        user alice: quota 8 GPUs, "
                                    "6 GPUs in use, this job needs 4 GPUs\n"));
  ASSERT_EQ(Run({"why", "8", "-o", "json"}), 0);
  v1::WhyJobResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok())
      << out_.str();
  EXPECT_EQ(parsed.quota(), response.quota());
}

TEST_F(CliWhyTest, Describe_PreemptedJob_ShowsSchedulingFields) {
  v1::GetJobResponse response = Proto<v1::GetJobResponse>(R"pb(
    job {
      id: 5
      state: JOB_STATE_PENDING
      spec {
        command: "python"
        queue: "prod"
        user: "alice"
        time_limit_ms: 7200000
        preemptible: true
      }
      preemptions: 2
      preempted_for_job_id: 9
    }
  )pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"describe", "5"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("Queue:       prod\n"));
  EXPECT_THAT(out_.str(), HasSubstr("User:        alice\n"));
  EXPECT_THAT(out_.str(), HasSubstr("Time limit:  2h\n"));
  EXPECT_THAT(out_.str(), HasSubstr("Preemptible: yes\n"));
  EXPECT_THAT(out_.str(),
              HasSubstr("Preempted:   2 times (waits for job 9 to start)\n"));
}

TEST_F(CliWhyTest, Why_UnknownJob_ErrorAndExit1) {
  EXPECT_CALL(stub_, WhyJob(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                    "job 9 does not exist")));
  EXPECT_EQ(Run({"why", "9"}), 1);
  EXPECT_EQ(err_.str(), "trainctl: error: job 9 does not exist\n");
}

}  // namespace
}  // namespace trainctl::cli
