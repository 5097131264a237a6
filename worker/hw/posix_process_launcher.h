#ifndef TRAINCTL_WORKER_HW_POSIX_PROCESS_LAUNCHER_H_
#define TRAINCTL_WORKER_HW_POSIX_PROCESS_LAUNCHER_H_

// ProcessLauncher for real processes on Linux (posix_spawn, process groups).

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/hw/process_launcher.h"

namespace trainctl::worker {

// Starts each task with posix_spawn as the leader of its own process group,
// stdin from /dev/null, stdout and stderr appended to the log file, only the
// spec's environment, signals reset to their defaults and an empty signal
// mask. One waiter thread per child waits for its leader; when the leader
// ends, the rest of its group is SIGKILLed before the leader is reaped (so its
// pid cannot be reused meanwhile), the killed members are reaped, and then
// `on_exit` runs on the waiter thread: when on_exit runs, no process of the
// group is left, not even a zombie. A housekeeping thread sends the SIGKILLs
// that Stop() schedules and joins finished waiters.
//
// The constructor makes the agent process a child subreaper
// (prctl(PR_SET_CHILD_SUBREAPER), Linux >= 3.4), so a task's orphaned
// processes are reparented to the agent, not to init, and can be reaped with
// the group. Processes a task moves into another process group or session
// (setsid, setpgid) escape the group kill, and if they are orphaned they end
// as zombies of the agent.
//
// The destructor SIGKILLs every running group, waits for all on_exit
// callbacks to return and joins every thread. Launch() called from an
// on_exit during destruction fails with UNAVAILABLE.
//
// The agent must not reap children itself (waitpid(-1), SIGCHLD = SIG_IGN):
// the launcher owns its children's exit statuses.
//
// Thread-safe.
// With Options::task_shim set, each task (or, with shim_every_task off,
// each task with an account or a cgroup of its own) is started through
// trainctl-task-shim (task_shim.cc), which watches the agent's pid and kills
// the task's process group when the agent dies, even by SIGKILL: no task
// outlives its agent. The pid returned by Launch() is then the shim's (the
// group leader); the exit reported is the task's own.
class PosixProcessLauncher : public ProcessLauncher {
 public:
  struct Options {
    // Path of trainctl-task-shim; empty: tasks are started directly and
    // survive the agent's death (reparented to init).
    std::string task_shim;
    // With task_shim set: true starts every task through it; false only a
    // task that needs it (LaunchSpec.run_as or cgroup_dir): the agent's
    // guard (agent_guard.h) keeps the others from outliving the agent, and
    // each spares one program start (~0.35 ms of CPU per task on the 2-core
    // VM of bench/README.md).
    bool shim_every_task = true;
    // How long the shim waits after SIGTERM before SIGKILL, once the agent
    // is gone.
    absl::Duration orphan_grace = absl::Seconds(5);
    // How long a PATH lookup of a program name is reused for tasks with the
    // same name, PATH and workdir. A reused path is checked (one stat) before
    // each launch and looked up again when it is no longer an executable
    // file; a program put earlier in the PATH is seen once this has passed
    // (bash's command hash keeps it until `hash -r`). The lookup is about a
    // tenth of the agent's CPU per task on a long PATH (bench/README.md).
    // Zero: every launch looks the program up.
    absl::Duration program_lookup_ttl = absl::Seconds(1);
    // A task that runs as another account (LaunchSpec.run_as, not
    // keep_root) gets no_new_privs (the shim's --no-new-privs): no set-uid
    // program it execs gains privilege.
    bool no_new_privs = true;
  };

  PosixProcessLauncher() : PosixProcessLauncher(Options()) {}
  explicit PosixProcessLauncher(Options options);
  ~PosixProcessLauncher() override;
  PosixProcessLauncher(const PosixProcessLauncher&) = delete;
  PosixProcessLauncher& operator=(const PosixProcessLauncher&) = delete;

  // See ProcessLauncher::Launch. argv[0] without a '/' is searched in the PATH
  // of spec.env (or "/bin:/usr/bin" when it has none), as execvp would. An
  // empty workdir means the agent's working directory; an empty log_path
  // discards the output. With spec.run_as, the log file is handed to that
  // account (fchown) and the shim drops to it before it enters the workdir
  // and execs the task (task_shim.cc); with spec.cgroup_dir the shim moves
  // into that cgroup first. A failure there is the task's exit 125 with the
  // reason in its log.
  // Errors: INVALID_ARGUMENT for an empty argv; NOT_FOUND naming argv[0] or
  // the workdir when it does not exist; FAILED_PRECONDITION when run_as or
  // cgroup_dir is set but Options::task_shim is not, or run_as names another
  // account and this process is not root; INTERNAL naming the log file or
  // the failing call (with errno text); UNAVAILABLE while being destroyed.
  absl::StatusOr<int> Launch(const LaunchSpec& spec,
                             absl::AnyInvocable<void(ExitInfo)> on_exit) override;

  // See ProcessLauncher::Stop. A grace <= 0 sends SIGKILL at once. Calling it
  // again keeps the earlier of the two SIGKILL deadlines.
  // Errors: NOT_FOUND when `pid` is not a running process of this launcher.
  absl::Status Stop(int pid, absl::Duration grace) override;

 private:
  struct Child {
    std::thread waiter;
    absl::AnyInvocable<void(ExitInfo)> on_exit;
    // When Stop() wants the group SIGKILLed; InfiniteFuture() when not.
    absl::Time kill_deadline = absl::InfiniteFuture();
  };

  // A PATH lookup kept for Options::program_lookup_ttl.
  struct ProgramLookup {
    std::string path;
    absl::Time expires;
  };

  void Wait(int pid);
  void Housekeep();
  // The path to execute for spec.argv[0] (see Launch), from the lookup cache
  // when it holds a fresh entry that is still an executable file.
  absl::StatusOr<std::string> FindProgram(const LaunchSpec& spec);

  const Options options_;

  absl::Mutex mu_;
  // Children whose leader has not been reaped, by pid.
  std::map<int, Child> children_ ABSL_GUARDED_BY(mu_);
  // Waiter threads that have returned from on_exit, to be joined.
  std::vector<std::thread> finished_ ABSL_GUARDED_BY(mu_);
  // Waiter threads not yet in finished_ (still waiting or running on_exit).
  int active_waiters_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // PATH lookups by program name, PATH and workdir (FindProgram); at most
  // kMaxProgramLookups, all dropped when full.
  static constexpr size_t kMaxProgramLookups = 1024;
  absl::Mutex lookups_mu_;
  absl::flat_hash_map<std::string, ProgramLookup> lookups_ ABSL_GUARDED_BY(lookups_mu_);
  // Wakes Housekeep() on a new deadline, a finished waiter or shutdown.
  absl::CondVar housekeeping_cv_;
  std::thread housekeeper_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_POSIX_PROCESS_LAUNCHER_H_
