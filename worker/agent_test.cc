// Tier 2 tests of the agent core: a fake GPU inventory and a fake process
// launcher whose processes end when the test says so. No network, no sleeps.

#include "worker/agent.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <functional>
#include <utility>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/hw/cgroup.h"
#include "worker/hw/fake_gpu_inventory.h"

namespace trainctl::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

// Records launches; Exit(pid) plays a process ending.
class FakeLauncher : public ProcessLauncher {
 public:
  absl::StatusOr<int> Launch(const LaunchSpec& spec,
                             absl::AnyInvocable<void(ExitInfo)> on_exit) override {
    if (fail_next) {
      fail_next = false;
      return absl::NotFoundError("program \"nope\" not found in PATH");
    }
    const int pid = next_pid++;
    launched[pid] = spec;
    exits[pid] = std::move(on_exit);
    if (during_launch) std::exchange(during_launch, nullptr)(pid);
    return pid;
  }
  absl::Status Stop(int pid, absl::Duration grace) override {
    stopped.push_back({pid, grace});
    return absl::OkStatus();
  }
  void Exit(int pid, ExitInfo info) { exits[pid](info); }
  // Runs inside the next Launch(), after the process "started": plays what
  // other threads do while a launch is in flight.
  std::function<void(int pid)> during_launch;

  bool fail_next = false;
  int next_pid = 1000;
  std::map<int, LaunchSpec> launched;
  std::map<int, absl::AnyInvocable<void(ExitInfo)>> exits;
  std::vector<std::pair<int, absl::Duration>> stopped;
};

// Records the stores the agent opens and closes; Open fails with `fail`.
class FakeTorchStore : public TorchStore {
 public:
  absl::Status Open(int port, int world_size) override {
    calls.push_back(absl::StrCat("open ", port, " ", world_size));
    return fail;
  }
  void Close(int port) override { calls.push_back(absl::StrCat("close ", port)); }
  absl::Status fail = absl::OkStatus();
  std::vector<std::string> calls;
};

v1::CoordinatorMessage Start(int64_t job, int rank) {
  v1::CoordinatorMessage msg;
  v1::StartTask* s = msg.mutable_start_task();
  s->mutable_task()->set_job_id(job);
  s->mutable_task()->set_rank(rank);
  s->add_argv("python");
  s->add_argv("train.py");
  (*s->mutable_env())["RANK"] = std::to_string(rank);
  (*s->mutable_env())["PATH"] = "/task/bin";
  return msg;
}

class AgentTest : public ::testing::Test {
 protected:
  AgentTest()
      : inventory_(FakeGpuSpec{4, "Fake H200", int64_t{141} << 30}, "n1") {
    log_dir_ = ::testing::TempDir() + "/agent-test-" +
               ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(log_dir_);
    config_.node_name = "n1";
    config_.log_dir = log_dir_;
    config_.cpu_count = 16;
    config_.base_env = {{"PATH", "/usr/bin"}, {"NCCL_NVLS_ENABLE", "0"}};
  }
  void Make() {
    agent_ = std::make_unique<Agent>(config_, &inventory_, &launcher_);
  }
  void Connect() {
    agent_->Connected([this](const v1::AgentMessage& m) { sent_.push_back(m); });
  }

  std::string log_dir_;
  AgentConfig config_;
  FakeGpuInventory inventory_;
  FakeLauncher launcher_;
  std::unique_ptr<Agent> agent_;
  std::vector<v1::AgentMessage> sent_;
};

TEST_F(AgentTest, Handle_StartTask_LaunchesWithMergedEnvAndReportsRunning) {
  Make();
  Connect();
  agent_->Handle(Start(7, 1));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const LaunchSpec& spec = launcher_.launched.begin()->second;
  EXPECT_THAT(spec.argv, ElementsAre("python", "train.py"));
  // The agent's pass-through variables reach the task; the launch
  // environment wins; the account's own facts are set.
  EXPECT_EQ(spec.env.at("NCCL_NVLS_ENABLE"), "0");
  EXPECT_EQ(spec.env.at("PATH"), "/task/bin");
  EXPECT_EQ(spec.env.at("RANK"), "1");
  EXPECT_EQ(spec.env.at("USER"), CurrentAccount().run_as.user);
  EXPECT_FALSE(spec.run_as.has_value());
  // One flat file per task, in the directory of job ids 0-999.
  EXPECT_EQ(spec.log_path, log_dir_ + "/jobs-0/job-7.attempt-0.rank-1.log");
  // No workdir given: a scratch directory of its own, created for it.
  EXPECT_EQ(spec.workdir, log_dir_ + "/work/job-7/attempt-0");
  EXPECT_TRUE(std::filesystem::is_directory(spec.workdir));
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_RUNNING);
  EXPECT_EQ(sent_[0].task_status().task().pid(), 1000);
  EXPECT_EQ(agent_->RunningTasks(), 1);

  // A repeated StartTask does not launch twice.
  agent_->Handle(Start(7, 1));
  EXPECT_THAT(launcher_.launched, SizeIs(1));

  launcher_.Exit(1000, ExitInfo{3, 0});
  ASSERT_THAT(sent_, SizeIs(2));
  EXPECT_EQ(sent_[1].task_status().state(), v1::TASK_STATE_EXITED);
  EXPECT_EQ(sent_[1].task_status().exit_code(), 3);
  EXPECT_EQ(agent_->RunningTasks(), 0);
}

TEST_F(AgentTest, Handle_StartTaskBatch_StartsEachInOrderAndSaysItTakesBatches) {
  Make();
  Connect();
  // The coordinator batches starts only for agents that say they take them.
  EXPECT_TRUE(agent_->Registration()->accepts_start_task_batch());
  v1::CoordinatorMessage batch;
  for (int64_t job : {7, 8, 9}) {
    *batch.mutable_start_task_batch()->add_starts() = Start(job, 0).start_task();
  }
  agent_->Handle(batch);
  ASSERT_THAT(launcher_.launched, SizeIs(3));
  ASSERT_THAT(sent_, SizeIs(3));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(sent_[i].task_status().state(), v1::TASK_STATE_RUNNING);
    EXPECT_EQ(sent_[i].task_status().task().job_id(), 7 + i);
    EXPECT_EQ(sent_[i].task_status().task().pid(), 1000 + i);
  }
  EXPECT_EQ(launcher_.launched.at(1002).env.at("RANK"), "0");
  EXPECT_EQ(agent_->RunningTasks(), 3);
  // A start repeated in a later batch is not launched twice.
  agent_->Handle(batch);
  EXPECT_THAT(launcher_.launched, SizeIs(3));
}

