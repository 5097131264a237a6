// `trainctl submit --preflight/--no-preflight`, and the pre-flights in
// `trainctl describe` and `trainctl why` (docs/preflight.md), against a
// strict mock stub and a FakeClock.

#include <sstream>
#include <string>
#include <vector>

#include "client/cli.h"
#include "client/testing/cli_harness.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;
using ::testing::StrictMock;

class CliPreflightTest : public CliHarness<> {
 protected:
  CliPreflightTest() { options_.default_user = "alice"; }
};

TEST_F(CliPreflightTest, Submit_PreflightFlags_MapToSpec) {
  ExpectSubmit();
  ASSERT_EQ(Run({"submit", "--gpus", "2", "--preflight", "--", "python", "ddp.py"}), 0)
      << err_.str();
  EXPECT_EQ(submitted_.spec().preflight(), v1::PREFLIGHT_MODE_ON);
  ExpectSubmit();
  ASSERT_EQ(Run({"submit", "--nodes", "2", "--gpus-per-node", "1", "--no-preflight",
                 "--", "python", "ddp.py"}),
            0);
  EXPECT_EQ(submitted_.spec().preflight(), v1::PREFLIGHT_MODE_OFF);
  ExpectSubmit();
  ASSERT_EQ(Run({"submit", "--nodes", "2", "--gpus-per-node", "1", "--", "x"}), 0);
  EXPECT_EQ(submitted_.spec().preflight(), v1::PREFLIGHT_MODE_UNSPECIFIED);
}

TEST_F(CliPreflightTest, Submit_BothFlags_UsageError) {
  EXPECT_NE(Run({"submit", "--gpus", "2", "--preflight", "--no-preflight", "--", "x"}), 0);
}

TEST_F(CliPreflightTest, Describe_ShowsEachPreflightAndExclusions) {
  const v1::GetJobResponse job = Proto<v1::GetJobResponse>(R"pb(
    job {
      id: 7 kind: JOB_KIND_GANG state: JOB_STATE_RUNNING attempt: 1
      spec { command: "python" nodes: 2 gpus_per_node: 1 }
      preflight {
        excluded { node: "n1" reason: "rank 0 errored: NCCL error" run: 1 }
        runs {
          index: 1 attempt: 0 verdict: PREFLIGHT_VERDICT_FAILED
          nodes: "n1" nodes: "n2"
          reason: "failed: excluded n1 (rank 0 errored: NCCL error)"
          ranks { rank: 0 node: "n1" status: PREFLIGHT_RANK_STATUS_ERROR
                  detail: "NCCL error" blamed: true }
          ranks { rank: 1 node: "n2" status: PREFLIGHT_RANK_STATUS_STOPPED
                  detail: "stopped after rank 0 failed" }
        }
        runs {
          index: 2 attempt: 1 verdict: PREFLIGHT_VERDICT_PASSED
          nodes: "n2" nodes: "n3" start_time_ms: 1000 end_time_ms: 1850
          comm_ready_max_ms: 812
          links { link_class: LINK_CLASS_NETWORK ranks: 2 min_busbw_gbps: 40
                  median_busbw_gbps: 41 max_busbw_gbps: 42 }
          ranks { rank: 0 node: "n2" status: PREFLIGHT_RANK_STATUS_OK
                  comm_ready_ms: 800 busbw_gbps: 40 }
          ranks { rank: 1 node: "n3" status: PREFLIGHT_RANK_STATUS_OK
                  comm_ready_ms: 812 busbw_gbps: 42 }
        }
      }
    })pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(job), Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetJobUsage(_, _, _)).WillRepeatedly(Return(grpc::Status::OK));
  ASSERT_EQ(Run({"describe", "7"}), 0) << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("Pre-flight:  auto (when placed on more than one node)"));
  EXPECT_THAT(out, HasSubstr("Excluded:    n1: rank 0 errored: NCCL error (pre-flight 1)"));
  EXPECT_THAT(out, HasSubstr("#1 (attempt 0) FAILED on n1, n2"));
  EXPECT_THAT(out, HasSubstr("#2 (attempt 1) PASSED on n2, n3, took 850 ms"));
  EXPECT_THAT(out, HasSubstr("communicator ready: 812 ms (slowest rank)"));
  EXPECT_THAT(out, HasSubstr("network busbw: median 41.00 GB/s, min 40.00, max 42.00 (2 ranks)"));
  EXPECT_THAT(out, HasSubstr("ERROR (excluded)"));

  ASSERT_EQ(Run({"describe", "7", "-o", "json"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("\"excluded\""));
  EXPECT_THAT(out_.str(), HasSubstr("PREFLIGHT_VERDICT_PASSED"));
}

TEST_F(CliPreflightTest, Why_NamesExcludedNodes) {
  const v1::WhyJobResponse why = Proto<v1::WhyJobResponse>(R"pb(
    job_id: 7 state: JOB_STATE_PENDING queue: "default" position: 1
    summary: "waiting for 1 free GPUs on each of 2 nodes"
    excluded_nodes: "n1: pre-flight 1: rank 0 errored: NCCL error"
    nodes: "n1: excluded for this job by a pre-flight"
  )pb");
  EXPECT_CALL(stub_, WhyJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(why), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"why", "7"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("Excluded:     n1: pre-flight 1: rank 0 errored"));
  EXPECT_THAT(out_.str(), HasSubstr("n1: excluded for this job by a pre-flight"));
}

}  // namespace
}  // namespace trainctl::cli
