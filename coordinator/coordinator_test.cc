// Tier 1 tests of the coordinator core: a FakeClock, a MemoryStateStore and
// fake agent connections that record what the coordinator sends. No network,
// no threads, no sleeps.

#include "coordinator/coordinator.h"
#include "coordinator/testing/fake_agent_connection.h"

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

constexpr int64_t kGiB = int64_t{1} << 30;

// Records what the coordinator sends to one agent.
using FakeConnection = ::trainctl::coord::testing::FakeAgentConnection;

v1::RegisterNode NodeReg(const std::string& name, int gpus, int64_t mem = 80 * kGiB) {
  return ::trainctl::coord::testing::FakeNodeRegistration(name, gpus, 32, mem, "Fake H200");
}

v1::JobSpec Spec(std::vector<std::string> cmd = {"python", "train.py"}) {
  v1::JobSpec spec;
  for (auto& c : cmd) spec.add_command(c);
  return spec;
}

v1::AgentMessage Status(const v1::StartTask& start, v1::TaskState state,
                        int exit_code = 0, int pid = 100) {
  v1::AgentMessage msg;
  v1::TaskStatus* st = msg.mutable_task_status();
  *st->mutable_task() = start.task();
  st->mutable_task()->set_pid(pid);
  st->set_state(state);
  st->set_exit_code(exit_code);
  return msg;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override { Restart(); }

  // A new coordinator over the same store (as after a crash).
  void Restart() {
    core_.reset();
    CoordinatorConfig config = config_;
    config.advertise_address = "coord.example:50051";
    auto core = Coordinator::Create(config, &store_, &clock_);
    ASSERT_THAT(core, ::trainctl::testing::IsOk());
    core_ = std::move(*core);
  }

  FakeConnection& Connect(const std::string& name, int gpus) {
    auto& conn = conns_[name];
    conn = std::make_unique<FakeConnection>();
    EXPECT_THAT(core_->RegisterAgent(NodeReg(name, gpus), conn.get()),
                ::trainctl::testing::IsOk());
    return *conn;
  }

  void Report(const std::string& node, const v1::AgentMessage& msg) {
    TC_ASSERT_OK(core_->HandleAgentMessage(node, conns_[node].get(), msg));
  }

  v1::Job Job(int64_t id) { return *core_->GetJob(id); }

  // Unlike GPUs: node "big" (2 x 80 GiB) and node "small" (2 x 40 GiB), and
  // a 2 x 2 gang over both (no pre-flight); returns the gang's id.
  int64_t SubmitGangOverUnlikeGpus() {
    for (const auto& [name, gib] : {std::pair<std::string, int64_t>{"big", 80}, {"small", 40}}) {
      auto& conn = conns_[name];
      conn = std::make_unique<FakeConnection>();
      EXPECT_THAT(core_->RegisterAgent(NodeReg(name, 2, gib * kGiB), conn.get()),
                  ::trainctl::testing::IsOk());
    }
    v1::JobSpec gang = Spec();
    gang.set_nodes(2);
    gang.set_gpus_per_node(2);
    gang.set_preflight(v1::PREFLIGHT_MODE_OFF);
    absl::StatusOr<int64_t> id = core_->SubmitJob(gang, "");
    EXPECT_THAT(id, ::trainctl::testing::IsOk());
    return id.ok() ? *id : 0;
  }

  // Taken by the next Restart().
  CoordinatorConfig config_;
  FakeClock clock_;
  MemoryStateStore store_;
  std::unique_ptr<Coordinator> core_;
  std::map<std::string, std::unique_ptr<FakeConnection>> conns_;
};

