#ifndef TRAINCTL_COORDINATOR_TASK_KEY_H_
#define TRAINCTL_COORDINATOR_TASK_KEY_H_

// The name agents and the coordinator give one process: TaskRef without its
// pid. A pre-flight probe is a task of its own (probe_run >= 1) beside the
// job's rank of the same attempt (probe_run 0).

#include <cstdint>
#include <utility>

#include "trainctl/v1/service.pb.h"

namespace trainctl::coord {

struct TaskKey {
  int64_t job_id = 0;
  // Job.attempt of the attempt the task belongs to.
  int attempt = 0;
  // 0: the job's own rank; n >= 1: the probe of pre-flight run n.
  int probe_run = 0;
  int rank = 0;

  // The key of a TaskRef an agent sent.
  static TaskKey Of(const v1::TaskRef& ref) {
    return {ref.job_id(), ref.attempt(), ref.probe_run(), ref.rank()};
  }
  friend bool operator==(const TaskKey& a, const TaskKey& b) {
    return a.job_id == b.job_id && a.attempt == b.attempt &&
           a.probe_run == b.probe_run && a.rank == b.rank;
  }
  template <typename H>
  friend H AbslHashValue(H h, const TaskKey& k) {
    return H::combine(std::move(h), k.job_id, k.attempt, k.probe_run, k.rank);
  }
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_TASK_KEY_H_