TEST_F(AgentTest, Handle_StartTaskDiscardingOutput_NoLogFileAndNoneReported) {
  Make();
  Connect();
  v1::CoordinatorMessage start = Start(7, 0);
  start.mutable_start_task()->set_discard_output(true);
  agent_->Handle(start);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  // No log path: the launcher sends stdout and stderr to /dev/null.
  EXPECT_EQ(launcher_.launched.begin()->second.log_path, "");
  launcher_.Exit(1000, ExitInfo{0, 0});
  ASSERT_THAT(sent_, SizeIs(2));
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_RUNNING);
  EXPECT_EQ(sent_[0].task_status().log_path(), "");
  EXPECT_EQ(sent_[1].task_status().state(), v1::TASK_STATE_EXITED);
  EXPECT_EQ(sent_[1].task_status().log_path(), "");
}

TEST_F(AgentTest, Handle_PreflightProbeAskedToDiscard_KeepsItsLog) {
  config_.preflight_probe = "/bin/true";
  Make();
  Connect();
  v1::CoordinatorMessage start = Start(7, 0);
  start.mutable_start_task()->set_discard_output(true);
  start.mutable_start_task()->mutable_preflight()->set_run(1);
  agent_->Handle(start);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  // The probe's result is read from its log.
  EXPECT_NE(launcher_.launched.begin()->second.log_path, "");
}

TEST_F(AgentTest, Handle_TaskEndsBeforeLaunchReturns_RunningReportedBeforeExit) {
  Make();
  Connect();
  // A no-op task can end before Launch() returns (its exit callback runs on
  // the launcher's thread); the coordinator must still see RUNNING first,
  // or it would never record the task's start.
  launcher_.during_launch = [this](int pid) { launcher_.Exit(pid, ExitInfo{0, 0}); };
  agent_->Handle(Start(7, 0));
  ASSERT_THAT(sent_, SizeIs(2));
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_RUNNING);
  EXPECT_EQ(sent_[0].task_status().task().pid(), 1000);
  EXPECT_EQ(sent_[1].task_status().state(), v1::TASK_STATE_EXITED);
  EXPECT_EQ(sent_[1].task_status().exit_code(), 0);
  EXPECT_EQ(agent_->RunningTasks(), 0);
}

TEST_F(AgentTest, Fence_WhileLaunching_TaskKilledOnceLaunched) {
  config_.fences = true;
  Make();
  Connect();
  // The lease ends (watchdog thread) while a task is being spawned: it has
  // no pid yet, so Fence() cannot kill it then; the launch kills it.
  int fenced = -1;
  launcher_.during_launch = [&](int) { fenced = agent_->Fence("lease ended"); };
  agent_->Handle(Start(7, 0));
  EXPECT_EQ(fenced, 0);
  ASSERT_THAT(launcher_.stopped, SizeIs(1));
  EXPECT_EQ(launcher_.stopped[0].first, 1000);
  EXPECT_EQ(launcher_.stopped[0].second, absl::ZeroDuration());
  // Its exit is reported as usual.
  launcher_.Exit(1000, ExitInfo{137, 9});
  ASSERT_THAT(sent_, SizeIs(2));
  EXPECT_EQ(sent_[1].task_status().signal(), 9);
}

TEST_F(AgentTest, Handle_StartTaskSpawnFails_ReportsStartFailedWithReason) {
  Make();
  Connect();
  launcher_.fail_next = true;
  agent_->Handle(Start(7, 0));
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_START_FAILED);
  EXPECT_THAT(sent_[0].task_status().message(), HasSubstr("not found"));
  EXPECT_EQ(agent_->RunningTasks(), 0);
  EXPECT_THAT(agent_->Registration()->running_tasks(), SizeIs(0));
}

TEST_F(AgentTest, Handle_StartTaskAsUser_LaunchedUnderThatAccountWithItsHome) {
  // "nobody" exists on every Debian host (uid 65534).
  absl::StatusOr<Account> nobody = LookupAccount("nobody");
  if (!nobody.ok()) GTEST_SKIP() << "no account nobody: " << nobody.status();
  Make();
  Connect();
  v1::CoordinatorMessage msg = Start(7, 0);
  msg.mutable_start_task()->set_run_as_user("nobody");
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const LaunchSpec& spec = launcher_.launched.begin()->second;
  ASSERT_TRUE(spec.run_as.has_value());
  EXPECT_EQ(spec.run_as->uid, nobody->run_as.uid);
  EXPECT_EQ(spec.run_as->gid, nobody->run_as.gid);
  EXPECT_EQ(spec.env.at("USER"), "nobody");
  EXPECT_EQ(spec.env.at("LOGNAME"), "nobody");
  EXPECT_EQ(spec.env.at("HOME"), nobody->home);
  // The default work dir is the user's, private.
  struct stat st;
  ASSERT_EQ(stat(spec.workdir.c_str(), &st), 0);
  if (geteuid() == 0) {
    EXPECT_EQ(static_cast<int>(st.st_uid), nobody->run_as.uid);
  }
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].task_status().run_as(), "nobody");
  EXPECT_EQ(sent_[0].task_status().uid(), nobody->run_as.uid);
}

TEST_F(AgentTest, Handle_StartTaskOfUserWithoutAccount_StartFailedNamingUserAndNode) {
  Make();
  Connect();
  v1::CoordinatorMessage msg = Start(7, 0);
  msg.mutable_start_task()->set_run_as_user("no-such-user-4711");
  agent_->Handle(msg);
  EXPECT_THAT(launcher_.launched, SizeIs(0));
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_START_FAILED);
  EXPECT_THAT(sent_[0].task_status().message(),
              HasSubstr("user no-such-user-4711 has no local account on this node (node n1)"));
  EXPECT_EQ(agent_->RunningTasks(), 0);
}

TEST_F(AgentTest, Handle_StartTaskOfRoot_RefusedUnlessAllowed) {
  Make();
  Connect();
  v1::CoordinatorMessage msg = Start(7, 0);
  msg.mutable_start_task()->set_run_as_user("root");
  agent_->Handle(msg);
  EXPECT_THAT(launcher_.launched, SizeIs(0));
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_START_FAILED);
  EXPECT_THAT(sent_[0].task_status().message(), HasSubstr("--allow-root-jobs"));

  msg.mutable_start_task()->mutable_task()->set_job_id(8);
  msg.mutable_start_task()->set_allow_root(true);
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  EXPECT_EQ(launcher_.launched.begin()->second.run_as->uid, 0);
}