TEST_F(CoordinatorTest, SubmitJob_Experiment_StartsWithLaunchEnvironment) {
  FakeConnection& a = Connect("a", 2);
  auto id = core_->SubmitJob(Spec(), "");
  TC_ASSERT_OK(id);

  ASSERT_THAT(a.Starts(), SizeIs(1));
  const v1::StartTask start = a.Starts()[0];
  const auto& env = start.env();
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "GPU-a-0");
  EXPECT_EQ(env.at("RANK"), "0");
  EXPECT_EQ(env.at("WORLD_SIZE"), "1");
  EXPECT_EQ(env.at("MASTER_ADDR"), "a.example");
  EXPECT_EQ(env.at("MASTER_PORT"), "29500");
  EXPECT_EQ(env.at("TRAINCTL_COORDINATOR"), "coord.example:50051");
  EXPECT_EQ(env.at("TRAINCTL_JOB_ID"), absl::StrCat(*id));
  EXPECT_EQ(env.count("OMP_NUM_THREADS"), 0u);  // one process: torchrun leaves it unset
  EXPECT_EQ(env.at("TRAINCTL_TOKEN").size(), 32u);
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SCHEDULED);
  // The token is a secret of the ranks: users never see it.
  EXPECT_EQ(Job(*id).attempt_token(), "");

  Report("a", Status(start, v1::TASK_STATE_RUNNING));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_RUNNING);
  Report("a", Status(start, v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(CoordinatorTest, SubmitJob_Authenticated_TaskRunsAsTheJobsUserWithItsExport) {
  config_.run_jobs_as_user = true;
  Restart();
  FakeConnection& a = Connect("a", 2);
  v1::JobSpec spec = Spec();
  spec.set_user("alice");
  (*spec.mutable_exported_env())["VIRTUAL_ENV"] = "/home/alice/venv";
  (*spec.mutable_exported_env())["PATH"] = "/home/alice/venv/bin:/usr/bin";
  (*spec.mutable_env())["PATH"] = "/opt/bin";     // --env wins over the export
  spec.set_export_policy("ALL");
  auto id = core_->SubmitJob(spec, "");
  TC_ASSERT_OK(id);
  ASSERT_THAT(a.Starts(), SizeIs(1));
  const v1::StartTask start = a.Starts()[0];
  EXPECT_EQ(start.run_as_user(), "alice");
  EXPECT_FALSE(start.allow_root());
  EXPECT_EQ(start.env().at("VIRTUAL_ENV"), "/home/alice/venv");
  EXPECT_EQ(start.env().at("PATH"), "/opt/bin");
  EXPECT_EQ(start.env().at("RANK"), "0");
  // The agent says which account the task runs as; describe shows it.
  v1::AgentMessage running = Status(start, v1::TASK_STATE_RUNNING);
  running.mutable_task_status()->set_run_as("alice");
  running.mutable_task_status()->set_uid(1001);
  Report("a", running);
  EXPECT_EQ(Job(*id).tasks(0).run_as(), "alice");
  EXPECT_EQ(Job(*id).tasks(0).uid(), 1001);
  EXPECT_EQ(Job(*id).spec().export_policy(), "ALL");
}

TEST_F(CoordinatorTest, SubmitJob_RootWithoutAllowRootJobs_PermissionDenied) {
  config_.run_jobs_as_user = true;
  Restart();
  v1::JobSpec spec = Spec();
  spec.set_user("root");
  EXPECT_THAT(core_->SubmitJob(spec, ""),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("--allow-root-jobs")));
  EXPECT_THAT(core_->ListJobs({}, 0), SizeIs(0));
  config_.allow_root_jobs = true;
  Restart();
  FakeConnection& a = Connect("a", 1);
  TC_ASSERT_OK(core_->SubmitJob(spec, ""));
  ASSERT_THAT(a.Starts(), SizeIs(1));
  EXPECT_EQ(a.Starts()[0].run_as_user(), "root");
  EXPECT_TRUE(a.Starts()[0].allow_root());
}

TEST_F(CoordinatorTest, SubmitJob_WithoutAuthentication_TaskRunsAsTheAgentsAccount) {
  FakeConnection& a = Connect("a", 1);
  v1::JobSpec spec = Spec();
  spec.set_user("root");  // only a claim: not refused, not run as
  TC_ASSERT_OK(core_->SubmitJob(spec, ""));
  ASSERT_THAT(a.Starts(), SizeIs(1));
  EXPECT_EQ(a.Starts()[0].run_as_user(), "");
}

TEST_F(CoordinatorTest, SubmitJob_BadSpec_InvalidArgumentNamingField) {
  v1::JobSpec spec = Spec();
  spec.set_gpu_fraction(1.5);
  EXPECT_THAT(core_->SubmitJob(spec, ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gpu_fraction")));
  EXPECT_THAT(core_->SubmitJob(Spec({}), ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("spec.command")));
  // Nothing was accepted.
  EXPECT_THAT(core_->ListJobs({}, 0), SizeIs(0));
}

TEST_F(CoordinatorTest, SubmitJob_SameRequestId_ReturnsSameJob) {
  auto first = core_->SubmitJob(Spec(), "req-1");
  auto again = core_->SubmitJob(Spec(), "req-1");
  TC_ASSERT_OK(first);
  EXPECT_EQ(*again, *first);
  EXPECT_THAT(core_->ListJobs({}, 0), SizeIs(1));
}

TEST_F(CoordinatorTest, SubmitJob_StoreFails_NotAccepted) {
  store_.SetFailing(true);
  EXPECT_THAT(core_->SubmitJob(Spec(), ""),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("not accepted")));
  EXPECT_THAT(core_->ListJobs({}, 0), SizeIs(0));
}

TEST_F(CoordinatorTest, SubmitJob_QuarterGpus_FourShareOneGpu) {
  FakeConnection& a = Connect("a", 2);
  v1::JobSpec spec = Spec();
  spec.set_gpu_fraction(0.25);
  for (int i = 0; i < 4; ++i) TC_ASSERT_OK(core_->SubmitJob(spec, ""));
  // 4 x 0.25 = one GPU: all four on GPU 0, GPU 1 stays whole for a gang.
  ASSERT_THAT(a.Starts(), SizeIs(4));
  for (const auto& s : a.Starts()) EXPECT_EQ(s.env().at("CUDA_VISIBLE_DEVICES"), "GPU-a-0");
  // Four jobs, four distinct MASTER_PORTs on the same host.
  std::set<std::string> ports;
  for (const auto& s : a.Starts()) ports.insert(s.env().at("MASTER_PORT"));
  EXPECT_THAT(ports, SizeIs(4));
}

// Unlike GPUs: an 80 GiB node and a 40 GiB node. A whole-GPU gang over both
// held only 40 GiB (the smaller GPU's size) of each 80 GiB GPU, and a
// --gpu-fraction 0.5 job was then placed on a GPU the gang held.
TEST_F(CoordinatorTest, UnlikeGpus_GangHoldsEachGpuWhole_NoShareOnItsBigGpus) {
  const int64_t g = SubmitGangOverUnlikeGpus();
  FakeConnection* big = conns_["big"].get();
  FakeConnection* small = conns_["small"].get();
  ASSERT_THAT(big->Starts(), SizeIs(2));
  const v1::Job placed = Job(g);
  for (const v1::Task& t : placed.tasks()) EXPECT_TRUE(t.whole_gpus()) << t.node();

  v1::JobSpec share = Spec();
  share.set_gpu_fraction(0.5);
  auto f = core_->SubmitJob(share, "");
  TC_ASSERT_OK(f);
  // Every GPU is held whole by the gang: the share waits, started nowhere.
  EXPECT_EQ(Job(*f).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(big->Starts(), SizeIs(2));
  EXPECT_THAT(small->Starts(), SizeIs(2));
  // The node view counts each GPU's own size as held.
  for (const v1::NodeView& n : core_->ListNodes()) {
    for (int i = 0; i < n.gpu_tasks_size(); ++i) {
      ASSERT_THAT(n.gpu_tasks(i).tasks(), SizeIs(1));
      EXPECT_EQ(n.gpu_tasks(i).tasks(0).reserved_bytes(), n.node().gpus(i).memory_total_bytes());
    }
  }
}

// GPU-hours count every GPU of a gang whole, whatever its size: a 2 x 2 gang
// over 80 and 40 GiB GPUs is 4 GPUs (it was billed as 3).
TEST_F(CoordinatorTest, UnlikeGpus_GangGpuHours_CountEveryGpuWhole) {
  const int64_t g = SubmitGangOverUnlikeGpus();
  FakeConnection* big = conns_["big"].get();
  FakeConnection* small = conns_["small"].get();
  std::vector<std::pair<std::string, v1::StartTask>> starts;
  for (const auto& s : big->Starts()) starts.push_back({"big", s});
  for (const auto& s : small->Starts()) starts.push_back({"small", s});
  ASSERT_THAT(starts, SizeIs(4));
  for (const auto& [node, s] : starts) Report(node, Status(s, v1::TASK_STATE_RUNNING));
  clock_.Advance(absl::Hours(1));
  for (const auto& [node, s] : starts) Report(node, Status(s, v1::TASK_STATE_EXITED, 0));
  const v1::Job job = Job(g);
  ASSERT_EQ(job.state(), v1::JOB_STATE_SUCCEEDED);
  ASSERT_THAT(job.attempts(), SizeIs(1));
  EXPECT_DOUBLE_EQ(job.attempts(0).gpus(), 4.0);
  EXPECT_NEAR(job.gpu_hours(), 4.0, 1e-6);
}

// One user could keep 340,000 held jobs in the coordinator's memory: the
// pending jobs per user and in all are capped.
TEST_F(CoordinatorTest, SubmitJob_PastPendingLimits_ResourceExhaustedNamingTheLimit) {
  config_.limits.max_pending_jobs_per_user = 2;
  config_.limits.max_pending_jobs = 3;
  Restart();
  v1::JobSpec alice = Spec();
  alice.set_user("alice");
  alice.set_hold(true);
  auto a1 = core_->SubmitJob(alice, "");
  TC_ASSERT_OK(a1);
  TC_ASSERT_OK(core_->SubmitJob(alice, ""));
  EXPECT_THAT(core_->SubmitJob(alice, ""),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("\"alice\" has 2 pending jobs"),
                             HasSubstr("--max-pending-jobs-per-user"))));
  v1::JobSpec bob = alice;
  bob.set_user("bob");
  TC_ASSERT_OK(core_->SubmitJob(bob, ""));
  EXPECT_THAT(core_->SubmitJob(bob, ""),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("the cluster has 3 pending jobs")));
  // A cancelled job no longer counts; the refused ones were never stored.
  TC_ASSERT_OK(core_->CancelJob(*a1));
  TC_ASSERT_OK(core_->SubmitJob(alice, ""));
  EXPECT_THAT(core_->ListJobs({}, 0), SizeIs(4));
  // Started jobs do not count: alice's pending ones leave when a node comes.
  Connect("a", 4);
  TC_ASSERT_OK(core_->SubmitJob(alice, ""));
}

TEST_F(CoordinatorTest, SubmitJob_TwoAgentsOnOneHost_JobsGetDistinctMasterPorts) {
  // Two agents on one host, each offering one of its GPUs, with the same
  // (default) port range: rank 0 of each job binds MASTER_PORT on the same
  // address, so the ports are counted per host, not per node.
  std::map<std::string, std::unique_ptr<FakeConnection>>& conns = conns_;
  for (const char* name : {"gpu0", "gpu1"}) {
    v1::RegisterNode reg = NodeReg(name, 1);
    reg.mutable_node()->set_address("10.0.0.7");
    conns[name] = std::make_unique<FakeConnection>();
    TC_ASSERT_OK(core_->RegisterAgent(reg, conns[name].get()));
  }
  TC_ASSERT_OK(core_->SubmitJob(Spec(), ""));
  TC_ASSERT_OK(core_->SubmitJob(Spec(), ""));
  ASSERT_THAT(conns["gpu0"]->Starts(), SizeIs(1));
  ASSERT_THAT(conns["gpu1"]->Starts(), SizeIs(1));
  const v1::StartTask first = conns["gpu0"]->Starts()[0];
  const v1::StartTask second = conns["gpu1"]->Starts()[0];
  EXPECT_EQ(first.env().at("MASTER_ADDR"), "10.0.0.7");
  EXPECT_EQ(second.env().at("MASTER_ADDR"), "10.0.0.7");
  EXPECT_NE(first.env().at("MASTER_PORT"), second.env().at("MASTER_PORT"));
}

