#include "worker/hw/proc_stats.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::ElementsAre;

// A fake /proc: uptime and <pid>/stat with the fields the sampler reads.
class FakeProc {
 public:
  FakeProc() {
    root_ = ::testing::TempDir() + "/fake-proc-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void Uptime(double s) { std::ofstream(root_ + "/uptime") << s << " 12345.0\n"; }
  // Process `pid` in group `pgrp` with `ticks` of user time and `pages` RSS.
  void Process(int pid, int pgrp, int64_t ticks, int64_t pages,
               const std::string& comm = "python") {
    std::filesystem::create_directories(absl::StrCat(root_, "/", pid));
    // Fields 3..24: state ppid pgrp session tty tpgid flags minflt cminflt
    // majflt cmajflt utime stime cutime cstime priority nice threads
    // itrealvalue starttime vsize rss.
    std::ofstream(absl::StrCat(root_, "/", pid, "/stat"))
        << pid << " (" << comm << ") S 1 " << pgrp << " " << pgrp
        << " 0 -1 0 0 0 0 0 " << ticks << " 0 0 0 20 0 1 0 100 1000000 "
        << pages << " 0\n";
  }
  void Exit(int pid) { std::filesystem::remove_all(absl::StrCat(root_, "/", pid)); }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

TEST(ProcessGroupSamplerTest, Sample_SumsTheGroupAndMeasuresCpuBetweenCalls) {
  FakeProc proc;
  const long hz = sysconf(_SC_CLK_TCK);
  const long page = sysconf(_SC_PAGESIZE);
  proc.Uptime(100);
  // Task 500 with two DataLoader workers (a name with spaces and a ')');
  // process 900 belongs to another group.
  proc.Process(500, 500, 0, 1000);
  proc.Process(501, 500, 0, 500, "pt_data_worker (0)");
  proc.Process(502, 500, 0, 500);
  proc.Process(900, 900, 0, 7);
  ProcessGroupSampler sampler(proc.root());
  auto first = sampler.Sample({500});
  EXPECT_THAT(first[500].pids, ElementsAre(500, 501, 502));
  EXPECT_EQ(first[500].rss_bytes, 2000 * page);
  EXPECT_EQ(first[500].cpu_pct, 0);  // Nothing to compare with yet.

  // 2 s later the group used 3 s of CPU: 150 % of a core.
  proc.Uptime(102);
  proc.Process(500, 500, hz * 1, 1000);
  proc.Process(501, 500, hz * 1, 500, "pt_data_worker (0)");
  proc.Process(502, 500, hz * 1, 500);
  auto second = sampler.Sample({500});
  EXPECT_DOUBLE_EQ(second[500].cpu_pct, 150);
}

// A task whose processes the agent knows from its cgroup: they are the
// group, a container's process in a session of its own included, and a
// process of the task's process group outside its cgroup is not; a group
// with no members given is still found by its process group.
TEST(ProcessGroupSamplerTest, Sample_MembersGiven_AreTheGroupWhateverTheirProcessGroup) {
  FakeProc proc;
  const long hz = sysconf(_SC_CLK_TCK);
  const long page = sysconf(_SC_PAGESIZE);
  proc.Uptime(100);
  proc.Process(500, 500, 0, 1000);
  proc.Process(700, 700, 0, 3000, "python train.py");  // in the container
  proc.Process(501, 500, 0, 5);                          // left the cgroup
  proc.Process(600, 600, 0, 10);                         // task 600: no cgroup
  proc.Process(601, 600, 0, 10);
  ProcessGroupSampler sampler(proc.root());
  const std::map<int, std::vector<int>> members = {{500, {500, 700}}};
  auto first = sampler.Sample({500, 600}, members);
  EXPECT_THAT(first[500].pids, ElementsAre(500, 700));
  EXPECT_EQ(first[500].rss_bytes, 4000 * page);
  EXPECT_THAT(first[600].pids, ElementsAre(600, 601));

  // 1 s later the container's process used 2 s of CPU: 200 % of a core.
  proc.Uptime(101);
  proc.Process(700, 700, hz * 2, 3000, "python train.py");
  auto second = sampler.Sample({500, 600}, members);
  EXPECT_DOUBLE_EQ(second[500].cpu_pct, 200);
  EXPECT_DOUBLE_EQ(second[600].cpu_pct, 0);
}

TEST(ProcessGroupSamplerTest, Sample_GoneGroup_IsEmpty) {
  FakeProc proc;
  proc.Uptime(100);
  ProcessGroupSampler sampler(proc.root());
  auto usage = sampler.Sample({42});
  ASSERT_TRUE(usage.count(42));
  EXPECT_TRUE(usage[42].pids.empty());
  EXPECT_EQ(usage[42].cpu_pct, 0);
}

TEST(ProcessGroupSamplerTest, Sample_RealProc_FindsThisProcess) {
  ProcessGroupSampler sampler;
  auto usage = sampler.Sample({getpgrp()});
  EXPECT_THAT(usage[getpgrp()].pids, ::testing::Contains(getpid()));
  EXPECT_GT(usage[getpgrp()].rss_bytes, 0);
}

}  // namespace
}  // namespace trainctl::worker
