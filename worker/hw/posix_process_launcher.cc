#include "worker/hw/posix_process_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/logging.h"

namespace trainctl::worker {
namespace {

namespace fs = std::filesystem;

std::string ErrnoText(int err) { return std::strerror(err); }

// A path as the child will see it after chdir(workdir).
fs::path InWorkdir(const std::string& workdir, const fs::path& path) {
  if (path.is_absolute() || workdir.empty()) return path;
  return fs::path(workdir) / path;
}

bool IsExecutableFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && access(path.c_str(), X_OK) == 0;
}

// The path posix_spawn should execute for `spec.argv[0]`: as given when it
// contains '/', else the first executable match in the PATH of spec.env (as
// execvp does, but with the child's PATH rather than the agent's).
absl::StatusOr<std::string> ResolveProgram(const LaunchSpec& spec) {
  const std::string& program = spec.argv[0];
  if (program.empty()) {
    return absl::InvalidArgumentError("argv[0] is empty: no program to run");
  }
  if (program.find('/') != std::string::npos) {
    if (!IsExecutableFile(InWorkdir(spec.workdir, program))) {
      return absl::NotFoundError(absl::StrFormat(
          "program \"%s\" does not exist or is not an executable file%s",
          program,
          fs::path(program).is_absolute()
              ? ""
              : absl::StrFormat(" (relative to workdir %s)", spec.workdir)));
    }
    return program;
  }
  auto path_it = spec.env.find("PATH");
  const std::string search_path =
      path_it != spec.env.end() ? path_it->second : "/bin:/usr/bin";
  for (absl::string_view dir : absl::StrSplit(search_path, ':')) {
    // An empty PATH entry means the current directory.
    const fs::path candidate =
        (dir.empty() ? fs::path(".") : fs::path(std::string(dir))) / program;
    if (IsExecutableFile(InWorkdir(spec.workdir, candidate))) {
      return candidate.string();
    }
  }
  return absl::NotFoundError(absl::StrFormat(
      "program \"%s\" not found in the task's PATH=\"%s\"%s", program,
      search_path,
      path_it == spec.env.end() ? " (the task env has no PATH; default used)"
                                : ""));
}

// Opens the task's log for appending, creating it and its parent directories;
// hands it to `run_as` when set.
absl::StatusOr<int> OpenLog(const std::string& log_path,
                            const std::optional<RunAs>& run_as) {
  if (log_path.empty()) {
    const int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::InternalError("cannot open /dev/null: " + ErrnoText(errno));
    }
    return fd;
  }
  constexpr int kFlags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC;
  // Owner-only: a task's output may hold secrets; the agent serves it to
  // the job's owner through `trainctl logs`.
  constexpr mode_t kLogMode = 0600;
  // Usually the directory is there (one per 1,000 jobs): one open, no stat.
  int fd = open(log_path.c_str(), kFlags, kLogMode);
  const fs::path parent = fs::path(log_path).parent_path();
  if (fd < 0 && errno == ENOENT && !parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
    if (ec) {
      return absl::InternalError(absl::StrFormat(
          "cannot create the log directory %s: %s", parent.string(),
          ec.message()));
    }
    fd = open(log_path.c_str(), kFlags, kLogMode);
  }
  if (fd < 0) {
    return absl::InternalError(absl::StrFormat("cannot open the log file %s: %s",
                                               log_path, ErrnoText(errno)));
  }
  // The job's user owns its log (it may read it on the node directly); the
  // agent, as root, still reads it for `trainctl logs`.
  if (run_as.has_value() && fchown(fd, run_as->uid, run_as->gid) != 0) {
    const int err = errno;
    close(fd);
    return absl::InternalError(absl::StrFormat(
        "cannot give the log file %s to %s (uid %d): %s", log_path,
        run_as->user, run_as->uid, ErrnoText(err)));
  }
  return fd;
}

