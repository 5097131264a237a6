#include "worker/hw/posix_process_launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/hw/accounts.h"

namespace trainctl::worker {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

constexpr absl::Duration kTimeout = absl::Seconds(10);
const std::map<std::string, std::string> kEnv = {{"PATH", "/usr/bin:/bin"}};

// Collects one process's ExitInfo and lets the test wait for it.
struct ExitWaiter {
  absl::Notification done;
  ExitInfo info;

  absl::AnyInvocable<void(ExitInfo)> Callback() {
    return [this](ExitInfo exit) {
      info = exit;
      done.Notify();
    };
  }
  bool Wait() { return done.WaitForNotificationWithTimeout(kTimeout); }
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A FIFO a task writes one line to ("ready", a pid) once it has reached the
// state a test needs. Opened for reading before the task starts, so the
// task's `echo ... > fifo` never blocks.
class ReadyFifo {
 public:
  explicit ReadyFifo(const fs::path& path) : path_(path) {
    EXPECT_EQ(mkfifo(path.c_str(), 0600), 0) << std::strerror(errno);
    fd_ = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    EXPECT_GE(fd_, 0) << std::strerror(errno);
  }
  ~ReadyFifo() { close(fd_); }
  const fs::path& path() const { return path_; }

  // The first line written, or nullopt after kTimeout.
  std::optional<std::string> ReadLine() {
    std::string line;
    const absl::Time deadline = absl::Now() + kTimeout;
    while (absl::Now() < deadline) {
      pollfd p = {fd_, POLLIN, 0};
      const int timeout_ms =
          static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
      if (poll(&p, 1, timeout_ms) <= 0) continue;
      char c;
      const ssize_t n = read(fd_, &c, 1);
      if (n == 1) {
        if (c == '\n') return line;
        line += c;
      } else if (n == 0 || (n < 0 && errno != EAGAIN)) {
        return std::nullopt;  // The writer closed without a full line.
      }
    }
    return std::nullopt;
  }

 private:
  fs::path path_;
  int fd_ = -1;
};

class PosixProcessLauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/tc_launcher_test.XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  LaunchSpec Spec(std::vector<std::string> argv) {
    LaunchSpec spec;
    spec.argv = std::move(argv);
    spec.env = kEnv;
    spec.workdir = dir_.string();
    spec.log_path = (dir_ / "logs" / "job-1" / "rank-0.log").string();
    return spec;
  }

