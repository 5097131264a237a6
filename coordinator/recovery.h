#ifndef TRAINCTL_COORDINATOR_RECOVERY_H_
#define TRAINCTL_COORDINATOR_RECOVERY_H_

// Recovery after a restart: what the stored records say that cannot all be
// true. A write that failed (or was lost in a crash) can leave a task's
// record live after its GPU was given to a later placement; loaded
// together, the two over-book the GPU. The earliest placement's claim there
// is the stale one: its end was not stored.
//
// Also what an agent's (re)registration says against the records: tasks to
// keep, stop or replay, GPUs no longer able to hold what is reserved.
//
// Pure functions of the parts they read; the caller holds the coordinator's
// lock and applies the result.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "coordinator/draining_tasks.h"
#include "coordinator/job_table.h"
#include "coordinator/node_registry.h"
#include "coordinator/task_key.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::coord {

// A task whose reservation, with the others on one of its GPUs, exceeds
// that GPU's memory.
struct StaleClaim {
  // Job.placement_seq of its placement (the earliest on that GPU).
  int64_t seq = 0;
  int64_t job_id = 0;
  int rank = 0;
  // A draining task of an earlier attempt, not a task of the job's record.
  bool draining = false;
  // "NODE GPU INDEX".
  std::string where;
};

// The first GPU (by node name, index) whose live and draining tasks reserve
// more than its memory (a task holding GPUs whole counts the GPU's size),
// and on it the claim of the earliest placement (ties: lowest job id).
// nullopt when no GPU is over-booked.
std::optional<StaleClaim> FindStaleClaim(const JobTable& jobs, const DrainingTasks& draining,
                                         const NodeRegistry& nodes);

// What an agent's (re)registration says against the records: the tasks it
// runs (RegisterNode.running_tasks) and the exits it sent last
// (finished_tasks), compared with the live tasks of `jobs` on its node.
struct Reconciliation {
  // Every task the agent runs.
  absl::flat_hash_set<TaskKey> reported;
  // STARTING tasks it runs: their RUNNING report was lost with the previous
  // coordinator (or their lazily written record with a crash); the caller
  // handles each as that report.
  std::vector<v1::TaskRef> started;
  // What it runs that holds no live task of a current attempt here
  // (unknown, finished, of an old attempt or an aborted pre-flight) or is
  // STOPPING: the caller tells the agent to stop each.
  std::vector<v1::TaskRef> stop;
  // Of `stop`, those with no reservation at all: which GPUs they hold is
  // unknown (NodeEntry.stopping_unplaced).
  absl::flat_hash_set<TaskKey> unplaced;
  // Exits it sent that may not have been stored, of tasks it no longer
  // runs: the caller applies them before taking anything for lost.
  std::vector<v1::TaskStatus> replay;
};
Reconciliation Reconcile(const v1::RegisterNode& reg, const JobTable& jobs);

// The GPUs of `node` (by index) that its live and draining tasks reserve more
// of than the GPU has, or that it no longer reports: after a
// re-registration with a GPU missing or smaller, the tasks on them no longer
// fit (a task holding GPUs whole counts the GPU's size).
absl::flat_hash_set<int> OverbookedGpus(const NodeEntry& node, const JobTable& jobs,
                                        const DrainingTasks& draining);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_RECOVERY_H_