TEST_F(CoordinatorTest, RegisterAgent_GpusOfAnotherLiveNode_RefusedUntilThatNodeIsLost) {
  // A second agent on host "a", started with its own --node-name but without
  // --gpus, offers a's GPUs (the same UUIDs).
  Connect("a", 2);
  v1::RegisterNode bis = NodeReg("a", 2);
  bis.mutable_node()->set_name("a-bis");
  FakeConnection bis_conn;
  EXPECT_THAT(core_->RegisterAgent(bis, &bis_conn),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       AllOf(HasSubstr("GPU-a-0"), HasSubstr("node a at a.example"),
                             HasSubstr("--gpus"))));
  EXPECT_TRUE(bis_conn.sent.empty());
  EXPECT_THAT(core_->ListNodes(), SizeIs(1));
  // The same UUID twice in one inventory.
  v1::RegisterNode twice = NodeReg("c", 2);
  twice.mutable_node()->mutable_gpus(1)->set_uuid("GPU-c-0");
  FakeConnection twice_conn;
  EXPECT_THAT(core_->RegisterAgent(twice, &twice_conn),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GPU-c-0")));
  // a's agent is gone but a is not lost yet: try again later.
  core_->AgentDisconnected("a", conns_["a"].get());
  EXPECT_THAT(core_->RegisterAgent(bis, &bis_conn),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("once that node is lost")));
  // Once a is lost, its GPUs may be offered under the new name.
  clock_.Advance(absl::Seconds(11));
  core_->Tick();
  TC_ASSERT_OK(core_->RegisterAgent(bis, &bis_conn));
  // And a's old agent coming back with them is the one refused.
  FakeConnection again;
  EXPECT_THAT(core_->RegisterAgent(NodeReg("a", 2), &again),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("node a-bis")));
}

TEST_F(CoordinatorTest, SubmitJob_GangOverTwoNodes_RanksAndSharedMaster) {
  FakeConnection& a = Connect("a", 2);
  FakeConnection& b = Connect("b", 2);
  v1::JobSpec spec = Spec();
  spec.set_nodes(2);
  spec.set_gpus_per_node(2);
  auto id = core_->SubmitJob(spec, "");
  TC_ASSERT_OK(id);

  std::vector<v1::StartTask> starts = a.Starts();
  for (auto& s : b.Starts()) starts.push_back(s);
  ASSERT_THAT(starts, SizeIs(4));
  std::set<std::string> ranks;
  for (const auto& s : starts) {
    ranks.insert(s.env().at("RANK"));
    EXPECT_EQ(s.env().at("WORLD_SIZE"), "4");
    EXPECT_EQ(s.env().at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(s.env().at("GROUP_WORLD_SIZE"), "2");
    EXPECT_EQ(s.env().at("MASTER_ADDR"), starts[0].env().at("MASTER_ADDR"));
    EXPECT_EQ(s.env().at("MASTER_PORT"), starts[0].env().at("MASTER_PORT"));
    EXPECT_EQ(s.env().at("TRAINCTL_TOKEN"), starts[0].env().at("TRAINCTL_TOKEN"));
    // Every local rank sees all of the job's GPUs of its node, in local-rank
    // order (docs/design.md §4).
    const std::string node = s.env().at("NODE_RANK") == "0" ? "a" : "b";
    EXPECT_EQ(s.env().at("CUDA_VISIBLE_DEVICES"),
              absl::StrCat("GPU-", node, "-0,GPU-", node, "-1"));
    EXPECT_EQ(s.env().at("RANK"),
              absl::StrCat(std::stoi(s.env().at("NODE_RANK")) * 2 +
                           std::stoi(s.env().at("LOCAL_RANK"))));
  }
  EXPECT_EQ(ranks, (std::set<std::string>{"0", "1", "2", "3"}));

  // RUNNING only once all four ranks started.
  for (size_t i = 0; i < starts.size(); ++i) {
    EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SCHEDULED);
    Report(i < 2 ? "a" : "b", Status(starts[i], v1::TASK_STATE_RUNNING));
  }
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_RUNNING);
}

TEST_F(CoordinatorTest, SubmitJob_RankZeroNodeHostsTorchStore_EveryRankUsesTheAgentStore) {
  // Node a's agent hosts PyTorch stores; node b's does not. Ranks follow the
  // node of rank 0 (all of them must agree: agent-store ranks are all
  // clients, with the attempt's key prefix), as under torchrun.
  auto& a = conns_["a"];
  a = std::make_unique<FakeConnection>();
  v1::RegisterNode reg = NodeReg("a", 2);
  reg.mutable_node()->set_torch_store(true);
  TC_ASSERT_OK(core_->RegisterAgent(reg, a.get()));
  FakeConnection& b = Connect("b", 2);
  v1::JobSpec spec = Spec();
  spec.set_nodes(2);
  spec.set_gpus_per_node(2);
  TC_ASSERT_OK(core_->SubmitJob(spec, ""));
  std::vector<v1::StartTask> starts = a->Starts();
  for (auto& s : b.Starts()) starts.push_back(s);
  ASSERT_THAT(starts, SizeIs(4));
  for (const auto& s : starts) {
    EXPECT_EQ(s.env().at("MASTER_ADDR"), "a.example");
    EXPECT_EQ(s.env().at("TORCHELASTIC_USE_AGENT_STORE"), "True");
  }
  // A one-process experiment creates its own store, as before, even on a
  // node that hosts stores.
  auto& c = conns_["c"];
  c = std::make_unique<FakeConnection>();
  reg = NodeReg("c", 1);
  reg.mutable_node()->set_torch_store(true);
  TC_ASSERT_OK(core_->RegisterAgent(reg, c.get()));
  TC_ASSERT_OK(core_->SubmitJob(Spec(), ""));
  ASSERT_THAT(c->Starts(), SizeIs(1));
  EXPECT_EQ(c->Starts()[0].env().count("TORCHELASTIC_USE_AGENT_STORE"), 0u);
}

TEST_F(CoordinatorTest, Gang_OneRankFails_OthersStoppedAndJobFails) {
  FakeConnection& a = Connect("a", 2);
  v1::JobSpec spec = Spec();
  spec.set_gpus(2);
  auto id = core_->SubmitJob(spec, "");
  TC_ASSERT_OK(id);
  auto starts = a.Starts();
  ASSERT_THAT(starts, SizeIs(2));
  Report("a", Status(starts[0], v1::TASK_STATE_RUNNING));
  Report("a", Status(starts[1], v1::TASK_STATE_RUNNING));
  Report("a", Status(starts[1], v1::TASK_STATE_EXITED, 3));

  v1::Job job = Job(*id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("rank 1 on a exited with code 3"));
  // Rank 0 is torn down with the gang.
  ASSERT_THAT(a.Stops(), SizeIs(1));
  EXPECT_EQ(a.Stops()[0].task().rank(), 0);
  EXPECT_EQ(a.Stops()[0].grace_ms(), 10000);
}

TEST_F(CoordinatorTest, Gang_RestartsLeft_NewAttemptAfterOldRanksExit) {
  FakeConnection& a = Connect("a", 2);
  v1::JobSpec spec = Spec();
  spec.set_gpus(2);
  spec.set_max_restarts(1);
  auto id = core_->SubmitJob(spec, "");
  auto starts = a.Starts();
  Report("a", Status(starts[0], v1::TASK_STATE_RUNNING));
  Report("a", Status(starts[1], v1::TASK_STATE_EXITED, 1));
  // Attempt 0 failed; rank 0 still holds GPU 0 while it stops, so attempt 1
  // (2 whole GPUs) waits.
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(Job(*id).attempt(), 1);
  EXPECT_THAT(a.Starts(), SizeIs(2));

  Report("a", Status(starts[0], v1::TASK_STATE_EXITED, 143));
  auto all = a.Starts();
  ASSERT_THAT(all, SizeIs(4));
  EXPECT_EQ(all[2].env().at("TORCHELASTIC_RESTART_COUNT"), "1");
  EXPECT_EQ(all[2].task().attempt(), 1);
  // A new attempt gets a new token: attempt 0's ranks cannot read its id.
  EXPECT_NE(all[2].env().at("TRAINCTL_TOKEN"), starts[0].env().at("TRAINCTL_TOKEN"));
}

