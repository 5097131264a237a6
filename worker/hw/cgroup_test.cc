#include "worker/hw/cgroup.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/hw/cgroup_self.h"

namespace trainctl::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::trainctl::testing::StatusIs;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// A fake cgroup tree in a temporary directory: plain directories and files
// stand for cgroups and their control files, and a fake /proc/self/cgroup.
// Nothing here moves processes or enforces the kernel's rules; the tests read
// back what the library wrote.
class FakeCgroupFs {
 public:
  FakeCgroupFs() {
    root_ = ::testing::TempDir() + "/fake-cgroupfs-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  ~FakeCgroupFs() { std::filesystem::remove_all(root_); }

  // `mount` (relative to root, "" or "unified") becomes the v2 root cgroup
  // offering `controllers`.
  void Mount(const std::string& mount, const std::string& controllers) {
    mount_ = mount.empty() ? root_ + "/fs" : root_ + "/fs/" + mount;
    std::filesystem::create_directories(mount_);
    WriteFile(mount_ + "/cgroup.controllers", controllers + "\n");
    WriteFile(mount_ + "/cgroup.procs", "1\n");
    WriteFile(mount_ + "/cgroup.subtree_control", "");
  }
  // A non-root cgroup at `rel` (e.g. "/system.slice/a.service") offered
  // `controllers` by its parent, holding `pids`.
  void Cgroup(const std::string& rel, const std::string& controllers,
              const std::string& pids) {
    const std::string dir = mount_ + rel;
    std::filesystem::create_directories(dir);
    WriteFile(dir + "/cgroup.controllers", controllers + "\n");
    WriteFile(dir + "/cgroup.procs", pids);
    WriteFile(dir + "/cgroup.subtree_control", "");
    WriteFile(dir + "/cgroup.type", "domain\n");
  }
  // The fake /proc/self/cgroup.
  void Self(const std::string& text) { WriteFile(self_file(), text); }

  std::string fs() const { return root_ + "/fs"; }
  std::string self_file() const { return root_ + "/self-cgroup"; }
  const std::string& mount() const { return mount_; }

 private:
  std::string root_;
  std::string mount_;
};

// A systemd host in unified mode: the agent's service cgroup, offered cpu,
// memory and pids (not io) by system.slice, holding the guard (pid 100) and
// the agent (this process).
class UnifiedTest : public ::testing::Test {
 protected:
  static constexpr char kService[] = "/system.slice/trainctl-agent.service";
  void SetUp() override {
    fs_.Mount("", "cpuset cpu io memory hugetlb pids rdma misc");
    fs_.Cgroup("/system.slice", "cpu io memory pids", "");
    fs_.Cgroup(kService, "cpu memory pids", absl::StrCat("100\n", getpid(), "\n"));
    fs_.Self(absl::StrCat("0::", kService, "\n"));
  }
  std::string Base() const { return fs_.mount() + kService; }
  FakeCgroupFs fs_;
};

TEST_F(UnifiedTest, Open_DelegatedCgroup_MovesProcessesToLeafAndEnablesControllers) {
  auto tree = CgroupTree::Open(fs_.fs(), fs_.self_file());
  ASSERT_THAT(tree, ::trainctl::testing::IsOk());
  EXPECT_EQ(tree->mount(), fs_.fs());
  EXPECT_EQ(tree->agent_cgroup_dir(), Base());
  EXPECT_EQ(tree->agent_leaf_dir(), Base() + "/agent");
  EXPECT_EQ(tree->tasks_dir(), Base() + "/tasks");
  // Both processes of the service's cgroup were written into the leaf, one
  // write each.
  EXPECT_EQ(ReadFile(Base() + "/agent/cgroup.procs"), absl::StrCat("100\n", getpid(), "\n"));
  // Then the controllers were enabled below the service's cgroup and below
  // tasks/, one write each.
  EXPECT_EQ(ReadFile(Base() + "/cgroup.subtree_control"), "+cpu\n+memory\n+pids\n");
  EXPECT_EQ(ReadFile(Base() + "/tasks/cgroup.subtree_control"), "+cpu\n+memory\n+pids\n");
  EXPECT_THAT(tree->controllers(), ElementsAre("cpu", "memory", "pids"));
  EXPECT_THAT(tree->missing_controllers(), IsEmpty());
  const std::string line = tree->Describe();
  EXPECT_THAT(line, HasSubstr("(unified)"));
  EXPECT_THAT(line, HasSubstr("agent cgroup /system.slice/trainctl-agent.service (2 processes"));
  EXPECT_THAT(line, HasSubstr("controllers: cpu memory pids"));
  EXPECT_THAT(line, ::testing::Not(HasSubstr("missing")));
}

TEST_F(UnifiedTest, Open_ParentOffersOnlyMemory_EnablesItAndSaysWhatIsMissing) {
  fs_.Cgroup(kService, "memory", absl::StrCat(getpid(), "\n"));
  auto tree = CgroupTree::Open(fs_.fs(), fs_.self_file());
  ASSERT_THAT(tree, ::trainctl::testing::IsOk());
  EXPECT_THAT(tree->controllers(), ElementsAre("memory"));
  EXPECT_THAT(tree->missing_controllers(),
              ElementsAre(HasSubstr("cpu (not offered"), HasSubstr("pids (not offered")));
  EXPECT_EQ(ReadFile(Base() + "/cgroup.subtree_control"), "+memory\n");
  EXPECT_THAT(tree->Describe(), HasSubstr("missing: cpu (not offered"));
}

TEST_F(UnifiedTest, Open_CalledAgainFromTheLeaf_ReusesTheTree) {
  ASSERT_THAT(CgroupTree::Open(fs_.fs(), fs_.self_file()), ::trainctl::testing::IsOk());
  // The agent now sits in the leaf (the kernel would say so).
  fs_.Self(absl::StrCat("0::", kService, "/agent\n"));
  auto again = CgroupTree::Open(fs_.fs(), fs_.self_file());
  ASSERT_THAT(again, ::trainctl::testing::IsOk());
  EXPECT_EQ(again->agent_cgroup_dir(), Base());
  EXPECT_EQ(again->tasks_dir(), Base() + "/tasks");
  EXPECT_FALSE(std::filesystem::exists(Base() + "/agent/agent"));
}

TEST_F(UnifiedTest, Open_RootCgroup_IsRefusedWithTheFix) {
  fs_.Self("0::/\n");
  EXPECT_THAT(CgroupTree::Open(fs_.fs(), fs_.self_file()),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       ::testing::AllOf(HasSubstr("root cgroup"), HasSubstr("Delegate=yes"))));
}