// A fake cgroup v2 tree under the test's directory (plain files, as in
// cgroup_test.cc): the agent's delegated cgroup offering cpu, memory, pids.
absl::StatusOr<CgroupTree> FakeCgroupTree(const std::string& root) {
  auto write = [](const std::string& path, const std::string& text) {
    std::ofstream(path, std::ios::trunc) << text;
  };
  const std::string fs = root + "/fs", svc = fs + "/agent.service";
  std::filesystem::create_directories(svc);
  write(fs + "/cgroup.controllers", "cpu memory pids\n");
  write(fs + "/cgroup.procs", "1\n");
  write(fs + "/cgroup.subtree_control", "");
  write(svc + "/cgroup.controllers", "cpu memory pids\n");
  write(svc + "/cgroup.procs", absl::StrCat(getpid(), "\n"));
  write(svc + "/cgroup.subtree_control", "");
  write(svc + "/cgroup.type", "domain\n");
  write(root + "/self-cgroup", "0::/agent.service\n");
  return CgroupTree::Open(fs, root + "/self-cgroup");
}

// AgentTest with a fake cgroup tree (above) as the agent's.
class AgentCgroupTest : public AgentTest {
 protected:
  void SetUp() override {
    absl::StatusOr<CgroupTree> tree = FakeCgroupTree(log_dir_ + "/cg");
    ASSERT_THAT(tree, ::trainctl::testing::IsOk());
    tree_.emplace(*std::move(tree));
    config_.cgroups = &*tree_;
  }
  // The agent goes first: it removes its pooled slots from the tree.
  void TearDown() override { agent_.reset(); }

  std::optional<CgroupTree> tree_;
};

TEST_F(AgentCgroupTest, Cgroups_TaskWithoutLimits_ReusesTheEmptiedSlotOfItsAccount) {
  Make();
  Connect();
  agent_->Handle(Start(1, 0));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const std::string slot = launcher_.launched.at(1000).cgroup_dir;
  EXPECT_THAT(slot, ::testing::EndsWith("/tasks/n1-slot-0"));
  // The task ends with nothing left in its cgroup: the slot is kept.
  std::ofstream(slot + "/cgroup.events") << "populated 0\nfrozen 0\n";
  launcher_.Exit(1000, ExitInfo{0, 0});
  EXPECT_TRUE(std::filesystem::is_directory(slot));
  // The next such task of the same account runs in it.
  agent_->Handle(Start(2, 0));
  EXPECT_EQ(launcher_.launched.at(1001).cgroup_dir, slot);
  launcher_.Exit(1001, ExitInfo{0, 0});
  // A task of another account gets another slot; a task with a memory
  // limit, a cgroup named after it.
  v1::CoordinatorMessage other = Start(3, 0);
  other.mutable_start_task()->set_run_as_user("root");
  other.mutable_start_task()->set_allow_root(true);
  agent_->Handle(other);
  EXPECT_THAT(launcher_.launched.at(1002).cgroup_dir, ::testing::EndsWith("/tasks/n1-slot-1"));
  v1::CoordinatorMessage limited = Start(4, 0);
  limited.mutable_start_task()->set_memory_bytes(int64_t{1} << 30);
  agent_->Handle(limited);
  EXPECT_THAT(launcher_.launched.at(1003).cgroup_dir,
              ::testing::EndsWith("/tasks/n1-job-4.attempt-0.rank-0"));
  // The agent removes its pooled slots when it goes (before the tree it
  // points to). On this fake tree rmdir works once the file is gone.
  launcher_.Exit(1002, ExitInfo{0, 0});
  std::filesystem::remove(slot + "/cgroup.events");
  agent_.reset();
  EXPECT_FALSE(std::filesystem::exists(slot));
}

// A task's use is its cgroup's processes: a container's process (started by
// its runtime in a session of its own, so outside the task's process group)
// counts, its GPU memory included, which a walk of /proc by process group
// missed (`top` showed such a task using no GPU memory).
TEST_F(AgentCgroupTest, Heartbeat_TaskInACgroup_CountsProcessesOutsideItsProcessGroup) {
  const std::string proc = log_dir_ + "/proc";
  auto stat = [&](int pid, int pgrp, int64_t pages) {
    std::filesystem::create_directories(absl::StrCat(proc, "/", pid));
    std::ofstream(absl::StrCat(proc, "/", pid, "/stat"))
        << pid << " (python) S 1 " << pgrp << " " << pgrp << " 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 "
        << "100 1000000 " << pages << " 0\n";
  };
  std::filesystem::create_directories(proc);
  std::ofstream(proc + "/uptime") << "50 0\n";
  config_.proc_root = proc;
  Make();
  Connect();
  agent_->Handle(Start(1, 0));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const std::string dir = launcher_.launched.at(1000).cgroup_dir;
  stat(1000, 1000, 100);  // `podman run`, the task's process
  stat(3000, 3000, 900);  // the container's trainer, in its own session
  std::ofstream(dir + "/cgroup.procs") << "1000\n3000\n";
  inventory_.SetProcessSamples({{0, 3000, int64_t{6} << 30, 70}});
  auto hb = agent_->Heartbeat();
  TC_ASSERT_OK(hb);
  ASSERT_THAT(hb->task_usage(), SizeIs(1));
  const v1::TaskUsage& u = hb->task_usage(0);
  EXPECT_TRUE(u.gpu_memory_known());
  EXPECT_EQ(u.gpu_memory_bytes(), int64_t{6} << 30);
  EXPECT_EQ(u.gpu_util_pct(), 70);
  EXPECT_EQ(u.rss_bytes(), 1000 * sysconf(_SC_PAGESIZE));
  std::filesystem::remove(dir + "/cgroup.procs");
}

TEST_F(AgentCgroupTest, Cgroups_TwoAgentsOnOneHost_NeitherKillsTheOthersTask) {
  // Two agents on one host, each offering some of its GPUs (--gpus), share
  // the host's cgroup tree. A cgroup name an agent finds taken is treated as
  // left by a dead agent and its processes are killed, so the two must never
  // pick the same name: each one's first slot was "slot-0".
  Make();
  Connect();
  AgentConfig other_config = config_;
  other_config.node_name = "n2";
  other_config.log_dir = log_dir_ + "/n2";
  FakeGpuInventory other_inventory(FakeGpuSpec{4, "Fake H200", int64_t{141} << 30}, "n2");
  FakeLauncher other_launcher;
  Agent other(other_config, &other_inventory, &other_launcher);
  other.Connected([](const v1::AgentMessage&) {});

  agent_->Handle(Start(1, 0));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const std::string mine = launcher_.launched.at(1000).cgroup_dir;
  // What the kernel would offer in a live cgroup: a kill writes "1" here.
  std::ofstream(mine + "/cgroup.kill") << "";
  other.Handle(Start(1, 1));
  ASSERT_THAT(other_launcher.launched, SizeIs(1));
  const std::string theirs = other_launcher.launched.at(1000).cgroup_dir;
  EXPECT_THAT(mine, ::testing::EndsWith("/tasks/n1-slot-0"));
  EXPECT_THAT(theirs, ::testing::EndsWith("/tasks/n2-slot-0"));
  std::ifstream kill(mine + "/cgroup.kill");
  const std::string written((std::istreambuf_iterator<char>(kill)),
                            std::istreambuf_iterator<char>());
  EXPECT_EQ(written, "") << "n2's agent killed n1's task";
  EXPECT_TRUE(std::filesystem::is_directory(mine));
  std::filesystem::remove(mine + "/cgroup.kill");
}

