#ifndef TRAINCTL_WORKER_HW_CGROUP_H_
#define TRAINCTL_WORKER_HW_CGROUP_H_

// One cgroup v2 per task, in a subtree delegated to the agent (cgroup-v2(7),
// the kernel's Documentation/admin-guide/cgroup-v2.rst). A cgroup holds every
// process of a task wherever it goes (setsid, double fork, a container
// runtime's conmon), so the agent can measure the task (CPU time, memory,
// peak memory), limit it (cpu.max, memory.max) and kill all of it
// (cgroup.kill), which process groups cannot do.
//
// Layout, under the cgroup the agent was started in (<agent cgroup>, e.g.
// /sys/fs/cgroup/system.slice/trainctl-agent.service):
//
//   <agent cgroup>/               cgroup.subtree_control: +cpu +memory +pids
//     agent/                      the agent (and its guard), moved here by Open()
//     tasks/                      cgroup.subtree_control: the same controllers
//       <task name>/              one per task: cpu.max, memory.max, ...
//
// cgroup v2 lets processes live only in leaves once controllers are enabled
// below a cgroup ("no internal processes"), hence the leaf `agent`. The
// agent's cgroup must be its own: Open() moves every process it finds there
// into `agent`.
//
// Where this works:
//  - systemd hosts in unified mode (Debian >= 11, Ubuntu >= 21.10, RHEL >= 9):
//    run the agent with Delegate=yes in its unit (deploy/systemd/
//    trainctl-agent.service) and without ProtectControlGroups=: systemd then
//    hands the service's cgroup (and its files, to User=) to the agent and
//    leaves what is below it alone. Without Delegate=, the cgroup belongs to
//    systemd, which may move or empty it; with ProtectControlGroups=yes,
//    /sys/fs/cgroup is read-only and Open() fails (FAILED_PRECONDITION).
//  - Hybrid hosts (cgroup v1 controllers, a v2 tree at /sys/fs/cgroup/unified
//    with no controllers, e.g. systemd's "hybrid" mode): cgroups group, count
//    CPU time (cpu.stat exists without the cpu controller) and kill, but
//    cannot limit: controllers() is empty, and CreateTaskCgroup() refuses
//    limits (FAILED_PRECONDITION).
//  - The development VM of bench/README.md (no systemd, Linux 6.18): hybrid,
//    /sys/fs/cgroup/unified offers only `hugetlb`; as root, creating a child
//    cgroup, moving a process in, cgroup.kill and rmdir all work
//    (cgroup_test.cc, RealSystem_*). The agent there runs in the root cgroup
//    ("0::/"), which Open() refuses (see its comment).
//
// Thread-safety: immutable after Open(); every method may be called from any
// thread (two calls on the same task cgroup race as the files they write do).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace trainctl::worker {

// Limits of one task's cgroup. Zero means no limit.
struct CgroupLimits {
  // CPU bandwidth in cores (1.5 = one and a half cores): cpu.max is written
  // as "<quota> 100000", quota = cpus x 100000 us per 100000 us period (at
  // least 1000 us, the kernel's minimum). Needs the cpu controller.
  double cpus = 0;
  // memory.max, bytes: above it the kernel reclaims, then OOM-kills inside
  // the cgroup. memory.oom.group is set too, so an OOM kill takes the whole
  // task (not one DataLoader worker, leaving the trainer hung). Needs the
  // memory controller.
  int64_t memory_bytes = 0;
};

// What a task cgroup and its descendants use.
struct CgroupUsage {
  // CPU time since the cgroup was created (cpu.stat usage_usec), µs.
  int64_t cpu_usec = 0;
  // memory.current, bytes (page cache included); 0 without the memory
  // controller.
  int64_t memory_bytes = 0;
  // memory.peak, bytes (Linux >= 5.19); 0 where the file is absent.
  int64_t memory_peak_bytes = 0;
  // Processes now in the cgroup and its descendant cgroups (e.g. a
  // container's, below the task's), ascending.
  std::vector<int> pids;
};

// True when `name` may name a task cgroup: 1 to 255 bytes of [A-Za-z0-9._-],
// not "." or ".." (what CgroupTree::CreateTaskCgroup accepts).
bool IsValidCgroupName(absl::string_view name);

// The agent's delegated cgroup v2 subtree (see the file comment).
class CgroupTree {
 public:
  // Finds the agent's cgroup and prepares the layout above:
  //  1. the cgroup v2 mount: `cgroupfs_root` itself when it has
  //     cgroup.controllers (unified mode), else `cgroupfs_root`/unified
  //     (hybrid mode);
  //  2. the agent's cgroup: the "0::<path>" line of `self_cgroup_file`; when
  //     the agent already sits in the `agent` leaf of a prepared tree (Open()
  //     called twice), its parent;
  //  3. checks it is writable, creates `agent` and moves every process of the
  //     agent's cgroup into it (this one included), enables those of cpu,
  //     memory and pids that cgroup.controllers offers in
  //     cgroup.subtree_control, creates `tasks` and enables them there too.
  // The parameters exist for tests, which pass a fake tree in a temporary
  // directory (plain files stand for the control files).
  //
  // Errors (all FAILED_PRECONDITION, for the agent to log at start before it
  // falls back to process groups): no cgroup v2 under `cgroupfs_root` (v1
  // only); no "0::" line in `self_cgroup_file`; the agent's cgroup directory
  // is missing under the mount (another mount or cgroup namespace); the agent
  // runs in the root cgroup (it must not take the whole machine's root: start
  // it in a cgroup of its own, e.g. systemd Delegate=yes, or `mkdir
  // <mount>/trainctl && echo $$ > <mount>/trainctl/cgroup.procs` before
  // starting it); a threaded cgroup; the cgroup is not writable (EACCES,
  // EROFS: not delegated, or ProtectControlGroups=); a process could not be
  // moved into `agent`. Each message names the path and the fix.
  static absl::StatusOr<CgroupTree> Open(
      std::string cgroupfs_root = "/sys/fs/cgroup",
      std::string self_cgroup_file = "/proc/self/cgroup");

