// trainctl-task-shim: the first process of every task, so that a task never
// outlives its agent (no orphan holding a GPU after `kill -9` of the agent),
// and the one that puts the task in its cgroup and under its user's account.
//
//   trainctl-task-shim [--cgroup DIR] [--uid UID --gid GID [--groups G1,G2]
//                      [--keep-root [--bind-as-user DIR:STAGE]...] [--no-new-privs]]
//                      [--chdir DIR] WATCH_PID GRACE_MS PROGRAM ARGV0 [ARGS...]
//
// PosixProcessLauncher starts it (as the agent's user, usually root) as the
// leader of the task's process group with WATCH_PID = the agent's pid. The
// shim opens a pidfd on WATCH_PID (pidfd_open, Linux >= 5.3), then, in this
// order:
//  1. --cgroup: moves itself into the cgroup v2 directory DIR (writes "0" to
//     DIR/cgroup.procs), so the task and everything it forks are counted,
//     limited and killed there;
//  2. --uid/--gid: drops to the job's account for good: setgroups(GROUPS, or
//     none), setgid(GID), setuid(UID), and checks that it cannot get uid 0
//     back. From here on the shim is the user's own process: the user's task
//     may signal it, which harms only the user's own job;
//     With --no-new-privs it then sets no_new_privs
//     (prctl(PR_SET_NO_NEW_PRIVS)): no set-uid program or file capability
//     the task execs can give it more than the account has (the task can
//     still run them, without their privilege: `sudo` refuses, `ping`
//     needs no capability on kernels >= 3.x with ping_group_range).
//     With --keep-root the shim stays the agent's account instead (root
//     podman must be root to start the container as --user UID:GID). With
//     --bind-as-user DIR:STAGE (the directories podman will mount) it moves
//     into a mount namespace of its own (unshare(CLONE_NEWNS), every mount a
//     slave of the host's, so nothing it mounts is seen outside); a child
//     process that drops to the account as above opens each DIR (O_PATH)
//     and enters it, and hands the descriptors back over a socket
//     (SCM_RIGHTS); one it cannot enter fails the task as step 3 does, with
//     the same line. The shim bind-mounts each opened directory at its
//     STAGE, a directory only root reaches, which podman mounts in place of
//     DIR. So `--image` never mounts what the user could not
//     enter, not even if DIR is swapped for a link after the check: podman
//     gets the directory the user opened, not a path;
//  3. --chdir: enters the working directory as that account, so a directory
//     the user may not enter is refused (exit 125) rather than entered with
//     the agent's rights;
//  4. starts PROGRAM with argv ARGV0 ARGS... (posix_spawn; the environment
//     and descriptors as the launcher set them).
// It is linked statically (CMakeLists.txt): it runs once
// per task, and a static binary skips the dynamic loader's work at every
// start (about 0.5-1.5 ms on the 2-core VM of bench/README.md). The shim then waits for whichever comes first:
//  - the task ends: the shim exits with the task's exit code, or dies of the
//    task's signal, so the launcher sees the task's own status;
//  - WATCH_PID ends (the agent was killed): the shim sends SIGTERM to the
//    whole process group, waits up to GRACE_MS for the task, then SIGKILLs
//    the group (itself included).
//
// Why a pidfd, not prctl(PR_SET_PDEATHSIG): the death signal fires when the
// *thread* that forked the child ends, not the process (the agent spawns
// from several threads), it reaches only the direct child (not the rest of
// the group, e.g. the workers under `sh -c` or torchrun), and it is cleared
// by exec of a set-uid program and by the shim's own setuid. A pidfd watches
// the process as a whole (and stays valid across setuid), and the shim,
// staying behind, kills the whole group.
//
// The shim ignores SIGTERM, SIGINT, SIGHUP and SIGQUIT (a group-wide SIGTERM
// from the launcher's Stop() reaches the task directly; the shim stays to
// report its status); the task gets default dispositions back before exec.
// Exit codes of its own: 125 bad usage or setup failure (cgroup, account,
// working directory), 127 exec failed (both with a line on stderr, i.e. in
// the task's log).
//
// Limit: between the spawn and pidfd_open, the agent could die and its pid be
// reused; then the shim watches the wrong process. The window is
// microseconds; the shim checks that WATCH_PID exists.

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "worker/hw/cgroup_self.h"