TEST_F(CoordinatorTest, SubmitJob_LargerThanCluster_RefusedWithReasonUnlessHeld) {
  Connect("a", 2);
  v1::JobSpec spec = Spec();
  spec.set_gpus(3);
  EXPECT_THAT(core_->SubmitJob(spec, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("cannot run on this cluster: needs 3 GPUs but the "
                                       "cluster has 2"),
                             HasSubstr("--hold"))));
  v1::JobSpec big = Spec();
  big.set_gpu_memory_bytes(100 * kGiB);
  EXPECT_THAT(core_->SubmitJob(big, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("largest GPU")));
  // Nothing was accepted.
  EXPECT_THAT(core_->ListJobs({}, 0), SizeIs(0));

  // Held: accepted, it waits for nodes that will join, then runs.
  spec.set_hold(true);
  auto id = core_->SubmitJob(spec, "");
  TC_ASSERT_OK(id);
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Job(*id).reason(), HasSubstr("held (--hold): cannot run on this cluster yet"));
  Connect("b", 4);  // a node that can hold the 3 GPUs joins
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(CoordinatorTest, SubmitJob_BusyCluster_WaitsThenRuns) {
  FakeConnection& a = Connect("a", 1);
  auto first = core_->SubmitJob(Spec(), "");
  auto second = core_->SubmitJob(Spec(), "");
  EXPECT_EQ(Job(*second).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(Job(*second).reason(), HasSubstr("waiting"));
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(Job(*first).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Job(*second).state(), v1::JOB_STATE_SCHEDULED);
}

TEST_F(CoordinatorTest, CancelJob_Running_StopsTasksAndHoldsGpuUntilExit) {
  FakeConnection& a = Connect("a", 1);
  auto id = core_->SubmitJob(Spec(), "");
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));
  auto next = core_->SubmitJob(Spec(), "");

  auto cancelled = core_->CancelJob(*id);
  TC_ASSERT_OK(cancelled);
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  ASSERT_THAT(a.Stops(), SizeIs(1));
  // The process may still run: the GPU is not given to the next job yet.
  EXPECT_EQ(Job(*next).state(), v1::JOB_STATE_PENDING);
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 143));
  EXPECT_EQ(Job(*next).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(CoordinatorTest, CancelJob_AlreadyEnded_FailedPreconditionNamingState) {
  FakeConnection& a = Connect("a", 1);
  auto id = core_->SubmitJob(Spec(), "");
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 0));
  EXPECT_THAT(core_->CancelJob(*id),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(absl::StrCat("job ", *id, " has already ended: succeeded"))));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SUCCEEDED);
  // A second cancel of a cancelled job is refused the same way.
  auto other = core_->SubmitJob(Spec(), "");
  TC_ASSERT_OK(core_->CancelJob(*other));
  EXPECT_THAT(core_->CancelJob(*other),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cancelled")));
}

TEST_F(CoordinatorTest, CancelJob_Unknown_NotFound) {
  EXPECT_THAT(core_->CancelJob(42),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("job 42")));
}

TEST_F(CoordinatorTest, Tick_NodeMissesHeartbeats_LostAndGangFails) {
  FakeConnection& a = Connect("a", 1);
  FakeConnection& b = Connect("b", 1);
  v1::JobSpec spec = Spec();
  spec.set_nodes(2);
  spec.set_gpus_per_node(1);
  auto id = core_->SubmitJob(spec, "");
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));
  Report("b", Status(b.Starts()[0], v1::TASK_STATE_RUNNING));

  // a keeps heartbeating; b goes silent. 9 s: nothing happens yet.
  v1::AgentMessage hb;
  hb.mutable_heartbeat();
  clock_.Advance(absl::Seconds(9));
  Report("a", hb);
  core_->Tick();
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_RUNNING);
  // 11 s after b's last heartbeat (10 s timeout): b is lost, the gang fails
  // and a's rank is stopped.
  clock_.Advance(absl::Seconds(2));
  Report("a", hb);
  core_->Tick();
  v1::Job job = Job(*id);
  EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(job.reason(), HasSubstr("lost with node b"));
  EXPECT_THAT(a.Stops(), SizeIs(1));
  EXPECT_FALSE(b.closed.ok());
  auto nodes = core_->ListNodes();
  EXPECT_EQ(nodes[1].node().state(), v1::NODE_STATE_LOST);
}