// posix_spawn's attribute and file-action objects, destroyed on scope exit.
class SpawnSetup {
 public:
  SpawnSetup() {
    posix_spawnattr_init(&attr_);
    posix_spawn_file_actions_init(&actions_);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions_);
    posix_spawnattr_destroy(&attr_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;

  posix_spawnattr_t* attr() { return &attr_; }
  posix_spawn_file_actions_t* actions() { return &actions_; }

 private:
  posix_spawnattr_t attr_;
  posix_spawn_file_actions_t actions_;
};

// Fills `setup` for a child that leads a new process group, has default
// signal dispositions and an empty mask (the agent may ignore SIGPIPE or block
// signals; ignored signals survive exec), stdin from /dev/null, stdout and
// stderr on `log_fd` (or spec's own descriptors, or spec.tty_path as its
// controlling terminal in a session of its own), runs in `workdir` and
// inherits no other descriptor.
// An empty `workdir` leaves the directory alone (the shim enters it).
int PrepareSpawn(SpawnSetup& setup, int log_fd, const std::string& workdir,
                 const LaunchSpec& spec) {
  const bool tty = !spec.tty_path.empty();
  int err = posix_spawnattr_setflags(
      setup.attr(), (tty ? POSIX_SPAWN_SETSID : POSIX_SPAWN_SETPGROUP) |
                        POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  if (err == 0 && !tty) err = posix_spawnattr_setpgroup(setup.attr(), 0);
  sigset_t none;
  sigemptyset(&none);
  if (err == 0) err = posix_spawnattr_setsigmask(setup.attr(), &none);
  sigset_t all;
  sigfillset(&all);
  if (err == 0) err = posix_spawnattr_setsigdefault(setup.attr(), &all);
  if (err == 0 && !workdir.empty()) {
    err = posix_spawn_file_actions_addchdir_np(setup.actions(), workdir.c_str());
  }
  if (tty) {
    // glibc runs the file actions after setsid(): a session leader with no
    // controlling terminal that opens a terminal without O_NOCTTY acquires
    // it as its controlling terminal.
    if (err == 0) {
      err = posix_spawn_file_actions_addopen(setup.actions(), STDIN_FILENO,
                                             spec.tty_path.c_str(), O_RDWR, 0);
    }
    if (err == 0) {
      err = posix_spawn_file_actions_adddup2(setup.actions(), STDIN_FILENO, STDOUT_FILENO);
    }
    if (err == 0) {
      err = posix_spawn_file_actions_adddup2(setup.actions(), STDIN_FILENO, STDERR_FILENO);
    }
  } else {
    if (err == 0 && spec.stdin_fd >= 0) {
      err = posix_spawn_file_actions_adddup2(setup.actions(), spec.stdin_fd, STDIN_FILENO);
    } else if (err == 0) {
      err = posix_spawn_file_actions_addopen(setup.actions(), STDIN_FILENO,
                                             "/dev/null", O_RDONLY, 0);
    }
    if (err == 0) {
      err = posix_spawn_file_actions_adddup2(
          setup.actions(), spec.stdout_fd >= 0 ? spec.stdout_fd : log_fd, STDOUT_FILENO);
    }
    if (err == 0) {
      err = posix_spawn_file_actions_adddup2(
          setup.actions(), spec.stderr_fd >= 0 ? spec.stderr_fd : log_fd, STDERR_FILENO);
    }
  }
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  // Descriptors the agent opened without O_CLOEXEC stay out of tasks.
  if (err == 0) err = posix_spawn_file_actions_addclosefrom_np(setup.actions(), 3);
#endif
  return err;
}

// Sends `sig` to process group `pgid`; a group that is already gone is fine.
void SignalGroup(int pgid, int sig) {
  if (kill(-pgid, sig) != 0 && errno != ESRCH) {
    // EPERM: a task changed its credentials; nothing more we can do here.
  }
}

ExitInfo ToExitInfo(int status) {
  ExitInfo info;
  if (WIFSIGNALED(status)) {
    info.signal = WTERMSIG(status);
    info.exit_code = 128 + info.signal;
  } else if (WIFEXITED(status)) {
    info.exit_code = WEXITSTATUS(status);
  }
  return info;
}

}  // namespace

PosixProcessLauncher::PosixProcessLauncher(Options options)
    : options_(std::move(options)), housekeeper_([this] { Housekeep(); }) {
  // Orphans of a task's processes are reparented to this process rather than
  // to init, so Wait() can reap the whole group before reporting the exit.
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    TC_LOG_WARN(
        "prctl(PR_SET_CHILD_SUBREAPER) failed: {}; processes a task leaves "
        "behind may outlive its exit report by a moment",
        ErrnoText(errno));
  }
}