extern char** environ;

namespace {

constexpr int kIgnored[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};

int PidfdOpen(pid_t pid) {
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
}

bool ParseInt(const char* s, long* out) {
  char* end = nullptr;
  errno = 0;
  *out = std::strtol(s, &end, 10);
  return errno == 0 && end != s && *end == '\0';
}

// Exits as the task did: its code, or its signal (default action).
[[noreturn]] void ExitLike(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, nullptr);
    raise(sig);
    // A signal whose default is to ignore it (cannot end a process): exit as
    // a shell would report it.
    _exit(128 + sig);
  }
  _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 125);
}

// Waits up to `ms` for `child` (its pidfd) to end; reaps it. True if it did.
bool WaitChild(pid_t child, int child_fd, int ms, int* status) {
  pollfd p{child_fd, POLLIN, 0};
  while (poll(&p, 1, ms) < 0 && errno == EINTR) {
  }
  return waitpid(child, status, WNOHANG) == child;
}

constexpr char kUsage[] =
    "usage: trainctl-task-shim [--cgroup DIR] [--uid UID --gid GID [--groups "
    "G1,G2] [--keep-root [--bind-as-user DIR:STAGE]...] [--no-new-privs]] [--chdir DIR] WATCH_PID "
    "GRACE_MS PROGRAM ARGV0 [ARGS...]\n";

struct Options {
  const char* cgroup = nullptr;
  const char* chdir = nullptr;
  long uid = -1;
  long gid = -1;
  std::vector<gid_t> groups;
  bool keep_root = false;
  bool no_new_privs = false;
  // --bind-as-user DIR:STAGE, split.
  std::vector<std::pair<std::string, std::string>> binds;
};

// Parses the options before WATCH_PID (getopt_long; "+": stop at the first
// operand, so the task's own arguments are never taken for ours). Returns
// the index of WATCH_PID, or -1 after printing what is wrong.
int ParseOptions(int argc, char** argv, Options* o) {
  static const option kLong[] = {{"cgroup", required_argument, nullptr, 'c'},
                                 {"chdir", required_argument, nullptr, 'd'},
                                 {"uid", required_argument, nullptr, 'u'},
                                 {"gid", required_argument, nullptr, 'g'},
                                 {"groups", required_argument, nullptr, 'G'},
                                 {"keep-root", no_argument, nullptr, 'k'},
                                 {"no-new-privs", no_argument, nullptr, 'n'},
                                 {"bind-as-user", required_argument, nullptr, 'B'},
                                 {nullptr, 0, nullptr, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "+", kLong, nullptr)) != -1) {
    switch (opt) {
      case 'c':
        o->cgroup = optarg;
        break;
      case 'd':
        o->chdir = optarg;
        break;
      case 'k':
        o->keep_root = true;
        break;
      case 'n':
        o->no_new_privs = true;
        break;
      case 'B': {
        const std::string arg = optarg;
        const size_t colon = arg.rfind(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == arg.size()) return -1;
        o->binds.emplace_back(arg.substr(0, colon), arg.substr(colon + 1));
        break;
      }
      case 'u':
        if (!ParseInt(optarg, &o->uid) || o->uid < 0) return -1;
        break;
      case 'g':
        if (!ParseInt(optarg, &o->gid) || o->gid < 0) return -1;
        break;
      case 'G': {
        std::string list = optarg;
        size_t start = 0;
        while (start <= list.size() && !list.empty()) {
          const size_t end = std::min(list.find(',', start), list.size());
          long g = 0;
          if (!ParseInt(list.substr(start, end - start).c_str(), &g) || g < 0) return -1;
          o->groups.push_back(static_cast<gid_t>(g));
          start = end + 1;
        }
        break;
      }
      default:
        return -1;
    }
  }
  if ((o->uid >= 0) != (o->gid >= 0)) return -1;
  if ((o->keep_root || o->no_new_privs) && o->uid < 0) return -1;
  if (o->keep_root && o->no_new_privs) return -1;
  if (!o->binds.empty() && !o->keep_root) return -1;
  return optind;
}