TEST_F(CoordinatorTest, Heartbeat_FencingAgent_AnsweredWithLeaseOfNodeTimeout) {
  // A fencing agent is told its lease (the 10 s node timeout) in the ack and
  // gets a LeaseGrant for each heartbeat; an agent that does not fence gets
  // none (it would not know what to do with it).
  FakeConnection fencing, plain;
  v1::RegisterNode reg = NodeReg("f", 1);
  reg.set_fences(true);
  TC_ASSERT_OK(core_->RegisterAgent(reg, &fencing));
  TC_ASSERT_OK(core_->RegisterAgent(NodeReg("p", 1), &plain));
  ASSERT_THAT(fencing.sent, SizeIs(1));
  EXPECT_EQ(fencing.sent[0].register_ack().lease_ms(), 10'000);
  v1::AgentMessage hb;
  hb.mutable_heartbeat();
  TC_ASSERT_OK(core_->HandleAgentMessage("f", &fencing, hb));
  TC_ASSERT_OK(core_->HandleAgentMessage("f", &fencing, hb));
  TC_ASSERT_OK(core_->HandleAgentMessage("p", &plain, hb));
  ASSERT_THAT(fencing.sent, SizeIs(3));
  EXPECT_EQ(fencing.sent[1].lease_grant().lease_ms(), 10'000);
  EXPECT_EQ(fencing.sent[2].lease_grant().lease_ms(), 10'000);
  EXPECT_THAT(plain.sent, SizeIs(1));  // the ack only
}

TEST_F(CoordinatorTest, Heartbeat_Samples_ShownInListNodes) {
  FakeConnection& a = Connect("a", 1);
  v1::JobSpec spec = Spec();
  spec.set_gpu_fraction(0.5);
  spec.set_name("sweep-1");
  auto id = core_->SubmitJob(spec, "");
  v1::AgentMessage hb;
  v1::GpuSample* s = hb.mutable_heartbeat()->add_gpus();
  s->set_index(0);
  s->set_utilization_pct(87);
  s->set_memory_used_bytes(12 * kGiB);
  s->set_temperature_c(61);
  s->set_power_w(410.5);
  Report("a", hb);
  auto nodes = core_->ListNodes();
  ASSERT_THAT(nodes, SizeIs(1));
  const v1::Gpu& gpu = nodes[0].node().gpus(0);
  EXPECT_EQ(gpu.utilization_pct(), 87);
  EXPECT_EQ(gpu.memory_used_bytes(), 12 * kGiB);
  EXPECT_EQ(gpu.temperature_c(), 61);
  ASSERT_THAT(nodes[0].gpu_tasks(0).tasks(), SizeIs(1));
  EXPECT_EQ(nodes[0].gpu_tasks(0).tasks(0).job_id(), *id);
  EXPECT_EQ(nodes[0].gpu_tasks(0).tasks(0).job_name(), "sweep-1");
  EXPECT_EQ(nodes[0].gpu_tasks(0).tasks(0).reserved_bytes(), 40 * kGiB);
  (void)a;
}

TEST_F(CoordinatorTest, Restart_JobsSurviveAndAgentReconciles) {
  FakeConnection& a = Connect("a", 2);
  auto running = core_->SubmitJob(Spec(), "");
  auto vanished = core_->SubmitJob(Spec(), "");
  auto starts = a.Starts();
  Report("a", Status(starts[0], v1::TASK_STATE_RUNNING, 0, 111));
  Report("a", Status(starts[1], v1::TASK_STATE_RUNNING, 0, 222));

  // The coordinator crashes and comes back over the same store.
  conns_.clear();
  Restart();
  EXPECT_EQ(Job(*running).state(), v1::JOB_STATE_RUNNING);

  // The agent reconnects: it still runs the first task and a task the
  // coordinator never heard of; the second task is gone.
  v1::RegisterNode reg = NodeReg("a", 2);
  v1::TaskRef* kept = reg.add_running_tasks();
  *kept = starts[0].task();
  kept->set_pid(111);
  v1::TaskRef* stranger = reg.add_running_tasks();
  stranger->set_job_id(999);
  stranger->set_rank(0);
  stranger->set_pid(333);
  auto conn = std::make_unique<FakeConnection>();
  TC_ASSERT_OK(core_->RegisterAgent(reg, conn.get()));
  // The ack is the first message on the new stream.
  ASSERT_FALSE(conn->sent.empty());
  EXPECT_TRUE(conn->sent[0].has_register_ack());
  EXPECT_EQ(conn->sent[0].register_ack().heartbeat_interval_ms(), 1000);

  EXPECT_EQ(Job(*running).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Job(*vanished).state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(Job(*vanished).reason(), HasSubstr("was not running"));
  // The unknown task is stopped; nothing runs twice.
  ASSERT_THAT(conn->Stops(), SizeIs(1));
  EXPECT_EQ(conn->Stops()[0].task().job_id(), 999);
  EXPECT_THAT(conn->Starts(), SizeIs(0));
  // New job ids continue after the old ones.
  EXPECT_GT(*core_->SubmitJob(Spec(), ""), *vanished);
}

TEST_F(CoordinatorTest, RegisterAgent_UnknownRunningTask_NodeGetsNothingUntilItExits) {
  // Agent "a" (1 GPU) comes back still running a process the coordinator
  // holds no reservation for (say an aborted pre-flight's probe, or a job of
  // an earlier attempt): which GPU it is on is unknown, so the node takes no
  // placement until the agent reports that process's exit.
  v1::RegisterNode reg = NodeReg("a", 1);
  v1::TaskRef* stranger = reg.add_running_tasks();
  stranger->set_job_id(999);
  stranger->set_attempt(0);
  stranger->set_probe_run(1);
  stranger->set_rank(0);
  stranger->set_pid(333);
  auto& conn = conns_["a"];
  conn = std::make_unique<FakeConnection>();
  TC_ASSERT_OK(core_->RegisterAgent(reg, conn.get()));
  ASSERT_THAT(conn->Stops(), SizeIs(1));

  v1::JobSpec whole = Spec();
  whole.set_gpus(1);
  const int64_t id = *core_->SubmitJob(whole, "");
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(conn->Starts(), SizeIs(0));

  v1::AgentMessage exited;
  *exited.mutable_task_status()->mutable_task() = *stranger;
  exited.mutable_task_status()->set_state(v1::TASK_STATE_EXITED);
  exited.mutable_task_status()->set_signal(15);
  Report("a", exited);
  EXPECT_EQ(Job(id).state(), v1::JOB_STATE_SCHEDULED);
  EXPECT_THAT(conn->Starts(), SizeIs(1));
}

TEST_F(CoordinatorTest, Restart_ExitSentButNotStored_AppliedFromRegistration) {
  FakeConnection& a = Connect("a", 2);
  auto ok_job = core_->SubmitJob(Spec(), "");
  auto bad_job = core_->SubmitJob(Spec(), "");
  auto starts = a.Starts();
  Report("a", Status(starts[0], v1::TASK_STATE_RUNNING, 0, 111));
  Report("a", Status(starts[1], v1::TASK_STATE_RUNNING, 0, 222));
  // Both tasks exit; the agent sent the reports but the coordinator died
  // before storing them (here: it never saw them).
  conns_.clear();
  Restart();
  v1::RegisterNode reg = NodeReg("a", 2);
  v1::TaskStatus* done = reg.add_finished_tasks();
  *done->mutable_task() = starts[0].task();
  done->set_state(v1::TASK_STATE_EXITED);
  v1::TaskStatus* failed = reg.add_finished_tasks();
  *failed->mutable_task() = starts[1].task();
  failed->set_state(v1::TASK_STATE_EXITED);
  failed->set_exit_code(3);
  // An exit of a job already final is ignored.
  *reg.add_finished_tasks() = *done;
  auto conn = std::make_unique<FakeConnection>();
  TC_ASSERT_OK(core_->RegisterAgent(reg, conn.get()));
  EXPECT_EQ(Job(*ok_job).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Job(*bad_job).state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(Job(*bad_job).tasks(0).exit_code(), 3);
  EXPECT_THAT(Job(*bad_job).reason(), Not(HasSubstr("was not running")));
}

TEST_F(CoordinatorTest, WaitJobAsync_NotFinal_ReturnsAtTimeoutThenAtEnd) {
  FakeConnection& a = Connect("a", 1);
  auto id = core_->SubmitJob(Spec(), "");
  std::vector<v1::JobState> seen;
  auto record = [&](absl::StatusOr<v1::Job> j) { seen.push_back(j->state()); };
  core_->WaitJobAsync(*id, absl::Seconds(30), record);
  core_->WaitJobAsync(*id, absl::Seconds(5), record);
  clock_.Advance(absl::Seconds(6));
  core_->Tick();
  // The 5 s wait returned with the job still running; the 30 s one waits on.
  EXPECT_EQ(seen, std::vector<v1::JobState>{v1::JOB_STATE_SCHEDULED});
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(seen, (std::vector<v1::JobState>{v1::JOB_STATE_SCHEDULED,
                                             v1::JOB_STATE_SUCCEEDED}));
}

TEST_F(CoordinatorTest, Rendezvous_RanksOfAttempt_GetPublishedId) {
  FakeConnection& a = Connect("a", 2);
  v1::JobSpec spec = Spec();
  spec.set_gpus(2);
  auto id = core_->SubmitJob(spec, "");
  const std::string token = a.Starts()[0].env().at("TRAINCTL_TOKEN");

  v1::FetchUniqueIdRequest fetch;
  fetch.set_job_id(*id);
  fetch.set_rank(1);
  fetch.set_token(token);
  absl::StatusOr<std::string> got = absl::UnknownError("not called");
  core_->FetchUniqueIdAsync(fetch, [&](absl::StatusOr<std::string> r) { got = r; });
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kUnknown, HasSubstr("not called")));

  v1::PublishUniqueIdRequest pub;
  pub.set_job_id(*id);
  pub.set_rank(0);
  pub.set_token(token);
  pub.set_unique_id(std::string(128, 'x'));
  TC_ASSERT_OK(core_->PublishUniqueId(pub));
  ASSERT_THAT(got, ::trainctl::testing::IsOk());
  EXPECT_EQ(*got, std::string(128, 'x'));

  // Another job's token cannot read it.
  fetch.set_token("not-the-token");
  core_->FetchUniqueIdAsync(fetch, [&](absl::StatusOr<std::string> r) { got = r; });
  EXPECT_THAT(got, StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("TRAINCTL_TOKEN")));
}

TEST_F(CoordinatorTest, RegisterAgent_BadInventory_InvalidArgument) {
  FakeConnection conn;
  v1::RegisterNode reg = NodeReg("a", 2);
  reg.mutable_node()->mutable_gpus(1)->set_index(0);
  EXPECT_THAT(core_->RegisterAgent(reg, &conn),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("appears twice")));
  reg = NodeReg("", 1);
  EXPECT_THAT(core_->RegisterAgent(reg, &conn),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("node.name")));
}

TEST_F(CoordinatorTest, RegisterAgent_SameInstanceReconnects_OldStreamClosed) {
  auto& old_conn = conns_["a"];
  old_conn = std::make_unique<FakeConnection>();
  v1::RegisterNode reg = NodeReg("a", 1);
  reg.set_agent_instance_id("agent-1");
  TC_ASSERT_OK(core_->RegisterAgent(reg, old_conn.get()));
  // The same agent process on a new stream, before the old one was seen to
  // end: it takes its node back.
  FakeConnection fresh;
  TC_ASSERT_OK(core_->RegisterAgent(reg, &fresh));
  EXPECT_THAT(old_conn->closed, StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("")));
  // Messages from the replaced stream are refused.
  v1::AgentMessage hb;
  hb.mutable_heartbeat();
  EXPECT_THAT(core_->HandleAgentMessage("a", old_conn.get(), hb),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("a")));
}