TEST_F(AgentCgroupTest, Cgroups_NodeNameNotAValidCgroupName_HashedIntoTheName) {
  config_.node_name = "rack 4/gpu 7";
  Make();
  Connect();
  agent_->Handle(Start(1, 0));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  EXPECT_THAT(launcher_.launched.at(1000).cgroup_dir,
              ::testing::MatchesRegex(".*/tasks/node-[0-9a-f]{16}-slot-0"));
}

TEST_F(AgentTest, Handle_SharedGpuTaskWithMps_GetsClientEnvCappedAtReservation) {
  FakeMpsControl mps;
  TC_ASSERT_OK(mps.Start(2, "GPU-fake-n1-2"));
  config_.mps = &mps;
  config_.mps_active_thread_pct = 50;
  Make();
  Connect();
  EXPECT_TRUE(agent_->Registration()->node().mps());
  // An auto-packed trial on GPU 2 reserving 11.25 GiB = 11520 MiB.
  v1::CoordinatorMessage packed = Start(7, 0);
  packed.mutable_start_task()->set_shared_gpu(true);
  packed.mutable_start_task()->set_shared_gpu_memory_limit_bytes(int64_t{11520} << 20);
  packed.mutable_start_task()->set_shared_gpu_index(2);
  agent_->Handle(packed);
  // A task holding its GPUs whole: no MPS client.
  agent_->Handle(Start(8, 0));
  ASSERT_THAT(launcher_.launched, SizeIs(2));
  const LaunchSpec& trial = launcher_.launched.at(1000);
  EXPECT_EQ(trial.env.at("CUDA_MPS_PIPE_DIRECTORY"), "/fake-mps/gpu-2/pipe");
  EXPECT_EQ(trial.env.at("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"), "0=11520MB");
  EXPECT_EQ(trial.env.at("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"), "50");
  EXPECT_EQ(launcher_.launched.at(1001).env.count("CUDA_MPS_PIPE_DIRECTORY"), 0u);
}

TEST_F(AgentTest, Registration_WithoutMps_SaysNoMps) {
  Make();
  EXPECT_FALSE(agent_->Registration()->node().mps());
}

TEST_F(AgentTest, Handle_RunTasksAsAgent_JobUserIgnored) {
  config_.run_tasks_as_agent = true;
  Make();
  Connect();
  v1::CoordinatorMessage msg = Start(7, 0);
  msg.mutable_start_task()->set_run_as_user("no-such-user-4711");
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  EXPECT_FALSE(launcher_.launched.begin()->second.run_as.has_value());
  EXPECT_FALSE(agent_->Registration()->node().runs_as_job_user());
}

TEST_F(AgentTest, Handle_StartTaskNeedsWhatTheNodeLacks_StartFailedWithTheReason) {
  Make();
  Connect();
  v1::CoordinatorMessage boxed = Start(7, 0);
  boxed.mutable_start_task()->set_image("localhost/train:1");
  agent_->Handle(boxed);
  v1::CoordinatorMessage limited = Start(8, 0);
  limited.mutable_start_task()->set_cpus(2);
  agent_->Handle(limited);
  EXPECT_THAT(launcher_.launched, SizeIs(0));
  ASSERT_THAT(sent_, SizeIs(2));
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_START_FAILED);
  EXPECT_THAT(sent_[0].task_status().message(),
              HasSubstr("node n1 has no container runtime (podman or Apptainer)"));
  EXPECT_THAT(sent_[1].task_status().message(), HasSubstr("cannot enforce --cpus/--mem"));
  EXPECT_THAT(agent_->Registration()->node().container_runtimes(), SizeIs(0));
  EXPECT_FALSE(agent_->Registration()->node().cgroups());
}

// podman runs as root: the task's variables (a token, an LD_PRELOAD) reach
// the container through a file only the task's account reads, never through
// podman's own environment or command line.
TEST_F(AgentTest, Handle_StartTaskWithImage_EnvInAPrivateFileNotInPodmansEnvOrArgv) {
  ContainerRuntime::Options options;
  options.env_exec = "/usr/bin/trainctl-container-env";
  const ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1",
                                /*rootless=*/false, options);
  config_.container_runtime = &podman;
  Make();
  Connect();
  EXPECT_THAT(agent_->Registration()->node().container_runtimes(), ElementsAre("podman"));
  v1::CoordinatorMessage msg = Start(7, 0);
  msg.mutable_start_task()->set_image("localhost/train:1");
  (*msg.mutable_start_task()->mutable_env())["TRAINCTL_TOKEN"] = "s3cret-token";
  (*msg.mutable_start_task()->mutable_env())["LD_PRELOAD"] = "/home/u/evil.so";
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const int pid = launcher_.launched.begin()->first;
  const LaunchSpec spec = launcher_.launched.begin()->second;
  ASSERT_FALSE(spec.argv.empty());
  EXPECT_EQ(spec.argv[0], "/usr/bin/podman");
  EXPECT_THAT(spec.argv, ::testing::Contains("localhost/train:1"));
  EXPECT_THAT(spec.argv, ::testing::Contains("--security-opt=label=disable"));
  for (const std::string& arg : spec.argv) {
    EXPECT_THAT(arg, ::testing::Not(HasSubstr("s3cret-token")));
  }
  EXPECT_FALSE(spec.env.count("TRAINCTL_TOKEN"));
  EXPECT_FALSE(spec.env.count("LD_PRELOAD"));
  // The file podman mounts: mode 0400, both variables in it.
  const std::string file = log_dir_ + "/containers/trainctl-j7-a0-r0.env";
  EXPECT_THAT(spec.argv, ::testing::Contains(file + ":/.trainctl/env:ro"));
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  std::ifstream in(file, std::ios::binary);
  const std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(content, HasSubstr(std::string("TRAINCTL_TOKEN=s3cret-token\0", 28)));
  EXPECT_THAT(content, HasSubstr(std::string("LD_PRELOAD=/home/u/evil.so\0", 27)));
  // The command runs inside, after the image and env-exec.
  EXPECT_EQ(spec.argv.back(), "train.py");
  // Gone with the task.
  launcher_.Exit(pid, ExitInfo{0, 0});
  EXPECT_NE(stat(file.c_str(), &st), 0);
}

