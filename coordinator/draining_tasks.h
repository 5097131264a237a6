#ifndef TRAINCTL_COORDINATOR_DRAINING_TASKS_H_
#define TRAINCTL_COORDINATOR_DRAINING_TASKS_H_

// Tasks of earlier attempts that still hold GPUs, and who preempted whom.
//
// When a job's attempt ends while some of its tasks still run (a restart, a
// preemption, a requeue after a failed pre-flight), those tasks are told to
// stop and keep their GPUs reserved until their agent reports them ended, so
// a new placement never lands on a GPU a process still uses. A preempted job
// (a victim) waits for its preemptor to be placed before it may start again
// (no ping-pong between two jobs preempting each other).
//
// Not thread-safe: called under the coordinator's lock, which guards it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "coordinator/task_key.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// A task of an earlier attempt of a job that still holds GPUs.
struct DrainingTask {
  int64_t job_id = 0;
  // Its TaskRef.attempt and probe_run (0: the job's rank; n: the probe of
  // pre-flight run n).
  int attempt = 0;
  int probe_run = 0;
  v1::Task task;
  // The placement_seq of its attempt.
  int64_t placement_seq = 0;

  // Its TaskRef (job, attempt, probe run, rank, pid).
  v1::TaskRef Ref() const {
    v1::TaskRef ref;
    ref.set_job_id(job_id);
    ref.set_attempt(attempt);
    ref.set_probe_run(probe_run);
    ref.set_rank(task.rank());
    ref.set_pid(task.pid());
    return ref;
  }
};

class DrainingTasks {
 public:
  using List = std::vector<DrainingTask>;

  // ---- draining tasks
  void Add(DrainingTask task) { tasks_.push_back(std::move(task)); }
  List::const_iterator begin() const { return tasks_.begin(); }
  List::const_iterator end() const { return tasks_.end(); }
  size_t size() const { return tasks_.size(); }
  // Whether a task of job `job_id` still drains.
  bool HoldsJob(int64_t job_id) const;
  // Removes every task for which `pred` is true (called once per task, in
  // order); returns how many.
  int RemoveIf(absl::FunctionRef<bool(const DrainingTask&)> pred);
  // The agent of `node` reported task `key` ended: it frees its GPUs. Only
  // the node running a task may end it. Returns whether such a task drained.
  bool Ended(const TaskKey& key, const std::string& node);

  // ---- preemption
  // Job `victim` was preempted for job `preemptor`.
  void AddVictim(int64_t preemptor, int64_t victim);
  // The victims of `preemptor` (it is being placed), removed.
  std::vector<int64_t> TakeVictims(int64_t preemptor);

 private:
  List tasks_;
  // Preemptor job id -> the jobs preempted for it that still wait for it to
  // be placed (preempted_for_job_id).
  absl::flat_hash_map<int64_t, std::vector<int64_t>> victims_of_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_DRAINING_TASKS_H_