// A second agent started under a name in use (two agents on one host without
// --node-name) is refused, and the node's running job is untouched.
TEST_F(CoordinatorTest, RegisterAgent_SecondAgentUnderLiveName_AlreadyExistsJobKeepsRunning) {
  FakeConnection& a = Connect("a", 1);
  auto id = core_->SubmitJob(Spec(), "");
  TC_ASSERT_OK(id);
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));

  FakeConnection intruder;
  v1::RegisterNode reg = NodeReg("a", 4);
  reg.mutable_node()->set_address("other-host.example");
  reg.set_agent_instance_id("agent-2");
  EXPECT_THAT(core_->RegisterAgent(reg, &intruder),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       HasSubstr("held by the connected agent at a.example")));
  EXPECT_THAT(intruder.sent, SizeIs(0));
  EXPECT_TRUE(a.closed.ok());
  EXPECT_THAT(a.Stops(), SizeIs(0));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_RUNNING);
  // The node keeps its registered inventory.
  ASSERT_THAT(core_->ListNodes(), SizeIs(1));
  EXPECT_EQ(core_->ListNodes()[0].node().gpus_size(), 1);
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_SUCCEEDED);
}

// A holder whose host died without closing its stream stops heartbeating;
// after 3 heartbeat intervals of silence a new agent may take the name.
TEST_F(CoordinatorTest, RegisterAgent_HolderSilent_NewAgentTakesOver) {
  FakeConnection& a = Connect("a", 1);
  FakeConnection fresh;
  v1::RegisterNode reg = NodeReg("a", 1);
  reg.set_agent_instance_id("agent-2");
  clock_.Advance(absl::Seconds(2));
  EXPECT_THAT(core_->RegisterAgent(reg, &fresh),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("")));
  clock_.Advance(absl::Seconds(2));
  TC_ASSERT_OK(core_->RegisterAgent(reg, &fresh));
  EXPECT_THAT(a.closed, StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("")));
}

TEST_F(CoordinatorTest, RegisterAgent_AfterOldStreamEnded_TakesOver) {
  FakeConnection& a = Connect("a", 1);
  core_->AgentDisconnected("a", &a);
  FakeConnection fresh;
  v1::RegisterNode reg = NodeReg("a", 1);
  reg.set_agent_instance_id("agent-2");
  TC_ASSERT_OK(core_->RegisterAgent(reg, &fresh));
}

// The cluster id in every RegisterAck: the same after a restart over the same
// store, another for a new store (a new cluster).
TEST_F(CoordinatorTest, RegisterAck_ClusterId_StableAcrossRestartNewForNewStore) {
  FakeConnection& a = Connect("a", 1);
  ASSERT_TRUE(a.sent[0].has_register_ack());
  const std::string id = a.sent[0].register_ack().cluster_id();
  EXPECT_EQ(id.size(), 32u);
  Restart();
  FakeConnection& again = Connect("a", 1);
  EXPECT_EQ(again.sent[0].register_ack().cluster_id(), id);

  MemoryStateStore fresh_store;
  auto other = Coordinator::Create(CoordinatorConfig{}, &fresh_store, &clock_);
  TC_ASSERT_OK(other);
  FakeConnection b;
  TC_ASSERT_OK((*other)->RegisterAgent(NodeReg("a", 1), &b));
  EXPECT_NE(b.sent[0].register_ack().cluster_id(), id);
}

// Jobs per state counted the slow way, over every job the user API lists.
std::array<int64_t, v1::JobState_ARRAYSIZE> CountByState(const Coordinator& core) {
  std::array<int64_t, v1::JobState_ARRAYSIZE> out{};
  for (const v1::Job& j : core.ListJobs({}, 1'000'000)) ++out[j.state()];
  return out;
}

TEST_F(CoordinatorTest, Stats_JobsThroughEveryEdge_CountsMatchJobList) {
  FakeConnection& a = Connect("a", 1);
  auto expect_consistent = [&](const std::string& step) {
    SCOPED_TRACE(step);
    const CoordinatorStats stats = core_->Stats();
    EXPECT_EQ(stats.jobs_by_state, CountByState(*core_));
    EXPECT_EQ(stats.pending_jobs, stats.jobs_by_state[v1::JOB_STATE_PENDING]);
  };
  expect_consistent("empty");
  // 1 GPU: the first job is placed (SCHEDULED), the second waits (PENDING).
  v1::JobSpec retried = Spec();
  retried.set_max_restarts(1);
  auto first = core_->SubmitJob(retried, "");
  auto second = core_->SubmitJob(Spec(), "");
  EXPECT_EQ(core_->Stats().jobs_by_state[v1::JOB_STATE_SCHEDULED], 1);
  EXPECT_EQ(core_->Stats().pending_jobs, 1);
  expect_consistent("one scheduled, one pending");
  // A repeated request id adds nothing.
  auto third = core_->SubmitJob(Spec(), "req-1");
  TC_ASSERT_OK(core_->SubmitJob(Spec(), "req-1"));
  EXPECT_EQ(core_->Stats().pending_jobs, 2);
  // Too large for the cluster: refused at submit; held, it waits PENDING.
  v1::JobSpec huge = Spec();
  huge.set_gpus(8);
  EXPECT_THAT(core_->SubmitJob(huge, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cannot run")));
  huge.set_hold(true);
  auto held = core_->SubmitJob(huge, "");
  TC_ASSERT_OK(held);
  expect_consistent("infeasible held");
  // RUNNING, then its rank fails with a restart left: RUNNING -> PENDING
  // (attempt 1), which is placed again at once: PENDING -> SCHEDULED.
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_RUNNING));
  expect_consistent("running");
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 1));
  EXPECT_EQ(Job(*first).attempt(), 1);
  expect_consistent("restarted");
  // Whichever job holds the GPU now succeeds; the next one is placed.
  const int64_t placed = a.Starts().back().task().job_id();
  Report("a", Status(a.Starts().back(), v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(Job(placed).state(), v1::JOB_STATE_SUCCEEDED);
  expect_consistent("succeeded");
  // Cancel the three left: one SCHEDULED, two PENDING (one held).
  for (int64_t id : {*first, *second, *third, *held}) {
    if (!IsFinal(Job(id).state())) {
      TC_ASSERT_OK(core_->CancelJob(id));
    }
  }
  expect_consistent("cancelled");
  const CoordinatorStats before = core_->Stats();
  EXPECT_EQ(before.jobs_by_state[v1::JOB_STATE_SUCCEEDED], 1);
  EXPECT_EQ(before.jobs_by_state[v1::JOB_STATE_FAILED], 0);
  EXPECT_EQ(before.jobs_by_state[v1::JOB_STATE_CANCELLED], 3);
  // After a restart the counts come back from the store.
  conns_.clear();
  Restart();
  EXPECT_EQ(core_->Stats().jobs_by_state, before.jobs_by_state);
  expect_consistent("after restart");
}

TEST_F(CoordinatorTest, Stats_GpusAndRunningGang_SamplesAndMeanJobUtil) {
  FakeConnection& a = Connect("a", 2);
  Connect("b", 1);
  v1::JobSpec spec = Spec();
  spec.set_gpus(2);
  spec.set_name("llama");
  auto id = core_->SubmitJob(spec, "");
  ASSERT_THAT(a.Starts(), SizeIs(2));
  // a's GPUs at 90 % and 70 %: the gang on both averages 80 %.
  v1::AgentMessage hb;
  for (int i = 0; i < 2; ++i) {
    v1::GpuSample* s = hb.mutable_heartbeat()->add_gpus();
    s->set_index(i);
    s->set_utilization_pct(i == 0 ? 90 : 70);
    s->set_memory_used_bytes((i + 1) * kGiB);
    s->set_power_w(400 + i);
    s->set_temperature_c(60 + i);
  }
  Report("a", hb);
  CoordinatorStats stats = core_->Stats();
  EXPECT_EQ(stats.nodes_ready, 2);
  EXPECT_EQ(stats.nodes_lost, 0);
  ASSERT_THAT(stats.gpus, SizeIs(3));
  const GpuStats& a1 = stats.gpus[1];
  EXPECT_EQ(a1.node, "a");
  EXPECT_TRUE(a1.node_ready);
  EXPECT_EQ(a1.index, 1);
  EXPECT_EQ(a1.uuid, "GPU-a-1");
  EXPECT_EQ(a1.model, "Fake H200");
  EXPECT_EQ(a1.utilization_pct, 70);
  EXPECT_EQ(a1.memory_used_bytes, 2 * kGiB);
  EXPECT_EQ(a1.memory_total_bytes, 80 * kGiB);
  EXPECT_EQ(a1.power_w, 401);
  EXPECT_EQ(a1.temperature_c, 61);
  EXPECT_EQ(stats.gpus[2].node, "b");
  ASSERT_THAT(stats.jobs, SizeIs(1));
  EXPECT_EQ(stats.jobs[0].job_id, *id);
  EXPECT_EQ(stats.jobs[0].job_name, "llama");
  EXPECT_EQ(stats.jobs[0].gpus, 2);
  EXPECT_DOUBLE_EQ(stats.jobs[0].utilization_pct, 80);

  // b goes silent for 11 s (timeout 10 s) and is lost; a heartbeats on.
  clock_.Advance(absl::Seconds(11));
  hb.mutable_heartbeat()->clear_gpus();
  Report("a", hb);
  core_->Tick();
  stats = core_->Stats();
  EXPECT_EQ(stats.nodes_ready, 1);
  EXPECT_EQ(stats.nodes_lost, 1);
  EXPECT_FALSE(stats.gpus[2].node_ready);
  // Both ranks exit 0: the job has no live task and leaves the job list.
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 0));
  Report("a", Status(a.Starts()[1], v1::TASK_STATE_EXITED, 0));
  EXPECT_THAT(core_->Stats().jobs, SizeIs(0));
}

