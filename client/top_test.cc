// `trainctl top` rendering and the utilization part of `describe`, against a
// strict mock stub and a FakeClock. No network, no sleeps.

#include "client/top.h"

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

using ::testing::_;
using ::testing::DoAll;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Return;
using ::testing::SaveArg;
using ::testing::SetArgPointee;
using ::testing::StrictMock;

// One node with two H100s: GPU 0 runs jobs 7 and 8 packed, GPU 1 is idle.
const char kNodes[] = R"pb(
  nodes {
    node {
      name: "gpu-a"
      state: NODE_STATE_READY
      gpus { index: 0 name: "NVIDIA H100 80GB HBM3" memory_total_bytes: 85899345920
             memory_used_bytes: 21474836480 utilization_pct: 72 power_w: 351
             temperature_c: 61 activity_source: GPU_ACTIVITY_SOURCE_GPM
             sm_active_pct: 45 dram_bw_pct: 20 }
      gpus { index: 1 name: "NVIDIA H100 80GB HBM3" memory_total_bytes: 85899345920
             utilization_pct: 0 power_w: 70 temperature_c: 33 }
    }
    gpu_tasks { tasks { job_id: 7 } tasks { job_id: 8 } }
    gpu_tasks {}
  }
)pb";

// Job 7's last 4 samples (2 s apart): util 20, 40, 60, 80 %, up to 10 GiB.
const char kUsage[] = R"pb(
  jobs {
    job_id: 7
    job_name: "trial-0"
    sample_period_ms: 2000
    samples { time_ms: 1700000000000 gpu_util_pct: 20 gpu_memory_used_bytes: 4294967296
              gpu_memory_total_bytes: 85899345920 cpu_pct: 95 }
    samples { time_ms: 1700000002000 gpu_util_pct: 40 gpu_memory_used_bytes: 6442450944
              gpu_memory_total_bytes: 85899345920 cpu_pct: 97 }
    samples { time_ms: 1700000004000 gpu_util_pct: 60 gpu_memory_used_bytes: 8589934592
              gpu_memory_total_bytes: 85899345920 cpu_pct: 99 }
    samples { time_ms: 1700000006000 gpu_util_pct: 80 gpu_memory_used_bytes: 10737418240
              gpu_memory_total_bytes: 85899345920 cpu_pct: 98
              activity_source: GPU_ACTIVITY_SOURCE_GPM sm_active_pct: 41 }
    findings { code: "low_memory" message: "Low GPU memory use: at most 10.0 of 80.0 GiB (12%)." }
    findings { code: "pack_candidate" message: "Candidate for packing." }
  }
)pb";

// Now is 1'700'000'006'000 ms, the time of job 7's last sample; the
// terminal is 120 columns wide.
class TopTest : public CliHarness<> {
 protected:
  TopTest() : CliHarness(absl::FromUnixMillis(1'700'000'006'000)) {
    options_.terminal_width = 120;
  }
  void ExpectFrame() {
    EXPECT_CALL(stub_, ListNodes(_, _, _))
        .WillOnce(DoAll(SetArgPointee<2>(Proto<v1::ListNodesResponse>(kNodes)),
                        Return(grpc::Status::OK)));
    EXPECT_CALL(stub_, GetJobUsage(_, _, _))
        .WillOnce(DoAll(SaveArg<1>(&usage_request_),
                        SetArgPointee<2>(Proto<v1::GetJobUsageResponse>(kUsage)),
                        Return(grpc::Status::OK)));
  }

  // `n` frames' calls, each answered with the same nodes and usage.
  void ExpectFrames(int n) {
    EXPECT_CALL(stub_, ListNodes(_, _, _))
        .Times(n)
        .WillRepeatedly(DoAll(SetArgPointee<2>(Proto<v1::ListNodesResponse>(kNodes)),
                              Return(grpc::Status::OK)));
    EXPECT_CALL(stub_, GetJobUsage(_, _, _))
        .Times(n)
        .WillRepeatedly(DoAll(SetArgPointee<2>(Proto<v1::GetJobUsageResponse>(kUsage)),
                              Return(grpc::Status::OK)));
  }

  v1::GetJobUsageRequest usage_request_;
};

TEST(SparklineTest, Sparkline_ScalesAndBuckets) {
  EXPECT_EQ(Sparkline({0, 50, 100}, 100, 10), "\u2581\u2585\u2588");
  // Six values into three buckets: averages 0, 50, 100.
  EXPECT_EQ(Sparkline({0, 0, 40, 60, 100, 100}, 100, 3), "\u2581\u2585\u2588");
  EXPECT_EQ(Sparkline({}, 100, 10), "");
}

TEST_F(TopTest, TopOnce_PrintsGpusWithTheirJobsAndJobHistories) {
  ExpectFrame();
  ASSERT_EQ(Run({"top", "--once"}), 0) << err_.str();
  EXPECT_EQ(usage_request_.max_samples(), kTopHistorySamples);
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("nodes 1/1 ready  GPUs 2"));
  // GPU 0: bar, 72 %, 20.0 of 80.0 GiB, power, temperature, SM activity
  // 45 % and DRAM bandwidth 20 % (GPM), jobs 7 and 8. GPU 1 has no GPM: "-".
  EXPECT_THAT(out, HasSubstr("gpu-a          0 NVIDIA H100 80GB [########   ]  72% "
                             "20.0/80.0 (25%)         351W   61C  45/20%   7,8\n"));
  EXPECT_THAT(out, HasSubstr("gpu-a          1 NVIDIA H100 80GB [           ]   0% "
                             "0.0/80.0 (0%)            70W   33C  -        -\n"));
  // Job 7: its history as a sparkline, min/avg/max 20/50/80 %, peak 10 GiB,
  // the latest CPU, the diagnosis codes.
  EXPECT_THAT(out, HasSubstr("7      trial-0          \u2582\u2584\u2585\u2587"));
  // Its latest SM activity: 41 %.
  EXPECT_THAT(out, HasSubstr("20/50/80%        10.0          98   41  low_memory,pack_candidate\n"));
  // --once draws no escape codes (scripts and pipes).
  EXPECT_THAT(out, Not(HasSubstr("\x1b[")));
}

