#ifndef TRAINCTL_WORKER_HW_PROC_STATS_H_
#define TRAINCTL_WORKER_HW_PROC_STATS_H_

// CPU and memory use of task process groups, read from /proc (proc(5)):
// /proc/uptime for the time base, /proc/<pid>/stat for each process's group
// (field 5, pgrp), CPU time (fields 14-15, utime + stime, in clock ticks) and
// resident set (field 24, pages). Every task the agent starts leads its own
// process group (pgid = its pid), so a group is the task with its DataLoader
// workers and any other children. Where the agent knows a task's processes
// from its cgroup (worker/hw/cgroup.h), they are the group instead: read by
// pid alone, with no walk of /proc, and including processes that left the
// process group (a container's, which its runtime starts in a session of
// its own; anything that called setsid). Slurm's jobacct_gather/cgroup
// plugin takes a job's processes from its cgroup for the same reason.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace trainctl::worker {

struct GroupUsage {
  // CPU time used by the group since the previous Sample() that saw it,
  // percent of one core (250 = two and a half cores); 0 on the first sample.
  double cpu_pct = 0;
  // Sum of the members' resident set sizes, bytes.
  int64_t rss_bytes = 0;
  // Members now, ascending.
  std::vector<int> pids;
};

// Thread-safe. `proc_root` is "/proc" except in tests, which build a fake
// tree (uptime and <pid>/stat files).
class ProcessGroupSampler {
 public:
  explicit ProcessGroupSampler(std::string proc_root = "/proc");

  // Usage of each of `pgids` now; a group without live members comes back
  // with no pids and zeros. A group with an entry in `members` is those
  // processes, whatever their process group; the others are found by a walk
  // of every /proc/<pid>/stat, done only when some group has no entry.
  // Unreadable or malformed entries are skipped (a process may exit while
  // being read). No errors.
  std::map<int, GroupUsage> Sample(const std::vector<int>& pgids,
                                   const std::map<int, std::vector<int>>& members = {});

 private:
  const std::string root_;
  const long ticks_per_s_;
  const long page_bytes_;
  absl::Mutex mu_;
  // pgid -> (uptime s, CPU ticks of the group) at its previous sample.
  std::map<int, std::pair<double, int64_t>> last_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_HW_PROC_STATS_H_
