#include "client/cli.h"

#include <stdlib.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/sweep.h"
#include "client/testing/cli_harness.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using ::testing::_;
using ::testing::AllOf;
using ::testing::DoAll;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Invoke;
using ::testing::Not;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;
using ::testing::StartsWith;
using ::testing::StrictMock;

MATCHER_P(EqualsProto, expected, "") {
  std::string diff;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  bool equal = differencer.Compare(expected, arg);
  *result_listener << diff;
  return equal;
}

// Runs command lines against a strict mock stub: any RPC a test does not
// expect fails it. Time is a FakeClock at 1'700'000'000 s.
class CliTest : public CliHarness<> {
 protected:
  void SetUp() override { unsetenv("TRAINCTL_COORDINATOR"); }
};

// ------------------------------------------------------------------ submit

TEST_F(CliTest, Submit_WholeGpusEnvAndCommand_MapsToSpecAndPrintsId) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit",   "--name",     "lr-sweep",  "--gpus",
                 "2",        "--priority", "5",         "--max-restarts",
                 "3",        "--env",      "LR=3e-4",   "--env",
                 "ARGS=a=b", "--workdir",  "/data/run", "--request-id",
                 "r-1",      "--",         "python",    "train.py",
                 "--lr",     "3"}),
            0);
  EXPECT_THAT(submitted_, EqualsProto(Proto<v1::SubmitJobRequest>(R"pb(
                spec {
                  name: "lr-sweep"
                  command: [ "python", "train.py", "--lr", "3" ]
                  env { key: "LR" value: "3e-4" }
                  env { key: "ARGS" value: "a=b" }
                  workdir: "/data/run"
                  priority: 5
                  gpus: 2
                  max_restarts: 3
                  export_policy: "ALL"
                }
                request_id: "r-1"
              )pb")));
  // The id alone, so that `id=$(trainctl submit ...)` works.
  EXPECT_EQ(out_.str(), "42\n");
  EXPECT_EQ(err_.str(), "");
}

TEST_F(CliTest, Submit_NoLogs_AsksToDiscardTheOutput) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--no-logs", "--", "sh", "-c", "date > /data/out"}), 0);
  EXPECT_TRUE(submitted_.spec().discard_output());
}

TEST_F(CliTest, Submit_SlurmEnv_AsksForSrunsVariables) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--gpus", "2", "--slurm-env", "--", "python", "train.py"}), 0);
  EXPECT_TRUE(submitted_.spec().slurm_env());
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--gpus", "2", "--", "python", "train.py"}), 0);
  EXPECT_FALSE(submitted_.spec().slurm_env());  // off unless asked for
}

TEST_F(CliTest, Submit_ExportAllByDefault_TheShellsEnvironmentButTrainctlsOwn) {
  const char* env[] = {"PATH=/home/u/venv/bin:/usr/bin",
                       "VIRTUAL_ENV=/home/u/venv",
                       "MYVAR=x=y",
                       "TRAINCTL_AUTH_TOKEN=user-secret",
                       "TRAINCTL_TOKEN=enclosing-job",
                       "PWD=/somewhere",
                       "BASH_FUNC_f%%=() {  echo; }",
                       nullptr};
  options_.environ = env;
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--", "python", "a.py"}), 0);
  EXPECT_EQ(submitted_.spec().export_policy(), "ALL");
  std::map<std::string, std::string> exported(submitted_.spec().exported_env().begin(),
                                              submitted_.spec().exported_env().end());
  EXPECT_EQ(exported, (std::map<std::string, std::string>{
                          {"MYVAR", "x=y"},
                          {"PATH", "/home/u/venv/bin:/usr/bin"},
                          {"VIRTUAL_ENV", "/home/u/venv"}}));
}

TEST_F(CliTest, Submit_ExportListAndNone_OnlyWhatWasAsked) {
  const char* env[] = {"PATH=/usr/bin", "MYVAR=1", "OTHER=2", nullptr};
  options_.environ = env;
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--export", "MYVAR,EXTRA=3", "--", "true"}), 0);
  std::map<std::string, std::string> exported(submitted_.spec().exported_env().begin(),
                                              submitted_.spec().exported_env().end());
  EXPECT_EQ(exported,
            (std::map<std::string, std::string>{{"EXTRA", "3"}, {"MYVAR", "1"}}));
  EXPECT_EQ(submitted_.spec().export_policy(), "MYVAR,EXTRA=3");

  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--export", "NONE", "--", "true"}), 0);
  EXPECT_EQ(submitted_.spec().exported_env_size(), 0);
  EXPECT_EQ(submitted_.spec().export_policy(), "NONE");

  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--export", "ALL,OTHER=9", "--", "true"}), 0);
  EXPECT_EQ(submitted_.spec().exported_env().at("OTHER"), "9");
  EXPECT_EQ(submitted_.spec().exported_env().at("PATH"), "/usr/bin");
}

TEST_F(CliTest, Submit_ExportUnsetOrBadName_UsageErrorNamingIt) {
  // StrictMock: no RPC may be made.
  EXPECT_EQ(Run({"submit", "--export", "NOT_SET_ANYWHERE", "--", "true"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--export NOT_SET_ANYWHERE: NOT_SET_ANYWHERE is "
                                    "not set in this environment"));
  EXPECT_EQ(Run({"submit", "--export", "A,NONE", "--", "true"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("NONE only alone"));
  EXPECT_EQ(Run({"submit", "--export", "1X", "--", "true"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("\"1X\" is not a variable name"));
}

// The launch contract's names never come from the shell: ALL leaves them
// out (a shell inside a task has them all), a named one is refused.
TEST_F(CliTest, Submit_ExportLaunchContractNames_LeftOutOfAllRefusedByName) {
  const char* env[] = {"PATH=/usr/bin", "RANK=3", "CUDA_VISIBLE_DEVICES=GPU-1",
                       "TRAINCTL_CHECKPOINT_DIR=/etc", "TORCHELASTIC_RUN_ID=9", nullptr};
  options_.environ = env;
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--", "true"}), 0);
  std::map<std::string, std::string> exported(submitted_.spec().exported_env().begin(),
                                              submitted_.spec().exported_env().end());
  EXPECT_EQ(exported, (std::map<std::string, std::string>{{"PATH", "/usr/bin"}}));
  // StrictMock: no RPC for the refused ones.
  EXPECT_EQ(Run({"submit", "--export", "TRAINCTL_CHECKPOINT_DIR=/etc", "--", "true"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("TRAINCTL_CHECKPOINT_DIR is set by trainctl"));
  EXPECT_EQ(Run({"submit", "--export", "ALL,RANK", "--", "true"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("RANK is set by trainctl"));
}

// 0, negative and NaN sizes are refused naming the flag: 0 ran as a whole
// GPU (--gpu-fraction, --gpu-mem) or no limit (--cpus, --mem) before.
TEST_F(CliTest, Submit_ZeroNegativeOrNanSizes_UsageErrorNamingTheFlag) {
  for (const std::vector<std::string>& flag :
       std::vector<std::vector<std::string>>{{"--gpu-fraction", "0"},
                                             {"--gpu-fraction", "-0.5"},
                                             {"--gpu-fraction", "nan"},
                                             {"--gpu-fraction", "1.5"},
                                             {"--gpu-mem", "0"},
                                             {"--gpu-mem", "0GiB"},
                                             {"--cpus", "0"},
                                             {"--cpus", "nan"},
                                             {"--mem", "0"},
                                             {"--gpus", "0"}}) {
    err_.str("");
    std::vector<std::string> args = {"submit", flag[0], flag[1], "--", "true"};
    EXPECT_NE(Run(args), 0) << flag[0] << " " << flag[1];
    EXPECT_THAT(err_.str(), HasSubstr(flag[0])) << flag[0] << " " << flag[1];
  }
}

TEST_F(CliTest, Submit_Hold_SetsHold) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--hold", "--gpus", "16", "--", "true"}), 0);
  EXPECT_TRUE(submitted_.spec().hold());
}

TEST_F(CliTest, Submit_ImageCpusMem_MapToSpec) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--image", "localhost/train:1", "--cpus", "2.5", "--mem",
                 "8GiB", "--", "python", "a.py"}),
            0);
  EXPECT_EQ(submitted_.spec().image(), "localhost/train:1");
  EXPECT_DOUBLE_EQ(submitted_.spec().cpus(), 2.5);
  EXPECT_EQ(submitted_.spec().memory_bytes(), int64_t{8} << 30);
}

TEST_F(CliTest, Submit_WithToken_LeavesTheUserToTheCoordinator) {
  // $USER is a default only without authentication: with a token the
  // coordinator takes the user from it (a login name that differs would be
  // refused).
  options_.default_user = "login-name";
  ExpectSubmit();
  EXPECT_EQ(Run({"--token", "t0k3n", "submit", "--", "true"}), 0);
  EXPECT_EQ(submitted_.spec().user(), "");
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--", "true"}), 0);
  EXPECT_EQ(submitted_.spec().user(), "login-name");
  ExpectSubmit();
  EXPECT_EQ(Run({"--token", "t0k3n", "submit", "--user", "bob", "--", "true"}), 0);
  EXPECT_EQ(submitted_.spec().user(), "bob");
}

TEST_F(CliTest, Submit_GpuFraction_SetsFraction) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--gpu-fraction", "0.25", "--", "python", "a.py"}),
            0);
  EXPECT_DOUBLE_EQ(submitted_.spec().gpu_fraction(), 0.25);
  EXPECT_EQ(submitted_.spec().gpus(), 0);
}

TEST_F(CliTest, Submit_GpuMem_SetsBytes) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--gpu-mem", "10GiB", "--", "python", "a.py"}), 0);
  EXPECT_EQ(submitted_.spec().gpu_memory_bytes(), int64_t{10} << 30);
}

TEST_F(CliTest, Submit_NodesGpusPerNodeTasksPerNode_MakesGangSpec) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--nodes", "2", "--gpus-per-node", "4",
                 "--tasks-per-node", "1", "--", "torchrun", "ddp.py"}),
            0);
  EXPECT_EQ(submitted_.spec().nodes(), 2);
  EXPECT_EQ(submitted_.spec().gpus_per_node(), 4);
  EXPECT_EQ(submitted_.spec().tasks_per_node(), 1);
  EXPECT_THAT(submitted_.spec().command(), ElementsAre("torchrun", "ddp.py"));
}