TEST_F(CoordinatorTest, Observers_SchedulePassAndRendezvous_TimedWithClock) {
  std::vector<absl::Duration> passes, rendezvous;
  MemoryStateStore store;
  CoordinatorConfig config;
  config.hooks.on_schedule_pass = [&](absl::Duration d) { passes.push_back(d); };
  config.hooks.on_rendezvous_published = [&](absl::Duration d) { rendezvous.push_back(d); };
  auto core = Coordinator::Create(config, &store, &clock_);
  TC_ASSERT_OK(core);
  FakeConnection a;
  TC_ASSERT_OK((*core)->RegisterAgent(NodeReg("a", 2), &a));
  // No pending job: registering schedules nothing.
  EXPECT_THAT(passes, SizeIs(0));
  v1::JobSpec spec = Spec();
  spec.set_gpus(2);
  auto id = (*core)->SubmitJob(spec, "");
  // One pass; the FakeClock did not move during it.
  ASSERT_THAT(passes, SizeIs(1));
  EXPECT_EQ(passes[0], absl::ZeroDuration());

  // Rank 0 publishes 3.5 s after placement.
  clock_.Advance(absl::Milliseconds(3500));
  v1::PublishUniqueIdRequest pub;
  pub.set_job_id(*id);
  pub.set_rank(0);
  pub.set_token(a.Starts()[0].env().at("TRAINCTL_TOKEN"));
  pub.set_unique_id(std::string(128, 'x'));
  TC_ASSERT_OK((*core)->PublishUniqueId(pub));
  EXPECT_EQ(rendezvous, std::vector<absl::Duration>{absl::Milliseconds(3500)});
  // Publishing again is OK and is not counted again; a refused publish
  // (wrong token) is not counted.
  TC_ASSERT_OK((*core)->PublishUniqueId(pub));
  pub.set_token("wrong");
  EXPECT_FALSE((*core)->PublishUniqueId(pub).ok());
  EXPECT_THAT(rendezvous, SizeIs(1));
}

TEST_F(CoordinatorTest, Stats_Counters_EachEventCountedOnce) {
  FakeConnection& a = Connect("a", 1);
  EXPECT_EQ(core_->Stats().counters.agent_registrations, 1);
  // 1 GPU. Job 1 (a restart allowed) is placed; job 2 waits; a retry of
  // job 2's request is not a new submit.
  v1::JobSpec retried = Spec();
  retried.set_max_restarts(1);
  auto first = core_->SubmitJob(retried, "");
  auto second = core_->SubmitJob(Spec(), "req-2");
  TC_ASSERT_OK(core_->SubmitJob(Spec(), "req-2"));
  CoordinatorCounters c = core_->Stats().counters;
  EXPECT_EQ(c.jobs_submitted, 2);
  EXPECT_EQ(c.placements, 1);

  // Job 1's rank fails: restart 1 of 1, placed again at once (placement 2).
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 1));
  c = core_->Stats().counters;
  EXPECT_EQ(c.restarts, 1);
  EXPECT_EQ(c.placements, 2);
  // Fails again with no restart left: FAILED. Job 2 is placed (3) and
  // succeeds.
  Report("a", Status(a.Starts()[1], v1::TASK_STATE_EXITED, 1));
  EXPECT_EQ(Job(*first).state(), v1::JOB_STATE_FAILED);
  ASSERT_THAT(a.Starts(), SizeIs(3));
  Report("a", Status(a.Starts()[2], v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(Job(*second).state(), v1::JOB_STATE_SUCCEEDED);
  // A third job is cancelled while it runs.
  auto third = core_->SubmitJob(Spec(), "");
  TC_ASSERT_OK(core_->CancelJob(*third));

  c = core_->Stats().counters;
  EXPECT_EQ(c.jobs_submitted, 3);
  EXPECT_EQ(c.placements, 4);
  EXPECT_EQ(c.restarts, 1);
  EXPECT_EQ(c.jobs_finished[v1::JOB_STATE_SUCCEEDED], 1);
  EXPECT_EQ(c.jobs_finished[v1::JOB_STATE_FAILED], 1);
  EXPECT_EQ(c.jobs_finished[v1::JOB_STATE_CANCELLED], 1);
  EXPECT_EQ(c.preemptions, 0);
  // The agent's stream ends and it registers again: 2 registrations. The
  // cancelled job's task, not reported, is taken for lost; the job stays
  // counted once.
  core_->AgentDisconnected("a", &a);
  Connect("a", 1);
  EXPECT_EQ(core_->Stats().counters.agent_registrations, 2);
  EXPECT_EQ(core_->Stats().counters.jobs_finished[v1::JOB_STATE_CANCELLED], 1);

  // Counters are events of this process: a restart over the same store
  // starts them at 0, while the per-state gauges come back from the store.
  conns_.clear();
  Restart();
  c = core_->Stats().counters;
  EXPECT_EQ(c.jobs_submitted, 0);
  EXPECT_EQ(c.jobs_finished[v1::JOB_STATE_SUCCEEDED], 0);
  EXPECT_EQ(core_->Stats().jobs_by_state[v1::JOB_STATE_SUCCEEDED], 1);
}

TEST_F(CoordinatorTest, Stats_GpusHeldByLiveTasks_AllocatedUntilExit) {
  FakeConnection& a = Connect("a", 2);
  auto allocated = [&]() {
    int n = 0;
    for (const GpuStats& g : core_->Stats().gpus) n += g.allocated ? 1 : 0;
    return n;
  };
  EXPECT_EQ(allocated(), 0);
  // Two quarter-GPU experiments share GPU 0 (it counts once); a whole-GPU
  // job takes GPU 1.
  v1::JobSpec quarter = Spec();
  quarter.set_gpu_fraction(0.25);
  TC_ASSERT_OK(core_->SubmitJob(quarter, ""));
  TC_ASSERT_OK(core_->SubmitJob(quarter, ""));
  EXPECT_EQ(allocated(), 1);
  EXPECT_TRUE(core_->Stats().gpus[0].allocated);
  TC_ASSERT_OK(core_->SubmitJob(Spec(), ""));
  ASSERT_THAT(a.Starts(), SizeIs(3));
  EXPECT_EQ(allocated(), 2);
  // Cancelled, their tasks are STOPPING and keep the GPUs until they exit.
  for (const v1::StartTask& s : a.Starts()) {
    TC_ASSERT_OK(core_->CancelJob(s.task().job_id()));
  }
  EXPECT_EQ(allocated(), 2);
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 143));
  EXPECT_EQ(allocated(), 2);  // the other quarter still holds GPU 0
  Report("a", Status(a.Starts()[1], v1::TASK_STATE_EXITED, 143));
  Report("a", Status(a.Starts()[2], v1::TASK_STATE_EXITED, 143));
  EXPECT_EQ(allocated(), 0);
}

