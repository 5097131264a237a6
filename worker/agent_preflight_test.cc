// Tier 2 tests of the agent's side of the pre-flight (docs/preflight.md): a
// probe StartTask runs --preflight-probe, not the job's argv, and the
// probe's result line travels back with its exit. Fake launcher and GPUs; no
// processes, no sleeps.

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/agent.h"
#include "worker/hw/fake_gpu_inventory.h"

namespace trainctl::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records launches; Exit(pid) plays a process ending.
class FakeLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<int> Launch(const LaunchSpec& spec,
                             absl::AnyInvocable<void(ExitInfo)> on_exit) override {
    const int pid = next_pid++;
    launched[pid] = spec;
    exits[pid] = std::move(on_exit);
    return pid;
  }
  absl::Status Stop(int pid, absl::Duration grace) override { return absl::OkStatus(); }
  void Exit(int pid, ExitInfo info) { exits[pid](info); }

  int next_pid = 1000;
  std::map<int, LaunchSpec> launched;
  std::map<int, absl::AnyInvocable<void(ExitInfo)>> exits;
};


v1::CoordinatorMessage ProbeStart() {
  v1::CoordinatorMessage msg;
  v1::StartTask* s = msg.mutable_start_task();
  s->mutable_task()->set_job_id(7);
  s->mutable_task()->set_attempt(0);
  s->mutable_task()->set_probe_run(1);
  s->mutable_task()->set_rank(1);
  s->add_argv("python");
  s->add_argv("train.py");
  v1::PreflightProbe* p = s->mutable_preflight();
  p->set_bytes(64 << 20);
  p->set_iters(10);
  p->set_warmup(3);
  p->set_timeout_ms(45000);
  p->set_run(1);
  return msg;
}

class AgentPreflightTest : public ::testing::Test {
 protected:
  AgentPreflightTest() : inventory_(FakeGpuSpec{2, "Fake H200", int64_t{141} << 30}, "n1") {
    config_.node_name = "n1";
    config_.log_dir = ::testing::TempDir() + "/agent-preflight-test-" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(config_.log_dir);
    config_.preflight_probe = "/opt/trainctl/bin/trainctl-nccl-allreduce";
  }
  void Make() {
    agent_ = std::make_unique<Agent>(config_, &inventory_, &launcher_);
    agent_->Connected([this](const v1::AgentMessage& m) { sent_.push_back(m); });
  }

  AgentConfig config_;
  FakeGpuInventory inventory_;
  FakeLauncher launcher_;
  std::unique_ptr<Agent> agent_;
  std::vector<v1::AgentMessage> sent_;
};

TEST_F(AgentPreflightTest, ProbeStart_RunsTheProbeWithItsSettings) {
  Make();
  agent_->Handle(ProbeStart());
  ASSERT_EQ(launcher_.launched.size(), 1u);
  const LaunchSpec& spec = launcher_.launched.begin()->second;
  EXPECT_THAT(spec.argv,
              ElementsAre("/opt/trainctl/bin/trainctl-nccl-allreduce", "--preflight",
                          "--bytes", "67108864", "--iters", "10", "--warmup", "3",
                          "--timeout-ms", "45000"));
  EXPECT_THAT(spec.log_path, HasSubstr("/jobs-0/job-7.preflight-1.rank-1.log"));
}

TEST_F(AgentPreflightTest, ProbeExit_CarriesItsResultLine) {
  Make();
  agent_->Handle(ProbeStart());
  const auto& [pid, spec] = *launcher_.launched.begin();
  std::filesystem::create_directories(std::filesystem::path(spec.log_path).parent_path());
  std::ofstream(spec.log_path)
      << "NCCL INFO ...\n"
      << "trainctl-preflight: {\"rank\":1,\"comm_ready_ms\":812.5,"
         "\"busbw_gbps\":41.25,\"future_field\":1}\n";
  launcher_.Exit(pid, ExitInfo{0, 0});
  ASSERT_FALSE(sent_.empty());
  const v1::TaskStatus& st = sent_.back().task_status();
  EXPECT_EQ(st.state(), v1::TASK_STATE_EXITED);
  ASSERT_TRUE(st.has_preflight_result());
  EXPECT_EQ(st.preflight_result().rank(), 1);
  EXPECT_DOUBLE_EQ(st.preflight_result().comm_ready_ms(), 812.5);
  EXPECT_DOUBLE_EQ(st.preflight_result().busbw_gbps(), 41.25);
}

TEST_F(AgentPreflightTest, ProbeExitWithoutResultLine_NoResult) {
  Make();
  agent_->Handle(ProbeStart());
  launcher_.Exit(launcher_.launched.begin()->first, ExitInfo{3, 0});
  ASSERT_FALSE(sent_.empty());
  EXPECT_FALSE(sent_.back().task_status().has_preflight_result());
  EXPECT_EQ(sent_.back().task_status().exit_code(), 3);
}

TEST_F(AgentPreflightTest, NoProbeConfigured_StartFails) {
  config_.preflight_probe.clear();
  Make();
  agent_->Handle(ProbeStart());
  EXPECT_TRUE(launcher_.launched.empty());
  ASSERT_FALSE(sent_.empty());
  EXPECT_EQ(sent_.back().task_status().state(), v1::TASK_STATE_START_FAILED);
  EXPECT_THAT(sent_.back().task_status().message(), HasSubstr("--preflight-probe"));
}

// A missing or non-executable probe is said at registration, as
// the agent's configuration error (the coordinator then never excludes the
// node for it); a usable one leaves the field empty.
TEST_F(AgentPreflightTest, Registration_SaysWhyItsProbeCannotRun) {
  const std::string dir = config_.log_dir + "-probes";
  std::filesystem::create_directories(dir);
  const std::string plain = dir + "/not-executable";
  std::ofstream(plain) << "#!/bin/sh\n";
  std::filesystem::permissions(plain, std::filesystem::perms::owner_read |
                                          std::filesystem::perms::owner_write);
  struct Case {
    std::string probe;
    std::string says;
  };
  for (const Case& c : std::vector<Case>{
           {dir + "/missing", "does not exist"},
           {plain, "is not executable"},
           {dir, "is not a regular file"},
           {"", "no --preflight-probe given"},
           {"/bin/true", ""}}) {
    SCOPED_TRACE(c.probe);
    config_.preflight_probe = c.probe;
    Make();
    absl::StatusOr<v1::RegisterNode> reg = agent_->Registration();
    ASSERT_TRUE(reg.ok()) << reg.status();
    const std::string& error = reg->node().preflight_probe_error();
    if (c.says.empty()) {
      EXPECT_EQ(error, "");
    } else {
      EXPECT_THAT(error, HasSubstr(c.says));
      EXPECT_THAT(error, HasSubstr(c.probe));
    }
  }
}

TEST(ParsePreflightResult, LastLineWins_GarbageIsNone) {
  auto r = Agent::ParsePreflightResult(
      "trainctl-preflight: {\"rank\":0,\"busbw_gbps\":1}\n"
      "trainctl-preflight: {\"rank\":0,\"busbw_gbps\":2,\"error\":\"x\"}\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->busbw_gbps(), 2);
  EXPECT_EQ(r->error(), "x");
  EXPECT_FALSE(Agent::ParsePreflightResult("trainctl-preflight: {not json").has_value());
  EXPECT_FALSE(Agent::ParsePreflightResult("no result here").has_value());
}

}  // namespace
}  // namespace trainctl::worker