TEST_F(CliTest, Submit_NodeSelectionFlags_FillTheSpec) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--nodes", "2", "--gpus-per-node", "4", "--gpu-type",
                 "h100,a100", "--constraint", "ib&nvlink", "-w", "n1,n2", "-x", "n3",
                 "--exclude", "n4", "--allow-mixed-gpu-types", "--", "torchrun",
                 "ddp.py"}),
            0)
      << err_.str();
  const v1::JobSpec& spec = submitted_.spec();
  EXPECT_THAT(spec.gpu_types(), ElementsAre("h100", "a100"));
  EXPECT_EQ(spec.constraint(), "ib&nvlink");
  EXPECT_THAT(spec.nodelist(), ElementsAre("n1", "n2"));
  EXPECT_THAT(spec.exclude_nodes(), ElementsAre("n3", "n4"));
  EXPECT_TRUE(spec.allow_mixed_gpu_types());
}

TEST_F(CliTest, Submit_Dependency_FillsTheSpecAsGiven) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "-d", "afterok:12:13,afterany:14", "--", "true"}), 0)
      << err_.str();
  EXPECT_EQ(submitted_.spec().dependency(), "afterok:12:13,afterany:14");
}

TEST_F(CliTest, Submit_BadDependency_UsageErrorNamingTheFlagBeforeAnyCall) {
  // StrictMock: no RPC may be made.
  EXPECT_EQ(Run({"submit", "--dependency", "afterok:1,afterany:2?after:3", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("--dependency afterok:1,afterany:2?after:3"),
                                HasSubstr("mixes ','")));
  EXPECT_EQ(Run({"submit", "-d", "afterok:x", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("\"x\" is not a job id"));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CliTest, Submit_GpuType_IsAFlagNotAHintAboutDashDash) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--gpu-type", "h100", "--", "true"}), 0) << err_.str();
  EXPECT_THAT(err_.str(), Not(HasSubstr("--")));
  EXPECT_THAT(submitted_.spec().gpu_types(), ElementsAre("h100"));
}

TEST_F(CliTest, Submit_NoWorkdir_UsesCurrentDirectory) {
  ExpectSubmit();
  EXPECT_EQ(Run({"submit", "--", "true"}), 0);
  EXPECT_EQ(submitted_.spec().workdir(),
            std::filesystem::current_path().lexically_normal().string());
}

TEST_F(CliTest, Submit_GpusAndGpuFraction_UsageErrorNamingBoth) {
  // StrictMock: no RPC may be made.
  EXPECT_EQ(Run({"submit", "--gpus", "1", "--gpu-fraction", "0.5", "--", "x"}),
            2);
  EXPECT_THAT(err_.str(),
              AllOf(StartsWith("trainctl: error: "), HasSubstr("--gpus"),
                    HasSubstr("--gpu-fraction")));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CliTest, Submit_GpuFractionAndGpuMem_UsageError) {
  EXPECT_EQ(
      Run({"submit", "--gpu-fraction", "0.5", "--gpu-mem", "1GiB", "--", "x"}),
      2);
  EXPECT_THAT(err_.str(),
              AllOf(HasSubstr("--gpu-fraction"), HasSubstr("--gpu-mem")));
}

TEST_F(CliTest, Submit_EnvWithoutEquals_ErrorNamesTheFlag) {
  EXPECT_EQ(Run({"submit", "--env", "LR", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), AllOf(StartsWith("trainctl: error: --env LR:"),
                                HasSubstr("KEY=VALUE")));
}

TEST_F(CliTest, Submit_EnvWithBadName_ErrorNamesTheFlag) {
  EXPECT_EQ(Run({"submit", "--env", "1X=2", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), StartsWith("trainctl: error: --env 1X=2:"));
}

TEST_F(CliTest, Submit_BadGpuMem_ErrorNamesTheFlag) {
  EXPECT_EQ(Run({"submit", "--gpu-mem", "lots", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), StartsWith("trainctl: error: --gpu-mem: "));
}

TEST_F(CliTest, Submit_NoCommand_ExplainsTheDoubleDash) {
  EXPECT_EQ(Run({"submit", "--gpus", "1"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("give it after --"));
}

TEST_F(CliTest, Submit_CommandFlagsWithoutDoubleDash_HintsDoubleDash) {
  EXPECT_EQ(Run({"submit", "python", "train.py", "--lr", "3"}), 2);
  EXPECT_THAT(err_.str(), AllOf(HasSubstr("--lr"),
                                HasSubstr("put the command to run after --")));
}

TEST_F(CliTest, Submit_NodesWithoutGpusPerNode_UsageError) {
  EXPECT_EQ(Run({"submit", "--nodes", "2", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--gpus-per-node"));
}

TEST_F(CliTest, Submit_CoordinatorUnavailable_SaysCannotReachAndExits1) {
  EXPECT_CALL(stub_, SubmitJob(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                    "failed to connect to all addresses")));
  EXPECT_EQ(Run({"--coordinator", "head:7000", "submit", "--", "x"}), 1);
  EXPECT_EQ(err_.str(),
            "trainctl: error: cannot reach the coordinator at head:7000: "
            "failed to connect to all addresses (is trainctl-coordinator "
            "running? set --coordinator or TRAINCTL_COORDINATOR)\n");
  EXPECT_EQ(out_.str(), "");
}

TEST_F(CliTest, List_CoordinatorTooSlow_SaysItDidNotAnswer) {
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                                    "Deadline Exceeded")));
  EXPECT_EQ(Run({"list"}), 1);
  EXPECT_EQ(err_.str(),
            "trainctl: error: the coordinator at 127.0.0.1:50051 did not "
            "answer within 10s\n");
}

TEST_F(CliTest, Submit_ServerRejectsSpec_PrintsServerMessage) {
  EXPECT_CALL(stub_, SubmitJob(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "spec.gpus: 64 GPUs exceed the cluster")));
  EXPECT_EQ(Run({"submit", "--gpus", "64", "--", "x"}), 1);
  EXPECT_EQ(err_.str(),
            "trainctl: error: spec.gpus: 64 GPUs exceed the cluster\n");
}

TEST_F(CliTest, Submit_Wait_PrintsIdThenExitsWithJobStatus) {
  ExpectSubmit();
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(
          DoAll(SetArgPointee<2>(Proto<v1::WaitJobResponse>(
                    "job { id: 42 state: JOB_STATE_SUCCEEDED } done: true")),
                Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"submit", "--wait", "--", "x"}), 0);
  EXPECT_EQ(out_.str(), "42\n");
  EXPECT_THAT(err_.str(), HasSubstr("job 42 succeeded"));
}

TEST_F(CliTest, SubmitArray_SlurmSyntax_OneSubmitJobArrayCallWithTheSpecOnce) {
  v1::SubmitJobArrayRequest sent;
  EXPECT_CALL(stub_, SubmitJobArray(_, _, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, const v1::SubmitJobArrayRequest& r,
                           v1::SubmitJobsResponse* resp) {
        sent = r;
        for (int i = 0; i < r.task_ids_size(); ++i) resp->add_job_ids(57 + i);
        return grpc::Status::OK;
      }));
  ASSERT_EQ(Run({"submit", "--name", "eval", "--array", "1,3,5-7%2", "--", "x"}), 0)
      << err_.str();
  // One spec, sent once with its exported environment, and the task ids.
  EXPECT_EQ(sent.spec().name(), "eval");
  EXPECT_FALSE(sent.spec().has_array());
  EXPECT_EQ(sent.spec().export_policy(), "ALL");
  EXPECT_THAT(sent.task_ids(), ::testing::ElementsAre(1, 3, 5, 6, 7));
  EXPECT_EQ(sent.max_running(), 2);
  // The array id (its first job's) alone on stdout, as for a plain submit.
  EXPECT_EQ(out_.str(), "57\n");
  EXPECT_THAT(err_.str(), HasSubstr("array 57: 5 job(s) submitted (jobs 57..61, at "
                                    "most 2 running)"));
}

TEST_F(CliTest, SubmitArray_CoordinatorWithoutSubmitJobArray_OneSpecPerTaskInSubmitJobs) {
  EXPECT_CALL(stub_, SubmitJobArray(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown method")));
  v1::SubmitJobsRequest sent;
  EXPECT_CALL(stub_, SubmitJobs(_, _, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, const v1::SubmitJobsRequest& r,
                           v1::SubmitJobsResponse* resp) {
        sent = r;
        for (int i = 0; i < r.specs_size(); ++i) resp->add_job_ids(57 + i);
        return grpc::Status::OK;
      }));
  ASSERT_EQ(Run({"submit", "--name", "eval", "--array", "1,3,5-7%2", "--", "x"}), 0)
      << err_.str();
  ASSERT_EQ(sent.specs_size(), 5);
  const std::vector<int> task_ids = {1, 3, 5, 6, 7};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(sent.specs(i).name(), "eval");
    EXPECT_EQ(sent.specs(i).array().task_id(), task_ids[i]);
    EXPECT_EQ(sent.specs(i).array().task_count(), 5);
    EXPECT_EQ(sent.specs(i).array().max_running(), 2);
  }
  EXPECT_EQ(out_.str(), "57\n");
}

TEST_F(CliTest, SubmitArray_BadSyntax_UsageErrorNamingTheFlag) {
  // StrictMock: no RPC.
  EXPECT_EQ(Run({"submit", "--array", "9-2", "--", "x"}), 2);
  EXPECT_EQ(err_.str(),
            "trainctl: error: --array 9-2: \"9-2\": the range ends before it starts\n");
  err_.str("");
  EXPECT_EQ(Run({"submit", "--array", "0-9%0", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--array 0-9%0: \"%0\": expected %P with P >= 1"));
  err_.str("");
  EXPECT_EQ(Run({"submit", "--array", "0-3", "--wait", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--wait: not with --array"));
}

TEST_F(CliTest, CancelArray_CancelsEveryUnfinishedTask) {
  v1::ListJobsRequest listed;
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&listed),
                      SetArgPointee<2>(Proto<v1::ListJobsResponse>(R"pb(
                        jobs { id: 59 state: JOB_STATE_PENDING }
                        jobs { id: 58 state: JOB_STATE_RUNNING }
                        jobs { id: 57 state: JOB_STATE_SUCCEEDED }
                      )pb")),
                      Return(grpc::Status::OK)));
  const std::vector<int64_t>& cancelled = ExpectCancels(2);
  ASSERT_EQ(Run({"cancel", "--array", "57"}), 0) << err_.str();
  EXPECT_EQ(listed.array_job_id(), 57);
  EXPECT_THAT(cancelled, ElementsAre(59, 58));
}

TEST_F(CliTest, Submit_Help_ShowsExampleAndExits0) {
  EXPECT_EQ(Run({"submit", "--help"}), 0);
  EXPECT_THAT(out_.str(),
              AllOf(HasSubstr("--gpu-fraction"), HasSubstr("Example:"),
                    HasSubstr("trainctl submit --")));
}

// ------------------------------------------------------------------ address

TEST_F(CliTest, Run_NoFlagNoEnv_UsesDefaultAddress) {
  EXPECT_CALL(stub_, ListJobs(_, _, _)).WillOnce(Return(grpc::Status::OK));
  EXPECT_EQ(Run({"list"}), 0);
  EXPECT_EQ(address_, "127.0.0.1:50051");
}

TEST_F(CliTest, Run_EnvSet_UsesEnvAddress) {
  setenv("TRAINCTL_COORDINATOR", "env-host:1", 1);
  EXPECT_CALL(stub_, ListJobs(_, _, _)).WillOnce(Return(grpc::Status::OK));
  EXPECT_EQ(Run({"list"}), 0);
  EXPECT_EQ(address_, "env-host:1");
}

TEST_F(CliTest, Run_FlagAfterSubcommand_OverridesEnv) {
  setenv("TRAINCTL_COORDINATOR", "env-host:1", 1);
  EXPECT_CALL(stub_, ListJobs(_, _, _)).WillOnce(Return(grpc::Status::OK));
  EXPECT_EQ(Run({"list", "--coordinator", "flag-host:2"}), 0);
  EXPECT_EQ(address_, "flag-host:2");
}

TEST_F(CliTest, Run_UnknownSubcommand_Exits2) {
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_THAT(err_.str(), StartsWith("trainctl: error: "));
}

// ------------------------------------------------------------------ list

TEST_F(CliTest, List_Jobs_TableNewestFirst) {
  // Submitted 5 min ago (running for 3 min) and 1 h ago (finished).
  auto response = Proto<v1::ListJobsResponse>(absl::StrFormat(
      R"pb(
        jobs {
          id: 7
          spec { name: "old" gpu_fraction: 0.25 }
          kind: JOB_KIND_EXPERIMENT
          state: JOB_STATE_FAILED
          attempt: 1
          reason: "rank 0 exited with code 3"
          submit_time_ms: %d
          start_time_ms: %d
          end_time_ms: %d
        }
        jobs {
          id: 9
          spec { name: "ddp" nodes: 2 gpus_per_node: 4 }
          kind: JOB_KIND_GANG
          state: JOB_STATE_RUNNING
          submit_time_ms: %d
          start_time_ms: %d
        }
      )pb",
      kNowMs - 3600'000, kNowMs - 3000'000, kNowMs - 2940'000, kNowMs - 300'000,
      kNowMs - 180'000));
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"list"}), 0);
  EXPECT_THAT(
      Lines(out_.str()),
      ElementsAre(
          "ID  NAME  KIND        STATE    GPUS  ATTEMPT  AGE   RUNTIME  REASON",
          "9   ddp   gang        running  2x4   0        5m0s  3m0s",
          "7   old   experiment  failed   0.25  1        1h0m  1m0s     rank 0 "
          "exited with code 3"));
}

TEST_F(CliTest, List_StateFlags_SentAsFilter) {
  v1::ListJobsRequest request;
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&request), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"list", "--state", "running", "--state", "PENDING"}), 0);
  EXPECT_THAT(request.states(),
              ElementsAre(v1::JOB_STATE_RUNNING, v1::JOB_STATE_PENDING));
}