// An exported TRAINCTL_CHECKPOINT_DIR=/etc made the root agent create and
// chown that path to the user: the agent acts only on
// StartTask.checkpoint_dir, which the coordinator derives from its root.
TEST_F(AgentTest, Handle_CheckpointDir_MadeFromItsFieldNeverFromTheEnvironment) {
  Make();
  Connect();
  const std::string dir = std::filesystem::path(log_dir_).lexically_normal().string();
  const std::string victim = dir + "/victim-dir";
  v1::CoordinatorMessage msg = Start(7, 0);
  (*msg.mutable_start_task()->mutable_env())["TRAINCTL_CHECKPOINT_DIR"] = victim;
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  EXPECT_FALSE(std::filesystem::exists(victim));
  msg = Start(8, 0);
  msg.mutable_start_task()->set_checkpoint_dir(dir + "/ckpt/8");
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(2));
  struct stat st {};
  ASSERT_EQ(stat((dir + "/ckpt/8").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  // A path the coordinator never derives (not <root>/<job id>) is not made.
  msg = Start(9, 0);
  msg.mutable_start_task()->set_checkpoint_dir(victim);
  agent_->Handle(msg);
  EXPECT_FALSE(std::filesystem::exists(victim));
}

TEST_F(AgentTest, ContainerTask_StoppedButExitedZero_ItsContainerIsRemoved) {
  // `podman run` stopped while it creates the container exits 0 and leaves
  // the container behind: the agent removes the container of a task it
  // stopped whatever the exit code. A stand-in "podman" records the
  // commands it gets.
  std::filesystem::create_directories(log_dir_);
  const std::string podman_path = log_dir_ + "/podman";
  const std::string calls = log_dir_ + "/calls";
  {
    std::ofstream script(podman_path);
    script << "#!/bin/sh\necho \"$*\" >>" << calls << "\n";
  }
  ASSERT_EQ(chmod(podman_path.c_str(), 0755), 0);
  ContainerRuntime::Options options;
  options.env_exec = "/usr/bin/trainctl-container-env";
  const ContainerRuntime podman(ContainerRuntimeKind::kPodman, podman_path, "4.3.1",
                                /*rootless=*/false, options);
  config_.container_runtime = &podman;
  Make();
  Connect();
  auto read_calls = [&] {
    std::ifstream in(calls);
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  v1::CoordinatorMessage msg = Start(7, 0);
  msg.mutable_start_task()->set_image("localhost/train:1");
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  // A container task that ends by itself with 0 was removed by `run --rm`.
  launcher_.Exit(launcher_.launched.begin()->first, ExitInfo{0, 0});
  EXPECT_THAT(read_calls(), SizeIs(0));

  msg = Start(8, 0);
  msg.mutable_start_task()->set_image("localhost/train:1");
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(2));
  const int pid = launcher_.launched.rbegin()->first;
  v1::CoordinatorMessage stop;
  *stop.mutable_stop_task()->mutable_task() = msg.start_task().task();
  agent_->Handle(stop);
  ASSERT_THAT(launcher_.stopped, SizeIs(1));
  launcher_.Exit(pid, ExitInfo{0, 0});
  EXPECT_THAT(read_calls(), ElementsAre("stop --ignore --time=0 trainctl-j8-a0-r0",
                                        "rm --force --ignore trainctl-j8-a0-r0"));
  EXPECT_EQ(sent_.back().task_status().state(), v1::TASK_STATE_EXITED);
}

v1::CoordinatorMessage GangStart(int64_t job, int rank) {
  v1::CoordinatorMessage msg = Start(job, rank);
  auto& env = *msg.mutable_start_task()->mutable_env();
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["MASTER_PORT"] = "29611";
  env["WORLD_SIZE"] = "2";
  return msg;
}

TEST_F(AgentTest, TorchStore_RankZeroOfAGang_StoreListensBeforeLaunchAndClosesAtExit) {
  FakeTorchStore store;
  config_.torch_store = &store;
  Make();
  Connect();
  EXPECT_TRUE(agent_->Registration()->node().torch_store());
  // The store is open by the time the process starts (torchrun's order).
  launcher_.during_launch = [&](int) { EXPECT_THAT(store.calls, ElementsAre("open 29611 2")); };
  agent_->Handle(GangStart(7, 0));
  agent_->Handle(GangStart(7, 1));  // Other ranks connect to it; no store of their own.
  EXPECT_THAT(store.calls, ElementsAre("open 29611 2"));
  launcher_.Exit(1001, ExitInfo{0, 0});
  EXPECT_THAT(store.calls, ElementsAre("open 29611 2"));
  launcher_.Exit(1000, ExitInfo{0, 0});
  EXPECT_THAT(store.calls, ElementsAre("open 29611 2", "close 29611"));
}

TEST_F(AgentTest, TorchStore_OpenFails_RankZeroStartFailedWithTheReason) {
  FakeTorchStore store;
  store.fail = absl::FailedPreconditionError("PyTorch TCPStore on port 29611: address in use");
  config_.torch_store = &store;
  Make();
  Connect();
  agent_->Handle(GangStart(7, 0));
  EXPECT_THAT(launcher_.launched, SizeIs(0));
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_START_FAILED);
  EXPECT_THAT(sent_[0].task_status().message(), HasSubstr("address in use"));
}

// The rendezvous relay as the agent sees it: records who is registered.
class RecordingUpstream : public RendezvousUpstream {
 public:
  void FetchAsync(const v1::FetchUniqueIdRequest& r, UniqueIdsDone done) override {
    fetches.push_back(r);
    done(std::vector<std::string>{std::string(128, 'x')});
  }
  void PublishAsync(const v1::PublishUniqueIdRequest&,
                    absl::AnyInvocable<void(absl::Status)> done) override {
    done(absl::OkStatus());
  }
  std::vector<v1::FetchUniqueIdRequest> fetches;
};

v1::CoordinatorMessage RelayStart(int64_t job, int rank) {
  v1::CoordinatorMessage msg = Start(job, rank);
  auto& env = *msg.mutable_start_task()->mutable_env();
  env["TRAINCTL_JOB_ID"] = std::to_string(job);
  env["TRAINCTL_ATTEMPT"] = "0";
  env["TRAINCTL_TOKEN"] = "tok-7";
  return msg;
}