TEST_F(TopTest, Top_NotATerminal_FramesFollowEachOtherWithoutEscapeCodes) {
  ExpectFrames(2);
  ASSERT_EQ(Run({"top", "-n", "0.1", "--frames", "2"}), 0) << err_.str();
  const std::string out = out_.str();
  EXPECT_THAT(out, Not(HasSubstr("\x1b[")));
  const size_t first = out.find("nodes 1/1 ready");
  ASSERT_NE(first, std::string::npos);
  EXPECT_NE(out.find("nodes 1/1 ready", first + 1), std::string::npos);
}

TEST_F(TopTest, Top_OnATerminal_RedrawsInPlace) {
  options_.stdout_terminal = true;
  ExpectFrames(2);
  ASSERT_EQ(Run({"top", "-n", "0.1", "--frames", "2"}), 0) << err_.str();
  EXPECT_THAT(out_.str(), HasSubstr("\x1b[2J\x1b[H"));
  EXPECT_THAT(out_.str(), HasSubstr("\x1b[H\x1b[J"));
}

TEST_F(TopTest, TopOnceJson_PrintsATopFrameThatParsesBack) {
  ExpectFrame();
  ASSERT_EQ(Run({"top", "--once", "-o", "json"}), 0) << err_.str();
  v1::TopFrame frame;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(out_.str(), &frame).ok())
      << out_.str();
  EXPECT_EQ(frame.time_ms(), 1'700'000'006'000);
  ASSERT_EQ(frame.nodes_size(), 1);
  EXPECT_EQ(frame.nodes(0).node().gpus(0).utilization_pct(), 72);
  ASSERT_EQ(frame.jobs_size(), 1);
  EXPECT_EQ(frame.jobs(0).samples_size(), 4);
}

TEST_F(TopTest, Top_CoordinatorDown_FailsWithItsAddress) {
  EXPECT_CALL(stub_, ListNodes(_, _, _))
      .WillOnce(Return(grpc::Status(grpc::StatusCode::UNAVAILABLE, "connect failed")));
  EXPECT_EQ(Run({"top", "--once"}), 1);
  EXPECT_THAT(err_.str(), HasSubstr("cannot reach the coordinator"));
}

TEST_F(TopTest, Describe_RunningJob_PrintsUtilizationSummaryAndDiagnosis) {
  auto job = Proto<v1::GetJobResponse>(R"pb(
    job {
      id: 7
      spec { name: "trial-0" command: "python" auto_pack: true }
      kind: JOB_KIND_EXPERIMENT
      state: JOB_STATE_RUNNING
      tasks { rank: 0 node: "gpu-a" gpu_indices: 0 state: TASK_STATE_RUNNING pid: 42 }
    }
  )pb");
  EXPECT_CALL(stub_, GetJob(_, _, _))
      .WillOnce(DoAll(SetArgPointee<2>(job), Return(grpc::Status::OK)));
  v1::GetJobUsageRequest request;
  EXPECT_CALL(stub_, GetJobUsage(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&request),
                      SetArgPointee<2>(Proto<v1::GetJobUsageResponse>(kUsage)),
                      Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"describe", "7"}), 0) << err_.str();
  ASSERT_EQ(request.job_ids_size(), 1);
  EXPECT_EQ(request.job_ids(0), 7);
  const std::string out = out_.str();
  EXPECT_THAT(out, HasSubstr("Auto-pack:   on\n"));
  EXPECT_THAT(out, HasSubstr("Utilization over the last 6s (4 samples):\n"));
  EXPECT_THAT(out, HasSubstr("GPU util     20% min, 50% avg, 80% max"));
  // Only the last sample carries GPM counters: the summary says utilization.
  EXPECT_THAT(out, HasSubstr("GPU activity from NVML utilization"));
  EXPECT_THAT(out, HasSubstr("GPU memory   4 GiB min, 7 GiB avg, 10 GiB max of 80 GiB"));
  EXPECT_THAT(out, HasSubstr("Diagnosis:\n  - Low GPU memory use: at most 10.0 of 80.0 GiB"));
  EXPECT_THAT(out, HasSubstr("  - Candidate for packing.\n"));
}

TEST_F(TopTest, SubmitAutoPack_SetsTheSpecFlag_AndRefusesWholeGpus) {
  v1::SubmitJobRequest sent;
  v1::SubmitJobResponse resp;
  resp.set_job_id(3);
  EXPECT_CALL(stub_, SubmitJob(_, _, _))
      .WillOnce(DoAll(SaveArg<1>(&sent), SetArgPointee<2>(resp), Return(grpc::Status::OK)));
  ASSERT_EQ(Run({"submit", "--auto-pack", "--gpu-mem", "6GiB", "--", "python", "t.py"}), 0)
      << err_.str();
  EXPECT_TRUE(sent.spec().auto_pack());
  EXPECT_EQ(sent.spec().gpu_memory_bytes(), int64_t{6} << 30);
  // StrictMock: a usage error makes no RPC.
  EXPECT_EQ(Run({"submit", "--auto-pack", "--gpus", "2", "--", "python"}), 2);
}

}  // namespace
}  // namespace trainctl::cli