TEST_F(CliTest, List_UnknownState_UsageError) {
  EXPECT_EQ(Run({"list", "--state", "sleeping"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--state"));
}

TEST_F(CliTest, List_Json_ParsesBackWithProtoFieldNames) {
  auto response = Proto<v1::ListJobsResponse>(R"pb(
    jobs {
      id: 9
      spec { name: "ddp" command: "python" }
      state: JOB_STATE_RUNNING
      attempt_token: "secret"
    }
  )pb");
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"list", "-o", "json"}), 0);
  const std::string json = out_.str();
  EXPECT_THAT(json, AllOf(HasSubstr("\"submit_time_ms\""),
                          HasSubstr("\"JOB_STATE_RUNNING\""),
                          Not(HasSubstr("secret"))));
  v1::ListJobsResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(json, &parsed).ok())
      << json;
  response.mutable_jobs(0)->clear_attempt_token();
  EXPECT_THAT(parsed, EqualsProto(response));
}

// ------------------------------------------------------------------ describe

TEST_F(CliTest, Describe_UnknownJob_PrintsServerMessage) {
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(Return(
          grpc::Status(grpc::StatusCode::NOT_FOUND, "job 404 not found")));
  EXPECT_EQ(Run({"describe", "404"}), 1);
  EXPECT_EQ(err_.str(), "trainctl: error: job 404 not found\n");
}

