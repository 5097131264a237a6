// Tier 2 tests of what the agent measures for telemetry: per-task
// CPU from a fake /proc, per-process GPU use from a scripted fake inventory,
// and CUDA out-of-memory detection at exit. No network, no sleeps.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/agent.h"
#include "worker/hw/fake_gpu_inventory.h"

namespace trainctl::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

constexpr int64_t kGiB = int64_t{1} << 30;

// Launches nothing; Exit(pid) plays a process ending.
class FakeLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<int> Launch(const LaunchSpec& spec,
                             absl::AnyInvocable<void(ExitInfo)> on_exit) override {
    const int pid = next_pid++;
    exits[pid] = std::move(on_exit);
    return pid;
  }
  absl::Status Stop(int, absl::Duration) override { return absl::OkStatus(); }
  void Exit(int pid, ExitInfo info) { exits[pid](info); }
  int next_pid = 1000;
  std::map<int, absl::AnyInvocable<void(ExitInfo)>> exits;
};

v1::CoordinatorMessage Start(int64_t job) {
  v1::CoordinatorMessage msg;
  msg.mutable_start_task()->mutable_task()->set_job_id(job);
  msg.mutable_start_task()->add_argv("python");
  return msg;
}

class AgentTelemetryTest : public ::testing::Test {
 protected:
  AgentTelemetryTest() : inventory_(FakeGpuSpec{1, "Fake H100", 80 * kGiB}, "n1") {
    dir_ = ::testing::TempDir() + "/agent-telemetry-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/proc");
    config_.node_name = "n1";
    config_.log_dir = dir_ + "/logs";
    config_.proc_root = dir_ + "/proc";
    agent_ = std::make_unique<Agent>(config_, &inventory_, &launcher_);
    agent_->Connected([this](const v1::AgentMessage& m) { sent_.push_back(m); });
  }

  void Uptime(double s) { std::ofstream(dir_ + "/proc/uptime") << s << " 0\n"; }
  void Process(int pid, int pgrp, int64_t ticks) {
    std::filesystem::create_directories(absl::StrCat(dir_, "/proc/", pid));
    std::ofstream(absl::StrCat(dir_, "/proc/", pid, "/stat"))
        << pid << " (python) S 1 " << pgrp << " " << pgrp << " 0 -1 0 0 0 0 0 "
        << ticks << " 0 0 0 20 0 1 0 100 1000000 256 0\n";
  }
  void Log(int64_t job, const std::string& text) {
    v1::TaskRef ref;
    ref.set_job_id(job);
    const std::string path = agent_->LogPath(ref);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
  }

  std::string dir_;
  AgentConfig config_;
  FakeGpuInventory inventory_;
  FakeLauncher launcher_;
  std::unique_ptr<Agent> agent_;
  std::vector<v1::AgentMessage> sent_;
};

TEST_F(AgentTelemetryTest, Heartbeat_RunningTask_ReportsItsGroupsCpuAndGpuUse) {
  const long hz = sysconf(_SC_CLK_TCK);
  agent_->Handle(Start(7));  // pid 1000, its own process group.
  Uptime(50);
  Process(1000, 1000, 0);
  Process(1001, 1000, 0);  // A DataLoader worker.
  Process(2000, 2000, 0);  // Someone else's process.
  // NVML sees the task's two processes and a stranger on GPU 0.
  inventory_.SetProcessSamples({{0, 1000, 6 * kGiB, 40},
                                {0, 1001, 1 * kGiB, -1},
                                {0, 2000, 20 * kGiB, 50}});
  auto hb = agent_->Heartbeat();
  TC_ASSERT_OK(hb);
  ASSERT_THAT(hb->task_usage(), SizeIs(1));
  v1::TaskUsage u = hb->task_usage(0);
  EXPECT_EQ(u.job_id(), 7);
  EXPECT_TRUE(u.gpu_memory_known());
  EXPECT_EQ(u.gpu_memory_bytes(), 7 * kGiB);  // Not the stranger's 20 GiB.
  EXPECT_EQ(u.gpu_util_pct(), 40);
  EXPECT_EQ(u.cpu_pct(), 0);  // First sample: no interval yet.

  // One second later the group used 0.5 + 0.5 s of CPU: one core, 100 %.
  Uptime(51);
  Process(1000, 1000, hz / 2);
  Process(1001, 1000, hz / 2);
  hb = agent_->Heartbeat();
  TC_ASSERT_OK(hb);
  EXPECT_NEAR(hb->task_usage(0).cpu_pct(), 100, 1);
}