PosixProcessLauncher::~PosixProcessLauncher() {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (const auto& [pid, child] : children_) SignalGroup(pid, SIGKILL);
    housekeeping_cv_.Signal();
  }
  housekeeper_.join();
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &active_waiters_));
    threads.swap(finished_);
  }
  for (std::thread& t : threads) t.join();
}

absl::StatusOr<std::string> PosixProcessLauncher::FindProgram(const LaunchSpec& spec) {
  const std::string& program = spec.argv[0];
  if (options_.program_lookup_ttl <= absl::ZeroDuration() || program.empty() ||
      program.find('/') != std::string::npos) {
    return ResolveProgram(spec);
  }
  auto path_it = spec.env.find("PATH");
  // The workdir is part of the key: an empty or relative PATH entry is
  // searched there.
  const std::string key = absl::StrCat(
      program, absl::string_view("\0", 1),
      path_it != spec.env.end() ? path_it->second : "", absl::string_view("\0", 1),
      spec.workdir);
  const absl::Time now = absl::Now();
  std::string reused;
  {
    absl::MutexLock lock(&lookups_mu_);
    auto it = lookups_.find(key);
    if (it != lookups_.end() && now < it->second.expires) reused = it->second.path;
  }
  // Checked without the lock: a stat.
  if (!reused.empty() && IsExecutableFile(InWorkdir(spec.workdir, reused))) return reused;
  absl::StatusOr<std::string> found = ResolveProgram(spec);
  absl::MutexLock lock(&lookups_mu_);
  if (!found.ok()) {
    lookups_.erase(key);
    return found;
  }
  if (lookups_.size() >= kMaxProgramLookups) lookups_.clear();
  lookups_[key] = ProgramLookup{*found, now + options_.program_lookup_ttl};
  return found;
}