TEST_F(CliTest, Describe_FailedGang_ShowsSpecAndRanks) {
  auto response = Proto<v1::GetJobResponse>(R"pb(
    job {
      id: 9
      spec {
        name: "ddp"
        command: [ "python", "train.py", "--note", "two words" ]
        env { key: "LR" value: "3" }
        workdir: "/data"
        nodes: 1
        gpus_per_node: 2
      }
      kind: JOB_KIND_GANG
      state: JOB_STATE_FAILED
      attempt: 1
      reason: "rank 1 exited with code 3"
      master_addr: "10.0.0.5"
      master_port: 29500
      world_size: 2
      tasks {
        rank: 0
        node: "gpu-a"
        gpu_indices: [ 0, 1 ]
        state: TASK_STATE_EXITED
        pid: 100
        signal: 15
        log_path: "/var/log/trainctl/9/0/rank0.log"
      }
      tasks {
        rank: 1
        node: "gpu-a"
        gpu_indices: [ 0, 1 ]
        state: TASK_STATE_EXITED
        pid: 101
        exit_code: 3
        log_path: "/var/log/trainctl/9/0/rank1.log"
      }
    }
  )pb");
  v1::GetJobRequest request;
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&request), SetArgPointee<2>(response),
                      Return(grpc::Status::OK)));
  // No utilization history: describe prints no such section.
  EXPECT_CALL(stub_, GetJobUsage(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")));
  ASSERT_EQ(Run({"describe", "9"}), 0);
  EXPECT_EQ(request.job_id(), 9);
  const std::string out = out_.str();
  EXPECT_THAT(out,
              HasSubstr("Command:     python train.py --note 'two words'\n"));
  EXPECT_THAT(out, HasSubstr("Env:         LR=3\n"));
  EXPECT_THAT(out, HasSubstr("State:       failed\n"));
  EXPECT_THAT(out, HasSubstr("Reason:      rank 1 exited with code 3\n"));
  EXPECT_THAT(out, HasSubstr("Resources:   1 node(s) x 2 GPU(s)\n"));
  EXPECT_THAT(out, HasSubstr("Master:      10.0.0.5:29500\n"));
  EXPECT_THAT(out,
              HasSubstr("RANK  NODE   GPUS  STATE   PID  EXIT     LOG PATH\n"
                        "0     gpu-a  0,1   exited  100  SIGTERM  "
                        "/var/log/trainctl/9/0/rank0.log\n"
                        "1     gpu-a  0,1   exited  101  3        "
                        "/var/log/trainctl/9/0/rank1.log\n"));
}

TEST_F(CliTest, Describe_ExportAndAccount_ShownWithSecretsMasked) {
  auto response = Proto<v1::GetJobResponse>(R"pb(
    job {
      id: 9
      spec {
        command: "python"
        user: "alice"
        env { key: "HF_TOKEN" value: "hf_abc" }
        exported_env { key: "PATH" value: "/usr/bin" }
        exported_env { key: "WANDB_API_KEY" value: "wandb-secret" }
        export_policy: "ALL"
      }
      state: JOB_STATE_RUNNING
      tasks { rank: 0 node: "n1" state: TASK_STATE_RUNNING run_as: "alice" uid: 1001 }
    }
  )pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .Times(2)
      .WillRepeatedly(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetJobUsage(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")));
  ASSERT_EQ(Run({"describe", "9"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("Env:         HF_TOKEN=****\n"));
  EXPECT_THAT(out_.str(), HasSubstr("Export:      ALL (2 variables: PATH WANDB_API_KEY)\n"));
  EXPECT_THAT(out_.str(), HasSubstr("Runs as:     alice (uid 1001)\n"));
  EXPECT_THAT(out_.str(), Not(HasSubstr("hf_abc")));
  ASSERT_EQ(Run({"describe", "9", "-o", "json"}), 0);
  EXPECT_THAT(out_.str(), Not(HasSubstr("hf_abc")));
  EXPECT_THAT(out_.str(), Not(HasSubstr("wandb-secret")));
  EXPECT_THAT(out_.str(), HasSubstr("/usr/bin"));
}

// An interactive job says so, with its idle timeout: its own, its queue's,
// or none.
TEST_F(CliTest, Describe_InteractiveJob_ShowsItsIdleTimeout) {
  for (const auto& [ms, want] : std::vector<std::pair<int64_t, std::string>>{
           {1800000, "ends when idle for 30m"},
           {0, "ends when idle for the queue's idle timeout"},
           {-1, "never ends for idleness"}}) {
    v1::GetJobResponse response = Proto<v1::GetJobResponse>(R"pb(
      job { id: 4 spec { command: "sleep" interactive: true } state: JOB_STATE_RUNNING }
    )pb");
    response.mutable_job()->mutable_spec()->set_idle_timeout_ms(ms);
    EXPECT_CALL(stub_, GetJob(_, _, _))
        .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
    EXPECT_CALL(stub_, GetJobUsage(_, _, _))
        .Times(::testing::AnyNumber())
        .WillRepeatedly(Return(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "")));
    out_.str("");
    ASSERT_EQ(Run({"describe", "4"}), 0);
    EXPECT_THAT(out_.str(), HasSubstr("Interactive: yes (trainctl shell); " + want + "\n"));
  }
}

TEST_F(CliTest, Describe_Yaml_TheJsonAsYaml) {
  auto response = Proto<v1::GetJobResponse>(R"pb(job { id: 9 spec { name: "ddp" } })pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"describe", "9", "-o", "yaml"}), 0);
  EXPECT_THAT(out_.str(), StartsWith("job:\n"));
  EXPECT_THAT(out_.str(), HasSubstr("  id: 9\n"));
  EXPECT_THAT(out_.str(), HasSubstr("    name: ddp\n"));
}

// -o yaml is the JSON's data: a string that looks like a number, a boolean
// or nothing stays a string (a command line's "1.0"); ids stay numbers.
TEST_F(CliTest, Describe_Yaml_StringsStayStrings) {
  auto response = Proto<v1::GetJobResponse>(
      R"pb(job { id: 9 spec { command: "train.py" command: "1.0" command: "true" command: "" } })pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"describe", "9", "-o", "yaml"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("  id: 9\n"));
  EXPECT_THAT(out_.str(), HasSubstr("- train.py\n"));
  EXPECT_THAT(out_.str(), HasSubstr("- \"1.0\"\n"));
  EXPECT_THAT(out_.str(), HasSubstr("- \"true\"\n"));
  EXPECT_THAT(out_.str(), HasSubstr("- \"\"\n"));
}

TEST_F(CliTest, Describe_Json_ParsesBack) {
  auto response = Proto<v1::GetJobResponse>(R"pb(job {
                                                   id: 9
                                                   tasks { rank: 0 pid: 5 }
                                                 })pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"describe", "9", "-o", "json"}), 0);
  v1::GetJobResponse parsed;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok());
  EXPECT_THAT(parsed, EqualsProto(response));
  EXPECT_THAT(out_.str(), HasSubstr("\"log_path\""));
}

// describe takes several ids: a description each; as JSON one list.
TEST_F(CliTest, Describe_SeveralIds_EachOrOneList) {
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillRepeatedly([](grpc::ClientContext*, const v1::GetJobRequest& req,
                         v1::GetJobResponse* resp) {
        resp->mutable_job()->set_id(req.job_id());
        resp->mutable_job()->mutable_spec()->set_name(absl::StrCat("job", req.job_id()));
        return grpc::Status::OK;
      });
  ASSERT_EQ(Run({"describe", "3", "4"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("3 (job3)"));
  EXPECT_THAT(out_.str(), HasSubstr("4 (job4)"));
  ASSERT_EQ(Run({"describe", "3", "4", "-o", "json"}), 0);
  v1::ListJobsResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok());
  ASSERT_EQ(parsed.jobs_size(), 2);
  EXPECT_EQ(parsed.jobs(1).id(), 4);
}

TEST_F(CliTest, Describe_NotANumber_UsageError) {
  EXPECT_EQ(Run({"describe", "abc"}), 2);
}

// ------------------------------------------------------------------ wait

v1::WaitJobResponse Done(const std::string& job_text) {
  auto response = Proto<v1::WaitJobResponse>("job {" + job_text + "}");
  response.set_done(true);
  return response;
}

// A WaitJob mock's answer: the job (text format), not final; the follower
// waits again.
auto StillRunning(const std::string& job_text) {
  return DoAll(SetArgPointee<2>(Proto<v1::WaitJobResponse>("job {" + job_text + "}")),
               Return(grpc::Status::OK));
}

TEST_F(CliTest, Wait_Succeeded_Exits0WithSummary) {
  v1::WaitJobRequest request;
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(
          DoAll(SaveArg<1>(&request),
                SetArgPointee<2>(
                    Done("id: 5 state: JOB_STATE_SUCCEEDED start_time_ms: 1000 "
                         "end_time_ms: 61000")),
                Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"wait", "5"}), 0);
  EXPECT_EQ(request.job_id(), 5);
  EXPECT_EQ(request.timeout_ms(), 30000);
  EXPECT_EQ(err_.str(), "job 5 succeeded after 1m0s\n");
}

TEST_F(CliTest, Wait_FailedRankExit3_Exits3) {
  // Rank 1 exited with 3 first; rank 0 was then killed by the teardown.
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Done(R"pb(
                        id: 5
                        state: JOB_STATE_FAILED
                        reason: "rank 1 exited with code 3"
                        tasks { rank: 0 exit_code: 143 end_time_ms: 2000 }
                        tasks { rank: 1 exit_code: 3 end_time_ms: 1000 }
                      )pb")),
                      Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"wait", "5"}), 3);
  EXPECT_THAT(err_.str(), HasSubstr("job 5 failed: rank 1 exited with code 3"));
}

// Several jobs: each one's summary, and the worst status: a failure's code
// over a cancel, whatever the order they ended in.
TEST_F(CliTest, Wait_SeveralJobs_TheWorstStatus) {
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Done("id: 5 state: JOB_STATE_CANCELLED")),
                      Return(grpc::Status::OK)))
      .WillOnce(DoAll(SetArgPointee<2>(Done(R"pb(
                        id: 6 state: JOB_STATE_FAILED tasks { rank: 0 exit_code: 3 })pb")),
                      Return(grpc::Status::OK)))
      .WillOnce(DoAll(SetArgPointee<2>(Done("id: 7 state: JOB_STATE_SUCCEEDED")),
                      Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"wait", "5", "6", "7"}), 3);
  EXPECT_THAT(err_.str(), HasSubstr("job 5 cancelled"));
  EXPECT_THAT(err_.str(), HasSubstr("job 6 failed"));
  EXPECT_THAT(err_.str(), HasSubstr("job 7 succeeded"));
}

