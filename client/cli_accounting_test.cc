// `trainctl usage` and `trainctl history` against a mock stub
// (client/cli_accounting.cc): the request they send, tables, JSON and CSV,
// and usage errors naming the flag before any call.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/cli.h"
#include "client/testing/cli_harness.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/test/mock_stream.h"
#include "gtest/gtest.h"

namespace trainctl::cli {

namespace internal {
std::string CsvRow(const std::vector<std::string>& fields);
}  // namespace internal

namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::AllOf;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;

class CliAccountingTest : public CliHarness<> {};

constexpr int64_t kDayMs = 86400 * 1000;

TEST_F(CliAccountingTest, Usage_Defaults_ByUserLast30DaysTableWithTotal) {
  v1::GetUsageRequest sent;
  auto answer = Proto<v1::GetUsageResponse>(R"pb(
    by: "user" since_ms: 1697408000000 until_ms: 1700000000000
    rows { key: "alice" allocated_gpu_hours: 12.5 used_gpu_hours: 10 efficiency: 0.8 jobs: 3
           attempts: 4 failed: 1 preempted: 1 }
    rows { key: "bob" allocated_gpu_hours: 2 used_gpu_hours: 0.5 efficiency: 0.25 jobs: 1
           attempts: 1 }
    total { key: "total" allocated_gpu_hours: 14.5 used_gpu_hours: 10.5 efficiency: 0.724
            jobs: 4 attempts: 5 failed: 1 preempted: 1 })pb");
  EXPECT_CALL(stub_, GetUsage(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(answer), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"usage"}), 0) << err_.str();
  EXPECT_EQ(sent.by(), "user");
  EXPECT_EQ(sent.until_ms(), 0);  // now, the coordinator's
  EXPECT_EQ(sent.since_ms(), kNowMs - 30 * kDayMs);
  const std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 4u) << out_.str();
  EXPECT_THAT(lines[0], AllOf(HasSubstr("USER"), HasSubstr("ALLOC_GPU_H"),
                              HasSubstr("USED_GPU_H"), HasSubstr("EFFICIENCY")));
  EXPECT_THAT(lines[1], AllOf(HasSubstr("alice"), HasSubstr("12.500"), HasSubstr("10.000"),
                              HasSubstr("80.0%")));
  EXPECT_THAT(lines[3], AllOf(HasSubstr("total"), HasSubstr("14.500")));
}

TEST_F(CliAccountingTest, Usage_ByProjectDatesJson_PrintsTheResponse) {
  v1::GetUsageRequest sent;
  auto answer = Proto<v1::GetUsageResponse>(
      R"pb(by: "project" rows { key: "vision" allocated_gpu_hours: 3 })pb");
  EXPECT_CALL(stub_, GetUsage(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(answer), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"usage", "--by", "project", "--since", "2023-11-01", "--until",
                 "2023-11-10T12:00:00", "-o", "json"}),
            0)
      << err_.str();
  EXPECT_EQ(sent.by(), "project");
  EXPECT_EQ(sent.since_ms(), 1698796800000);
  EXPECT_EQ(sent.until_ms(), 1699617600000);
  v1::GetUsageResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok()) << out_.str();
  EXPECT_EQ(parsed.rows(0).key(), "vision");
}

TEST_F(CliAccountingTest, Usage_Csv_QuotesKeysWithCommasAndQuotes) {
  auto answer = Proto<v1::GetUsageResponse>(
      R"pb(by: "project" rows { key: "a,b \"c\"" allocated_gpu_hours: 1 jobs: 2 })pb");
  EXPECT_CALL(stub_, GetUsage(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(answer), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"usage", "--by", "project", "-o", "csv"}), 0) << err_.str();
  EXPECT_EQ(out_.str(),
            "PROJECT,ALLOC_GPU_H,USED_GPU_H,EFFICIENCY,JOBS,ATTEMPTS,FAILED,PREEMPTED\r\n"
            "\"a,b \"\"c\"\"\",1.000,0.000,0.0%,2,0,0,0\r\n");
}

TEST_F(CliAccountingTest, CsvRow_QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(internal::CsvRow({"plain", "", "x\ny", "\"q\""}), "plain,,\"x\ny\",\"\"\"q\"\"\"\r\n");
}