absl::StatusOr<int> PosixProcessLauncher::Launch(
    const LaunchSpec& spec, absl::AnyInvocable<void(ExitInfo)> on_exit) {
  if (spec.argv.empty()) {
    return absl::InvalidArgumentError("empty argv: no program to run");
  }
  if (!spec.workdir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(spec.workdir, ec)) {
      return absl::NotFoundError(absl::StrFormat(
          "workdir %s does not exist or is not a directory", spec.workdir));
    }
  }
  if ((spec.keep_root || !spec.bind_as_account.empty()) && !spec.run_as.has_value()) {
    return absl::InvalidArgumentError("keep_root and bind_as_account need run_as");
  }
  if (!spec.bind_as_account.empty() && !spec.keep_root) {
    return absl::InvalidArgumentError("bind_as_account needs keep_root");
  }
  if ((spec.run_as.has_value() || !spec.cgroup_dir.empty()) &&
      options_.task_shim.empty()) {
    return absl::FailedPreconditionError(
        "a task to run as another account or in a cgroup needs the task shim "
        "(trainctl-task-shim), and this launcher has none");
  }
  if (spec.run_as.has_value() && spec.run_as->uid != static_cast<int>(geteuid()) &&
      geteuid() != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "cannot run the task as %s (uid %d): the agent runs as uid %d, not "
        "root, and may start tasks only as itself",
        spec.run_as->user, spec.run_as->uid, static_cast<int>(geteuid())));
  }
  absl::StatusOr<std::string> program = FindProgram(spec);
  if (!program.ok()) return program.status();
  absl::StatusOr<int> log_fd = OpenLog(spec.log_path, spec.run_as);
  if (!log_fd.ok()) return log_fd.status();

  std::vector<std::string> env_strings;
  env_strings.reserve(spec.env.size());
  for (const auto& [name, value] : spec.env) {
    env_strings.push_back(name + "=" + value);
  }
  // Through the shim: trainctl-task-shim [OPTIONS] AGENT_PID GRACE_MS
  // PROGRAM ARGV... (task_shim.cc). With run_as, the shim enters the workdir
  // after dropping to the account, so posix_spawn does not.
  std::vector<std::string> shim_args;
  std::string spawn_workdir = spec.workdir;
  const bool through_shim =
      !options_.task_shim.empty() &&
      (options_.shim_every_task || spec.run_as.has_value() || !spec.cgroup_dir.empty());
  if (through_shim) {
    shim_args = {options_.task_shim};
    if (!spec.cgroup_dir.empty()) {
      shim_args.insert(shim_args.end(), {"--cgroup", spec.cgroup_dir});
    }
    if (spec.run_as.has_value()) {
      shim_args.insert(shim_args.end(),
                       {"--uid", std::to_string(spec.run_as->uid), "--gid",
                        std::to_string(spec.run_as->gid)});
      if (!spec.run_as->groups.empty()) {
        shim_args.insert(shim_args.end(),
                         {"--groups", absl::StrJoin(spec.run_as->groups, ",")});
      }
      if (!spec.workdir.empty()) {
        shim_args.insert(shim_args.end(), {"--chdir", spec.workdir});
        spawn_workdir.clear();
      }
      if (spec.keep_root) {
        shim_args.push_back("--keep-root");
      } else if (options_.no_new_privs) {
        shim_args.push_back("--no-new-privs");
      }
      for (const auto& [dir, stage] : spec.bind_as_account) {
        shim_args.insert(shim_args.end(), {"--bind-as-user", absl::StrCat(dir, ":", stage)});
      }
    }
    shim_args.insert(shim_args.end(),
                     {std::to_string(getpid()),
                      std::to_string(absl::ToInt64Milliseconds(options_.orphan_grace)),
                      *program});
  }
  std::vector<char*> argv;
  for (std::string& arg : shim_args) argv.push_back(arg.data());
  for (const std::string& arg : spec.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  const std::string& exec_path =
      through_shim ? options_.task_shim : *program;
  std::vector<char*> envp;
  for (std::string& var : env_strings) envp.push_back(var.data());
  envp.push_back(nullptr);

  SpawnSetup setup;
  int err = PrepareSpawn(setup, *log_fd, spawn_workdir, spec);
  if (err != 0) {
    close(*log_fd);
    return absl::InternalError("cannot prepare posix_spawn: " + ErrnoText(err));
  }

  absl::MutexLock lock(&mu_);
  if (shutting_down_) {
    close(*log_fd);
    return absl::UnavailableError(absl::StrFormat(
        "cannot start %s: the process launcher is shutting down", spec.argv[0]));
  }
  // The program path is already resolved, so posix_spawn (not posix_spawnp)
  // execs exactly it. glibc reports exec and file-action failures of the
  // child as the return value.
  pid_t pid = 0;
  err = posix_spawn(&pid, exec_path.c_str(), setup.actions(), setup.attr(),
                    argv.data(), envp.data());
  close(*log_fd);
  if (err == ENOENT) {
    std::error_code ec;
    if (!spec.workdir.empty() && !fs::is_directory(spec.workdir, ec)) {
      return absl::NotFoundError(
          absl::StrFormat("workdir %s does not exist", spec.workdir));
    }
    return absl::NotFoundError(absl::StrFormat(
        "cannot start %s: %s (%s)", spec.argv[0], ErrnoText(err), *program));
  }
  if (err != 0) {
    return absl::InternalError(absl::StrFormat(
        "posix_spawn of %s (%s) failed: %s", spec.argv[0], *program,
        ErrnoText(err)));
  }
  Child& child = children_[pid];
  child.on_exit = std::move(on_exit);
  ++active_waiters_;
  // The waiter needs mu_ to finish, so it cannot outrun this assignment.
  child.waiter = std::thread([this, pid] { Wait(pid); });
  return static_cast<int>(pid);
}