TEST_F(CliTest, Wait_Cancelled_Exits2) {
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(DoAll(
          SetArgPointee<2>(
              Done("id: 5 state: JOB_STATE_CANCELLED reason: \"by alice\"")),
          Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"wait", "5"}), 2);
  EXPECT_EQ(err_.str(), "job 5 cancelled: by alice\n");
}

TEST_F(CliTest, Wait_NotDoneYet_PollsAgain) {
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(StillRunning("id: 5 state: JOB_STATE_RUNNING"))
      .WillOnce(
          DoAll(SetArgPointee<2>(Done("id: 5 state: JOB_STATE_SUCCEEDED")),
                Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"wait", "5"}), 0);
}

TEST_F(CliTest, Wait_Timeout_Exits124) {
  // Each long-poll "takes" what it asked for: 30 s, then the 15 s left.
  std::vector<int64_t> polls;
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .Times(2)
      .WillRepeatedly(
          Invoke([&](grpc::ClientContext*, const v1::WaitJobRequest& request,
                     v1::WaitJobResponse* response) {
            polls.push_back(request.timeout_ms());
            clock_.Advance(absl::Milliseconds(request.timeout_ms()));
            response->mutable_job()->set_state(v1::JOB_STATE_RUNNING);
            return grpc::Status::OK;
          }));
  EXPECT_EQ(Run({"wait", "5", "--timeout", "45s"}), 124);
  EXPECT_THAT(polls, ElementsAre(30000, 15000));
  EXPECT_THAT(err_.str(), HasSubstr("job 5 is still running after 45s"));
}

TEST_F(CliTest, Wait_BadTimeout_UsageError) {
  EXPECT_EQ(Run({"wait", "5", "--timeout", "soon"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--timeout soon"));
}

TEST_F(CliTest, Wait_Help_DocumentsExitStatus) {
  EXPECT_EQ(Run({"wait", "--help"}), 0);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("Exit status:"), HasSubstr("124"),
                                HasSubstr("cancelled"), HasSubstr("--time-limit (reason TIMEOUT")));
}

TEST(WaitExitStatusTest, WaitExitStatus_RankExit200_CappedTo125) {
  auto job = Proto<v1::Job>(
      "state: JOB_STATE_FAILED tasks { rank: 0 exit_code: 200 }");
  EXPECT_EQ(Cli::WaitExitStatus(job), 125);
}

TEST(WaitExitStatusTest, WaitExitStatus_FailedBySignalOnly_Is1) {
  auto job =
      Proto<v1::Job>("state: JOB_STATE_FAILED tasks { rank: 0 signal: 9 }");
  EXPECT_EQ(Cli::WaitExitStatus(job), 1);
}

// ------------------------------------------------------------------ logs

TEST_F(CliTest, Logs_UntilEof_WritesRawBytesInOrder) {
  std::vector<int64_t> offsets;
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, const v1::GetLogsRequest& r,
                           v1::GetLogsResponse* response) {
        offsets.push_back(r.offset());
        EXPECT_EQ(r.rank(), 3);
        response->set_data(std::string("epoch 1\n\0", 9));
        response->set_next_offset(9);
        return grpc::Status::OK;
      }))
      .WillOnce(Invoke([&](grpc::ClientContext*, const v1::GetLogsRequest& r,
                           v1::GetLogsResponse* response) {
        offsets.push_back(r.offset());
        response->set_data("done\n");
        response->set_next_offset(14);
        response->set_eof(true);
        return grpc::Status::OK;
      }));
  EXPECT_EQ(Run({"logs", "7", "--rank", "3"}), 0);
  EXPECT_THAT(offsets, ElementsAre(0, 9));
  EXPECT_EQ(out_.str(), std::string("epoch 1\n\0done\n", 14));
}

TEST_F(CliTest, Logs_NoFollowCaughtUp_Stops) {
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::GetLogsResponse>(
                          "data: 'a' next_offset: 1")),
                      Return(grpc::Status::OK)))
      .WillOnce(
          DoAll(SetArgPointee<2>(Proto<v1::GetLogsResponse>("next_offset: 1")),
                Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"logs", "7"}), 0);
  EXPECT_EQ(out_.str(), "a");
}

TEST_F(CliTest, Logs_FollowCaughtUp_BlocksOnWaitJobThenReadsToEof) {
  ::testing::InSequence seq;
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::GetLogsResponse>(
                          "data: 'a' next_offset: 1")),
                      Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(
          DoAll(SetArgPointee<2>(Proto<v1::GetLogsResponse>("next_offset: 1")),
                Return(grpc::Status::OK)));
  // Caught up: block up to 1 s on the job instead of polling the log.
  v1::WaitJobRequest wait;
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&wait), SetArgPointee<2>(Done("id: 7")),
                      Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::GetLogsResponse>(
                          "data: 'b' next_offset: 2 eof: true")),
                      Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"logs", "7", "-f"}), 0);
  EXPECT_EQ(wait.timeout_ms(), 1000);
  EXPECT_EQ(out_.str(), "ab");
}

TEST_F(CliTest, Logs_FollowJobNotPlacedYet_WaitsForItsLog) {
  ::testing::InSequence seq;
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                    "job 7 has no logs yet: it is PENDING")));
  EXPECT_CALL(stub_, WaitJob(_, _, _)).WillOnce(StillRunning("id: 7 state: JOB_STATE_PENDING"));
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::GetLogsResponse>(
                          "data: 'hi' next_offset: 2 eof: true")),
                      Return(grpc::Status::OK)));
  // The rank's log ended; the follow ends once the job is final too.
  EXPECT_CALL(stub_, WaitJob(_, _, _)).WillOnce(DoAll(SetArgPointee<2>(Done("id: 7")),
                                                      Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::GetLogsResponse>("next_offset: 2 eof: true")),
                      Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"logs", "7", "-f"}), 0);
  EXPECT_EQ(out_.str(), "hi");
}

TEST_F(CliTest, Logs_NoFollowJobNotPlacedYet_PrintsServerMessage) {
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::NOT_FOUND,
                                    "job 7 has no logs yet: it is PENDING")));
  EXPECT_EQ(Run({"logs", "7"}), 1);
  EXPECT_EQ(err_.str(),
            "trainctl: error: job 7 has no logs yet: it is PENDING\n");
}

TEST_F(CliTest, Logs_FollowAcrossRestart_StartsNewAttemptAtOffset0) {
  std::vector<int64_t> offsets;
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillRepeatedly(
          Invoke([&](grpc::ClientContext*, const v1::GetLogsRequest& r,
                     v1::GetLogsResponse* response) {
            offsets.push_back(r.offset());
            // 1st read: attempt 0's log; then caught up; after the restart,
            // attempt 1's log to its end.
            if (offsets.size() == 1) response->set_data("a0");
            if (offsets.size() == 4) {
              response->set_data("a1");
              response->set_eof(true);
            }
            response->set_next_offset(r.offset() + response->data().size());
            return grpc::Status::OK;
          }));
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(StillRunning("id: 7 attempt: 0 tasks {}"))
      .WillOnce(StillRunning("id: 7 attempt: 1 tasks {}"))
      .WillOnce(DoAll(SetArgPointee<2>(Done("id: 7 attempt: 1 tasks {}")),
                      Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"logs", "7", "-f"}), 0);
  EXPECT_THAT(offsets, ElementsAre(0, 2, 2, 0, 2));
  EXPECT_EQ(out_.str(), "a0a1");
  EXPECT_THAT(err_.str(), HasSubstr("restarted (attempt 1)"));
}

// A gang's pre-flight: `logs -f` started while the probe ran shows the
// probe's log, then the job's own from its start, until the job ends. Before,
// the probe's end (its log's eof) ended the follow and the job's output was
// never shown.
TEST_F(CliTest, Logs_FollowThroughPreflight_ThenTheJobsOwnLogFromOffset0) {
  std::vector<int64_t> offsets;
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillRepeatedly(Invoke([&](grpc::ClientContext*, const v1::GetLogsRequest& r,
                                 v1::GetLogsResponse* response) {
        offsets.push_back(r.offset());
        if (offsets.size() == 1) {  // the probe's log, the probe done
          response->set_data("probe ok\n");
          response->set_eof(true);
          response->mutable_task()->set_probe_run(1);
        } else {  // the job's own log, the job done
          response->set_data(r.offset() == 0 ? "step 1\n" : "");
          response->set_eof(true);
        }
        response->set_next_offset(r.offset() + response->data().size());
        return grpc::Status::OK;
      }));
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(StillRunning("id: 7 attempt: 0 tasks {}"))
      .WillOnce(
          DoAll(SetArgPointee<2>(Done("id: 7 attempt: 0 tasks {} state: JOB_STATE_SUCCEEDED")),
                Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"logs", "7", "-f"}), 0);
  EXPECT_THAT(offsets, ElementsAre(0, 0, 7));
  EXPECT_EQ(out_.str(), "probe ok\nstep 1\n");
  EXPECT_THAT(err_.str(), HasSubstr("pre-flight done; following its command's log"));
}