TEST_F(AgentTest, Relay_RankStarted_GetsSocketAndIsRegisteredUntilExit) {
  RecordingUpstream upstream;
  RendezvousRelay relay(&upstream);
  config_.rendezvous_relay = &relay;
  config_.rendezvous_socket = "/run/trainctl/rendezvous.sock";
  Make();
  Connect();
  agent_->Handle(RelayStart(7, 1));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  EXPECT_EQ(launcher_.launched.begin()->second.env.at("TRAINCTL_RENDEZVOUS_SOCKET"),
            "/run/trainctl/rendezvous.sock");
  // Registered with its token: another token is refused by the relay.
  v1::FetchUniqueIdRequest wrong;
  wrong.set_job_id(7);
  wrong.set_rank(1);
  wrong.set_token("guess");
  absl::Status refused;
  relay.FetchAsync(wrong, absl::Now(), [&](auto ids) { refused = ids.status(); });
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(relay.Stats().refused, 1);
  // After the rank's exit the attempt is unknown here: a call is relayed for
  // the coordinator to judge, and nothing of it is kept.
  launcher_.Exit(1000, ExitInfo{0, 0});
  relay.FetchAsync(wrong, absl::Now(), [](auto) {});
  EXPECT_EQ(relay.Stats().refused, 1);
  EXPECT_EQ(upstream.fetches.size(), 1u);
  EXPECT_EQ(relay.Groups(), 0);
}

TEST_F(AgentTest, Relay_TaskWithoutToken_NoSocket) {
  RecordingUpstream upstream;
  RendezvousRelay relay(&upstream);
  config_.rendezvous_relay = &relay;
  config_.rendezvous_socket = "/run/trainctl/rendezvous.sock";
  Make();
  Connect();
  agent_->Handle(Start(7, 0));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  EXPECT_EQ(launcher_.launched.begin()->second.env.count("TRAINCTL_RENDEZVOUS_SOCKET"), 0u);
}

TEST_F(AgentTest, TorchStore_NotAskedOrNoHost_NothingOpened) {
  FakeTorchStore store;
  config_.torch_store = &store;
  Make();
  Connect();
  agent_->Handle(Start(7, 0));  // No TORCHELASTIC_USE_AGENT_STORE.
  EXPECT_THAT(store.calls, SizeIs(0));
  config_.torch_store = nullptr;  // An agent without a store host says so.
  Make();
  EXPECT_FALSE(agent_->Registration()->node().torch_store());
}

TEST_F(AgentTest, Exit_WhileDisconnected_ListedAtRegistrationThenReported) {
  Make();
  Connect();
  agent_->Handle(Start(7, 0));
  agent_->Handle(Start(8, 0));
  agent_->Disconnected();
  launcher_.Exit(1000, ExitInfo{0, 0});
  sent_.clear();

  // Both tasks are listed at the next registration: job 8 still runs, job 7's
  // exit is not reported yet, so the coordinator must not count it as lost.
  auto reg = agent_->Registration();
  TC_ASSERT_OK(reg);
  ASSERT_THAT(reg->running_tasks(), SizeIs(2));
  Connect();
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].task_status().task().job_id(), 7);
  EXPECT_EQ(sent_[0].task_status().state(), v1::TASK_STATE_EXITED);
  // Once reported, it is no longer running, but its exit is re-sent at the
  // next registration in case the coordinator died before storing it.
  auto again = agent_->Registration();
  EXPECT_THAT(again->running_tasks(), SizeIs(1));
  ASSERT_THAT(again->finished_tasks(), SizeIs(1));
  EXPECT_EQ(again->finished_tasks(0).task().job_id(), 7);
  EXPECT_EQ(again->finished_tasks(0).state(), v1::TASK_STATE_EXITED);
}

TEST_F(AgentTest, Registration_FinishedTasks_BoundedToTheNewest256) {
  Make();
  Connect();
  for (int job = 1; job <= 300; ++job) {
    agent_->Handle(Start(job, 0));
    launcher_.Exit(launcher_.launched.rbegin()->first, ExitInfo{0, 0});
  }
  auto reg = agent_->Registration();
  ASSERT_THAT(reg->finished_tasks(), SizeIs(256));
  EXPECT_EQ(reg->finished_tasks(0).task().job_id(), 45);
  EXPECT_EQ(reg->finished_tasks(255).task().job_id(), 300);
}

TEST_F(AgentTest, Fence_RunningTasks_KilledWithoutGraceAndExitsQueued) {
  config_.fences = true;
  Make();
  EXPECT_TRUE(agent_->Registration()->fences());
  Connect();
  agent_->Handle(Start(7, 0));
  agent_->Handle(Start(8, 1));
  launcher_.Exit(1000, ExitInfo{0, 0});  // job 7 already ended
  agent_->Disconnected();
  sent_.clear();

  // Only job 8 still runs: it is killed at once (no grace).
  EXPECT_EQ(agent_->Fence("lease ended"), 1);
  ASSERT_THAT(launcher_.stopped, SizeIs(1));
  EXPECT_EQ(launcher_.stopped[0].first, 1001);
  EXPECT_EQ(launcher_.stopped[0].second, absl::ZeroDuration());
  launcher_.Exit(1001, ExitInfo{137, 9});
  // The kill is reported after the next registration.
  EXPECT_THAT(sent_, SizeIs(0));
  Connect();
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].task_status().task().job_id(), 8);
  EXPECT_EQ(sent_[0].task_status().signal(), 9);
  EXPECT_EQ(agent_->Fence("again"), 0);
}

TEST_F(AgentTest, Registration_CarriesFeaturesAndLabels) {
  config_.features = {"ib", "nvlink"};
  config_.labels = {{"rack", "r1"}};
  Make();
  auto reg = agent_->Registration();
  TC_ASSERT_OK(reg);
  EXPECT_THAT(reg->node().features(), ElementsAre("ib", "nvlink"));
  EXPECT_EQ(reg->node().labels().at("rack"), "r1");
}

TEST_F(AgentTest, Registration_OfferedGpus_OnlyThoseAndTheirPeers) {
  config_.offered_gpus = {1, 3};
  Make();
  auto reg = agent_->Registration();
  TC_ASSERT_OK(reg);
  const v1::Node& node = reg->node();
  EXPECT_EQ(node.name(), "n1");
  EXPECT_TRUE(node.fake_gpus() == false);
  ASSERT_THAT(node.gpus(), SizeIs(2));
  EXPECT_EQ(node.gpus(0).index(), 1);
  EXPECT_EQ(node.gpus(0).memory_total_bytes(), int64_t{141} << 30);
  // The fake node is one NVLink island; peers are cut to what is offered.
  EXPECT_THAT(node.gpus(0).nvlink_peers(), ElementsAre(3));
  EXPECT_EQ(node.cpu_count(), 16);
}

TEST_F(AgentTest, Validate_GpuNotOnHost_InvalidArgument) {
  config_.offered_gpus = {0, 9};
  Make();
  EXPECT_THAT(agent_->Validate(), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("no GPU 9")));
}