  fs::path dir_;
  PosixProcessLauncher launcher_;
};

TEST_F(PosixProcessLauncherTest, Launch_StdoutAndStderr_LandInLogFile) {
  ExitWaiter exit;
  LaunchSpec spec = Spec({"sh", "-c", "echo hi; echo err >&2"});
  TC_ASSERT_OK(launcher_.Launch(spec, exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 0);
  EXPECT_EQ(exit.info.signal, 0);
  // The log's parent directories were created.
  EXPECT_EQ(ReadFile(spec.log_path), "hi\nerr\n");
  // A task's output may hold secrets: owner-only, whatever the umask.
  EXPECT_EQ(fs::status(spec.log_path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
}

TEST_F(PosixProcessLauncherTest, Launch_NoLogPath_OutputIsDiscardedAndNoFileMade) {
  ExitWaiter exit;
  LaunchSpec spec = Spec({"sh", "-c", "echo hi; echo err >&2; touch done"});
  spec.log_path.clear();
  TC_ASSERT_OK(launcher_.Launch(spec, exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 0);  // writing to /dev/null succeeded
  EXPECT_TRUE(fs::exists(dir_ / "done"));
  EXPECT_FALSE(fs::exists(dir_ / "logs"));
}

TEST_F(PosixProcessLauncherTest, Launch_ExistingLog_IsAppendedTo) {
  LaunchSpec spec = Spec({"sh", "-c", "echo attempt"});
  ExitWaiter first;
  TC_ASSERT_OK(launcher_.Launch(spec, first.Callback()));
  ASSERT_TRUE(first.Wait());
  ExitWaiter second;
  TC_ASSERT_OK(launcher_.Launch(spec, second.Callback()));
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(ReadFile(spec.log_path), "attempt\nattempt\n");
}

TEST_F(PosixProcessLauncherTest, Launch_LogDirectoryCannotBeMade_IsInternalNamingIt) {
  // The log's parent would have to be made under a regular file.
  std::ofstream(dir_ / "plain-file") << "x";
  LaunchSpec spec = Spec({"true"});
  spec.log_path = (dir_ / "plain-file" / "jobs-0" / "job-1.attempt-0.rank-0.log").string();
  ExitWaiter exit;
  absl::StatusOr<int> pid = launcher_.Launch(spec, exit.Callback());
  EXPECT_THAT(pid, StatusIs(absl::StatusCode::kInternal, HasSubstr("plain-file")));
}

TEST_F(PosixProcessLauncherTest, Launch_ExitCode3_IsReported) {
  ExitWaiter exit;
  absl::StatusOr<int> pid = launcher_.Launch(Spec({"sh", "-c", "exit 3"}),
                                             exit.Callback());
  TC_ASSERT_OK(pid);
  EXPECT_GT(*pid, 0);
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 3);
  EXPECT_EQ(exit.info.signal, 0);
}

TEST_F(PosixProcessLauncherTest, Launch_Env_IsExactlyTheSpecEnv) {
  // Set in the agent, so a leak would show.
  ASSERT_EQ(setenv("TC_AGENT_ONLY_VARIABLE", "leaked", 1), 0);
  LaunchSpec spec = Spec({"env"});
  spec.env["RANK"] = "3";
  spec.env["CUDA_VISIBLE_DEVICES"] = "GPU-a,GPU-b";
  ExitWaiter exit;
  TC_ASSERT_OK(launcher_.Launch(spec, exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  ASSERT_EQ(exit.info.exit_code, 0);
  const std::vector<std::string> lines =
      absl::StrSplit(ReadFile(spec.log_path), '\n', absl::SkipEmpty());
  EXPECT_THAT(lines, ::testing::UnorderedElementsAre(
                         "PATH=/usr/bin:/bin", "RANK=3",
                         "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b"));
  unsetenv("TC_AGENT_ONLY_VARIABLE");
}

TEST_F(PosixProcessLauncherTest, Launch_Workdir_IsTheTasksCurrentDirectory) {
  fs::create_directory(dir_ / "work");
  LaunchSpec spec = Spec({"pwd", "-P"});
  spec.workdir = (dir_ / "work").string();
  ExitWaiter exit;
  TC_ASSERT_OK(launcher_.Launch(spec, exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(ReadFile(spec.log_path),
            fs::canonical(dir_ / "work").string() + "\n");
}

TEST_F(PosixProcessLauncherTest, Launch_ProgramInTaskPathOnly_IsFound) {
  // A script in a directory that only the task's PATH names.
  fs::create_directory(dir_ / "bin");
  const fs::path script = dir_ / "bin" / "tc-hello";
  std::ofstream(script) << "#!/bin/sh\necho hello from $0\n";
  fs::permissions(script, fs::perms::owner_all);
  LaunchSpec spec = Spec({"tc-hello"});
  spec.env["PATH"] = (dir_ / "bin").string() + ":/usr/bin:/bin";
  ExitWaiter exit;
  TC_ASSERT_OK(launcher_.Launch(spec, exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 0);
  EXPECT_THAT(ReadFile(spec.log_path), HasSubstr("hello from"));
}

// Writes an executable script at `path` that prints `text`.
void WriteScript(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "#!/bin/sh\necho " << text << "\n";
  fs::permissions(path, fs::perms::owner_all);
}

TEST_F(PosixProcessLauncherTest, Launch_ReusedLookupWhoseProgramMoved_FindsItAgain) {
  // The first launch finds tc-where in a/; a later one with the same PATH
  // reuses that lookup, but a/tc-where is gone by then: the PATH is searched
  // again (b/), and once it is gone from every directory the launch is
  // NOT_FOUND naming it, as without the reuse.
  WriteScript(dir_ / "a" / "tc-where", "from-a");
  LaunchSpec spec = Spec({"tc-where"});
  spec.env["PATH"] = (dir_ / "a").string() + ":" + (dir_ / "b").string() + ":/usr/bin:/bin";
  ExitWaiter first;
  TC_ASSERT_OK(launcher_.Launch(spec, first.Callback()));
  ASSERT_TRUE(first.Wait());
  fs::remove(dir_ / "a" / "tc-where");
  WriteScript(dir_ / "b" / "tc-where", "from-b");
  ExitWaiter second;
  TC_ASSERT_OK(launcher_.Launch(spec, second.Callback()));
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(second.info.exit_code, 0);
  EXPECT_THAT(ReadFile(spec.log_path), HasSubstr("from-a\nfrom-b"));
  fs::remove(dir_ / "b" / "tc-where");
  EXPECT_THAT(launcher_.Launch(spec, [](ExitInfo) {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("tc-where")));
}

TEST_F(PosixProcessLauncherTest, Launch_NoLookupReuse_ProgramPutEarlierInPathIsRunAtOnce) {
  PosixProcessLauncher::Options options;
  options.program_lookup_ttl = absl::ZeroDuration();
  PosixProcessLauncher launcher(options);
  WriteScript(dir_ / "b" / "tc-where", "from-b");
  LaunchSpec spec = Spec({"tc-where"});
  spec.env["PATH"] = (dir_ / "a").string() + ":" + (dir_ / "b").string() + ":/usr/bin:/bin";
  ExitWaiter first;
  TC_ASSERT_OK(launcher.Launch(spec, first.Callback()));
  ASSERT_TRUE(first.Wait());
  WriteScript(dir_ / "a" / "tc-where", "from-a");
  ExitWaiter second;
  TC_ASSERT_OK(launcher.Launch(spec, second.Callback()));
  ASSERT_TRUE(second.Wait());
  EXPECT_THAT(ReadFile(spec.log_path), HasSubstr("from-b\nfrom-a"));
}

TEST_F(PosixProcessLauncherTest, Launch_MissingProgram_IsNotFoundNamingIt) {
  ExitWaiter exit;
  EXPECT_THAT(launcher_.Launch(Spec({"tc-no-such-program", "--x"}),
                               exit.Callback()),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("tc-no-such-program")));
  EXPECT_THAT(launcher_.Launch(Spec({"/no/such/dir/train.py"}), exit.Callback()),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("/no/such/dir/train.py")));
  EXPECT_FALSE(exit.done.HasBeenNotified());
}

TEST_F(PosixProcessLauncherTest, Launch_MissingWorkdir_IsNotFoundNamingIt) {
  LaunchSpec spec = Spec({"true"});
  spec.workdir = (dir_ / "missing").string();
  EXPECT_THAT(launcher_.Launch(spec, [](ExitInfo) {}),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing")));
}

TEST_F(PosixProcessLauncherTest, Launch_EmptyArgv_IsInvalidArgument) {
  EXPECT_THAT(launcher_.Launch(Spec({}), [](ExitInfo) {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("argv")));
}

TEST_F(PosixProcessLauncherTest, Launch_LeaderExitsLeavingBackgroundChild_ChildIsKilled) {
  ReadyFifo fifo(dir_ / "ready");
  ExitWaiter exit;
  absl::StatusOr<int> pid = launcher_.Launch(
      Spec({"sh", "-c", "sleep 1000 & echo $! > " + fifo.path().string()}),
      exit.Callback());
  TC_ASSERT_OK(pid);
  std::optional<std::string> line = fifo.ReadLine();
  ASSERT_TRUE(line.has_value());
  int background = 0;
  ASSERT_TRUE(absl::SimpleAtoi(*line, &background)) << *line;

  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 0);
  // By the time on_exit runs, the background sleep is gone (killed and
  // reaped), and so is every other process of the group.
  EXPECT_EQ(kill(background, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_EQ(kill(-*pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(PosixProcessLauncherTest, Stop_ProcessHonoringTerm_EndsBySigterm) {
  ExitWaiter exit;
  absl::StatusOr<int> pid = launcher_.Launch(Spec({"sleep", "1000"}),
                                             exit.Callback());
  TC_ASSERT_OK(pid);
  TC_ASSERT_OK(launcher_.Stop(*pid, absl::Seconds(30)));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.signal, SIGTERM);
  EXPECT_EQ(exit.info.exit_code, 128 + SIGTERM);
}

TEST_F(PosixProcessLauncherTest, Stop_ProcessIgnoringTerm_IsKilledAfterGrace) {
  ReadyFifo fifo(dir_ / "ready");
  ExitWaiter exit;
  absl::StatusOr<int> pid = launcher_.Launch(
      Spec({"sh", "-c",
            "trap '' TERM; echo ready > " + fifo.path().string() +
                "; sleep 1000"}),
      exit.Callback());
  TC_ASSERT_OK(pid);
  // Only once the trap is set does SIGTERM have nothing to kill.
  ASSERT_EQ(fifo.ReadLine(), "ready");

  const absl::Duration grace = absl::Milliseconds(200);
  const absl::Time stopped_at = absl::Now();
  TC_ASSERT_OK(launcher_.Stop(*pid, grace));
  ASSERT_TRUE(exit.Wait());
  EXPECT_GE(absl::Now() - stopped_at, grace);
  EXPECT_EQ(exit.info.signal, SIGKILL);
  EXPECT_EQ(exit.info.exit_code, 137);
}

TEST_F(PosixProcessLauncherTest, Stop_GroupWithBackgroundChild_LeavesNoProcess) {
  ReadyFifo fifo(dir_ / "ready");
  ExitWaiter exit;
  absl::StatusOr<int> pid = launcher_.Launch(
      Spec({"sh", "-c",
            "sleep 1000 & echo $! > " + fifo.path().string() + "; sleep 1000"}),
      exit.Callback());
  TC_ASSERT_OK(pid);
  std::optional<std::string> line = fifo.ReadLine();
  ASSERT_TRUE(line.has_value());
  int background = 0;
  ASSERT_TRUE(absl::SimpleAtoi(*line, &background)) << *line;
  TC_ASSERT_OK(launcher_.Stop(*pid, absl::Seconds(30)));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.signal, SIGTERM);
  // Neither the background sleep nor any other process of the group is left.
  EXPECT_EQ(kill(background, 0), -1);
  EXPECT_EQ(errno, ESRCH);
  EXPECT_EQ(kill(-*pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(PosixProcessLauncherTest, Stop_ZeroGrace_KillsAtOnce) {
  ExitWaiter exit;
  absl::StatusOr<int> pid =
      launcher_.Launch(Spec({"sleep", "1000"}), exit.Callback());
  TC_ASSERT_OK(pid);
  TC_ASSERT_OK(launcher_.Stop(*pid, absl::ZeroDuration()));
  ASSERT_TRUE(exit.Wait());
  // SIGTERM and SIGKILL are sent together; either may be the one that lands.
  EXPECT_THAT(exit.info.signal, ::testing::AnyOf(SIGTERM, SIGKILL));
}

TEST_F(PosixProcessLauncherTest, Stop_ExitedOrUnknownPid_IsNotFound) {
  ExitWaiter exit;
  absl::StatusOr<int> pid = launcher_.Launch(Spec({"true"}), exit.Callback());
  TC_ASSERT_OK(pid);
  ASSERT_TRUE(exit.Wait());
  EXPECT_THAT(launcher_.Stop(*pid, absl::Seconds(1)),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr(std::to_string(*pid))));
  EXPECT_THAT(launcher_.Stop(getpid(), absl::Seconds(1)),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
}

TEST_F(PosixProcessLauncherTest, OnExit_LaunchingFromCallback_Works) {
  // The agent restarts a task from its exit callback.
  ExitWaiter second;
  absl::Notification first_done;
  absl::Mutex mu;
  absl::StatusOr<int> second_pid;
  TC_ASSERT_OK(launcher_.Launch(Spec({"true"}), [&](ExitInfo) {
    absl::StatusOr<int> pid =
        launcher_.Launch(Spec({"sh", "-c", "exit 5"}), second.Callback());
    absl::MutexLock lock(&mu);
    second_pid = pid;
    first_done.Notify();
  }));
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(kTimeout));
  {
    absl::MutexLock lock(&mu);
    TC_ASSERT_OK(second_pid);
  }
  ASSERT_TRUE(second.Wait());
  EXPECT_EQ(second.info.exit_code, 5);
}

TEST(PosixProcessLauncher, Destructor_RunningTask_IsKilledAndReported) {
  ExitWaiter exit;
  int pid = 0;
  {
    PosixProcessLauncher launcher;
    LaunchSpec spec;
    spec.argv = {"sleep", "1000"};
    spec.env = kEnv;
    absl::StatusOr<int> launched = launcher.Launch(spec, exit.Callback());
    TC_ASSERT_OK(launched);
    pid = *launched;
  }
  // The destructor returned only after on_exit ran.
  EXPECT_TRUE(exit.done.HasBeenNotified());
  EXPECT_EQ(exit.info.signal, SIGKILL);
  EXPECT_EQ(kill(-pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

#ifdef TRAINCTL_TASK_SHIM_PATH
// True when `pid` is gone or a zombie (its parent has not reaped it yet).
bool Dead(int pid) {
  if (kill(pid, 0) != 0) return true;
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  return paren == std::string::npos || stat.substr(paren + 2, 1) == "Z";
}

// Polls Dead(pid) until kTimeout.
bool WaitDead(int pid) {
  const absl::Time deadline = absl::Now() + kTimeout;
  while (absl::Now() < deadline) {
    if (Dead(pid)) return true;
    absl::SleepFor(absl::Milliseconds(10));  // polling a condition, with a deadline
  }
  return Dead(pid);
}

class TaskShimTest : public PosixProcessLauncherTest {
 protected:
  PosixProcessLauncher shimmed_{{.task_shim = TRAINCTL_TASK_SHIM_PATH,
                                 .orphan_grace = absl::Milliseconds(200)}};
};

TEST_F(TaskShimTest, Launch_ThroughShim_ReportsTheTasksExitCode) {
  ExitWaiter exit;
  TC_ASSERT_OK(shimmed_.Launch(Spec({"sh", "-c", "echo $0; exit 3"}), exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 3);
  EXPECT_EQ(exit.info.signal, 0);
  // argv[0] is the task's own, not the shim's.
  EXPECT_EQ(ReadFile(dir_ / "logs" / "job-1" / "rank-0.log"), "sh\n");
}

TEST_F(TaskShimTest, Stop_ThroughShim_ReportsTheTasksSignal) {
  ReadyFifo ready(dir_ / "ready");
  ExitWaiter exit;
  absl::StatusOr<int> pid = shimmed_.Launch(
      Spec({"sh", "-c", "echo ready > " + ready.path().string() + "; exec sleep 1000"}),
      exit.Callback());
  TC_ASSERT_OK(pid);
  ASSERT_EQ(ready.ReadLine(), "ready");
  // SIGTERM to the group: the task dies of it, the shim reports it as such.
  TC_ASSERT_OK(shimmed_.Stop(*pid, absl::Seconds(30)));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.signal, SIGTERM);
}

TEST_F(TaskShimTest, Launch_ThroughShim_TaskIgnoresNoSignal) {
  // The shim ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT for itself; the task
  // must get them back at their defaults (SigIgn in proc(5) is the mask of
  // ignored signals, in hex).
  ExitWaiter exit;
  TC_ASSERT_OK(shimmed_.Launch(Spec({"sh", "-c", "grep SigIgn /proc/self/status"}),
                               exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 0);
  const std::string line = ReadFile(dir_ / "logs" / "job-1" / "rank-0.log");
  uint64_t ignored = 0;
  ASSERT_TRUE(absl::SimpleHexAtoi(absl::StripAsciiWhitespace(
                                      absl::StripPrefix(line, "SigIgn:")),
                                  &ignored))
      << line;
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGQUIT}) {
    EXPECT_EQ(ignored & (uint64_t{1} << (sig - 1)), 0u) << "signal " << sig << ": " << line;
  }
}

TEST_F(TaskShimTest, Launch_ProgramVanishedBeforeExec_Exits127NamingIt) {
  // The launcher resolves the program first; if it is gone by the time the
  // shim execs it, the shim's own exit code (127) and a line in the log say
  // so.
  const fs::path program = dir_ / "vanishing";
  std::ofstream(program) << "#!/bin/sh\nexit 0\n";
  fs::permissions(program, fs::perms::owner_all);
  std::vector<std::string> args = {TRAINCTL_TASK_SHIM_PATH, std::to_string(getpid()),
                                   "200", (dir_ / "gone").string(), "gone"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const fs::path log = dir_ / "shim.log";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t shim = 0;
  ASSERT_EQ(posix_spawn(&shim, args[0].c_str(), &actions, nullptr, argv.data(), environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  ASSERT_EQ(waitpid(shim, &status, 0), shim);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 127);
  EXPECT_THAT(ReadFile(log), HasSubstr("cannot exec " + (dir_ / "gone").string()));
}

TEST(TaskShim, WatchedAgentKilled_WholeTaskGroupDies) {
  char pattern[] = "/tmp/tc_shim_test.XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const fs::path dir = pattern;
  // A stand-in for the agent: a child that waits until killed.
  const pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {
    pause();
    _exit(0);
  }
  ReadyFifo ready(dir / "ready");
  // The task leaves a grandchild in its group: it must die too.
  const std::string script =
      "sleep 1000 & echo $! > " + ready.path().string() + "; wait";
  std::vector<std::string> args = {TRAINCTL_TASK_SHIM_PATH, std::to_string(agent),
                                   "200", "/bin/sh", "sh", "-c", script};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t shim = 0;
  ASSERT_EQ(posix_spawn(&shim, args[0].c_str(), nullptr, &attr, argv.data(), environ), 0);
  posix_spawnattr_destroy(&attr);
  std::optional<std::string> line = ready.ReadLine();
  ASSERT_TRUE(line.has_value());
  int grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(*line, &grandchild)) << *line;
  EXPECT_FALSE(Dead(grandchild));

  // The agent dies of SIGKILL: no chance to clean up itself.
  kill(agent, SIGKILL);
  waitpid(agent, nullptr, 0);

  // The shim ends its group: the task and its grandchild are gone.
  EXPECT_TRUE(WaitDead(shim));
  int status = 0;
  EXPECT_EQ(waitpid(shim, &status, 0), shim);
  EXPECT_TRUE(WIFSIGNALED(status) || WIFEXITED(status));
  EXPECT_TRUE(WaitDead(grandchild));
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// Running a task as another account: root only (the shim's setuid).
class RunAsTest : public TaskShimTest {
 protected:
  void SetUp() override {
    TaskShimTest::SetUp();
    if (geteuid() != 0) GTEST_SKIP() << "needs root (setuid to another account)";
    absl::StatusOr<Account> nobody = LookupAccount("nobody");
    if (!nobody.ok()) GTEST_SKIP() << nobody.status();
    nobody_ = *nobody;
    // The account must reach its work dir: traverse-only for the temp dir.
    fs::permissions(dir_, fs::perms::owner_all | fs::perms::group_exec |
                              fs::perms::others_exec);
    workdir_ = dir_ / "work";
    fs::create_directories(workdir_);
    ASSERT_EQ(chown(workdir_.c_str(), nobody_.run_as.uid, nobody_.run_as.gid), 0);
  }
  LaunchSpec AsNobody(std::vector<std::string> argv) {
    LaunchSpec spec = Spec(std::move(argv));
    spec.run_as = nobody_.run_as;
    spec.workdir = workdir_.string();
    return spec;
  }
  Account nobody_;
  fs::path workdir_;
};

TEST_F(RunAsTest, Launch_RunAs_TaskRunsUnderTheAccountAndOwnsItsLog) {
  ExitWaiter exit;
  TC_ASSERT_OK(shimmed_.Launch(AsNobody({"sh", "-c", "id -u; id -g; pwd"}),
                               exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 0);
  const fs::path log = dir_ / "logs" / "job-1" / "rank-0.log";
  EXPECT_EQ(ReadFile(log), absl::StrCat(nobody_.run_as.uid, "\n", nobody_.run_as.gid,
                                        "\n", workdir_.string(), "\n"));
  struct stat st;
  ASSERT_EQ(stat(log.c_str(), &st), 0);
  EXPECT_EQ(static_cast<int>(st.st_uid), nobody_.run_as.uid);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(RunAsTest, Launch_RunAsCannotSignalRootsProcesses) {
  // The agent (root) is the task's neighbour here: the task may not signal it.
  ExitWaiter exit;
  TC_ASSERT_OK(shimmed_.Launch(
      AsNobody({"sh", "-c", absl::StrCat("kill -0 ", getpid(), " 2>&1; echo rc=$?")}),
      exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_THAT(ReadFile(dir_ / "logs" / "job-1" / "rank-0.log"), HasSubstr("rc=1"));
}

TEST_F(RunAsTest, Launch_RunAsWorkdirItMayNotEnter_Exit125WithTheReason) {
  const fs::path closed = dir_ / "closed";
  fs::create_directories(closed);
  fs::permissions(closed, fs::perms::owner_all, fs::perm_options::replace);
  LaunchSpec spec = AsNobody({"true"});
  spec.workdir = closed.string();
  ExitWaiter exit;
  TC_ASSERT_OK(shimmed_.Launch(spec, exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 125);
  EXPECT_THAT(ReadFile(dir_ / "logs" / "job-1" / "rank-0.log"),
              HasSubstr("cannot enter the working directory"));
}

// A task of another account runs with no_new_privs: a set-uid program gives
// it nothing.
TEST_F(RunAsTest, Launch_RunAs_TaskHasNoNewPrivs) {
  ExitWaiter exit;
  TC_ASSERT_OK(shimmed_.Launch(AsNobody({"sh", "-c", "grep NoNewPrivs /proc/self/status"}),
                               exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_THAT(ReadFile(dir_ / "logs" / "job-1" / "rank-0.log"), HasSubstr("NoNewPrivs:\t1"));
}

// Root podman: the process stays root (keep_root); each directory podman
// will mount is opened as the account, which must be able to enter it (else
// the task fails as without --image: exit 125, the same line), and what it
// opened is bound at a stage in the task's own mount namespace. A link put
// in the directory's place after the check changes nothing: the stage holds
// the directory the account opened.
TEST_F(RunAsTest, Launch_KeepRoot_BindsWhatTheAccountOpenedAtItsStage) {
  const fs::path closed = dir_ / "alices-project";
  fs::create_directories(closed);
  fs::permissions(closed, fs::perms::owner_all, fs::perm_options::replace);
  {
    std::ofstream(closed / "secret.txt") << "alice\n";
    std::ofstream(workdir_ / "mine.txt") << "nobody's\n";
  }
  const fs::path stage0 = dir_ / "stage-0", stage1 = dir_ / "stage-1";
  fs::create_directories(stage0);
  fs::create_directories(stage1);
  LaunchSpec spec = AsNobody({"sh", "-c", absl::StrCat("id -u; cat ", stage0.string(), "/*.txt")});
  spec.workdir = "/";
  spec.keep_root = true;
  spec.bind_as_account = {{workdir_.string(), stage0.string()},
                          {closed.string(), stage1.string()}};
  ExitWaiter refused;
  TC_ASSERT_OK(shimmed_.Launch(spec, refused.Callback()));
  ASSERT_TRUE(refused.Wait());
  EXPECT_EQ(refused.info.exit_code, 125);
  const fs::path log = dir_ / "logs" / "job-1" / "rank-0.log";
  EXPECT_THAT(ReadFile(log),
              HasSubstr(absl::StrCat("cannot enter the working directory ", closed.string(),
                                     " as uid ", nobody_.run_as.uid)));
  fs::remove(log);
  // Every directory open to the account: the process runs as root and sees
  // the account's directory at the stage; nothing is mounted outside.
  spec.bind_as_account = {{workdir_.string(), stage0.string()}};
  ExitWaiter ran;
  TC_ASSERT_OK(shimmed_.Launch(spec, ran.Callback()));
  ASSERT_TRUE(ran.Wait());
  EXPECT_EQ(ran.info.exit_code, 0);
  EXPECT_EQ(ReadFile(log), "0\nnobody's\n");
  EXPECT_TRUE(fs::is_empty(stage0));
}

// With shim_every_task off (the agent's guard covers its death), a task
// with no account and no cgroup starts directly: its parent is the launcher,
// not trainctl-task-shim; one that runs as an account still goes through it.
class ShimWhenNeededTest : public TaskShimTest {
 protected:
  PosixProcessLauncher when_needed_{{.task_shim = TRAINCTL_TASK_SHIM_PATH,
                                     .shim_every_task = false,
                                     .orphan_grace = absl::Milliseconds(200)}};
};

TEST_F(ShimWhenNeededTest, Launch_PlainTask_HasTheLauncherAsItsParent) {
  ExitWaiter exit;
  TC_ASSERT_OK(when_needed_.Launch(Spec({"sh", "-c", "echo $PPID"}), exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 0);
  EXPECT_EQ(ReadFile(dir_ / "logs" / "job-1" / "rank-0.log"), absl::StrCat(getpid(), "\n"));
}

TEST_F(ShimWhenNeededTest, Launch_EveryTaskOption_PutsTheShimFirst) {
  // The same task through `shimmed_` (shim_every_task, the default): its
  // parent is the shim, whose command name says so.
  ExitWaiter exit;
  TC_ASSERT_OK(shimmed_.Launch(Spec({"sh", "-c", "cat /proc/$PPID/comm"}), exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_THAT(ReadFile(dir_ / "logs" / "job-1" / "rank-0.log"),
              HasSubstr("trainctl-task-s"));
}

TEST_F(ShimWhenNeededTest, Launch_RunAsTask_StillGoesThroughTheShim) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root (setuid to another account)";
  absl::StatusOr<Account> nobody = LookupAccount("nobody");
  if (!nobody.ok()) GTEST_SKIP() << nobody.status();
  fs::permissions(dir_, fs::perms::owner_all | fs::perms::others_exec);
  LaunchSpec spec = Spec({"sh", "-c", "id -u; cat /proc/$PPID/comm"});
  spec.run_as = nobody->run_as;
  spec.workdir = "/";
  ExitWaiter exit;
  TC_ASSERT_OK(when_needed_.Launch(spec, exit.Callback()));
  ASSERT_TRUE(exit.Wait());
  EXPECT_EQ(exit.info.exit_code, 0);
  EXPECT_EQ(ReadFile(dir_ / "logs" / "job-1" / "rank-0.log"),
            absl::StrCat(nobody->run_as.uid, "\ntrainctl-task-s\n"));
}

TEST_F(TaskShimTest, Launch_RunAsWithoutShim_FailedPrecondition) {
  LaunchSpec spec = Spec({"true"});
  spec.run_as = RunAs{"nobody", 65534, 65534, {}};
  ExitWaiter exit;
  EXPECT_THAT(launcher_.Launch(spec, exit.Callback()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("task shim")));
}
#endif  // TRAINCTL_TASK_SHIM_PATH

}  // namespace
}  // namespace trainctl::worker
