#ifndef TRAINCTL_COORDINATOR_SCHED_MURI_POLICY_H_
#define TRAINCTL_COORDINATOR_SCHED_MURI_POLICY_H_

// Preemptive cluster policies of the Muri artifact (SIGCOMM'22 simulator,
// Rivendile/Muri@4e69a78; rules in bench/sim/README.md, "Muri rules") and two
// non-preemptive FIFO baselines of our own, as pure functions over plain
// structs: state in, decisions out. No clock, no threads, no I/O; links
// only Abseil. bench/sim (trainctl-sim) drives them with a
// simulated clock; the cost model (units, restart overhead, progress) lives
// there, not here.
//
// Jobs are named by an index into the caller's job table (`JobIndex`), so a
// decision is a vector indexed the same way.
//
// All functions are stateless and thread-compatible.

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/types/span.h"
#include "coordinator/sched/interleave.h"

namespace trainctl::sched::muri {

using JobIndex = int;

// A homogeneous cluster: `num_nodes` nodes of `gpus_per_node` GPUs, one
// switch. (Muri's spec also gives CPUs and memory per node; they never bind
// on its n8g8 spec and are not modelled.)
struct GpuCluster {
  int num_nodes = 0;
  int gpus_per_node = 0;

  int total_gpus() const { return num_nodes * gpus_per_node; }
};

// Where a job runs: for each node it uses (ascending node index), the number
// of GPUs taken there.
struct NodeShare {
  int node = 0;
  int gpus = 0;
};
using GpuPlacement = std::vector<NodeShare>;

// Free GPUs per node while a policy places jobs one after another ("yarn"
// placement, Muri switch.py `ms_yarn_alloc_res`):
// - a job of <= gpus_per_node GPUs goes on the first node, in index order,
//   with enough free GPUs;
// - a larger job takes floor(n / gpus_per_node) completely idle nodes (the
//   first ones in index order) plus, if n is not a multiple, the first other
//   node with n % gpus_per_node free GPUs.
// All or nothing: a job that does not fit changes nothing.
class YarnAllocator {
 public:
  // Starts with every GPU of `cluster` free.
  explicit YarnAllocator(const GpuCluster& cluster);

  // Places `num_gpu` GPUs and returns where, or nullopt when they do not fit
  // now. num_gpu <= 0 never fits.
  std::optional<GpuPlacement> TryPlace(int num_gpu);

  // Marks GPUs of an existing placement as taken (for policies that keep
  // running jobs where they are). Returns false, changing nothing, if any
  // node in it lacks the free GPUs.
  bool Reserve(const GpuPlacement& placement);

  int free_gpus(int node) const { return free_[node]; }
  int total_free_gpus() const;

 private:
  GpuCluster cluster_;
  std::vector<int> free_;
};

// What a policy decided at one scheduling instant, indexed by JobIndex over
// the caller's table. Jobs it was not given stay false / empty.
struct Decision {
  // True: the job should be running after this instant.
  std::vector<bool> run;
  // Its GPUs when `run` (empty for policies that count GPUs only).
  std::vector<GpuPlacement> placement;
};

// ---------------------------------------------------------------------------
// SRTF / SRSF (Muri `shortest`, `shortest-gpu`; Muri rule 4, bench/sim/README.md).

enum class ShortestKey {
  // Shortest remaining time first.
  kRemainingTime,
  // Shortest remaining service (remaining time x num_gpu) first.
  kRemainingGpuTime,
};

struct ShortestFirstJob {
  JobIndex job = 0;
  int num_gpu = 0;
  // Seconds of isolated run time left; the caller's cost model decides it.
  double remaining_time_s = 0;
  // remaining_time_s * num_gpu, as the caller computed it (Muri updates it
  // only on some events, so it is an input, not derived here).
  double remaining_gpu_time_s = 0;
};

// Reorders `runnable` by the key (stable: equal keys keep their order, which
// is the order the caller kept from the previous instant), then empties the
// cluster and places each job in that order with YarnAllocator. A job that
// does not fit is skipped and later, smaller jobs still get placed (greedy
// backfill); a running job that does not fit is thereby preempted. Migration
// is allowed: placements are fresh every instant.
//
// `runnable` is reordered in place; the caller keeps that order for the next
// instant. `table_size` sizes the Decision vectors.
Decision ScheduleShortestFirst(const GpuCluster& cluster, ShortestKey key,
                               std::vector<ShortestFirstJob>& runnable,
                               int table_size);

// ---------------------------------------------------------------------------
// Tiresias 2D-LAS on GPU time (Muri `dlas-gpu`; Muri rule 5, bench/sim/README.md).

struct TiresiasConfig {
  // A job in queue q is demoted to q + 1 once its attained GPU time (GPU-s)
  // reaches thresholds_gpu_s[q]. Queues: thresholds_gpu_s.size() + 1.
  std::vector<double> thresholds_gpu_s = {3250, 7200};