TEST_F(UnifiedTest, Open_NoCgroup2LineInSelf_FailedPrecondition) {
  fs_.Self("4:memory:/x\n1:name=systemd:/x\n");
  EXPECT_THAT(CgroupTree::Open(fs_.fs(), fs_.self_file()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no cgroup v2 line")));
}

TEST_F(UnifiedTest, Open_CgroupNotUnderTheMount_FailedPrecondition) {
  fs_.Self("0::/elsewhere.scope\n");
  EXPECT_THAT(CgroupTree::Open(fs_.fs(), fs_.self_file()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("does not exist")));
}

TEST_F(UnifiedTest, Open_ThreadedCgroup_FailedPrecondition) {
  WriteFile(Base() + "/cgroup.type", "threaded\n");
  EXPECT_THAT(CgroupTree::Open(fs_.fs(), fs_.self_file()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("threaded")));
}

TEST_F(UnifiedTest, Open_NotWritable_FailedPrecondition) {
  // The service's cgroup is not delegated: it stays root's, mode 0555, and
  // the agent runs as another user (as root, a child process drops to
  // nobody first, since root may write anyway).
  chmod(Base().c_str(), 0555);
  auto refused = [&] {
    auto tree = CgroupTree::Open(fs_.fs(), fs_.self_file());
    return tree.status().code() == absl::StatusCode::kFailedPrecondition &&
           absl::StrContains(tree.status().message(), "not writable") &&
           absl::StrContains(tree.status().message(), "Delegate=yes");
  };
  if (geteuid() == 0) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
      _exit(refused() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  } else {
    EXPECT_TRUE(refused());
  }
  chmod(Base().c_str(), 0755);
}

TEST(CgroupTreeTest, Open_NoCgroup2_FailedPrecondition) {
  FakeCgroupFs fs;
  // Only v1 hierarchies: no cgroup.controllers at the root or in unified/.
  std::filesystem::create_directories(fs.fs() + "/memory");
  fs.Self("4:memory:/\n");
  EXPECT_THAT(CgroupTree::Open(fs.fs(), fs.self_file()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no cgroup v2 under")));
}

// A hybrid host: v1 controllers, and a v2 tree at unified/ offering only
// hugetlb (the development VM's layout).
class HybridTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(fs_.fs() + "/memory");
    fs_.Mount("unified", "hugetlb");
    fs_.Cgroup("/trainctl", "hugetlb", absl::StrCat(getpid(), "\n"));
    fs_.Self("9:name=systemd:/\n4:memory:/\n0::/trainctl\n");
    auto tree = CgroupTree::Open(fs_.fs(), fs_.self_file());
    ASSERT_THAT(tree, ::trainctl::testing::IsOk());
    tree_ = std::make_unique<CgroupTree>(*std::move(tree));
  }
  FakeCgroupFs fs_;
  std::unique_ptr<CgroupTree> tree_;
};

TEST_F(HybridTest, Open_Hybrid_UsesUnifiedWithoutControllers) {
  EXPECT_EQ(tree_->mount(), fs_.fs() + "/unified");
  EXPECT_EQ(tree_->tasks_dir(), fs_.fs() + "/unified/trainctl/tasks");
  EXPECT_THAT(tree_->controllers(), IsEmpty());
  EXPECT_EQ(tree_->missing_controllers().size(), 3u);
  EXPECT_EQ(ReadFile(fs_.mount() + "/trainctl/cgroup.subtree_control"), "");
  const std::string line = tree_->Describe();
  EXPECT_THAT(line, HasSubstr("hybrid"));
  EXPECT_THAT(line, HasSubstr("controllers: none"));
  EXPECT_THAT(line, HasSubstr("tasks get no limits"));
}

TEST_F(HybridTest, CreateTaskCgroup_LimitWithoutController_NamesTheController) {
  EXPECT_THAT(tree_->CreateTaskCgroup("j1-r0", {.cpus = 2}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("cpu controller")));
  EXPECT_THAT(tree_->CreateTaskCgroup("j1-r0", {.memory_bytes = 1 << 30}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("memory controller")));
  // Nothing was created; without limits it works.
  EXPECT_THAT(tree_->CreateTaskCgroup("j1-r0", {}), ::trainctl::testing::IsOk());
}

class TaskCgroupTest : public UnifiedTest {
 protected:
  void SetUp() override {
    UnifiedTest::SetUp();
    auto tree = CgroupTree::Open(fs_.fs(), fs_.self_file());
    ASSERT_THAT(tree, ::trainctl::testing::IsOk());
    tree_ = std::make_unique<CgroupTree>(*std::move(tree));
  }
  std::unique_ptr<CgroupTree> tree_;
};

TEST_F(TaskCgroupTest, CreateTaskCgroup_WritesCpuMaxMemoryMaxAndOomGroup) {
  auto dir = tree_->CreateTaskCgroup("j7-a0-r3", {.cpus = 1.5, .memory_bytes = 2LL << 30});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  EXPECT_EQ(*dir, Base() + "/tasks/j7-a0-r3");
  // 1.5 cores = 150000 us of CPU per 100000 us period.
  EXPECT_EQ(ReadFile(*dir + "/cpu.max"), "150000 100000\n");
  EXPECT_EQ(ReadFile(*dir + "/memory.max"), "2147483648\n");
  EXPECT_EQ(ReadFile(*dir + "/memory.oom.group"), "1\n");
  EXPECT_EQ(tree_->RelativePath(*dir), "/system.slice/trainctl-agent.service/tasks/j7-a0-r3");
}

TEST_F(TaskCgroupTest, CreateTaskCgroup_TinyCpu_GetsTheKernelMinimumQuota) {
  auto dir = tree_->CreateTaskCgroup("tiny", {.cpus = 0.001});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  // 0.001 x 100000 = 100 us, below the kernel's 1000 us minimum.
  EXPECT_EQ(ReadFile(*dir + "/cpu.max"), "1000 100000\n");
}

TEST_F(TaskCgroupTest, CreateTaskCgroup_NoLimits_WritesNothing) {
  auto dir = tree_->CreateTaskCgroup("free", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  EXPECT_TRUE(std::filesystem::is_empty(*dir));
}

TEST_F(TaskCgroupTest, CreateTaskCgroup_BadName_InvalidArgument) {
  for (const char* name : {"", ".", "..", "a/b", "../agent", "job 1", "x\n", "é"}) {
    EXPECT_THAT(tree_->CreateTaskCgroup(name, {}),
                StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bad task cgroup name")))
        << name;
  }
  EXPECT_THAT(tree_->CreateTaskCgroup(std::string(256, 'a'), {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("255")));
  EXPECT_THAT(tree_->CreateTaskCgroup("Job_1.rank-0", {}), ::trainctl::testing::IsOk());
}

TEST_F(TaskCgroupTest, CreateTaskCgroup_NegativeOrNanLimit_InvalidArgument) {
  EXPECT_THAT(tree_->CreateTaskCgroup("a", {.cpus = -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("CPU limit")));
  EXPECT_THAT(tree_->CreateTaskCgroup("a", {.cpus = std::nan("")}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("CPU limit")));
  EXPECT_THAT(tree_->CreateTaskCgroup("a", {.memory_bytes = -5}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("memory limit")));
  EXPECT_FALSE(std::filesystem::exists(Base() + "/tasks/a"));
}

TEST_F(TaskCgroupTest, CreateTaskCgroup_Exists_AlreadyExists) {
  ASSERT_THAT(tree_->CreateTaskCgroup("a", {}), ::trainctl::testing::IsOk());
  EXPECT_THAT(tree_->CreateTaskCgroup("a", {}),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("Kill() and Remove()")));
}

TEST_F(TaskCgroupTest, ReadUsage_ReadsCpuMemoryAndPidsOfTheSubtree) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  WriteFile(*dir + "/cpu.stat",
            "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n"
            "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n");
  WriteFile(*dir + "/memory.current", "1048576\n");
  WriteFile(*dir + "/memory.peak", "4194304\n");
  WriteFile(*dir + "/cgroup.procs", "70\n30\n");
  // A container runtime's cgroup below the task's.
  std::filesystem::create_directories(*dir + "/libpod-abc");
  WriteFile(*dir + "/libpod-abc/cgroup.procs", "90\n");
  auto u = tree_->ReadUsage(*dir);
  ASSERT_THAT(u, ::trainctl::testing::IsOk());
  EXPECT_EQ(u->cpu_usec, 2500000);
  EXPECT_EQ(u->memory_bytes, 1048576);
  EXPECT_EQ(u->memory_peak_bytes, 4194304);
  EXPECT_THAT(u->pids, ElementsAre(30, 70, 90));
}

// What the agent's per-task sampling reads: a container's processes (in a
// cgroup of its runtime below the task's) are the task's.
TEST_F(TaskCgroupTest, Pids_ListsTheSubtree_OtherPathsAreRefused) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  WriteFile(*dir + "/cgroup.procs", "70\n30\n");
  std::filesystem::create_directories(*dir + "/libpod-abc");
  WriteFile(*dir + "/libpod-abc/cgroup.procs", "90\n30\n");
  auto pids = tree_->Pids(*dir);
  ASSERT_THAT(pids, ::trainctl::testing::IsOk());
  EXPECT_THAT(*pids, ElementsAre(30, 70, 90));
  EXPECT_THAT(tree_->Pids(tree_->tasks_dir() + "/gone"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does not exist")));
  EXPECT_THAT(tree_->Pids(tree_->agent_leaf_dir()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a task cgroup")));
}

TEST_F(TaskCgroupTest, ReadUsage_OlderKernelWithoutMemoryPeak_PeakIsZero) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  WriteFile(*dir + "/cpu.stat", "usage_usec 7\n");
  WriteFile(*dir + "/memory.current", "4096\n");
  auto u = tree_->ReadUsage(*dir);
  ASSERT_THAT(u, ::trainctl::testing::IsOk());
  EXPECT_EQ(u->cpu_usec, 7);
  EXPECT_EQ(u->memory_bytes, 4096);
  EXPECT_EQ(u->memory_peak_bytes, 0);
  EXPECT_THAT(u->pids, IsEmpty());
}

TEST_F(TaskCgroupTest, ReadUsage_MalformedCpuStat_Internal) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  WriteFile(*dir + "/cpu.stat", "user_usec 1\n");
  EXPECT_THAT(tree_->ReadUsage(*dir),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("usage_usec")));
}

TEST_F(TaskCgroupTest, TaskDirMethods_OutsideTheTasksDir_InvalidArgumentOrNotFound) {
  for (const std::string& dir : {Base(), Base() + "/agent", Base() + "/tasks",
                                 Base() + "/tasks/", Base() + "/tasks/../agent",
                                 std::string("/etc")}) {
    EXPECT_THAT(tree_->ReadUsage(dir), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a task cgroup")))
        << dir;
    EXPECT_THAT(tree_->Kill(dir), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_))
        << dir;
    EXPECT_THAT(tree_->Remove(dir), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_))
        << dir;
    EXPECT_THAT(tree_->Populated(dir), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_))
        << dir;
  }
  const std::string gone = Base() + "/tasks/gone";
  EXPECT_THAT(tree_->ReadUsage(gone), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(tree_->Kill(gone), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(tree_->Remove(gone), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(TaskCgroupTest, Populated_ReadsThePopulatedLineOfCgroupEvents) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  WriteFile(*dir + "/cgroup.events", "populated 1\nfrozen 0\n");
  absl::StatusOr<bool> populated = tree_->Populated(*dir);
  ASSERT_THAT(populated, ::trainctl::testing::IsOk());
  EXPECT_TRUE(*populated);
  WriteFile(*dir + "/cgroup.events", "populated 0\nfrozen 0\n");
  populated = tree_->Populated(*dir);
  ASSERT_THAT(populated, ::trainctl::testing::IsOk());
  EXPECT_FALSE(*populated);
  WriteFile(*dir + "/cgroup.events", "frozen 0\n");
  EXPECT_THAT(tree_->Populated(*dir),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("no populated 0|1 line")));
  std::filesystem::remove_all(*dir);
  EXPECT_THAT(tree_->Populated(*dir), StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(TaskCgroupTest, Kill_WithCgroupKill_WritesOneAndReturnsWhenEmpty) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  WriteFile(*dir + "/cgroup.kill", "");
  WriteFile(*dir + "/cgroup.procs", "");
  EXPECT_THAT(tree_->Kill(*dir), ::trainctl::testing::IsOk());
  EXPECT_EQ(ReadFile(*dir + "/cgroup.kill"), "1\n");
}

TEST_F(TaskCgroupTest, Kill_ProcessesStayListed_DeadlineExceededNamesThem) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  // cgroup.kill present, so nothing is signalled; the fake never empties.
  WriteFile(*dir + "/cgroup.kill", "");
  WriteFile(*dir + "/cgroup.procs", "4000001\n4000002\n");
  EXPECT_THAT(tree_->Kill(*dir, absl::Milliseconds(30)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       ::testing::AllOf(HasSubstr("2 processes still in"),
                                        HasSubstr("4000001, 4000002"))));
}

TEST_F(TaskCgroupTest, Kill_WithoutCgroupKill_SigkillsTheListedPids) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    while (true) pause();
  }
  // Linux < 5.14: no cgroup.kill. The "kernel" of this fake: a thread that
  // reaps the child and then empties cgroup.procs, as the kernel would when
  // the process exits.
  WriteFile(*dir + "/cgroup.procs", absl::StrCat(child, "\n"));
  int status = 0;
  std::thread kernel([&] {
    waitpid(child, &status, 0);
    WriteFile(*dir + "/cgroup.procs", "");
  });
  EXPECT_THAT(tree_->Kill(*dir, absl::Seconds(10)), ::trainctl::testing::IsOk());
  kernel.join();
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST_F(TaskCgroupTest, Remove_RemovesTheTaskAndTheCgroupsBelowIt) {
  auto dir = tree_->CreateTaskCgroup("a", {});
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  std::filesystem::create_directories(*dir + "/libpod-abc/inner");
  EXPECT_THAT(tree_->Remove(*dir), ::trainctl::testing::IsOk());
  EXPECT_FALSE(std::filesystem::exists(*dir));
}

TEST(MoveSelfIntoCgroupTest, WritesZeroToCgroupProcs) {
  FakeCgroupFs fs;
  fs.Mount("", "");
  EXPECT_EQ(MoveSelfIntoCgroup(fs.mount().c_str()), 0);
  // The root's cgroup.procs held "1\n"; "0" (the caller) is appended.
  EXPECT_EQ(ReadFile(fs.mount() + "/cgroup.procs"), "1\n0\n");
  EXPECT_EQ(MoveSelfIntoCgroup((fs.mount() + "/nope").c_str()), ENOENT);
  EXPECT_EQ(MoveSelfIntoCgroup(std::string(5000, 'a').c_str()), ENAMETOOLONG);
}

// The real kernel, where this process may create cgroups (root, or a
// delegated cgroup): a test cgroup stands for the agent's delegated cgroup;
// this process moves into it, opens the tree there, starts a child that moves
// itself into a task cgroup (MoveSelfIntoCgroup, as the task shim will),
// kills it through the cgroup and removes the cgroup. Skips, with the reason,
// where cgroup v2 is absent or not writable.
class RealSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* m : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      if (access((std::string(m) + "/cgroup.controllers").c_str(), F_OK) == 0) {
        mount_ = m;
        break;
      }
    }
    if (mount_.empty()) GTEST_SKIP() << "no cgroup v2 at /sys/fs/cgroup or /sys/fs/cgroup/unified";
    for (absl::string_view line : absl::StrSplit(ReadFile("/proc/self/cgroup"), '\n')) {
      if (absl::ConsumePrefix(&line, "0::")) orig_ = std::string(line);
    }
    if (orig_.empty()) GTEST_SKIP() << "no 0:: line in /proc/self/cgroup";
    const std::string parent = orig_ == "/" ? "" : orig_;
    test_rel_ = absl::StrCat(parent, "/trainctl-cgroup-test-", getpid());
    if (mkdir((mount_ + test_rel_).c_str(), 0755) != 0) {
      GTEST_SKIP() << "cgroup v2 at " << mount_ << " is not writable here: mkdir "
                   << mount_ + test_rel_ << ": " << std::strerror(errno);
    }
    created_ = true;
    std::ofstream procs(mount_ + test_rel_ + "/cgroup.procs");
    procs << getpid() << "\n";
    procs.flush();
    if (!procs) {
      GTEST_SKIP() << "cannot move this process into " << mount_ + test_rel_;
    }
    moved_ = true;
    self_file_ = ::testing::TempDir() + "/real-self-cgroup-" + std::to_string(getpid());
    WriteFile(self_file_, absl::StrCat("0::", test_rel_, "\n"));
  }
  void TearDown() override {
    if (moved_) {
      std::ofstream(mount_ + orig_ + "/cgroup.procs") << getpid() << "\n";
    }
    if (created_) {
      rmdir((mount_ + test_rel_ + "/tasks").c_str());
      rmdir((mount_ + test_rel_ + "/agent").c_str());
      rmdir((mount_ + test_rel_).c_str());
    }
    if (!self_file_.empty()) std::filesystem::remove(self_file_);
  }
  std::string mount_, orig_, test_rel_, self_file_;
  bool created_ = false, moved_ = false;
};

