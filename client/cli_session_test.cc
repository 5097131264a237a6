// `trainctl exec`, `shell`, `attach` and `port-forward` against a mock stub
// (client/cli_session.cc): what is refused before any RPC, and the job a
// shell submits. The sessions themselves run end to end in
// tests/e2e/exec_e2e.py (a real terminal).

#include <string>

#include "client/cli.h"
#include "client/testing/cli_harness.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::DoAll;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;

class CliSessionTest : public CliHarness<> {};

TEST_F(CliSessionTest, PortForward_BadPorts_UsageErrorNamingThemBeforeAnyRpc) {
  EXPECT_CALL(stub_, GetJob(_, _, _)).Times(0);
  EXPECT_EQ(Run({"port-forward", "5", "http"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("PORTS: \"http\" is not [LOCAL:]REMOTE"));
  EXPECT_EQ(Run({"port-forward", "5", "8080:70000"}), kExitUsage);
}

TEST_F(CliSessionTest, Exec_WithoutACommand_UsageError) {
  EXPECT_EQ(Run({"exec", "5"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("command"));
}

TEST_F(CliSessionTest, Shell_BadIdleTimeout_UsageErrorBeforeAnyRpc) {
  EXPECT_CALL(stub_, SubmitJob(_, _, _)).Times(0);
  EXPECT_EQ(Run({"shell", "--idle-timeout", "soon"}), kExitUsage);
  EXPECT_THAT(err_.str(), HasSubstr("--idle-timeout soon"));
}

TEST_F(CliSessionTest, Shell_SubmitsAnInteractiveHolderJobUnderTheResourceFlags) {
  v1::SubmitJobRequest sent;
  v1::SubmitJobResponse made;
  made.set_job_id(9);
  EXPECT_CALL(stub_, SubmitJob(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(made), Return(grpc::Status::OK)));
  // The job ends before its shell could start (e.g. cancelled meanwhile).
  auto ended = Proto<v1::GetJobResponse>(
      R"pb(job { id: 9 state: JOB_STATE_CANCELLED reason: "cancelled by user" })pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillRepeatedly(DoAll(SetArgPointee<2>(ended), Return(grpc::Status::OK)));
  // --keep: nothing is cancelled on the way out.
  EXPECT_CALL(stub_, CancelJob(_, _, _)).Times(0);
  EXPECT_EQ(Run({"shell", "--gpus", "2", "--idle-timeout", "30m", "--keep"}), kExitRpcError);
  EXPECT_TRUE(sent.spec().interactive());
  EXPECT_EQ(sent.spec().idle_timeout_ms(), 30 * 60 * 1000);
  EXPECT_EQ(sent.spec().gpus(), 2);
  EXPECT_EQ(sent.spec().name(), "shell");
  EXPECT_THAT(sent.spec().command(), ElementsAre("sleep", "infinity"));
  EXPECT_THAT(err_.str(), HasSubstr("job 9 ended before its shell started"));
}

// --image: the holder runs in the image (the agent execs the shell into its
// container), with the same holder command.
TEST_F(CliSessionTest, Shell_Image_TheHolderJobRunsInTheImage) {
  v1::SubmitJobRequest sent;
  v1::SubmitJobResponse made;
  made.set_job_id(4);
  EXPECT_CALL(stub_, SubmitJob(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(made), Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillRepeatedly(Return(grpc::Status(grpc::StatusCode::NOT_FOUND, "no job 4")));
  Run({"shell", "--image", "localhost/train:3", "--keep", "--", "sh", "-c", "echo hi"});
  EXPECT_EQ(sent.spec().image(), "localhost/train:3");
  EXPECT_TRUE(sent.spec().interactive());
  EXPECT_THAT(sent.spec().command(), ElementsAre("sleep", "infinity"));
}

// Without --idle-timeout the coordinator applies the queue's default (0 on
// the wire); --idle-timeout 0 is "never" (-1).
TEST_F(CliSessionTest, Shell_IdleTimeoutDefaultsToTheQueuesAndZeroTurnsItOff) {
  v1::SubmitJobRequest sent;
  v1::SubmitJobResponse made;
  made.set_job_id(3);
  EXPECT_CALL(stub_, SubmitJob(_, _, _))
      .WillRepeatedly(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(made), Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillRepeatedly(Return(grpc::Status(grpc::StatusCode::NOT_FOUND, "no job 3")));
  Run({"shell", "--keep"});
  EXPECT_EQ(sent.spec().idle_timeout_ms(), 0);
  Run({"shell", "--keep", "--idle-timeout", "0"});
  EXPECT_EQ(sent.spec().idle_timeout_ms(), -1);
}

}  // namespace
}  // namespace trainctl::cli
