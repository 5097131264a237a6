#ifndef TRAINCTL_WORKER_HW_PROCESS_LAUNCHER_H_
#define TRAINCTL_WORKER_HW_PROCESS_LAUNCHER_H_

// Starting and stopping task processes, behind an interface
// (PosixProcessLauncher for real processes).

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainctl::worker {

// A local account to run a task as (worker/hw/accounts.h resolves one).
struct RunAs {
  std::string user;
  int uid = -1;
  int gid = -1;
  // Supplementary groups (getgrouplist), the primary gid included.
  std::vector<int> groups;
};

struct LaunchSpec {
  // argv[0] is looked up in PATH (of `env`).
  std::vector<std::string> argv;
  // The child's whole environment (nothing else is inherited).
  std::map<std::string, std::string> env;
  // Working directory; must exist.
  std::string workdir;
  // stdout and stderr are appended to this file (created with its parent
  // directories, mode 0600, owned by run_as when set).
  std::string log_path;
  // Set: the task runs as this account (the launcher's process needs
  // CAP_SETUID and CAP_SETGID, i.e. root); unset: as the launcher's own.
  std::optional<RunAs> run_as;
  // Non-empty: a cgroup v2 directory the task is moved into before it
  // starts (worker/hw/cgroup.h); it must exist.
  std::string cgroup_dir;
  // With run_as: the process stays the launcher's account (root) instead of
  // becoming run_as, for a root helper that itself starts the task as
  // run_as (root podman's --user). `workdir` is then entered as root (give
  // "/": the helper sets the task's own).
  bool keep_root = false;
  // With keep_root: each (DIR, STAGE) is opened by a process of run_as (who
  // must be able to enter DIR, else the task fails to start as one whose
  // workdir run_as cannot enter: the shim's exit 125 and its line in the
  // log) and that very directory is bind-mounted at STAGE (an existing
  // directory only root reaches) in a mount namespace of the task's own, so
  // the helper mounts STAGE and gets what run_as opened, even if DIR is
  // swapped for a link meanwhile. Nothing is mounted outside the task's
  // namespace.
  std::vector<std::pair<std::string, std::string>> bind_as_account;
  // Interactive sessions (worker/pty_session.h). Set (>= 0): the caller's
  // descriptors that become the process's stdin, stdout, stderr instead of
  // /dev/null and the log file (log_path is then not opened for them; the
  // caller keeps its own copies).
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // Non-empty: the path of a pseudo-terminal's slave side (/dev/pts/N). The
  // process starts a new session (setsid) instead of only a process group
  // and opens this path as stdin, stdout and stderr, which makes it the
  // session's controlling terminal: Ctrl-C typed on it signals the
  // foreground process group, a resize sends SIGWINCH (the rules of
  // login(1) and sshd). Overrides the three descriptors above.
  std::string tty_path;
};

// How a process ended: exit_code when it exited (signal == 0), or the signal
// that killed it (exit_code is then 128 + signal, as shells report it).
struct ExitInfo {
  int exit_code = 0;
  int signal = 0;
};

// Thread-safe.
class ProcessLauncher {
 public:
  virtual ~ProcessLauncher() = default;

  // Starts `spec` as the leader of a new process group. `on_exit` is called
  // exactly once, from a launcher thread, when the leader ends; any process
  // left in its group is then killed (SIGKILL), so nothing outlives its task.
  // Returns the pid (= process group id).
  // Errors: INVALID_ARGUMENT for an empty argv; NOT_FOUND when argv[0] or the
  // workdir does not exist; FAILED_PRECONDITION when run_as or cgroup_dir is
  // set and the launcher cannot apply it; INTERNAL for other spawn failures
  // (with errno text).
  virtual absl::StatusOr<int> Launch(const LaunchSpec& spec,
                                     absl::AnyInvocable<void(ExitInfo)> on_exit) = 0;

  // Sends SIGTERM to the process group of `pid`, then SIGKILL to the group if
  // the leader has not ended after `grace`. Returns at once.
  // Errors: NOT_FOUND when `pid` is not a running process of this launcher.
  virtual absl::Status Stop(int pid, absl::Duration grace) = 0;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_PROCESS_LAUNCHER_H_