// ------------------------------------------------------------------ cancel

TEST_F(CliTest, Cancel_Job_PrintsCancelled) {
  v1::CancelJobRequest request;
  EXPECT_CALL(stub_, CancelJob(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&request), Return(grpc::Status::OK)));
  EXPECT_EQ(Run({"cancel", "12"}), 0);
  EXPECT_EQ(request.job_id(), 12);
  EXPECT_EQ(out_.str(), "cancelled job 12\n");
}

TEST_F(CliTest, Cancel_SeveralIds_EachCancelled) {
  std::vector<int64_t> ids;
  EXPECT_CALL(stub_, CancelJob(_, _, _))
      .Times(3)
      .WillRepeatedly(Invoke([&](grpc::ClientContext*, const v1::CancelJobRequest& r,
                                 v1::CancelJobResponse*) {
        ids.push_back(r.job_id());
        return r.job_id() == 13 ? grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                               "job 13 already ended")
                                : grpc::Status::OK;
      }));
  EXPECT_EQ(Run({"cancel", "12", "13", "14"}), 1);
  EXPECT_THAT(ids, ElementsAre(12, 13, 14));
  EXPECT_EQ(out_.str(), "cancelled job 12\ncancelled job 14\n");
  EXPECT_THAT(err_.str(), HasSubstr("job 13: job 13 already ended"));
  EXPECT_THAT(err_.str(), HasSubstr("1 of 3 job(s) could not be cancelled"));
}

TEST_F(CliTest, Cancel_ByNameAndState_OnlyUnfinishedMatches) {
  auto listed = Proto<v1::ListJobsResponse>(R"pb(
    jobs { id: 1 spec { name: "lr" } state: JOB_STATE_PENDING }
    jobs { id: 2 spec { name: "other" } state: JOB_STATE_PENDING }
    jobs { id: 3 spec { name: "lr" } state: JOB_STATE_PENDING }
  )pb");
  v1::ListJobsRequest list_request;
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&list_request), SetArgPointee<2>(listed),
                      Return(grpc::Status::OK)));
  const std::vector<int64_t>& ids = ExpectCancels(2);
  EXPECT_EQ(Run({"cancel", "--name", "lr", "--state", "pending"}), 0);
  ASSERT_EQ(list_request.states_size(), 1);
  EXPECT_EQ(list_request.states(0), v1::JOB_STATE_PENDING);
  EXPECT_THAT(ids, ElementsAre(1, 3));
}

TEST_F(CliTest, Logs_TailAndAllRanks_LastLinesPrefixedByRank) {
  auto job = Proto<v1::GetJobResponse>(R"pb(job { id: 5 tasks { rank: 0 } tasks { rank: 1 } })pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(job), Return(grpc::Status::OK)));
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .Times(4)
      .WillRepeatedly(Invoke([](grpc::ClientContext*, const v1::GetLogsRequest& r,
                                v1::GetLogsResponse* out) {
        if (r.offset() == 0) {
          out->set_data(absl::StrFormat("r%d a\nr%d b\nr%d c\n", r.rank(), r.rank(), r.rank()));
          out->set_next_offset(12);
        } else {
          out->set_next_offset(r.offset());
          out->set_eof(true);
        }
        return grpc::Status::OK;
      }));
  EXPECT_EQ(Run({"logs", "5", "--all-ranks", "--tail", "2"}), 0);
  EXPECT_EQ(out_.str(), "[rank 0] r0 b\n[rank 0] r0 c\n[rank 1] r1 b\n[rank 1] r1 c\n");
}

TEST_F(CliTest, Logs_AllRanksFollow_EveryRankUntilTheJobEnds_LinesKeptWhole) {
  auto job = Proto<v1::GetJobResponse>(
      R"pb(job { id: 5 state: JOB_STATE_RUNNING tasks { rank: 0 } tasks { rank: 1 } })pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(job), Return(grpc::Status::OK)));
  // Rank 0 writes "step 1\nstep" then " 2\n" after a wait; rank 1 writes
  // "hello\n" at once. The job then ends: one more read of each.
  bool ended = false;
  EXPECT_CALL(stub_, GetLogs(_, _, _))
      .WillRepeatedly(Invoke([&](grpc::ClientContext*, const v1::GetLogsRequest& r,
                                 v1::GetLogsResponse* out) {
        std::string all = r.rank() == 0 ? (ended ? "step 1\nstep 2\n" : "step 1\nstep")
                                        : "hello\n";
        out->set_data(all.substr(std::min<size_t>(r.offset(), all.size())));
        out->set_next_offset(static_cast<int64_t>(all.size()));
        return grpc::Status::OK;
      }));
  EXPECT_CALL(stub_, WaitJob(_, _, _))
      .WillOnce(Invoke([&](grpc::ClientContext*, const v1::WaitJobRequest&,
                           v1::WaitJobResponse* out) {
        ended = true;
        *out = Done("id: 5 state: JOB_STATE_SUCCEEDED tasks { rank: 0 } tasks { rank: 1 }");
        return grpc::Status::OK;
      }));
  EXPECT_EQ(Run({"logs", "5", "--all-ranks", "-f"}), 0) << err_.str();
  EXPECT_EQ(out_.str(), "[rank 0] step 1\n[rank 1] hello\n[rank 0] step 2\n");
}

TEST_F(CliTest, MistypedCommand_SuggestsTheClosest) {
  EXPECT_EQ(Run({"sbumit", "--", "true"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("unknown command \"sbumit\"; did you mean submit?"));
  EXPECT_EQ(Run({"--coordinator", "h:1", "lsit"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("did you mean list?"));
  EXPECT_EQ(Run({"frobnicate"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("the commands are submit, sweep"));
}

TEST_F(CliTest, UnknownFlag_NamedWithTheClosestNotTheDoubleDashHint) {
  EXPECT_EQ(Run({"submit", "--gpu", "1", "--", "python", "train.py"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--gpu is not a flag of trainctl submit (did you mean --gpus?)"));
  EXPECT_THAT(err_.str(), Not(HasSubstr("after --")));
}

TEST_F(CliTest, List_UserNameLimitWide_FiltersAndShowsUserAndNodes) {
  auto listed = Proto<v1::ListJobsResponse>(R"pb(
    jobs { id: 1 spec { name: "lr" user: "alice" } state: JOB_STATE_RUNNING
           tasks { node: "gpu-a" } tasks { node: "gpu-b" } tasks { node: "gpu-a" } }
    jobs { id: 2 spec { name: "lr" user: "bob" } state: JOB_STATE_PENDING }
    jobs { id: 3 spec { name: "other" user: "alice" } state: JOB_STATE_PENDING }
    jobs { id: 4 spec { name: "lr" user: "alice" } state: JOB_STATE_PENDING }
  )pb");
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(listed), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"list", "--user", "alice", "--name", "lr", "-o", "wide"}), 0);
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("USER"));
  EXPECT_THAT(out, HasSubstr("NODES"));
  EXPECT_THAT(out, HasSubstr("RUNTIME"));  // wide adds columns, drops none
  EXPECT_THAT(out, HasSubstr("gpu-a,gpu-b"));
  EXPECT_THAT(out, Not(HasSubstr("bob")));
  EXPECT_THAT(out, Not(HasSubstr("other")));
  v1::ListJobsRequest request;
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&request), SetArgPointee<2>(listed), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"list", "--limit", "2", "-o", "json"}), 0);
  EXPECT_EQ(request.limit(), 2);
}

TEST_F(CliTest, HelpAlone_ListsTheCommands) {
  EXPECT_EQ(Run({"help"}), 0);
  EXPECT_THAT(out_.str(), AllOf(HasSubstr("submit"), HasSubstr("sweep"), HasSubstr("cancel"),
                                HasSubstr("logs"), Not(HasSubstr("Show the help of a command\nUsage"))));
}

TEST_F(CliTest, Version_PrintsTheProjectVersion) {
  EXPECT_EQ(Run({"--version"}), 0);
  EXPECT_THAT(out_.str(), StartsWith("trainctl 0."));
}

// ------------------------------------------------------------------ nodes

TEST_F(CliTest, Nodes_Table_ShowsModelMemoryUtilAndJobs) {
  // gpu-a GPU 0 runs two experiments (5, 6); job 9 is a gang on GPU 1 of
  // gpu-a and GPU 0 of gpu-b (fake GPUs).
  auto response = Proto<v1::ListNodesResponse>(R"pb(
    nodes {
      node {
        name: "gpu-a"
        state: NODE_STATE_READY
        features: "ib"
        features: "nvlink"
        labels { key: "rack" value: "r1" }
        gpus {
          index: 0
          name: "NVIDIA H100 80GB HBM3"
          gpu_type: "h100"
          memory_total_bytes: 85899345920
          memory_used_bytes: 10737418240
          utilization_pct: 87
          temperature_c: 61
          power_w: 412.4
        }
        gpus {
          index: 1
          name: "NVIDIA H100 80GB HBM3"
          memory_total_bytes: 85899345920
        }
      }
      gpu_tasks {
        tasks { job_id: 5 }
        tasks { job_id: 6 }
      }
      gpu_tasks { tasks { job_id: 9 rank: 0 } }
    }
    nodes {
      node {
        name: "gpu-b"
        state: NODE_STATE_LOST
        fake_gpus: true
        gpus { index: 0 name: "Fake GPU" memory_total_bytes: 1073741824 }
      }
      gpu_tasks { tasks { job_id: 9 rank: 1 } }
    }
  )pb");
  EXPECT_CALL(stub_, ListNodes(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"nodes"}), 0);
  std::vector<std::string> lines = Lines(out_.str());
  ASSERT_EQ(lines.size(), 5u) << out_.str();
  EXPECT_THAT(lines[0],
              AllOf(StartsWith("NODE "), HasSubstr("MODEL"),
                    HasSubstr("MEMORY"), HasSubstr("UTIL"), HasSubstr("JOBS")));
  EXPECT_THAT(lines[1],
              AllOf(StartsWith("gpu-a "), HasSubstr("ready"),
                    HasSubstr("NVIDIA H100 80GB HBM3"),
                    HasSubstr("10 GiB / 80 GiB"), HasSubstr("87%"),
                    HasSubstr("61C"), HasSubstr("412W"), HasSubstr("5,6"),
                    HasSubstr("h100 80G"), HasSubstr("ib,nvlink rack=r1")));
  EXPECT_THAT(lines[0], AllOf(HasSubstr("TYPE"), HasSubstr("FEATURES")));
  EXPECT_THAT(lines[2], AllOf(HasSubstr("0%"), HasSubstr("9/0")));
  EXPECT_THAT(lines[3], AllOf(StartsWith("gpu-b* "), HasSubstr("lost"),
                              HasSubstr("9/1")));
  EXPECT_THAT(lines[4], HasSubstr("fake GPUs"));
}

TEST_F(CliTest, Nodes_Json_ParsesBack) {
  auto response = Proto<v1::ListNodesResponse>(R"pb(
    nodes {
      node {
        name: "gpu-a"
        gpus { index: 0 name: "H100" }
      }
      gpu_tasks {}
    }
  )pb");
  EXPECT_CALL(stub_, ListNodes(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"nodes", "-o", "json"}), 0);
  v1::ListNodesResponse parsed;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok());
  EXPECT_THAT(parsed, EqualsProto(response));
  EXPECT_THAT(out_.str(), HasSubstr("\"fake_gpus\": false"));
}