TEST_F(CoordinatorTest, Observers_JobPlaced_QueueWaitFromSubmitOrAttemptEnd) {
  std::vector<absl::Duration> waits;
  config_.hooks.on_job_placed = [&](absl::Duration d) { waits.push_back(d); };
  Restart();
  // No node yet: the job waits 30 s, then a node comes and it is placed.
  v1::JobSpec spec = Spec();
  spec.set_max_restarts(1);
  auto id = core_->SubmitJob(spec, "");
  clock_.Advance(absl::Seconds(30));
  EXPECT_THAT(waits, SizeIs(0));
  FakeConnection& a = Connect("a", 1);
  ASSERT_THAT(waits, SizeIs(1));
  EXPECT_EQ(waits[0], absl::Seconds(30));
  // It runs 100 s and fails; the restart is placed at once: 0 s in the
  // queue, from the end of attempt 0 (not from the submit).
  clock_.Advance(absl::Seconds(100));
  Report("a", Status(a.Starts()[0], v1::TASK_STATE_EXITED, 1));
  EXPECT_EQ(Job(*id).attempt(), 1);
  ASSERT_THAT(waits, SizeIs(2));
  EXPECT_EQ(waits[1], absl::ZeroDuration());
}

TEST_F(CoordinatorTest, ListJobs_SweepFilter_OnlyThatSweepsTrialsAndSurvivesRestart) {
  // No agent: every job stays PENDING. Jobs 1 and 4 are plain, 2 and 5 are
  // trials of sweep "sw-a", 3 of "sw-b".
  auto submit = [&](const std::string& sweep) {
    v1::JobSpec spec = Spec();
    spec.set_sweep_id(sweep);
    if (!sweep.empty()) (*spec.mutable_params())["lr"] = "0.1";
    auto id = core_->SubmitJob(spec, "");
    EXPECT_THAT(id, ::trainctl::testing::IsOk());
    return id.value_or(0);
  };
  submit("");
  const int64_t a1 = submit("sw-a");
  const int64_t b1 = submit("sw-b");
  submit("");
  const int64_t a2 = submit("sw-a");

  auto ids = [&](const std::vector<v1::JobState>& states, int limit,
                 const std::string& sweep) {
    std::vector<int64_t> out;
    for (const v1::Job& job : core_->ListJobs(states, limit, sweep)) {
      out.push_back(job.id());
    }
    return out;
  };
  // Newest first, only that sweep's trials, with their params.
  EXPECT_EQ(ids({}, 0, "sw-a"), (std::vector<int64_t>{a2, a1}));
  EXPECT_EQ(ids({}, 0, "sw-b"), (std::vector<int64_t>{b1}));
  EXPECT_EQ(core_->ListJobs({}, 0, "sw-a")[0].spec().params().at("lr"), "0.1");
  EXPECT_THAT(ids({}, 0, "sw-none"), SizeIs(0));
  // The limit and the state filter apply within the sweep.
  EXPECT_EQ(ids({}, 1, "sw-a"), (std::vector<int64_t>{a2}));
  TC_ASSERT_OK(core_->CancelJob(a1));
  EXPECT_EQ(ids({v1::JOB_STATE_PENDING}, 0, "sw-a"), (std::vector<int64_t>{a2}));
  EXPECT_EQ(ids({v1::JOB_STATE_CANCELLED}, 0, "sw-a"), (std::vector<int64_t>{a1}));
  // No sweep id: every job, as before.
  EXPECT_THAT(core_->ListJobs({}, 0), SizeIs(5));

  // The index is rebuilt from the store.
  Restart();
  EXPECT_EQ(ids({}, 0, "sw-a"), (std::vector<int64_t>{a2, a1}));
  EXPECT_EQ(ids({}, 0, "sw-b"), (std::vector<int64_t>{b1}));
  // A trial submitted after the restart joins its sweep.
  const int64_t a3 = submit("sw-a");
  EXPECT_EQ(ids({}, 0, "sw-a"), (std::vector<int64_t>{a3, a2, a1}));
}

// Security: an agent speaks only for its own node (the transport pins the
// stream to the certificate's node; the core attributes reports to it).
TEST_F(CoordinatorTest, TaskStatus_FromAnotherNode_DoesNotReleaseItsGpus) {
  FakeConnection& a = Connect("a", 2);
  Connect("b", 1);
  v1::JobSpec spec = Spec();
  spec.set_nodes(1);
  spec.set_gpus_per_node(2);
  spec.set_max_restarts(1);
  auto id = core_->SubmitJob(spec, "");
  auto starts = a.Starts();
  ASSERT_THAT(starts, SizeIs(2));
  Report("a", Status(starts[0], v1::TASK_STATE_RUNNING));
  Report("a", Status(starts[1], v1::TASK_STATE_EXITED, 1));
  // Attempt 0 failed; rank 0 on a still holds GPU 0, so attempt 1 (2 GPUs on
  // one node: only a fits) waits.
  ASSERT_EQ(Job(*id).attempt(), 1);
  // Node b claims a's rank 0 exited: ignored, the GPU stays held.
  Report("b", Status(starts[0], v1::TASK_STATE_EXITED, 0));
  EXPECT_EQ(Job(*id).state(), v1::JOB_STATE_PENDING);
  EXPECT_THAT(a.Starts(), SizeIs(2));
  // a itself reports it: attempt 1 starts.
  Report("a", Status(starts[0], v1::TASK_STATE_EXITED, 143));
  EXPECT_THAT(a.Starts(), SizeIs(4));
}

TEST_F(CoordinatorTest, NoLogsJob_AgentToldToDiscardAndLogsRefusedSayingWhy) {
  FakeConnection& a = Connect("a", 1);
  v1::JobSpec spec = Spec();
  spec.set_discard_output(true);
  auto id = core_->SubmitJob(spec, "");
  TC_ASSERT_OK(id);
  auto starts = a.Starts();
  ASSERT_THAT(starts, SizeIs(1));
  EXPECT_TRUE(starts[0].discard_output());
  Report("a", Status(starts[0], v1::TASK_STATE_RUNNING));
  const size_t sent_before = a.sent.size();
  std::optional<absl::StatusOr<v1::GetLogsResponse>> got;
  core_->GetLogsAsync(*id, 0, 0, 0,
                      [&](absl::StatusOr<v1::GetLogsResponse> r) { got = std::move(r); });
  ASSERT_TRUE(got.has_value());
  EXPECT_THAT(*got, StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("--no-logs")));
  EXPECT_EQ(a.sent.size(), sent_before);  // the agent was not asked
}

TEST_F(CoordinatorTest, LogChunk_FromAnotherNode_IsRefusedAndReadStaysOpen) {
  FakeConnection& a = Connect("a", 1);
  FakeConnection& b = Connect("b", 1);
  v1::JobSpec spec = Spec();
  spec.set_gpus(2);  // one rank on each node
  auto id = core_->SubmitJob(spec, "");
  ASSERT_THAT(a.Starts(), SizeIs(1));
  ASSERT_THAT(b.Starts(), SizeIs(1));
  const int rank_on_a = a.Starts()[0].task().rank();
  std::optional<absl::StatusOr<v1::GetLogsResponse>> got;
  core_->GetLogsAsync(*id, rank_on_a, 0, 0,
                      [&](absl::StatusOr<v1::GetLogsResponse> r) { got = std::move(r); });
  ASSERT_FALSE(a.sent.empty());
  ASSERT_TRUE(a.sent.back().has_read_log());
  const int64_t request = a.sent.back().read_log().request_id();

  // b answers the read sent to a with a forged log: refused, nothing
  // reaches the user.
  v1::AgentMessage forged;
  forged.mutable_log_chunk()->set_request_id(request);
  forged.mutable_log_chunk()->set_data("forged");
  EXPECT_THAT(core_->HandleAgentMessage("b", &b, forged),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("sent to node a")));
  EXPECT_FALSE(got.has_value());

  // a's own answer is delivered.
  v1::AgentMessage real = forged;
  real.mutable_log_chunk()->set_data("real");
  Report("a", real);
  ASSERT_TRUE(got.has_value());
  TC_ASSERT_OK(*got);
  EXPECT_EQ((*got)->data(), "real");
}

}  // namespace
}  // namespace trainctl::coord