absl::Status PosixProcessLauncher::Stop(int pid, absl::Duration grace) {
  absl::MutexLock lock(&mu_);
  auto it = children_.find(pid);
  if (it == children_.end()) {
    return absl::NotFoundError(absl::StrFormat(
        "process %d is not running under this agent (it has exited or was "
        "never started here)",
        pid));
  }
  // The leader is not reaped while we hold mu_, so `pid` still names our
  // process group.
  SignalGroup(pid, SIGTERM);
  if (grace <= absl::ZeroDuration()) {
    SignalGroup(pid, SIGKILL);
    return absl::OkStatus();
  }
  it->second.kill_deadline = std::min(it->second.kill_deadline, absl::Now() + grace);
  housekeeping_cv_.Signal();
  return absl::OkStatus();
}

void PosixProcessLauncher::Wait(int pid) {
  // Wait for the leader to end without reaping it: as a zombie it keeps its
  // pid, and so the process group id, from being reused while we kill the
  // rest of the group.
  siginfo_t info;
  while (waitid(P_PID, pid, &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  SignalGroup(pid, SIGKILL);

  int status = 0;
  absl::AnyInvocable<void(ExitInfo)> on_exit;
  std::thread self;
  {
    absl::MutexLock lock(&mu_);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    auto it = children_.find(pid);
    on_exit = std::move(it->second.on_exit);
    self = std::move(it->second.waiter);
    children_.erase(it);
  }
  // The rest of the group, orphaned and so reparented to us (subreaper), dies
  // of the SIGKILL; reap it so that no process of the task, not even a
  // zombie, is left when on_exit runs. A process whose parent is still dying
  // is reparented to us before that parent can be reaped, so ECHILD means the
  // group is gone. A process stuck in the kernel (D state) delays this.
  int ignored = 0;
  while (waitpid(-pid, &ignored, 0) > 0 || errno == EINTR) {
  }

  if (on_exit) on_exit(ToExitInfo(status));
  absl::MutexLock lock(&mu_);
  finished_.push_back(std::move(self));
  --active_waiters_;
  housekeeping_cv_.Signal();
}

void PosixProcessLauncher::Housekeep() {
  absl::MutexLock lock(&mu_);
  while (!shutting_down_) {
    if (!finished_.empty()) {
      // Finished waiters have returned from on_exit; joining is quick.
      std::vector<std::thread> threads;
      threads.swap(finished_);
      mu_.Unlock();
      for (std::thread& t : threads) t.join();
      mu_.Lock();
      continue;
    }
    const absl::Time now = absl::Now();
    absl::Time next = absl::InfiniteFuture();
    for (auto& [pid, child] : children_) {
      if (child.kill_deadline <= now) {
        SignalGroup(pid, SIGKILL);
        child.kill_deadline = absl::InfiniteFuture();
      } else {
        next = std::min(next, child.kill_deadline);
      }
    }
    if (next == absl::InfiniteFuture()) {
      housekeeping_cv_.Wait(&mu_);
    } else {
      housekeeping_cv_.WaitWithDeadline(&mu_, next);
    }
  }
}

}  // namespace trainctl::worker
