#include "worker/hw/agent_guard.h"

#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainctl::worker {
namespace {

constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

struct Orphan {
  pid_t pid;
  pid_t pgid;
};

// Live (not zombie) children of this process, from /proc/<pid>/stat.
std::vector<Orphan> LiveChildren() {
  std::vector<Orphan> out;
  const pid_t self = getpid();
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* e = readdir(proc)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    char path[64];
    std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE* f = std::fopen(path, "re");
    if (f == nullptr) continue;
    char buf[512];
    const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
    const char* close = std::strrchr(buf, ')');
    char state = 0;
    int ppid = 0, pgrp = 0;
    if (close == nullptr ||
        std::sscanf(close + 1, " %c %d %d", &state, &ppid, &pgrp) != 3) {
      continue;
    }
    if (ppid == self && state != 'Z') out.push_back({pid, pgrp});
  }
  closedir(proc);
  return out;
}

// Reaps every child that has ended, without blocking.
void ReapEnded() {
  int status = 0;
  while (waitpid(-1, &status, WNOHANG) > 0) {
  }
}

void SignalAll(const std::vector<Orphan>& orphans, int sig) {
  for (const Orphan& o : orphans) {
    if (o.pgid > 1) kill(-o.pgid, sig);
    kill(o.pid, sig);
  }
}

// After the agent ended: its children are ours now. SIGTERM to each group,
// `grace`, then SIGKILL until none is left; everything is reaped.
void StopOrphans(pid_t agent, int agent_status, absl::Duration grace,
                 const sigset_t& wake) {
  std::vector<Orphan> orphans = LiveChildren();
  if (orphans.empty()) {
    ReapEnded();
    return;
  }
  std::fprintf(stderr,
               "trainctl-guard: the agent (pid %d) %s %d; stopping the %zu "
               "task process(es) it left (SIGTERM, SIGKILL after %s)\n",
               static_cast<int>(agent),
               WIFSIGNALED(agent_status) ? "was killed by signal" : "exited with code",
               WIFSIGNALED(agent_status) ? WTERMSIG(agent_status)
                                         : WEXITSTATUS(agent_status),
               orphans.size(), absl::FormatDuration(grace).c_str());
  SignalAll(orphans, SIGTERM);
  std::set<pid_t> terminated;
  for (const Orphan& o : orphans) terminated.insert(o.pid);
  const absl::Time deadline = absl::Now() + grace;
  for (;;) {
    ReapEnded();
    orphans = LiveChildren();
    if (orphans.empty()) return;
    // Newly orphaned to us (e.g. a process a task had moved into its own
    // session, whose parent just died): SIGTERM it too, with the same grace.
    for (const Orphan& o : orphans) {
      if (terminated.insert(o.pid).second) SignalAll({o}, SIGTERM);
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    // A child's end (SIGCHLD, blocked) wakes us; at most 50 ms between looks.
    const timespec ts = absl::ToTimespec(std::min(left, absl::Milliseconds(50)));
    sigtimedwait(&wake, nullptr, &ts);
  }
  // SIGKILL, repeatedly: a killed task's own children are orphaned to us in
  // turn (those in its group die with it; others are found by the next scan).
  while (!orphans.empty()) {
    SignalAll(orphans, SIGKILL);
    int status = 0;
    while (waitpid(-1, &status, 0) > 0 || errno == EINTR) {
    }
    orphans = LiveChildren();
  }
}

int ExitCodeOf(int status) {
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

absl::StatusOr<GuardSplit> SplitGuard(absl::Duration grace) {
  // Block the signals the guard waits for before forking, so none is lost
  // between fork and sigwaitinfo; the agent restores the mask.
  sigset_t wait_set, old_mask;
  sigemptyset(&wait_set);
  for (int sig : kForwarded) sigaddset(&wait_set, sig);
  sigaddset(&wait_set, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &wait_set, &old_mask) != 0) {
    return absl::InternalError("sigprocmask: " + ErrnoText());
  }
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    const std::string why = ErrnoText();
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return absl::InternalError("prctl(PR_SET_CHILD_SUBREAPER): " + why);
  }
  const pid_t guard = getpid();
  const pid_t agent = fork();
  if (agent < 0) {
    const std::string why = ErrnoText();
    prctl(PR_SET_CHILD_SUBREAPER, 0);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    return absl::InternalError("fork: " + why);
  }
  if (agent == 0) {
    // The agent (PR_SET_CHILD_SUBREAPER is not inherited: the launcher sets
    // the agent's own, for its tasks' orphans).
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    // The guard died before PDEATHSIG was armed: behave as if signalled.
    if (getppid() != guard) raise(SIGTERM);
    return GuardSplit{.is_agent = true};
  }

  // The guard: one thread, signals blocked, woken by sigwaitinfo.
  prctl(PR_SET_NAME, "trainctl-guard");
  int agent_status = 0;
  for (bool agent_done = false; !agent_done;) {
    siginfo_t info;
    const int sig = sigwaitinfo(&wait_set, &info);
    if (sig < 0) continue;  // EINTR
    if (sig != SIGCHLD) {
      kill(agent, sig);
      continue;
    }
    // Reap what ended (orphans of the agent's tasks come to the agent, its
    // own subreaper, not here; this is for the agent itself).
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      if (pid == agent) {
        agent_status = status;
        agent_done = true;
      }
    }
  }
  StopOrphans(agent, agent_status, grace, wait_set);
  return GuardSplit{.is_agent = false, .exit_code = ExitCodeOf(agent_status)};
}

}  // namespace trainctl::worker
