// The agent guard (agent_guard.h) with real processes: each test forks a
// process that calls SplitGuard(), so the test binary itself is never split.
// Its own binary: fork needs a process without other threads.

#include "worker/hw/agent_guard.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

extern char** environ;

namespace trainctl::worker {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(10);

// Gone, or a zombie nobody has reaped yet (its parent may be an init that
// does not reap in a container): either way it runs no more.
bool Dead(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (text.empty()) return true;
  const size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

bool WaitDead(pid_t pid) {
  const absl::Time deadline = absl::Now() + kTimeout;
  while (!Dead(pid)) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

// The guard's wait status, or nullopt after kTimeout.
std::optional<int> WaitExit(pid_t guard) {
  const absl::Time deadline = absl::Now() + kTimeout;
  int status = 0;
  while (waitpid(guard, &status, WNOHANG) == 0) {
    if (absl::Now() > deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return status;
}

// A guarded "agent" in a forked process. `agent_main` runs as the agent; the
// pipe `report` carries lines from it and its tasks to the test.
class GuardedProcess {
 public:
  GuardedProcess(absl::Duration grace, std::function<void(int report_fd)> agent_main) {
    EXPECT_EQ(pipe(report_), 0);
    guard_ = fork();
    if (guard_ == 0) {
      close(report_[0]);
      absl::StatusOr<GuardSplit> split = SplitGuard(grace);
      if (!split.ok()) _exit(99);
      if (split->is_agent) {
        agent_main(report_[1]);
        _exit(0);
      }
      _exit(split->exit_code);
    }
    close(report_[1]);
    in_ = fdopen(report_[0], "r");
  }
  ~GuardedProcess() {
    if (in_ != nullptr) fclose(in_);
    if (guard_ > 0 && !reaped_) {
      kill(guard_, SIGKILL);
      waitpid(guard_, nullptr, 0);
    }
  }

  pid_t guard() const { return guard_; }
  // The next line written to the report pipe (blocking; the writers end
  // with the test's processes, so EOF ends it).
  std::string ReadLine() {
    char buf[256] = {};
    if (in_ == nullptr || fgets(buf, sizeof(buf), in_) == nullptr) return "";
    std::string line(buf);
    if (!line.empty() && line.back() == '\n') line.pop_back();
    return line;
  }
  std::optional<int> WaitGuardExit() {
    std::optional<int> status = WaitExit(guard_);
    reaped_ = status.has_value();
    return status;
  }

 private:
  int report_[2] = {-1, -1};
  FILE* in_ = nullptr;
  pid_t guard_ = -1;
  bool reaped_ = false;
};

// In the agent: starts `script` under sh as the leader of a new process
// group (as PosixProcessLauncher does), with fd 3 = the report pipe; writes
// "agent PID" to the pipe, then waits to be killed.
void AgentWithTask(int report_fd, const std::string& script) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, report_fd, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<std::string> args = {"sh", "-c", script};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t task = 0;
  if (posix_spawn(&task, "/bin/sh", &actions, &attr, argv.data(), environ) != 0) _exit(98);
  const std::string line = "agent " + std::to_string(getpid()) + "\n";
  if (write(report_fd, line.data(), line.size()) < 0) _exit(97);
  for (;;) pause();
}

// "task PID CHILD" written by a task script, parsed.
std::pair<pid_t, pid_t> TaskPids(const std::string& line) {
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  int task = 0, child = 0;
  EXPECT_EQ(parts.size(), 3u) << line;
  if (parts.size() == 3) {
    EXPECT_TRUE(absl::SimpleAtoi(parts[1], &task)) << line;
    EXPECT_TRUE(absl::SimpleAtoi(parts[2], &child)) << line;
  }
  return {task, child};
}

int AgentPid(const std::string& line) {
  int pid = 0;
  EXPECT_TRUE(absl::SimpleAtoi(absl::StripPrefix(line, "agent "), &pid)) << line;
  return pid;
}

// The lines of a started agent and its task, in either order.
void ReadAgentAndTask(GuardedProcess& p, int* agent, std::pair<pid_t, pid_t>* task) {
  for (int i = 0; i < 2; ++i) {
    const std::string line = p.ReadLine();
    if (line.rfind("agent ", 0) == 0) {
      *agent = AgentPid(line);
    } else {
      *task = TaskPids(line);
    }
  }
}

TEST(AgentGuard, AgentSigkilled_TaskGroupDiesAndGuardExitsLikeTheAgent) {
  // A task that leaves a grandchild in its group.
  GuardedProcess p(absl::Seconds(5), [](int fd) {
    AgentWithTask(fd, "sleep 1000 & echo task $$ $! >&3; wait");
  });
  int agent = 0;
  std::pair<pid_t, pid_t> task;
  ReadAgentAndTask(p, &agent, &task);
  ASSERT_GT(agent, 0);
  ASSERT_GT(task.first, 0);
  EXPECT_FALSE(Dead(task.first));

  // The agent dies of SIGKILL: no chance to clean up itself.
  kill(agent, SIGKILL);

  // The guard stops the task's group (sh and its sleep die of SIGTERM) and
  // exits as the agent did: 128 + 9.
  std::optional<int> status = p.WaitGuardExit();
  ASSERT_TRUE(status.has_value()) << "the guard did not exit";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 137);
  EXPECT_TRUE(WaitDead(task.first));
  EXPECT_TRUE(WaitDead(task.second));
}

TEST(AgentGuard, ProcessEscapedIntoItsOwnSession_IsStoppedToo) {
  // The task moves a child into a session (and process group) of its own:
  // the group kill misses it, but once its parent dies it is orphaned to
  // the guard, which stops it as well, without waiting for the 30 s grace.
  GuardedProcess p(absl::Seconds(30), [](int fd) {
    AgentWithTask(fd, "setsid sleep 1000 & echo task $$ $! >&3; wait");
  });
  int agent = 0;
  std::pair<pid_t, pid_t> task;
  ReadAgentAndTask(p, &agent, &task);
  ASSERT_GT(task.second, 0);
  kill(agent, SIGKILL);
  EXPECT_TRUE(WaitDead(task.first));
  EXPECT_TRUE(WaitDead(task.second));
  std::optional<int> status = p.WaitGuardExit();
  ASSERT_TRUE(status.has_value()) << "the guard did not exit";
}

TEST(AgentGuard, TaskIgnoresSigterm_KilledAfterGrace) {
  // The task ignores SIGTERM and keeps a grandchild that does too.
  GuardedProcess p(absl::Milliseconds(200), [](int fd) {
    AgentWithTask(fd,
                  "trap '' TERM; (trap '' TERM; while :; do sleep 0.05; done) & "
                  "echo task $$ $! >&3; while :; do sleep 0.05; done");
  });
  int agent = 0;
  std::pair<pid_t, pid_t> task;
  ReadAgentAndTask(p, &agent, &task);
  ASSERT_GT(agent, 0);
  kill(agent, SIGKILL);

  // SIGTERM is ignored: after the 200 ms grace, SIGKILL.
  std::optional<int> status = p.WaitGuardExit();
  ASSERT_TRUE(status.has_value()) << "the guard did not exit";
  EXPECT_TRUE(WaitDead(task.first));
  EXPECT_TRUE(WaitDead(task.second));
}

TEST(AgentGuard, GuardSigterm_ForwardedToTheAgent) {
  GuardedProcess p(absl::Seconds(5), [](int fd) {
    AgentWithTask(fd, "echo task $$ 0 >&3; exec sleep 1000");
  });
  int agent = 0;
  std::pair<pid_t, pid_t> task;
  ReadAgentAndTask(p, &agent, &task);

  // systemd stops the unit: SIGTERM to the main pid, the guard. The agent
  // gets it (here it has no handler, so it dies of it); its task goes too.
  kill(p.guard(), SIGTERM);
  std::optional<int> status = p.WaitGuardExit();
  ASSERT_TRUE(status.has_value()) << "the guard did not exit";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGTERM);
  EXPECT_TRUE(WaitDead(agent));
  EXPECT_TRUE(WaitDead(task.first));
}

TEST(AgentGuard, GuardSigkilled_AgentGetsSigterm) {
  GuardedProcess p(absl::Seconds(5), [](int fd) {
    AgentWithTask(fd, "echo task $$ 0 >&3; exec sleep 1000");
  });
  int agent = 0;
  std::pair<pid_t, pid_t> task;
  ReadAgentAndTask(p, &agent, &task);

  // The guard dies without a word: the agent gets SIGTERM (its parent-death
  // signal), which trainctl-agent handles as a shutdown (stopping its
  // tasks); this stand-in has no handler and dies of it.
  kill(p.guard(), SIGKILL);
  ASSERT_TRUE(p.WaitGuardExit().has_value());
  EXPECT_TRUE(WaitDead(agent));
  kill(-task.first, SIGKILL);  // The stand-in agent cannot stop it.
}

TEST(AgentGuard, AgentExits_GuardExitsWithItsCode) {
  GuardedProcess p(absl::Seconds(5), [](int) { _exit(3); });
  std::optional<int> status = p.WaitGuardExit();
  ASSERT_TRUE(status.has_value()) << "the guard did not exit";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 3);
}

}  // namespace
}  // namespace trainctl::worker