TEST_F(AgentTest, Heartbeat_ScriptedSamples_Reported) {
  config_.offered_gpus = {2};
  Make();
  inventory_.SetSample(GpuSample{2, 5 << 20, 55, 48, 300.5});
  auto hb = agent_->Heartbeat();
  TC_ASSERT_OK(hb);
  ASSERT_THAT(hb->gpus(), SizeIs(1));
  EXPECT_EQ(hb->gpus(0).utilization_pct(), 55);
  inventory_.SetFailing(true);
  EXPECT_THAT(agent_->Heartbeat(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("")));
}

TEST_F(AgentTest, Handle_StopTask_StopsWithGrace) {
  Make();
  Connect();
  agent_->Handle(Start(7, 0));
  v1::CoordinatorMessage stop;
  stop.mutable_stop_task()->mutable_task()->set_job_id(7);
  stop.mutable_stop_task()->set_grace_ms(2500);
  agent_->Handle(stop);
  ASSERT_THAT(launcher_.stopped, SizeIs(1));
  EXPECT_EQ(launcher_.stopped[0].first, 1000);
  EXPECT_EQ(launcher_.stopped[0].second, absl::Milliseconds(2500));
}

TEST_F(AgentTest, Handle_ReadLog_ReturnsBytesFromOffset) {
  Make();
  Connect();
  std::filesystem::create_directories(log_dir_ + "/jobs-0");
  std::ofstream(log_dir_ + "/jobs-0/job-7.attempt-0.rank-0.log") << "hello world\n";
  v1::CoordinatorMessage read;
  read.mutable_read_log()->set_request_id(5);
  read.mutable_read_log()->mutable_task()->set_job_id(7);
  read.mutable_read_log()->set_offset(6);
  read.mutable_read_log()->set_max_bytes(100);
  agent_->Handle(read);
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].log_chunk().request_id(), 5);
  EXPECT_EQ(sent_[0].log_chunk().data(), "world\n");
  EXPECT_EQ(sent_[0].log_chunk().next_offset(), 12);

  read.mutable_read_log()->mutable_task()->set_rank(3);
  agent_->Handle(read);
  EXPECT_THAT(sent_[1].log_chunk().error(), HasSubstr("no log at"));
}

TEST_F(AgentTest, LogPath_GroupsThousandJobIdsPerDirectory) {
  Make();
  v1::TaskRef ref;
  ref.set_job_id(12345);
  ref.set_attempt(2);
  ref.set_rank(3);
  EXPECT_EQ(agent_->LogPath(ref), log_dir_ + "/jobs-12000/job-12345.attempt-2.rank-3.log");
  ref.set_job_id(999);
  EXPECT_EQ(agent_->LogPath(ref), log_dir_ + "/jobs-0/job-999.attempt-2.rank-3.log");
  // The probe of pre-flight run 1 of the same attempt: a log of its own.
  ref.set_probe_run(1);
  EXPECT_EQ(agent_->LogPath(ref), log_dir_ + "/jobs-0/job-999.preflight-1.rank-3.log");
}

TEST_F(AgentTest, LogPath_UnderTheClusterIdTheCoordinatorSent) {
  Make();
  agent_->Connected([this](const v1::AgentMessage& m) { sent_.push_back(m); },
                    "c0ffee");
  v1::TaskRef ref;
  ref.set_job_id(1);
  EXPECT_EQ(agent_->LogPath(ref),
            log_dir_ + "/cluster-c0ffee/jobs-0/job-1.attempt-0.rank-0.log");
}

// A new cluster (a fresh state dir: job ids start at 1 again) on the same
// host and log dir: its job 1 neither appends to nor shows the older
// cluster's job 1 log, and the log is readable by its owner only.
TEST_F(AgentTest, NewCluster_JobOneDoesNotSeeTheOldClustersLog) {
  Make();
  agent_->Connected([this](const v1::AgentMessage& m) { sent_.push_back(m); }, "old");
  agent_->Handle(Start(1, 0));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const std::string old_log = launcher_.launched.begin()->second.log_path;
  std::filesystem::create_directories(std::filesystem::path(old_log).parent_path());
  std::ofstream(old_log) << "alice's secret\n";

  Make();  // the agent restarted, now talking to a new cluster
  sent_.clear();
  agent_->Connected([this](const v1::AgentMessage& m) { sent_.push_back(m); }, "new");
  v1::TaskRef ref;
  ref.set_job_id(1);
  EXPECT_NE(agent_->LogPath(ref), old_log);
  v1::CoordinatorMessage read;
  read.mutable_read_log()->set_request_id(6);
  read.mutable_read_log()->mutable_task()->set_job_id(1);
  read.mutable_read_log()->set_max_bytes(100);
  agent_->Handle(read);
  ASSERT_THAT(sent_, SizeIs(1));
  EXPECT_EQ(sent_[0].log_chunk().data(), "");
  EXPECT_THAT(sent_[0].log_chunk().error(), HasSubstr("no log at"));
}

TEST_F(AgentTest, Registration_CarriesAStableInstanceId) {
  Make();
  auto reg = agent_->Registration();
  ASSERT_TRUE(reg.ok()) << reg.status();
  EXPECT_EQ(reg->agent_instance_id().size(), 32u);
  EXPECT_EQ(agent_->Registration()->agent_instance_id(), reg->agent_instance_id());
  Make();
  EXPECT_NE(agent_->Registration()->agent_instance_id(), reg->agent_instance_id());
}