  // The controllers enabled for task cgroups, of cpu, memory and pids, in
  // that order.
  std::vector<std::string> controllers() const { return controllers_; }
  // Those of cpu, memory and pids that are not enabled, each with why
  // ("cpu (not offered by the parent: bound to cgroup v1 or not delegated)").
  std::vector<std::string> missing_controllers() const { return missing_; }
  // The cgroup v2 mount directory, e.g. "/sys/fs/cgroup".
  const std::string& mount() const { return mount_; }
  // <agent cgroup>, <agent cgroup>/agent and <agent cgroup>/tasks: absolute
  // directories.
  const std::string& agent_cgroup_dir() const { return base_; }
  const std::string& agent_leaf_dir() const { return leaf_; }
  const std::string& tasks_dir() const { return tasks_; }

  // One line for the agent's start log, e.g. "cgroup v2 at /sys/fs/cgroup
  // (unified); agent cgroup /system.slice/trainctl-agent.service (2
  // processes moved to agent/); task cgroups under .../tasks; controllers:
  // cpu memory pids".
  std::string Describe() const;

  // Creates tasks_dir()/`name` with `limits` and returns its absolute path
  // (for MoveSelfIntoCgroup() in the task's first process, ReadUsage(), Kill()
  // and Remove()).
  // Errors: INVALID_ARGUMENT for a name that is empty, ".", "..", longer than
  // 255 or not only [A-Za-z0-9._-], or a negative (or NaN) limit;
  // FAILED_PRECONDITION naming the controller when a limit is asked and its
  // controller is not enabled; ALREADY_EXISTS when the cgroup exists (a task
  // of that name running, or left by an agent that died: Kill() and Remove()
  // it); INTERNAL naming the file and errno text when a write fails (the
  // directory is then removed again).
  absl::StatusOr<std::string> CreateTaskCgroup(absl::string_view name,
                                               const CgroupLimits& limits) const;

  // Usage of the task cgroup `dir` (a path CreateTaskCgroup() returned).
  // Errors: INVALID_ARGUMENT when `dir` is not a task cgroup of this tree;
  // NOT_FOUND when it does not exist (removed); INTERNAL for an unreadable or
  // malformed cpu.stat.
  absl::StatusOr<CgroupUsage> ReadUsage(const std::string& dir) const;

  // The processes now in `dir` and its descendant cgroups, ascending: the
  // task's, whatever their process group or session (a container's, started
  // by its runtime in a session of its own, included). One read of each
  // cgroup.procs; none of the usage files ReadUsage() also reads.
  // Errors: INVALID_ARGUMENT when `dir` is not a task cgroup of this tree;
  // NOT_FOUND when it does not exist.
  absl::StatusOr<std::vector<int>> Pids(const std::string& dir) const;

  // Whether a live process is left in `dir` or below it: the "populated"
  // line of its cgroup.events (cgroup v2; zombies do not count). One read,
  // where ReadUsage() lists every pid. Errors: INVALID_ARGUMENT when `dir`
  // is not a task cgroup of this tree; NOT_FOUND when it does not exist;
  // INTERNAL when cgroup.events is unreadable or has no populated line.
  absl::StatusOr<bool> Populated(const std::string& dir) const;

  // SIGKILLs every process in `dir` and its descendants: writes "1" to
  // cgroup.kill (Linux >= 5.14), or where that file is absent, SIGKILLs each
  // pid listed in the cgroup.procs files, round after round. Then waits until
  // no process is left or `wait` has passed (polling every 10 ms).
  // Errors: INVALID_ARGUMENT when `dir` is not a task cgroup of this tree;
  // NOT_FOUND when it does not exist; DEADLINE_EXCEEDED naming the pids still
  // there after `wait` (processes in uninterruptible sleep leave late, e.g.
  // while the GPU driver releases their memory: call again, or poll
  // ReadUsage(), before Remove()); INTERNAL when cgroup.kill cannot be
  // written.
  absl::Status Kill(const std::string& dir,
                    absl::Duration wait = absl::Seconds(1)) const;

  // Removes `dir` and the cgroups below it (rmdir, deepest first; a container
  // runtime may have left its own cgroup below the task's).
  // Errors: INVALID_ARGUMENT when `dir` is not a task cgroup of this tree;
  // NOT_FOUND when it does not exist; FAILED_PRECONDITION "still has
  // processes" naming up to 3 pids (EBUSY: Kill() first); INTERNAL with
  // errno text otherwise.
  absl::Status Remove(const std::string& dir) const;

  // `dir` relative to mount(), with a leading '/': what the kernel shows in
  // /proc/<pid>/cgroup, and what podman's --cgroup-parent takes
  // (container_runtime.h).
  std::string RelativePath(const std::string& dir) const;

 private:
  CgroupTree() = default;
  absl::Status CheckTaskDir(const std::string& dir) const;

  std::string mount_;
  bool hybrid_ = false;
  std::string base_;
  std::string leaf_;
  std::string tasks_;
  int moved_ = 0;
  std::vector<std::string> controllers_;
  std::vector<std::string> missing_;
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_CGROUP_H_