// Prints the line of a working directory the account cannot enter (the same
// for --chdir and --check-dir).
void CannotEnter(const char* dir, int err) {
  std::fprintf(stderr,
               "trainctl-task-shim: cannot enter the working directory %s as "
               "uid %d: %s\n",
               dir, static_cast<int>(getuid()), std::strerror(err));
}

// One message of one byte carrying `count` descriptors (SCM_RIGHTS), for
// sendmsg and recvmsg. Not copyable: msg points into it.
struct FdMessage {
  explicit FdMessage(size_t count) : control(CMSG_SPACE(sizeof(int) * count)) {
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
  char byte = 0;
  iovec iov{&byte, 1};
  std::vector<char> control;
  msghdr msg{};
};

// Sends `fds` over `sock` in one message. False on failure.
bool SendFds(int sock, const std::vector<int>& fds) {
  FdMessage m(fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&m.msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  return sendmsg(sock, &m.msg, 0) == 1;
}

// Receives `count` descriptors sent by SendFds; empty on failure.
std::vector<int> ReceiveFds(int sock, size_t count) {
  FdMessage m(count);
  ssize_t n;
  while ((n = recvmsg(sock, &m.msg, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR) {
  }
  cmsghdr* c = n == 1 ? CMSG_FIRSTHDR(&m.msg) : nullptr;
  if (c == nullptr || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
      c->cmsg_len != CMSG_LEN(sizeof(int) * count)) {
    return {};
  }
  std::vector<int> fds(count);
  std::memcpy(fds.data(), CMSG_DATA(c), sizeof(int) * count);
  return fds;
}

bool DropPrivileges(const Options& o);

// --keep-root's --bind-as-user: this process, still root, moves into a
// mount namespace of its own whose mounts are slaves of the host's; a child
// dropped to the account opens and enters each DIR there and sends the
// descriptors back; each descriptor's directory is bound at its STAGE. Returns
// false after printing why (the account cannot enter a DIR: the same line
// as --chdir's).
bool BindAsUser(const Options& o) {
  if (o.binds.empty()) return true;
  // First the namespace: a directory can be bound only from a mount of the
  // caller's namespace, so the opener must open in the new one (EINVAL
  // otherwise).
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) {
    std::fprintf(stderr, "trainctl-task-shim: a mount namespace of its own: %s\n",
                 std::strerror(errno));
    return false;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    std::fprintf(stderr, "trainctl-task-shim: socketpair: %s\n", std::strerror(errno));
    return false;
  }
  const pid_t opener = fork();
  if (opener < 0) {
    std::fprintf(stderr, "trainctl-task-shim: fork: %s\n", std::strerror(errno));
    return false;
  }
  if (opener == 0) {
    close(sv[0]);
    if (!DropPrivileges(o)) _exit(125);
    std::vector<int> fds;
    for (const auto& [dir, stage] : o.binds) {
      const int fd = open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0 || fchdir(fd) != 0) {
        CannotEnter(dir.c_str(), errno);
        _exit(125);
      }
      fds.push_back(fd);
    }
    _exit(SendFds(sv[1], fds) ? 0 : 125);
  }
  close(sv[1]);
  std::vector<int> fds = ReceiveFds(sv[0], o.binds.size());
  close(sv[0]);
  int status = 0;
  while (waitpid(opener, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || fds.size() != o.binds.size()) {
    for (int fd : fds) close(fd);
    return false;
  }
  bool ok = true;
  for (size_t i = 0; ok && i < fds.size(); ++i) {
    const std::string source = "/proc/self/fd/" + std::to_string(fds[i]);
    if (mount(source.c_str(), o.binds[i].second.c_str(), nullptr, MS_BIND | MS_REC,
              nullptr) != 0) {
      std::fprintf(stderr, "trainctl-task-shim: bind %s at %s: %s\n",
                   o.binds[i].first.c_str(), o.binds[i].second.c_str(), std::strerror(errno));
      ok = false;
    }
  }
  for (int fd : fds) close(fd);
  return ok;
}

// Drops to uid/gid/groups for good. Returns false after printing why.
bool DropPrivileges(const Options& o) {
  if (setgroups(o.groups.size(), o.groups.empty() ? nullptr : o.groups.data()) != 0) {
    std::fprintf(stderr, "trainctl-task-shim: setgroups: %s\n", std::strerror(errno));
    return false;
  }
  if (setgid(static_cast<gid_t>(o.gid)) != 0) {
    std::fprintf(stderr, "trainctl-task-shim: setgid(%ld): %s\n", o.gid,
                 std::strerror(errno));
    return false;
  }
  if (setuid(static_cast<uid_t>(o.uid)) != 0) {
    std::fprintf(stderr, "trainctl-task-shim: setuid(%ld): %s\n", o.uid,
                 std::strerror(errno));
    return false;
  }
  if (getuid() != static_cast<uid_t>(o.uid) || geteuid() != static_cast<uid_t>(o.uid) ||
      getgid() != static_cast<gid_t>(o.gid) || (o.uid != 0 && setuid(0) == 0)) {
    std::fprintf(stderr, "trainctl-task-shim: could not drop to uid %ld gid %ld\n",
                 o.uid, o.gid);
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  const int first = ParseOptions(argc, argv, &options);
  long watch = 0, grace_ms = 0;
  if (first < 0 || argc - first < 4 || !ParseInt(argv[first], &watch) || watch <= 0 ||
      !ParseInt(argv[first + 1], &grace_ms) || grace_ms < 0) {
    std::fputs(kUsage, stderr);
    return 125;
  }
  const int watch_fd = PidfdOpen(static_cast<pid_t>(watch));
  if (watch_fd < 0) {
    std::fprintf(stderr,
                 "trainctl-task-shim: cannot watch the agent (pid %ld): %s; "
                 "not starting the task\n",
                 watch, std::strerror(errno));
    return 125;
  }
  for (int sig : kIgnored) signal(sig, SIG_IGN);
  if (options.cgroup != nullptr) {
    if (const int err = trainctl::worker::MoveSelfIntoCgroup(options.cgroup); err != 0) {
      std::fprintf(stderr, "trainctl-task-shim: cannot enter cgroup %s: %s\n",
                   options.cgroup, std::strerror(err));
      return 125;
    }
  }
  if (options.keep_root) {
    if (!BindAsUser(options)) return 125;
  } else if (options.uid >= 0 && !DropPrivileges(options)) {
    return 125;
  }
  if (options.no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    std::fprintf(stderr, "trainctl-task-shim: prctl(PR_SET_NO_NEW_PRIVS): %s\n",
                 std::strerror(errno));
    return 125;
  }
  if (options.chdir != nullptr && chdir(options.chdir) != 0) {
    CannotEnter(options.chdir, errno);
    return 125;
  }

  // posix_spawn (glibc: clone(CLONE_VM | CLONE_VFORK)) rather than fork:
  // no copy of the shim's page tables, and the exec's failure comes back as
  // the return value. The task gets default dispositions of the signals the
  // shim ignores; watch_fd is close-on-exec (pidfds always are).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : kIgnored) sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t child = 0;
  const int err = posix_spawn(&child, argv[first + 2], nullptr, &attr, argv + first + 3, environ);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    std::fprintf(stderr, "trainctl-task-shim: cannot exec %s: %s\n", argv[first + 2],
                 std::strerror(err));
    return 127;
  }
  const int child_fd = PidfdOpen(child);
  if (child_fd < 0) {
    // Cannot happen for our own unreaped child; fall back to waiting.
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    ExitLike(status);
  }

  pollfd fds[2] = {{child_fd, POLLIN, 0}, {watch_fd, POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int status = 0;
    if (fds[0].revents != 0) {
      while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      ExitLike(status);
    }
    if (fds[1].revents != 0) {
      std::fprintf(stderr,
                   "trainctl-task-shim: the agent (pid %ld) is gone: stopping "
                   "the task (SIGTERM, SIGKILL after %ld ms)\n",
                   watch, grace_ms);
      kill(0, SIGTERM);
      if (!WaitChild(child, child_fd, static_cast<int>(grace_ms), &status)) {
        kill(0, SIGKILL);  // The group, this shim included.
      }
      // The task ended within the grace; the rest of the group goes too.
      signal(SIGTERM, SIG_DFL);
      kill(0, SIGKILL);
      _exit(137);
    }
  }
  std::fprintf(stderr, "trainctl-task-shim: poll: %s\n", std::strerror(errno));
  kill(0, SIGKILL);
  return 125;
}