// Session messages the agent sent, thread-safe (sessions send from their
// own threads).
class SessionOutbox {
 public:
  Agent::Outbox Outbox() {
    return [this](const v1::AgentMessage& m) {
      absl::MutexLock lock(&mu_);
      if (m.has_session()) got_.push_back(m.session());
    };
  }
  // Waits (bounded) for a message of session `id` that `pred` accepts.
  std::optional<v1::SessionFromAgent> Wait(
      const std::string& id, std::function<bool(const v1::SessionServerMessage&)> pred) {
    absl::MutexLock lock(&mu_);
    auto find = [&]() -> const v1::SessionFromAgent* {
      for (const auto& m : got_) {
        if (m.session_id() == id && pred(m.payload())) return &m;
      }
      return nullptr;
    };
    auto found = [&] { return find() != nullptr; };
    mu_.AwaitWithTimeout(absl::Condition(&found), absl::Seconds(20));
    const v1::SessionFromAgent* m = find();
    return m == nullptr ? std::nullopt : std::optional<v1::SessionFromAgent>(*m);
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::SessionFromAgent> got_;
};

v1::CoordinatorMessage OpenSession(const std::string& id, int64_t job, int rank) {
  v1::CoordinatorMessage msg;
  v1::SessionToAgent* s = msg.mutable_session();
  s->set_session_id(id);
  v1::SessionOpen* o = s->mutable_payload()->mutable_open();
  o->set_job_id(job);
  o->set_rank(rank);
  o->add_argv("nvidia-smi");
  return msg;
}

TEST_F(AgentTest, Session_BesideARunningTask_RunsWithTheTasksLaunchNotItsLog) {
  Make();
  agent_->Handle(Start(7, 1));
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const LaunchSpec task = launcher_.launched.begin()->second;
  SessionOutbox out;
  agent_->Connected(out.Outbox());
  agent_->Handle(OpenSession("s1", 7, 1));
  ASSERT_THAT(launcher_.launched, SizeIs(2));
  const LaunchSpec& spec = launcher_.launched.rbegin()->second;
  EXPECT_THAT(spec.argv, ElementsAre("nvidia-smi"));
  EXPECT_EQ(spec.env, task.env);
  EXPECT_EQ(spec.workdir, task.workdir);
  EXPECT_EQ(spec.cgroup_dir, task.cgroup_dir);
  EXPECT_TRUE(spec.log_path.empty());
  EXPECT_GE(spec.stdout_fd, 0);
  auto started = out.Wait("s1", [](const auto& p) { return p.has_started(); });
  ASSERT_TRUE(started.has_value());
  EXPECT_EQ(started->payload().started().pid(), launcher_.launched.rbegin()->first);
  EXPECT_EQ(agent_->OpenSessions(), 1);
  // The session's command exits: its exit goes to the coordinator.
  launcher_.Exit(launcher_.launched.rbegin()->first, ExitInfo{4, 0});
  auto exit = out.Wait("s1", [](const auto& p) { return p.has_exit(); });
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->payload().exit().exit_code(), 4);
  // The task itself runs on.
  EXPECT_EQ(agent_->RunningTasks(), 1);
}

TEST_F(AgentTest, Session_NoSuchRunningTask_FailedPreconditionBack) {
  Make();
  SessionOutbox out;
  agent_->Connected(out.Outbox());
  agent_->Handle(OpenSession("s2", 9, 0));
  auto err = out.Wait("s2", [](const auto& p) { return p.has_error(); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->payload().error().code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(err->payload().error().message(), HasSubstr("job 9 rank 0 has no running task"));
  EXPECT_THAT(launcher_.launched, SizeIs(0));
}

// A session into a container task: `podman exec` into its container, as
// the task's user, with podman's own environment (the task's variables are
// set inside from its file), started with the runtime's privileges.
TEST_F(AgentTest, Session_IntoAContainerTask_PodmanExecWithTheRuntimesEnvOnly) {
  ContainerRuntime::Options options;
  options.env_exec = "/usr/bin/trainctl-container-env";
  const ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1",
                                /*rootless=*/false, options);
  config_.container_runtime = &podman;
  Make();
  v1::CoordinatorMessage msg = Start(7, 0);
  msg.mutable_start_task()->set_image("localhost/train:1");
  (*msg.mutable_start_task()->mutable_env())["TRAINCTL_TOKEN"] = "s3cret-token";
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  const LaunchSpec task = launcher_.launched.begin()->second;
  SessionOutbox out;
  agent_->Connected(out.Outbox());
  v1::CoordinatorMessage open = OpenSession("s3", 7, 0);
  open.mutable_session()->mutable_payload()->mutable_open()->set_tty(true);
  open.mutable_session()->mutable_payload()->mutable_open()->set_term("xterm");
  agent_->Handle(open);
  ASSERT_THAT(launcher_.launched, SizeIs(2));
  const LaunchSpec& spec = launcher_.launched.rbegin()->second;
  EXPECT_THAT(spec.argv, ::testing::Contains("/usr/bin/podman"));
  EXPECT_THAT(spec.argv, ::testing::Contains("exec"));
  EXPECT_THAT(spec.argv, ::testing::Contains("-t"));
  EXPECT_THAT(spec.argv, ::testing::Contains("TERM=xterm"));
  EXPECT_THAT(spec.argv, ::testing::Contains("trainctl-j7-a0-r0"));
  EXPECT_EQ(spec.argv.back(), "nvidia-smi");
  for (const std::string& arg : spec.argv) {
    EXPECT_THAT(arg, ::testing::Not(HasSubstr("s3cret-token")));
  }
  // podman's environment: the runtime's, as the task's podman run had.
  EXPECT_EQ(spec.env, task.env);
  EXPECT_FALSE(spec.env.count("TRAINCTL_TOKEN"));
  EXPECT_EQ(spec.keep_root, task.keep_root);
  EXPECT_EQ(spec.cgroup_dir, task.cgroup_dir);
  EXPECT_TRUE(spec.log_path.empty());
  EXPECT_FALSE(spec.tty_path.empty());
  auto started = out.Wait("s3", [](const auto& p) { return p.has_started(); });
  ASSERT_TRUE(started.has_value());
  launcher_.Exit(launcher_.launched.rbegin()->first, ExitInfo{0, 0});
  ASSERT_TRUE(out.Wait("s3", [](const auto& p) { return p.has_exit(); }).has_value());
}

// Containers with a network of their own: 127.0.0.1:PORT of the node is not
// theirs, so port-forward into them is refused, saying why.
TEST_F(AgentTest, Session_PortForwardIntoAContainerOffTheHostNetwork_FailedPrecondition) {
  ContainerRuntime::Options options;
  options.env_exec = "/usr/bin/trainctl-container-env";
  options.run_args = {"--network=slirp4netns"};
  const ContainerRuntime podman(ContainerRuntimeKind::kPodman, "/usr/bin/podman", "4.3.1",
                                /*rootless=*/false, options);
  config_.container_runtime = &podman;
  Make();
  v1::CoordinatorMessage msg = Start(7, 0);
  msg.mutable_start_task()->set_image("localhost/train:1");
  agent_->Handle(msg);
  ASSERT_THAT(launcher_.launched, SizeIs(1));
  SessionOutbox out;
  agent_->Connected(out.Outbox());
  v1::CoordinatorMessage open = OpenSession("s4", 7, 0);
  v1::SessionOpen* o = open.mutable_session()->mutable_payload()->mutable_open();
  o->clear_argv();
  o->set_port(8888);
  agent_->Handle(open);
  auto err = out.Wait("s4", [](const auto& p) { return p.has_error(); });
  ASSERT_TRUE(err.has_value());
  EXPECT_EQ(err->payload().error().code(),
            static_cast<int>(absl::StatusCode::kFailedPrecondition));
  EXPECT_THAT(err->payload().error().message(), HasSubstr("network of its own"));
}

}  // namespace
}  // namespace trainctl::worker