// Bad values are usage errors naming the flag, before any call (the strict
// mock fails the test on any RPC).
TEST_F(CliAccountingTest, BadSinceUntilByFormat_UsageErrorNamingTheFlag) {
  EXPECT_EQ(Run({"usage", "--since", "lastweek"}), kExitUsage);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("--since"), HasSubstr("YYYY-MM-DD")));
  EXPECT_EQ(Run({"usage", "--until", "2023-13-01"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--until"));
  EXPECT_EQ(Run({"usage", "--since", "2023-11-10", "--until", "2023-11-01"}), kExitUsage);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("--since"), HasSubstr("before --until")));
  EXPECT_EQ(Run({"usage", "--by", "team"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--by"));
  EXPECT_EQ(Run({"history", "--format", "jobid,color"}), kExitUsage);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("--format"), HasSubstr("color")));
  EXPECT_EQ(Run({"history", "--state", "done"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--state"));
}

TEST_F(CliAccountingTest, History_StreamedPages_CsvWithChosenColumns) {
  v1::ListHistoryRequest sent;
  auto* reader = new grpc::testing::MockClientReader<v1::ListHistoryResponse>();
  auto first = Proto<v1::ListHistoryResponse>(R"pb(
    records { job_id: 7 attempt: 0 user: "alice" outcome: ATTEMPT_OUTCOME_RESTARTED
              preempted: true start_time_ms: 1699990000000 end_time_ms: 1699993600000
              gpus: 4 gpu_seconds_allocated: 14400 gpu_seconds_used: 7200 })pb");
  auto second = Proto<v1::ListHistoryResponse>(R"pb(
    records { job_id: 7 attempt: 1 user: "alice" outcome: ATTEMPT_OUTCOME_SUCCEEDED
              reason: "done, finally" gpu_seconds_allocated: 3600 })pb");
  EXPECT_CALL(*reader, Read(_))
      .WillOnce(DoAll(SetArgPointee<0>(first), Return(true)))
      .WillOnce(DoAll(SetArgPointee<0>(second), Return(true)))
      .WillOnce(Return(false));
  EXPECT_CALL(*reader, Finish()).WillOnce(Return(grpc::Status::OK));
  EXPECT_CALL(stub_, ListHistoryRaw(_, _)).WillOnce(DoAll(SaveArg<1>(&sent), Return(reader)));
  ASSERT_EQ(Run({"history", "--user", "alice", "--since", "12h", "--state", "preempted",
                 "--format", "jobid,attempt,state,alloc_gpu_h,used_gpu_h,reason", "-o", "csv"}),
            0)
      << err_.str();
  EXPECT_EQ(sent.user(), "alice");
  EXPECT_EQ(sent.state(), "preempted");
  EXPECT_EQ(sent.since_ms(), kNowMs - 12 * 3600 * 1000);
  EXPECT_EQ(out_.str(),
            "jobid,attempt,state,alloc_gpu_h,used_gpu_h,reason\r\n"
            "7,0,preempted,4.000,2.000,\r\n"
            "7,1,succeeded,1.000,0.000,\"done, finally\"\r\n");
}

TEST_F(CliAccountingTest, History_Yaml_OneDocumentOfEveryRecord) {
  auto* reader = new grpc::testing::MockClientReader<v1::ListHistoryResponse>();
  auto page = Proto<v1::ListHistoryResponse>(R"pb(
    records { job_id: 7 user: "alice" } records { job_id: 8 user: "bob" })pb");
  EXPECT_CALL(*reader, Read(_))
      .WillOnce(DoAll(SetArgPointee<0>(page), Return(true)))
      .WillOnce(Return(false));
  EXPECT_CALL(*reader, Finish()).WillOnce(Return(grpc::Status::OK));
  EXPECT_CALL(stub_, ListHistoryRaw(_, _)).WillOnce(Return(reader));
  ASSERT_EQ(Run({"history", "-o", "yaml"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("records:"), HasSubstr("job_id: 7"),
                                HasSubstr("user: bob")));
}

TEST_F(CliAccountingTest, History_Refused_ErrorFromTheStream) {
  auto* reader = new grpc::testing::MockClientReader<v1::ListHistoryResponse>();
  EXPECT_CALL(*reader, Read(_)).WillOnce(Return(false));
  EXPECT_CALL(*reader, Finish())
      .WillOnce(Return(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "state: bad")));
  EXPECT_CALL(stub_, ListHistoryRaw(_, _)).WillOnce(Return(reader));
  EXPECT_NE(Run({"history", "-o", "json"}), 0);
  EXPECT_THAT(err_.str(), HasSubstr("state: bad"));
}

}  // namespace
}  // namespace trainctl::cli