  int num_queues() const {
    return static_cast<int>(thresholds_gpu_s.size()) + 1;
  }
};

// The multi-level queue: queues[0] is the highest priority; FIFO inside a
// queue (list order).
struct TiresiasQueues {
  std::vector<std::vector<JobIndex>> queues;
};

struct TiresiasJob {
  int num_gpu = 0;
  bool running = false;
};

// An empty queue set for `config`.
TiresiasQueues MakeTiresiasQueues(const TiresiasConfig& config);

// Queue a job in queue `queue` with `attained_gpu_s` GPU-seconds of service
// should be in: queue + 1 if it has reached that queue's threshold (the last
// queue keeps everything), else `queue`. One step at most, as upstream
// checks once per event.
int TiresiasQueueAfter(const TiresiasConfig& config, int queue,
                       double attained_gpu_s);

// Moves `job` from queue `from` to the tail of queue `to`. No-op if it is not
// in `from`.
void TiresiasMove(TiresiasQueues& queues, JobIndex job, int from, int to);

// Walks queues 0..n-1 in list order and admits a job when the free GPU count
// (GPU counting only, no node topology) is at least its num_gpu; otherwise it
// is skipped (or preempted if running). Then, in each queue, jobs not admitted
// move behind admitted ones, both groups keeping their order (upstream keeps
// running jobs at the head of their queue). `jobs` is indexed by JobIndex and
// must cover every queued job. Decision.placement stays empty.
Decision ScheduleTiresias(int total_gpus, TiresiasQueues& queues,
                          absl::Span<const TiresiasJob> jobs);

// Simulated time at which a running job in queue `queue`, with
// `executed_time_s` seconds of attained (wall) service and `num_gpu` GPUs,
// reaches that queue's threshold: ceil(threshold / num_gpu) - executed + now,
// in this order of operations (Muri rule 6, bench/sim/README.md). nullopt in the last
// queue.
std::optional<double> TiresiasNextDemotion(const TiresiasConfig& config,
                                           int queue, int num_gpu,
                                           double executed_time_s,
                                           double now_s);

// ---------------------------------------------------------------------------
// FIFO baselines (ours, not Muri's: its simulator has no FIFO). Both are
// non-preemptive: running jobs keep their placement; pending jobs are
// considered in arrival order with YarnAllocator on what is left.

struct FifoJob {
  JobIndex job = 0;
  int num_gpu = 0;
  // Set for a running job: its current placement, kept.
  std::optional<GpuPlacement> placement;
};

// `arrival_order`: every runnable job, oldest first. Strict FIFO
// (`backfill` false) stops at the first pending job that does not fit, so
// nothing overtakes it; with `backfill` later jobs that fit are started
// (greedy backfill, no reservation for the head).
Decision ScheduleFifo(const GpuCluster& cluster,
                      absl::Span<const FifoJob> arrival_order, bool backfill,
                      int table_size);

// ---------------------------------------------------------------------------
// Muri-L (Muri `multi-resource-blossom-same-gpu-unaware`, run_sim.py
// multi_resource_blossom_same_sim_jobs(gputime=True, know_duration=False)):
// LAS on attained GPU-time plus multi-resource interleave packing of jobs of
// the same GPU count. An approximate reproduction (bench/sim/README.md,
// "Interleave packing", says where it departs from upstream).

struct MuriLJob {
  JobIndex job = 0;
  int num_gpu = 0;
  // GPU-seconds attained so far (wall time run x num_gpu): the sort key.
  double attained_gpu_s = 0;
  // Its per-resource profile; must outlive the call. A job without a usable
  // profile runs alone.
  const InterleaveProfile* profile = nullptr;
};

struct MuriLDecision {
  // run / placement per JobIndex; the members of a group share a placement.
  Decision decision;
  // The groups that run, each a list of JobIndex (singletons included).
  std::vector<std::vector<JobIndex>> groups;
  // InterleavedIterationTime of each group (the solo iteration time of a
  // singleton), in the profiles' unit.
  std::vector<double> group_time;
};

// One Muri-L scheduling instant:
// 1. `runnable` is stably sorted by attained_gpu_s (least first); the caller
//    keeps that order for the next instant.
// 2. Candidates: walking that order with YarnAllocator on an empty cluster,
//    every job that still fits opens a slot of its GPU count and makes the
//    next config.max_jobs jobs of that GPU count (in order) candidates.
// 3. Packing rounds (at most config.max_jobs): while the candidates need
//    more GPUs than the cluster has, per GPU count the groups are paired by
//    InterleaveUtilization (greedy, best pair first, groups of at most
//    config.max_jobs jobs, weight > 0) and pairs are merged in the order
//    upstream lists them until the demand fits.
// 4. A group whose interleaved iteration time exceeds the sum of its
//    members' solo times is split (upstream's autopack). Groups are ordered
//    by their least attained member and placed with YarnAllocator on an
//    empty cluster; those that do not fit do not run.
// 5. Running groups are placed afresh, larger GPU counts first (migration
//    allowed, as upstream).
MuriLDecision ScheduleMuriL(const GpuCluster& cluster,
                            std::vector<MuriLJob>& runnable,
                            const InterleaveConfig& config, int table_size);

}  // namespace trainctl::sched::muri

#endif  // TRAINCTL_COORDINATOR_SCHED_MURI_POLICY_H_