// ------------------------------------------------------------------ real gRPC

// A coordinator whose every node is disconnected, served in-process: the CLI
// over a real channel, deadlines and all.
class DisconnectedCoordinator : public v1::Coordinator::Service {
  grpc::Status GetLogs(grpc::ServerContext*, const v1::GetLogsRequest*,
                       v1::GetLogsResponse*) override {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "node gpu-b is not connected; rank 0's log is at "
                        "/var/log/trainctl/7/0/rank0.log on that host");
  }
};

// The real stub of an in-process server instead of the mock; the system
// clock, as trainctl itself has.
class CliGrpcTest : public CliHarness<> {
 protected:
  CliGrpcTest() { options_.clock = nullptr; }
};

TEST_F(CliGrpcTest, Logs_NodeDisconnected_PrintsCoordinatorsMessage) {
  DisconnectedCoordinator service;
  grpc::ServerBuilder builder;
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  auto stub = v1::Coordinator::NewStub(
      server->InProcessChannel(grpc::ChannelArguments()));
  UseStub(stub.get());

  EXPECT_EQ(Run({"logs", "7"}), 1);
  // Not "cannot reach the coordinator": it answered.
  EXPECT_EQ(err_.str(),
            "trainctl: error: node gpu-b is not connected; rank 0's log is at "
            "/var/log/trainctl/7/0/rank0.log on that host\n");
  server->Shutdown();
}

// ------------------------------------------------------------------ sweep

// Expects one SubmitJobs call of `n` specs, answers ids 10, 11, ... and
// keeps each spec as a SubmitJobRequest (request ids: batch_request_id_).
class SweepCliTest : public CliTest {
 protected:
  void ExpectSubmits(int n) {
    EXPECT_CALL(stub_, SubmitJobs(_, _, _))
        .WillOnce(Invoke([this, n](grpc::ClientContext*,
                                   const v1::SubmitJobsRequest& request,
                                   v1::SubmitJobsResponse* response) {
          EXPECT_EQ(request.specs_size(), n);
          batch_request_id_ = request.request_id();
          for (const v1::JobSpec& spec : request.specs()) {
            *requests_.emplace_back().mutable_spec() = spec;
            response->add_job_ids(10 + static_cast<int64_t>(requests_.size()) - 1);
          }
          return grpc::Status::OK;
        }));
  }

