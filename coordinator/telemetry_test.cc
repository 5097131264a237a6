// Tier 1 tests of the coordinator's telemetry: per-job usage
// history, its bounds, and auto-packing driven by scripted heartbeats under a
// FakeClock. No network, no threads, no sleeps.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

constexpr int64_t kGiB = int64_t{1} << 30;

using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

class TelemetryTest : public ::testing::Test {
 protected:
  void Start(CoordinatorConfig config) {
    auto core = Coordinator::Create(std::move(config), &store_, &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
    v1::RegisterNode reg;
    v1::Node* n = reg.mutable_node();
    n->set_name("a");
    n->set_address("a.example");
    n->set_cpu_count(16);
    n->set_port_min(29500);
    n->set_port_max(29599);
    v1::Gpu* g = n->add_gpus();
    g->set_index(0);
    g->set_uuid("GPU-a-0");
    g->set_name("Fake H100");
    g->set_memory_total_bytes(80 * kGiB);
    TC_ASSERT_OK(core_->RegisterAgent(reg, &conn_));
  }

  int64_t Submit(bool auto_pack, const std::string& sweep = "") {
    v1::JobSpec spec;
    spec.set_name(auto_pack ? "trial" : "plain");
    spec.add_command("python");
    spec.set_auto_pack(auto_pack);
    spec.set_sweep_id(sweep);
    auto id = core_->SubmitJob(spec, "");
    EXPECT_THAT(id, ::trainctl::testing::IsOk());
    return *id;
  }

  void Send(const v1::AgentMessage& msg) {
    TC_ASSERT_OK(core_->HandleAgentMessage("a", &conn_, msg));
  }

  // The agent says the task of start `i` runs.
  void Running(int i) {
    v1::AgentMessage msg;
    *msg.mutable_task_status()->mutable_task() = conn_.Starts()[i].task();
    msg.mutable_task_status()->mutable_task()->set_pid(1000 + i);
    msg.mutable_task_status()->set_state(v1::TASK_STATE_RUNNING);
    Send(msg);
  }

  // A heartbeat: GPU 0 at `util` % using `used` bytes; every started task
  // uses `per_task` bytes of GPU memory (per-process NVML) and `cpu` % CPU.
  // With `sm` >= 0 the GPU also reports GPM: SM activity `sm` %, DRAM
  // bandwidth `dram` %.
  void Heartbeat(int util, int64_t used, int64_t per_task, double cpu = 100,
                 double sm = -1, double dram = 0) {
    v1::AgentMessage msg;
    v1::GpuSample* g = msg.mutable_heartbeat()->add_gpus();
    g->set_index(0);
    g->set_utilization_pct(util);
    g->set_memory_used_bytes(used);
    g->set_activity_source(v1::GPU_ACTIVITY_SOURCE_UTILIZATION);
    if (sm >= 0) {
      g->set_activity_source(v1::GPU_ACTIVITY_SOURCE_GPM);
      g->set_sm_active_pct(sm);
      g->set_dram_bw_pct(dram);
    }
    for (const v1::StartTask& s : conn_.Starts()) {
      v1::TaskUsage* u = msg.mutable_heartbeat()->add_task_usage();
      u->set_job_id(s.task().job_id());
      u->set_attempt(s.task().attempt());
      u->set_rank(s.task().rank());
      u->set_cpu_pct(cpu);
      u->set_gpu_memory_bytes(per_task);
      u->set_gpu_memory_known(per_task > 0);
      u->set_gpu_util_pct(-1);
    }
    Send(msg);
  }

  void Advance(absl::Duration d) {
    clock_.Advance(d);
    core_->Tick();
  }

  // `seconds` of heartbeats every 2 s, as a live agent sends them.
  void Run(int seconds, int util, int64_t used, int64_t per_task) {
    for (int t = 0; t < seconds; t += 2) {
      Heartbeat(util, used, per_task);
      Advance(absl::Seconds(2));
    }
  }

  FakeClock clock_;
  MemoryStateStore store_;
  FakeConnection conn_;
  std::unique_ptr<Coordinator> core_;
};

TEST_F(TelemetryTest, GetJobUsage_HistoryIsBoundedToTheNewestSamples) {
  CoordinatorConfig config;
  config.usage.sample_period = absl::Seconds(2);
  config.usage.history_samples = 5;
  Start(config);
  const int64_t id = Submit(false);
  Running(0);
  // 10 samples, 2 s apart, utilization 10, 20, ... 100 %.
  for (int i = 1; i <= 10; ++i) {
    Heartbeat(10 * i, 12 * kGiB, 0);
    Advance(absl::Seconds(2));
  }
  auto usage = core_->GetJobUsage({id}, 0);
  TC_ASSERT_OK(usage);
  ASSERT_THAT(*usage, SizeIs(1));
  const v1::JobUsage& u = (*usage)[0];
  EXPECT_EQ(u.sample_period_ms(), 2000);
  // Only the newest 5 are kept: 60..100 %, oldest first.
  ASSERT_THAT(u.samples(), SizeIs(5));
  EXPECT_EQ(u.samples(0).gpu_util_pct(), 60);
  EXPECT_EQ(u.samples(4).gpu_util_pct(), 100);
  // Alone on its GPU and no per-process figure: the GPU's memory is its own.
  EXPECT_EQ(u.samples(4).gpu_memory_used_bytes(), 12 * kGiB);
  EXPECT_EQ(u.samples(4).gpu_memory_total_bytes(), 80 * kGiB);
  EXPECT_EQ(u.samples(4).cpu_pct(), 100);
  EXPECT_EQ(u.samples(4).cpu_cores(), 16);
  // max_samples trims further.
  EXPECT_THAT((*core_->GetJobUsage({id}, 2))[0].samples(), SizeIs(2));
  EXPECT_THAT(core_->GetJobUsage({id + 100}, 0), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(core_->GetJobUsage({id}, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST_F(TelemetryTest, GetJobUsage_LowUtilForMinutes_DiagnosedAsPackCandidate) {
  Start(CoordinatorConfig{});
  const int64_t id = Submit(false);
  Running(0);
  // 2 minutes at 35 % and 6 of 80 GiB, the CPU mostly idle.
  for (int i = 0; i < 61; ++i) {
    Heartbeat(35, 6 * kGiB, 6 * kGiB, 30);
    Advance(absl::Seconds(2));
  }
  auto usage = core_->GetJobUsage({}, 0);
  TC_ASSERT_OK(usage);
  ASSERT_THAT(*usage, SizeIs(1));
  std::vector<std::string> codes;
  for (const auto& f : (*usage)[0].findings()) codes.push_back(f.code());
  EXPECT_THAT(codes, ::testing::ElementsAre("low_memory", "pack_candidate"));
  EXPECT_EQ((*usage)[0].job_id(), id);
}

TEST_F(TelemetryTest, AutoPack_AdmitsTrialsOneAtATimeWhileMeasurementsLeaveRoom) {
  CoordinatorConfig config;  // Packer: plateau 5 samples, settle 20 s, util 90 %.
  Start(config);
  const int64_t t1 = Submit(true);
  const int64_t t2 = Submit(true);
  const int64_t t3 = Submit(true);
  // The empty GPU takes the first trial at once; the others wait for it to
  // be measured.
  ASSERT_THAT(conn_.Starts(), SizeIs(1));
  EXPECT_EQ(conn_.Starts()[0].task().job_id(), t1);
  Running(0);
  // 6 s: 3 samples (2, 4, 6 s) at 40 % and 8 GiB, not yet a plateau.
  Run(6, 40, 8 * kGiB, 8 * kGiB);
  EXPECT_THAT(conn_.Starts(), SizeIs(1));
  EXPECT_THAT(core_->GetJob(t2)->reason(), HasSubstr("settle"));
  // 10 s: the 5th flat sample: trial 1 has settled (a plateau of its own
  // counters, before the 20 s settle time) at 40 % and 8 GiB; trial 2 is
  // admitted, reserving 8 GiB x 1.25 = 10 GiB. No sweep: no fast ramp.
  Run(4, 40, 8 * kGiB, 8 * kGiB);
  ASSERT_THAT(conn_.Starts(), SizeIs(2));
  EXPECT_EQ(conn_.Starts()[1].task().job_id(), t2);
  EXPECT_EQ(core_->GetJob(t2)->tasks(0).reserved_bytes_per_gpu(), 10 * kGiB);
  EXPECT_EQ(conn_.Starts()[1].env().at("CUDA_VISIBLE_DEVICES"), "GPU-a-0");
  Running(1);
  // Both settled, but the GPU is now 95 % busy: trial 3 waits.
  Run(30, 95, 16 * kGiB, 8 * kGiB);
  EXPECT_THAT(conn_.Starts(), SizeIs(2));
  EXPECT_THAT(core_->GetJob(t3)->reason(), HasSubstr("utilization"));
}

TEST_F(TelemetryTest, AutoPack_SweepOnGpmGpu_RampsToPredictedCountAtOnce) {
  CoordinatorConfig config;  // Packer: plateau 5 samples, SM target 90 %.
  config.usage.sample_period = absl::Seconds(2);
  Start(config);
  std::vector<int64_t> trials;
  for (int i = 0; i < 7; ++i) trials.push_back(Submit(true, "sweep-1"));
  ASSERT_THAT(conn_.Starts(), SizeIs(1));
  Running(0);
  // The first trial alone: NVML utilization 97 % (the old rule would admit
  // nothing more), GPM SM activity 18 %, DRAM bandwidth 10 %, 9 GiB.
  for (int t = 0; t < 12; t += 2) {
    Heartbeat(97, 9 * kGiB, 9 * kGiB, 100, 18, 10);
    Advance(absl::Seconds(2));
  }
  // Flat for 5 samples: settled well before the 20 s settle time. The plan:
  // memory floor(72 / (9 x 1.25)) = 6, SM floor(90 / 18) = 5, DRAM
  // floor(80 / 10) = 8 -> 5 trials, so 4 more start at once.
  ASSERT_THAT(conn_.Starts(), SizeIs(5));
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(core_->GetJob(conn_.Starts()[i].task().job_id())
                  ->tasks(0)
                  .reserved_bytes_per_gpu(),
              static_cast<int64_t>(11.25 * kGiB));
  }
  // Every trial shares its GPU (MPS makes them clients where the agent runs
  // it): the first with no memory limit (its 4 GiB reservation was
  // bookkeeping, nothing was measured), the ramp's capped at their 11.25 GiB.
  EXPECT_TRUE(conn_.Starts()[0].shared_gpu());
  EXPECT_EQ(conn_.Starts()[0].shared_gpu_memory_limit_bytes(), 0);
  EXPECT_TRUE(conn_.Starts()[1].shared_gpu());
  EXPECT_EQ(conn_.Starts()[1].shared_gpu_memory_limit_bytes(),
            static_cast<int64_t>(11.25 * kGiB));
  // The history keeps the GPM counters.
  auto usage = core_->GetJobUsage({trials[0]}, 0);
  TC_ASSERT_OK(usage);
  const v1::JobUsageSample& last = (*usage)[0].samples((*usage)[0].samples_size() - 1);
  EXPECT_EQ(last.activity_source(), v1::GPU_ACTIVITY_SOURCE_GPM);
  EXPECT_DOUBLE_EQ(last.sm_active_pct(), 18);
  EXPECT_DOUBLE_EQ(last.dram_bw_pct(), 10);
}

TEST_F(TelemetryTest, GetJobUsage_WithoutGpm_SaysUtilizationIsTheSource) {
  Start(CoordinatorConfig{});
  const int64_t id = Submit(false);
  Running(0);
  for (int i = 0; i < 3; ++i) {
    Heartbeat(50, 8 * kGiB, 8 * kGiB);
    Advance(absl::Seconds(2));
  }
  auto usage = core_->GetJobUsage({id}, 0);
  TC_ASSERT_OK(usage);
  EXPECT_EQ((*usage)[0].samples(0).activity_source(),
            v1::GPU_ACTIVITY_SOURCE_UTILIZATION);
  // 3 samples over 4 s: the diagnosis says it needs a minute.
  ASSERT_THAT((*usage)[0].findings(), SizeIs(1));
  EXPECT_EQ((*usage)[0].findings(0).message(),
            "not enough samples yet (needs 60 s, has 4 s)");
}

TEST_F(TelemetryTest, AutoPack_OutOfMemory_RequeuesWithLargerRequestAndCapsGpu) {
  Start(CoordinatorConfig{});
  const int64_t t1 = Submit(true);
  Running(0);
  Run(22, 40, 8 * kGiB, 8 * kGiB);
  const int64_t t2 = Submit(true);
  ASSERT_THAT(conn_.Starts(), SizeIs(2));
  Running(1);
  Heartbeat(60, 18 * kGiB, 9 * kGiB);
  // Trial 2 runs out of memory: the agent says so, then reports the exit.
  v1::AgentMessage oom;
  oom.mutable_task_oom()->set_job_id(t2);
  oom.mutable_task_oom()->set_attempt(0);
  oom.mutable_task_oom()->set_rank(0);
  oom.mutable_task_oom()->set_line("torch.OutOfMemoryError: CUDA out of memory.");
  Send(oom);
  v1::AgentMessage exit;
  *exit.mutable_task_status()->mutable_task() = conn_.Starts()[1].task();
  exit.mutable_task_status()->set_state(v1::TASK_STATE_EXITED);
  exit.mutable_task_status()->set_exit_code(1);
  Send(exit);
  v1::Job job = *core_->GetJob(t2);
  // Requeued as attempt 1 (no restarts were asked for): 2 x its 9 GiB peak
  // is below a quarter of the GPU, so it asks for 20 GiB; the GPU that held
  // 2 trials now takes at most 1.
  EXPECT_EQ(job.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(job.attempt(), 1);
  EXPECT_EQ(job.oom_count(), 1);
  EXPECT_EQ(job.auto_pack_memory_bytes(), 20 * kGiB);
  EXPECT_THAT(job.reason(), HasSubstr("ran out of GPU memory 1 time(s)"));
  EXPECT_EQ(core_->Stats().counters.oom_requeues, 1);
  EXPECT_EQ(core_->Stats().counters.restarts, 0);
  // Trial 1 still runs alone; trial 2 does not come back next to it.
  Run(30, 40, 8 * kGiB, 8 * kGiB);
  EXPECT_THAT(conn_.Starts(), SizeIs(2));
  EXPECT_THAT(core_->GetJob(t2)->reason(), HasSubstr("limit"));
  EXPECT_EQ(core_->GetJob(t1)->state(), v1::JOB_STATE_RUNNING);
}

TEST_F(TelemetryTest, AutoPack_FlatThroughput_StopsAddingTrials) {
  CoordinatorConfig config;
  config.packer.settle_ms = 10000;
  Start(config);
  const int64_t t1 = Submit(true);
  const int64_t t2 = Submit(true);
  const int64_t t3 = Submit(true);
  Running(0);
  TC_ASSERT_OK(core_->ReportThroughput(t1, 1000));
  Run(12, 40, 8 * kGiB, 8 * kGiB);  // 1 trial, 1000 samples/s; trial 2 admitted.
  ASSERT_THAT(conn_.Starts(), SizeIs(2));
  Running(1);
  // Two trials give 500 + 520 = 1020 samples/s: +2 %, below the 5 % gain.
  TC_ASSERT_OK(core_->ReportThroughput(t1, 500));
  TC_ASSERT_OK(core_->ReportThroughput(t2, 520));
  Run(20, 50, 16 * kGiB, 8 * kGiB);
  EXPECT_THAT(conn_.Starts(), SizeIs(2));
  EXPECT_THAT(core_->GetJob(t3)->reason(), HasSubstr("limit"));
  EXPECT_THAT(core_->ReportThroughput(t1, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST_F(TelemetryTest, Heartbeat_UsageOfAnotherNodesTask_IgnoredByHistoryAndPacker) {
  Start(CoordinatorConfig{});  // Packer: settle 20 s, memory safety x1.25.
  // Node b runs nothing; its agent claims trial 1, which runs on a.
  FakeConnection b;
  TC_ASSERT_OK(core_->RegisterAgent(testing::FakeNodeRegistration("b", 0), &b));
  const int64_t t1 = Submit(true);
  ASSERT_THAT(conn_.Starts(), SizeIs(1));
  Running(0);
  v1::AgentMessage forged;
  v1::TaskUsage* u = forged.mutable_heartbeat()->add_task_usage();
  u->set_job_id(t1);
  u->set_attempt(0);
  u->set_rank(0);
  u->set_cpu_pct(3200);
  u->set_gpu_memory_bytes(70 * kGiB);
  u->set_gpu_memory_known(true);
  u->set_gpu_util_pct(99);
  // a reports 8 GiB and 100 % CPU, then b its forged figures, then a sample.
  Heartbeat(40, 8 * kGiB, 8 * kGiB);
  TC_ASSERT_OK(core_->HandleAgentMessage("b", &b, forged));
  Advance(absl::Seconds(2));
  auto usage = core_->GetJobUsage({t1}, 1);
  TC_ASSERT_OK(usage);
  ASSERT_THAT((*usage)[0].samples(), SizeIs(1));
  const v1::JobUsageSample& s = (*usage)[0].samples(0);
  EXPECT_EQ(s.gpu_memory_used_bytes(), 8 * kGiB);
  EXPECT_EQ(s.cpu_pct(), 100);
  EXPECT_EQ(s.gpu_util_pct(), 40);
  EXPECT_EQ(core_->Stats().ignored_task_usage, 1);
  // The packer's view: trial 1 peaked at 8 GiB (not 70), so once it has
  // settled trial 2 joins it reserving 8 GiB x 1.25 = 10 GiB.
  Run(20, 40, 8 * kGiB, 8 * kGiB);
  const int64_t t2 = Submit(true);
  ASSERT_THAT(conn_.Starts(), SizeIs(2));
  EXPECT_EQ(conn_.Starts()[1].task().job_id(), t2);
  EXPECT_EQ(core_->GetJob(t2)->tasks(0).reserved_bytes_per_gpu(), 10 * kGiB);
}

TEST_F(TelemetryTest, SubmitJob_AutoPackGang_IsInvalid) {
  Start(CoordinatorConfig{});
  v1::JobSpec spec;
  spec.add_command("python");
  spec.set_gpus(2);
  spec.set_auto_pack(true);
  EXPECT_THAT(core_->SubmitJob(spec, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("auto_pack")));
}

}  // namespace
}  // namespace trainctl::coord
