#ifndef TRAINCTL_COORDINATOR_SCHEDULER_VIEW_H_
#define TRAINCTL_COORDINATOR_SCHEDULER_VIEW_H_

// The scheduler's inputs, built from the coordinator's parts: the cluster
// snapshot (free capacity per GPU; the jobs holding GPUs with their owners,
// priorities and time limits) and the pending queue (every PENDING job as a
// sched::JobRequest, with long job arrays cut to what one pass can place).
// The scheduler library (sched/scheduler.h) decides on these values alone.
//
// Not thread-safe: called under the coordinator's lock, which guards it and
// the parts it reads. It reads them only; the snapshot's walk also records
// the MASTER_PORTs in use (NodeRegistry::snapshot_ports) for the pass.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "coordinator/draining_tasks.h"
#include "coordinator/job_table.h"
#include "coordinator/node_registry.h"
#include "coordinator/sched/scheduler.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::coord {

// The pending tasks of one job array or sweep left out of a scheduling pass
// by SchedulerView::Queue (`trimmed`, in id order), and the last task of it
// the pass does see (`last_included`).
struct TrimmedArray {
  int64_t last_included = 0;
  // How many such tasks the queue may hold.
  int cap = 0;
  std::vector<int64_t> trimmed;
};

class SchedulerView {
 public:
  // `max_tasks_per_gpu`: SchedulerConfig.max_tasks_per_gpu (the cut of
  // arrays of GPU shares).
  explicit SchedulerView(int max_tasks_per_gpu) : max_tasks_per_gpu_(max_tasks_per_gpu) {}

  // The cluster as the scheduler sees it at `now_ms` (Unix ms): per node
  // whether it takes placements (its agent connected, READY, no unplaced
  // process stopping), per GPU the bytes reserved by live tasks, draining
  // tasks and running pre-flights, and the jobs holding GPUs. Rebuilt in
  // place (unchanged nodes cost no allocation); valid until the next call.
  // Fills nodes.snapshot_ports() with the MASTER_PORTs in use.
  const sched::ClusterSnapshot& Snapshot(const JobTable& jobs, const NodeRegistry& nodes,
                                         const DrainingTasks& draining,
                                         int64_t now_ms) const;

  // Every PENDING job, but auto-packed ones (the packer places those), as
  // the scheduler sees it at `now_ms`. With `trimmed`, the first-attempt
  // tasks of a job array (or trials of a sweep) that make the same request
  // as its first pending one (SameSchedulingRequest) are cut after as many
  // as a pass could place or preempt for, plus one: one per schedulable GPU
  // for whole-GPU tasks, one per T GPUs for gangs of T, max_tasks_per_gpu
  // per GPU for shares. Those left out are listed by the array's id (a
  // negative key for a sweep). Identical requests are decided in id order,
  // so the pass decides as it would on the full queue, and a 10,000-task
  // array costs a pass a few dozen requests.
  std::vector<sched::JobRequest> Queue(
      const JobTable& jobs, const NodeRegistry& nodes, const DrainingTasks& draining,
      int64_t now_ms, absl::flat_hash_map<int64_t, TrimmedArray>* trimmed = nullptr) const;

  // Why `job` waits (`trainctl why`), at `now`: for a PENDING job, what
  // `scheduler` says of it over the cluster as it is (sched::Explanation:
  // queue position, quota, what each node lacks, the reservation it waits
  // behind and its estimated start); for any other state, its state and
  // reason; the nodes a pre-flight excluded, either way. Costs one
  // scheduling pass; changes nothing.
  v1::WhyJobResponse Why(const v1::Job& job, const sched::Scheduler& scheduler,
                         const JobTable& jobs, const NodeRegistry& nodes,
                         const DrainingTasks& draining, absl::Time now) const;

  // Whether the tasks of `array` left out of this pass already carry
  // `reason` from the last pass with the same cut `cap` (then they need no
  // rewrite).
  bool TrimReasonUnchanged(int64_t array, int cap, const std::string& reason) const;
  // The arrays' cuts and reasons of the pass that just ran.
  void SetTrimReasons(absl::flat_hash_map<int64_t, std::pair<int, std::string>> reasons) {
    trim_reasons_ = std::move(reasons);
  }

  // After a pass over a queue with arrays cut short (`trimmed`, from Queue):
  // the tasks left out wait for the same reason as the last task the pass
  // decided (set here on their PENDING records, unless TrimReasonUnchanged),
  // or fail with it (`fail`: they would not fit either). Had that task
  // started, the cut was too tight: `pass_again`. Records the cuts'
  // reasons for the next pass.
  struct FollowUp {
    bool pass_again = false;
    // (job id, reason) of PENDING tasks to fail.
    std::vector<std::pair<int64_t, std::string>> fail;
  };
  FollowUp FollowUpTrimmed(const absl::flat_hash_map<int64_t, TrimmedArray>& trimmed,
                           JobTable& jobs);

 private:
  const int max_tasks_per_gpu_;
  mutable sched::ClusterSnapshot cache_;
  absl::flat_hash_map<int64_t, std::pair<int, std::string>> trim_reasons_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_SCHEDULER_VIEW_H_