// --task-usage-period: per-task use with every Nth heartbeat while tasks
// run, never with 0; the GPUs' samples with every one.
TEST_F(AgentTelemetryTest, Heartbeat_TaskUsagePeriod_SamplesEveryNthOrNever) {
  for (int period : {2, 0}) {
    AgentConfig config = config_;
    config.task_usage_period = period;
    Agent agent(config, &inventory_, &launcher_);
    agent.Connected([](const v1::AgentMessage&) {});
    agent.Handle(Start(7));
    Uptime(50);
    std::vector<int> sampled;
    for (int i = 0; i < 4; ++i) {
      auto hb = agent.Heartbeat();
      TC_ASSERT_OK(hb);
      EXPECT_THAT(hb->gpus(), SizeIs(1));
      sampled.push_back(hb->task_usage_size());
    }
    EXPECT_THAT(sampled, period == 2 ? ::testing::ElementsAre(1, 0, 1, 0)
                                     : ::testing::ElementsAre(0, 0, 0, 0))
        << "period " << period;
  }
}

TEST_F(AgentTelemetryTest, Heartbeat_NoPerProcessFigures_LeavesGpuUseUnknown) {
  agent_->Handle(Start(7));
  Uptime(50);
  Process(1000, 1000, 0);
  auto hb = agent_->Heartbeat();
  TC_ASSERT_OK(hb);
  ASSERT_THAT(hb->task_usage(), SizeIs(1));
  EXPECT_FALSE(hb->task_usage(0).gpu_memory_known());
  EXPECT_EQ(hb->task_usage(0).gpu_util_pct(), -1);
}

TEST_F(AgentTelemetryTest, Heartbeat_GpuWithGpm_SendsSmActivityAndDramBandwidth) {
  // Before any GPM figure the GPU reports utilization as its source.
  auto hb = agent_->Heartbeat();
  TC_ASSERT_OK(hb);
  ASSERT_THAT(hb->gpus(), SizeIs(1));
  EXPECT_EQ(hb->gpus(0).activity_source(), v1::GPU_ACTIVITY_SOURCE_UTILIZATION);
  // A Hopper GPU: NVML utilization 97 % but 31 % of SMs busy, occupancy
  // 12 %, DRAM bandwidth 22 %.
  GpuSample sample;
  sample.index = 0;
  sample.utilization_pct = 97;
  sample.gpm = true;
  sample.sm_active_pct = 31;
  sample.sm_occupancy_pct = 12;
  sample.dram_bw_pct = 22;
  inventory_.SetSample(sample);
  hb = agent_->Heartbeat();
  TC_ASSERT_OK(hb);
  const v1::GpuSample& g = hb->gpus(0);
  EXPECT_EQ(g.utilization_pct(), 97);
  EXPECT_EQ(g.activity_source(), v1::GPU_ACTIVITY_SOURCE_GPM);
  EXPECT_DOUBLE_EQ(g.sm_active_pct(), 31);
  EXPECT_DOUBLE_EQ(g.sm_occupancy_pct(), 12);
  EXPECT_DOUBLE_EQ(g.dram_bw_pct(), 22);
}

TEST_F(AgentTelemetryTest, Exit_CudaOutOfMemoryInLog_ReportsOomBeforeTheExit) {
  agent_->Handle(Start(7));
  Log(7, "epoch 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to "
         "allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB\n");
  launcher_.Exit(1000, ExitInfo{1, 0});
  ASSERT_THAT(sent_, SizeIs(3));  // RUNNING, task_oom, EXITED.
  ASSERT_TRUE(sent_[1].has_task_oom());
  EXPECT_EQ(sent_[1].task_oom().job_id(), 7);
  EXPECT_THAT(sent_[1].task_oom().line(), HasSubstr("Tried to allocate 2.00 GiB"));
  EXPECT_EQ(sent_[2].task_status().state(), v1::TASK_STATE_EXITED);
}

TEST_F(AgentTelemetryTest, Exit_FailureWithoutOom_ReportsOnlyTheExit) {
  agent_->Handle(Start(7));
  Log(7, "Traceback...\nValueError: bad learning rate\n");
  launcher_.Exit(1000, ExitInfo{1, 0});
  ASSERT_THAT(sent_, SizeIs(2));
  EXPECT_TRUE(sent_[1].has_task_status());
}

}  // namespace
}  // namespace trainctl::worker
