#ifndef TRAINCTL_COORDINATOR_RECOVERY_H_
#define TRAINCTL_COORDINATOR_RECOVERY_H_

// Recovery after a restart: what the stored records say that cannot all be
// true. A write that failed (or was lost in a crash) can leave a task's
// record live after its GPU was given to a later placement; loaded
// together, the two over-book the GPU. The earliest placement's claim there
// is the stale one: its end was not stored.
//
// A pure function of the parts it reads; the caller holds the coordinator's
// lock and applies the result (the task is taken as LOST).

#include <cstdint>
#include <optional>
#include <string>

#include "coordinator/draining_tasks.h"
#include "coordinator/job_table.h"
#include "coordinator/node_registry.h"

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

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_RECOVERY_H_