  // A coordinator without SubmitJobs: `n` SubmitJob calls.
  void ExpectLegacySubmits(int n) {
    EXPECT_CALL(stub_, SubmitJobs(_, _, _))
        .WillOnce(Return(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown method")));
    EXPECT_CALL(stub_, SubmitJob(_, _, _))
        .Times(n)
        .WillRepeatedly(Invoke([this](grpc::ClientContext*,
                                      const v1::SubmitJobRequest& request,
                                      v1::SubmitJobResponse* response) {
          requests_.push_back(request);
          response->set_job_id(10 + static_cast<int64_t>(requests_.size()) - 1);
          return grpc::Status::OK;
        }));
  }

  // Four trials of sweep sw-test (newest first, as the coordinator lists):
  // 13 pending, 12 running, 11 failed with exit 3, 10 succeeded.
  v1::ListJobsResponse FourTrials() {
    return Proto<v1::ListJobsResponse>(absl::StrFormat(
        R"pb(
          jobs {
            id: 13
            spec { sweep_id: "sw-test" params { key: "lr" value: "3e-4" } params { key: "bs" value: "128" } }
            state: JOB_STATE_PENDING
            submit_time_ms: %d
          }
          jobs {
            id: 12
            spec { sweep_id: "sw-test" params { key: "lr" value: "3e-4" } params { key: "bs" value: "64" } }
            state: JOB_STATE_RUNNING
            submit_time_ms: %d
            tasks { state: TASK_STATE_RUNNING }
          }
          jobs {
            id: 11
            spec { sweep_id: "sw-test" params { key: "lr" value: "1e-3" } params { key: "bs" value: "128" } }
            state: JOB_STATE_FAILED
            submit_time_ms: %d
            tasks { state: TASK_STATE_EXITED exit_code: 3 }
          }
          jobs {
            id: 10
            spec { sweep_id: "sw-test" params { key: "lr" value: "1e-3" } params { key: "bs" value: "64" } }
            state: JOB_STATE_SUCCEEDED
            submit_time_ms: %d
            tasks { state: TASK_STATE_EXITED exit_code: 0 }
          }
        )pb",
        kNowMs - 60'000, kNowMs - 60'000, kNowMs - 60'000, kNowMs - 120'000));
  }

  // Expects one ListJobs for sweep sw-test and answers `response`.
  void ExpectListSweep(const v1::ListJobsResponse& response) {
    EXPECT_CALL(stub_, ListJobs(_, _, _))
        .WillOnce(DoAll(SaveArg<1>(&listed_), SetArgPointee<2>(response),
                        Return(grpc::Status::OK)));
  }

  std::vector<v1::SubmitJobRequest> requests_;
  std::string batch_request_id_;
  v1::ListJobsRequest listed_;
};

TEST_F(SweepCliTest, Sweep_TwoByTwoGrid_SubmitsFourTrialsWithParamsAndRequestIds) {
  ExpectSubmits(4);
  ASSERT_EQ(Run({"sweep", "--name", "lrs", "--sweep-id", "sw-test",
                 "--gpu-fraction", "0.5", "--workdir", "/data", "--env", "A=1",
                 "--grid", "lr=1e-3,3e-4", "--grid", "bs=64,128", "--",
                 "python", "train.py", "--lr", "{lr}", "--bs", "{bs}"}),
            0)
      << err_.str();
  ASSERT_EQ(requests_.size(), 4u);
  // Trial 3: the last grid point; the spec flags as for submit.
  EXPECT_THAT(requests_[3], EqualsProto(Proto<v1::SubmitJobRequest>(R"pb(
                spec {
                  name: "lrs-3"
                  command: [ "python", "train.py", "--lr", "3e-4", "--bs", "128" ]
                  env { key: "A" value: "1" }
                  workdir: "/data"
                  gpu_fraction: 0.5
                  sweep_id: "sw-test"
                  params { key: "lr" value: "3e-4" }
                  params { key: "bs" value: "128" }
                  export_policy: "ALL"
                }
              )pb")));
  // One call for the whole sweep; the sweep id makes it idempotent.
  EXPECT_EQ(batch_request_id_, "sw-test");
  const std::vector<std::vector<std::string>> argv = {
      {"1e-3", "64"}, {"1e-3", "128"}, {"3e-4", "64"}, {"3e-4", "128"}};
  for (int i = 0; i < 4; ++i) {
    const v1::SubmitJobRequest& r = requests_[i];
    EXPECT_EQ(r.spec().name(), absl::StrCat("lrs-", i));
    EXPECT_EQ(r.spec().sweep_id(), "sw-test");
    EXPECT_EQ(r.spec().params().at("lr"), argv[i][0]);
    EXPECT_EQ(r.spec().params().at("bs"), argv[i][1]);
    EXPECT_THAT(r.spec().command(),
                ElementsAre("python", "train.py", "--lr", argv[i][0], "--bs",
                            argv[i][1]));
  }
  // The sweep id alone on stdout, so that `sw=$(trainctl sweep ...)` works.
  EXPECT_EQ(out_.str(), "sw-test\n");
  EXPECT_THAT(err_.str(), HasSubstr("sweep sw-test: 4 trial(s) submitted (jobs 10..13)"));
}

TEST_F(SweepCliTest, Sweep_RandomNoSweepId_GeneratedIdAndSeededSamples) {
  ExpectSubmits(3);
  ASSERT_EQ(Run({"sweep", "--random", "3", "--param", "lr=loguniform:1e-5:1e-2",
                 "--seed", "5", "--", "python", "train.py", "--lr={lr}"}),
            0)
      << err_.str();
  ASSERT_EQ(requests_.size(), 3u);
  const std::string id = requests_[0].spec().sweep_id();
  EXPECT_THAT(id, ::testing::MatchesRegex("sw-[0-9a-f]{8}"));
  EXPECT_EQ(out_.str(), id + "\n");
  std::vector<std::string> lrs;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(requests_[i].spec().sweep_id(), id);
    // No --name: trials are named after the sweep.
    EXPECT_EQ(requests_[i].spec().name(), absl::StrCat(id, "-", i));
    lrs.push_back(requests_[i].spec().params().at("lr"));
    EXPECT_EQ(requests_[i].spec().command(2), "--lr=" + lrs.back());
  }
  // The same seed gives the same values (what makes a retried sweep with
  // --sweep-id idempotent).
  SweepSpec spec;
  spec.random = {*ParseParamFlag("lr=loguniform:1e-5:1e-2")};
  spec.random_count = 3;
  spec.seed = 5;
  auto trials = ExpandSweep(spec, {"x", "{lr}"});
  ASSERT_TRUE(trials.ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*trials)[i].params.at("lr"), lrs[i]);
}

TEST_F(SweepCliTest, Sweep_UnknownPlaceholder_UsageErrorBeforeAnyRpc) {
  // StrictMock: no RPC may be made.
  EXPECT_EQ(Run({"sweep", "--grid", "lr=1,2", "--", "python", "--bs", "{bs}"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("placeholder {bs} is not a parameter"));
  EXPECT_EQ(Run({"sweep", "--grid", "lr=", "--", "python"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--grid lr=: empty value"));
  EXPECT_EQ(Run({"sweep", "--random", "2", "--param", "lr=normal:0:1", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("unknown distribution"));
  EXPECT_EQ(Run({"sweep", "--grid", "lr=1"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("sweep: no command to run"));
  EXPECT_EQ(Run({"sweep", "--sweep-id", "a/b", "--grid", "lr=1", "--", "x"}), 2);
  EXPECT_THAT(err_.str(), HasSubstr("--sweep-id a/b"));
}

TEST_F(SweepCliTest, Sweep_ParamNotInCommand_WarnsAndSubmits) {
  ExpectSubmits(2);
  EXPECT_EQ(Run({"sweep", "--sweep-id", "s", "--grid", "seed=1,2", "--", "python",
                 "train.py"}),
            0);
  EXPECT_THAT(err_.str(), HasSubstr("warning: no {placeholder} in the command uses seed"));
  EXPECT_EQ(requests_[1].spec().params().at("seed"), "2");
}

TEST_F(SweepCliTest, Sweep_OlderCoordinator_OneSubmitJobPerTrial) {
  ExpectLegacySubmits(3);
  ASSERT_EQ(Run({"sweep", "--sweep-id", "sw-old", "--grid", "a=1,2,3", "--", "run",
                 "{a}"}),
            0)
      << err_.str();
  ASSERT_EQ(requests_.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(requests_[i].request_id(), absl::StrCat("sw-old-", i));
  }
  EXPECT_EQ(out_.str(), "sw-old\n");
}

TEST_F(SweepCliTest, Sweep_SubmitJobsRefused_NoTrialSubmitted) {
  EXPECT_CALL(stub_, SubmitJobs(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                    "specs[2].gpus: too many")));
  EXPECT_EQ(Run({"sweep", "--sweep-id", "sw-x", "--grid", "a=1,2,3", "--", "run",
                 "{a}"}),
            1);
  EXPECT_THAT(err_.str(), HasSubstr("sweep sw-x: specs[2].gpus: too many"));
  EXPECT_THAT(err_.str(), HasSubstr("no trial was submitted"));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(SweepCliTest, Sweep_SubmitFailsMidway_SaysHowToResume) {
  v1::SubmitJobResponse ok;
  ok.set_job_id(10);
  EXPECT_CALL(stub_, SubmitJobs(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown method")));
  EXPECT_CALL(stub_, SubmitJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(ok), Return(grpc::Status::OK)))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "down")));
  EXPECT_EQ(Run({"sweep", "--sweep-id", "sw-x", "--grid", "a=1,2,3", "--", "run",
                 "{a}"}),
            1);
  EXPECT_THAT(err_.str(), HasSubstr("trial 1 of sweep sw-x: cannot reach"));
  EXPECT_THAT(err_.str(), HasSubstr("1 of 3 trials were submitted; run the same "
                                    "command with --sweep-id sw-x"));
  EXPECT_EQ(out_.str(), "");
}

TEST_F(SweepCliTest, SweepDescribe_FourTrials_TableOldestFirstWithParamColumns) {
  ExpectListSweep(FourTrials());
  ASSERT_EQ(Run({"sweep", "describe", "sw-test"}), 0) << err_.str();
  EXPECT_EQ(listed_.sweep_id(), "sw-test");
  EXPECT_EQ(listed_.limit(), 10000);
  // Parameters in name order (bs, lr); EXIT of the trial's process.
  EXPECT_THAT(Lines(out_.str()),
              ElementsAre("JOB  STATE      bs   lr    EXIT",
                          "10   succeeded  64   1e-3  0",
                          "11   failed     128  1e-3  3",
                          "12   running    64   3e-4  -",
                          "13   pending    128  3e-4  -"));
}

TEST_F(SweepCliTest, SweepDescribe_Json_ParsesBack) {
  ExpectListSweep(FourTrials());
  ASSERT_EQ(Run({"sweep", "describe", "sw-test", "-o", "json"}), 0);
  v1::ListJobsResponse parsed;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &parsed).ok());
  ASSERT_EQ(parsed.jobs_size(), 4);
  EXPECT_EQ(parsed.jobs(0).id(), 10);
  EXPECT_EQ(parsed.jobs(0).spec().params().at("lr"), "1e-3");
}

TEST_F(SweepCliTest, SweepDescribe_UnknownSweep_NotFoundExits1) {
  ExpectListSweep(v1::ListJobsResponse());
  EXPECT_EQ(Run({"sweep", "describe", "sw-nope"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("sweep sw-nope has no trials"));
}

TEST_F(SweepCliTest, SweepCancel_MixedStates_CancelsOnlyNonFinalTrials) {
  ExpectListSweep(FourTrials());
  const std::vector<int64_t>& cancelled = ExpectCancels(2);
  EXPECT_EQ(Run({"sweep", "cancel", "sw-test"}), 0) << err_.str();
  // 12 (running) and 13 (pending); 10 and 11 had ended.
  EXPECT_THAT(cancelled, ElementsAre(12, 13));
  EXPECT_EQ(out_.str(), "sweep sw-test: cancelled 2 trial(s); 2 had already ended\n");
}

TEST_F(SweepCliTest, SweepList_TrialsOfTwoSweepsAndPlainJobs_OneRowPerSweep) {
  v1::ListJobsResponse response = FourTrials();
  v1::Job* other = response.add_jobs();
  other->set_id(5);
  other->mutable_spec()->set_sweep_id("sw-old");
  other->set_state(v1::JOB_STATE_CANCELLED);
  other->set_submit_time_ms(kNowMs - 3600'000);
  response.add_jobs()->set_id(4);  // not a sweep trial
  EXPECT_CALL(stub_, ListJobs(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(response), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"sweep", "list"}), 0);
  EXPECT_THAT(
      Lines(out_.str()),
      ElementsAre(
          "SWEEP    TRIALS  PENDING  RUNNING  SUCCEEDED  FAILED  CANCELLED  AGE",
          "sw-test  4       1        1        1          1       0          2m0s",
          "sw-old   1       0        0        0          0       1          1h0m"));
}

}  // namespace
}  // namespace trainctl::cli