TEST_F(RealSystemTest, RealSystem_CreateMoveKillRemove) {
  auto tree = CgroupTree::Open("/sys/fs/cgroup", self_file_);
  ASSERT_THAT(tree, ::trainctl::testing::IsOk());
  std::cout << "[ info ] " << tree->Describe() << "\n";
  // This process now sits in the leaf.
  EXPECT_THAT(ReadFile("/proc/self/cgroup"), HasSubstr(absl::StrCat("0::", test_rel_, "/agent\n")));

  CgroupLimits limits;
  const auto& c = tree->controllers();
  const bool cpu = std::find(c.begin(), c.end(), "cpu") != c.end();
  const bool memory = std::find(c.begin(), c.end(), "memory") != c.end();
  if (cpu) limits.cpus = 0.5;
  if (memory) limits.memory_bytes = 256LL << 20;
  auto dir = tree->CreateTaskCgroup("sleeper", limits);
  ASSERT_THAT(dir, ::trainctl::testing::IsOk());
  if (cpu) {
    EXPECT_EQ(ReadFile(*dir + "/cpu.max"), "50000 100000\n");
  }
  if (memory) {
    EXPECT_EQ(ReadFile(*dir + "/memory.max"), "268435456\n");
  }

  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int err = MoveSelfIntoCgroup(dir->c_str());
    if (err != 0) _exit(100 + err);
    execl("/bin/sleep", "sleep", "300", static_cast<char*>(nullptr));
    while (true) pause();
  }
  // Wait (bounded) until the child shows up in the task cgroup.
  std::vector<int> pids;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    auto u = tree->ReadUsage(*dir);
    ASSERT_THAT(u, ::trainctl::testing::IsOk());
    pids = u->pids;
    if (!pids.empty()) break;
    int status;
    ASSERT_EQ(waitpid(child, &status, WNOHANG), 0) << "child exited early: " << status;
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_THAT(pids, ElementsAre(child));
  EXPECT_THAT(ReadFile(absl::StrCat("/proc/", child, "/cgroup")),
              HasSubstr(absl::StrCat("0::", tree->RelativePath(*dir), "\n")));

  // Busy: it cannot be removed yet.
  EXPECT_THAT(tree->Remove(*dir),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("still has processes")));

  std::cout << "[ info ] cgroup.kill "
            << (access((*dir + "/cgroup.kill").c_str(), F_OK) == 0 ? "present" : "absent (SIGKILL fallback)")
            << "\n";
  ASSERT_THAT(tree->Kill(*dir, absl::Seconds(10)), ::trainctl::testing::IsOk());
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);

  auto after = tree->ReadUsage(*dir);
  ASSERT_THAT(after, ::trainctl::testing::IsOk());
  EXPECT_THAT(after->pids, IsEmpty());
  EXPECT_GE(after->cpu_usec, 0);
  EXPECT_THAT(tree->Remove(*dir), ::trainctl::testing::IsOk());
  EXPECT_FALSE(std::filesystem::exists(*dir));
}

}  // namespace
}  // namespace trainctl::worker
