#ifndef TRAINCTL_COORDINATOR_SCHED_SCHEDULER_H_
#define TRAINCTL_COORDINATOR_SCHED_SCHEDULER_H_

// The scheduler: a pure function from (cluster snapshot, queue) to placement
// decisions. No proto, no gRPC, no clock, no threads (STYLE.md habit 2); it
// links only Abseil. The coordinator and the simulator (bench/) drive the same
// code.

#include <cstdint>
#include <string>
#include <vector>

namespace trainctl::sched {

// One GPU as the scheduler sees it.
struct GpuState {
  // NVML index on its node.
  int index = 0;
  std::string uuid;
  // Total GPU memory, bytes.
  int64_t memory_total_bytes = 0;
  // Sum of the reservations of the tasks placed on it, bytes. A GPU with
  // reserved_bytes == 0 is whole and free.
  int64_t reserved_bytes = 0;
  // Tasks placed on it now.
  int task_count = 0;
  // Indices of GPUs on the same node joined to this one by NVLink.
  std::vector<int> nvlink_peers;
};

// One node (host) as the scheduler sees it.
struct NodeState {
  std::string name;
  // False for a node that is known but lost: it counts when judging whether a
  // job can ever fit this cluster, but gets no placements.
  bool schedulable = true;
  std::vector<GpuState> gpus;
};

struct ClusterSnapshot {
  std::vector<NodeState> nodes;
};

enum class JobKind { kExperiment, kGang };

// A pending job as the scheduler sees it. Validated by the caller.
struct JobRequest {
  int64_t job_id = 0;
  JobKind kind = JobKind::kExperiment;
  // Higher first; ties by submit_seq, lower first.
  int priority = 0;
  int64_t submit_seq = 0;

  // Experiment: a share of one GPU. gpu_fraction in (0, 1] (1 = the whole
  // GPU, exclusive); gpu_memory_bytes > 0 asks for that many bytes instead.
  // On a GPU of total T the reservation is gpu_memory_bytes if > 0, else
  // ceil(gpu_fraction * T) and at least 1 byte; whole-GPU experiments
  // reserve T.
  double gpu_fraction = 1.0;
  int64_t gpu_memory_bytes = 0;

  // Gang: whole GPUs only. Either `nodes` x `gpus_per_node` (nodes >= 1), or
  // nodes == 0 and `total_gpus` >= 1: the scheduler picks the fewest nodes K
  // (K divides total_gpus) with total_gpus / K free GPUs each.
  int total_gpus = 0;
  int nodes = 0;
  int gpus_per_node = 0;
};

// The GPUs a job gets on one node, in local-rank order.
struct NodeAssignment {
  std::string node;
  std::vector<int> gpu_indices;
};

struct Placement {
  // Node rank order: nodes[0] holds rank 0.
  std::vector<NodeAssignment> nodes;
  // Bytes reserved on each assigned GPU.
  int64_t reserved_bytes_per_gpu = 0;
};

enum class Outcome {
  // Placed now; `placement` is set.
  kPlaced,
  // Fits this cluster but not its free capacity now; `reason` says what it
  // waits for.
  kRetryLater,
  // Can never fit this cluster (more GPUs than it has, more memory than any
  // GPU...); `reason` says why. The job should fail at once.
  kInfeasible,
};

struct Decision {
  int64_t job_id = 0;
  Outcome outcome = Outcome::kRetryLater;
  Placement placement;
  // A user-facing sentence for kRetryLater and kInfeasible.
  std::string reason;
};

struct SchedulerConfig {
  // At most this many tasks share one GPU (experiments only).
  int max_tasks_per_gpu = 8;
};

// Bytes an experiment reserves on a GPU with `gpu_total_bytes` of memory (see
// JobRequest). Gangs reserve whole GPUs.
int64_t ReservationBytes(const JobRequest& job, int64_t gpu_total_bytes);

// Decides placements. Stateless and thread-compatible.
//
// Rules:
// - Queue order: priority (higher first), then submit_seq.
// - Experiments: best fit, the GPU that has the least room left after the
//   reservation among those where it fits (partly used GPUs first, so whole
//   GPUs and whole nodes stay free for gangs); ties go to the node with the
//   fewest whole free GPUs, then node name, then GPU index.
// - Gangs: all-or-nothing on whole free GPUs, the fewest nodes; among nodes
//   that fit, best fit (fewest whole free GPUs left); within a node GPUs of one
//   NVLink island when one island has enough.
// - Head-of-queue reservation: the first job in queue order that cannot be
//   placed now reserves the nodes it would use when they drain; jobs after it
//   are placed only outside that reservation, so a gang is not starved by a
//   stream of small jobs.
// - Infeasible is judged against the whole cluster (lost nodes included),
//   ignoring what is in use; an empty cluster makes every job kRetryLater.
class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config = {});

  // One decision per job of `queue`, in queue order (sorted as above). The
  // placements of one call never overlap, and each fits `cluster` minus what
  // the earlier placements of the same call took.
  std::vector<Decision> Schedule(const ClusterSnapshot& cluster,
                                 const std::vector<JobRequest>& queue) const;

 private:
  SchedulerConfig config_;
};

}  // namespace trainctl::sched

#endif  // TRAINCTL_COORDINATOR_SCHED_SCHEDULER_H_
