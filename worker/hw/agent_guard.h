#ifndef TRAINCTL_WORKER_HW_AGENT_GUARD_H_
#define TRAINCTL_WORKER_HW_AGENT_GUARD_H_

// The agent's guard: one small process per agent (not one per task) that
// makes sure no task outlives its agent, even when the agent is killed with
// SIGKILL or by the OOM killer.
//
//   guard (the pid systemd / the shell started; comm "trainctl-guard")
//     └─ trainctl-agent (the real agent, forked from it at start)
//          ├─ task process group 1
//          └─ task process group 2 ...
//
// SplitGuard() forks the process before any thread exists. The parent
// becomes a child subreaper (prctl(PR_SET_CHILD_SUBREAPER)) and the guard;
// the child goes on as the agent. When the agent ends, however it ends, the
// kernel reparents its children (the task processes, each the leader of its
// process group) to the guard, its nearest subreaper ancestor, before the
// guard can reap the agent; the guard then sends SIGTERM to each of their
// process groups, waits up to `grace` for them, SIGKILLs what is left
// (descendants orphaned meanwhile included) and reaps everything, and exits
// as the agent did (its exit code, or 128 + its signal). SIGTERM, SIGINT,
// SIGHUP and SIGQUIT sent to the guard are forwarded to the agent (its
// graceful shutdown); if the guard itself dies, the agent gets SIGTERM
// (prctl(PR_SET_PDEATHSIG); the guard has one thread) and shuts down,
// stopping its tasks.
//
// Why not one trainctl-task-shim per task (task_shim.cc, still available as
// the agent's --task-shim): the shim is an extra program start per task
// (exec of a static binary, a posix_spawn, two pidfds), ~0.4-0.8 ms of CPU
// and ~1-3 ms of latency per task on the 2-core VM of bench/README.md, paid
// on every job's critical path. The guard is paid once per agent, and there
// is no window in which a task exists that it does not cover: orphans reach
// it through the kernel, not through a message.
//
// Processes that left their task's process group (setsid, setpgid) are
// missed by the group kill, but reach the guard too once their parent dies
// (the guard is their nearest subreaper) and are stopped the same way (the
// shim could not see them). Limit: a process that left the agent's tree
// (reparented to another subreaper, e.g. a container runtime's) escapes.
// If the guard and the agent are both SIGKILLed at once (`pkill -9 -f
// trainctl-agent`), the tasks are orphaned to init.

#include <sys/types.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace trainctl::worker {

// What SplitGuard() returns in each process.
struct GuardSplit {
  // True in the agent (the child): go on starting the agent.
  bool is_agent = false;
  // In the guard (the parent), after the agent ended and its tasks were
  // stopped: the code to exit with (the agent's exit code, or 128 + the
  // signal that killed it).
  int exit_code = 0;
};

// Forks into guard and agent as described above; returns in both. Must be
// called before the process starts any thread (fork copies only the calling
// thread). In the guard it returns only once the agent has ended and every
// process left behind by it is reaped; `grace` is how long its orphaned
// process groups get between SIGTERM and SIGKILL.
// Errors: INTERNAL naming the failing call (prctl, fork) with errno text;
// the process is then not split and may go on unguarded.
absl::StatusOr<GuardSplit> SplitGuard(absl::Duration grace);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_AGENT_GUARD_H_
