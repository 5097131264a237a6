#ifndef TRAINCTL_COORDINATOR_SCHED_SCHEDULER_INTERNAL_H_
#define TRAINCTL_COORDINATOR_SCHED_SCHEDULER_INTERNAL_H_

// Private to the files that implement Scheduler (scheduler.cc and the
// scheduler_*.cc files beside it; nothing else includes this): the helpers
// they share, and SchedulePass, the working state of one Schedule() call,
// whose methods are defined across those files by responsibility. Pure like
// the rest of tc_sched: no proto, no gRPC, no clock, no threads.
//
// SchedulePass's methods are declared below grouped by the file that defines
// them; their comments are at their definitions.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "coordinator/sched/interleave.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::sched::internal {

// --- Text for reasons and explanations (scheduler_explain.cc) ---

// "80.0 GiB".
std::string GiB(int64_t bytes);

// "a", "a or b", "a, b or c", "a, b, c or 2 more" (conjunction "or"/"and").
std::string JoinList(const std::vector<std::string>& items,
                     absl::string_view conjunction);

// "45s", "25m", "2h05m".
std::string ShortDuration(double seconds);

// --- GPUs and nodes ---

inline bool IsUsable(const GpuState& gpu) {
  return gpu.memory_total_bytes > 0;
}

// A whole, free GPU: usable and holding no task.
inline bool IsWholeFree(const GpuState& gpu) {
  return IsUsable(gpu) && gpu.reserved_bytes == 0 && gpu.task_count == 0;
}

// Unreserved bytes of `gpu`, never negative.
inline int64_t FreeBytes(const GpuState& gpu) {
  if (!IsUsable(gpu)) return 0;
  return std::max<int64_t>(
      0, gpu.memory_total_bytes - std::max<int64_t>(gpu.reserved_bytes, 0));
}

inline int UsableGpuCount(const NodeState& node) {
  return static_cast<int>(
      std::count_if(node.gpus.begin(), node.gpus.end(), IsUsable));
}

inline int WholeFreeCount(const NodeState& node) {
  return static_cast<int>(
      std::count_if(node.gpus.begin(), node.gpus.end(), IsWholeFree));
}

// --- Layouts, the cluster's shape, feasibility (scheduler_feasibility.cc) ---

// `per_node` whole GPUs on each of `nodes` nodes.
struct Layout {
  int nodes = 0;
  int per_node = 0;
};

// "8 GPUs on one node", "4 free GPUs on each of 2 nodes".
std::string DescribeLayout(const Layout& layout, bool free);

// A gang's layouts; inline up to 16 (no allocation per job in a long queue).
using Layouts = absl::InlinedVector<Layout, 16>;

// The layouts a (valid) gang accepts, fewest nodes first, using at most
// `max_nodes` nodes.
Layouts GangLayouts(const JobRequest& job, int max_nodes);

// What the whole cluster has, lost nodes included, ignoring use.
struct ClusterShape {
  int node_count = 0;
  int lost_node_count = 0;
  int64_t gpu_count = 0;
  int max_gpus_on_node = 0;
  int64_t max_gpu_memory_bytes = 0;
  // Nodes with a container runtime, and with task cgroups.
  int container_runtime_nodes = 0;
  int cgroup_nodes = 0;
  std::vector<int> gpus_on_node;
  // nodes_with_at_least[k]: nodes with k or more usable GPUs (k <= max).
  std::vector<int> nodes_with_at_least;

  explicit ClusterShape(const ClusterSnapshot& cluster) {
    node_count = static_cast<int>(cluster.nodes.size());
    for (const NodeState& node : cluster.nodes) {
      if (!node.schedulable) ++lost_node_count;
      container_runtime_nodes += node.container_runtime ? 1 : 0;
      cgroup_nodes += node.cgroups ? 1 : 0;
      const int gpus = UsableGpuCount(node);
      gpus_on_node.push_back(gpus);
      gpu_count += gpus;
      max_gpus_on_node = std::max(max_gpus_on_node, gpus);
      for (const GpuState& gpu : node.gpus) {
        max_gpu_memory_bytes =
            std::max(max_gpu_memory_bytes, gpu.memory_total_bytes);
      }
    }
    nodes_with_at_least.assign(max_gpus_on_node + 2, 0);
    for (int gpus : gpus_on_node) ++nodes_with_at_least[gpus];
    for (int k = max_gpus_on_node - 1; k >= 0; --k) {
      nodes_with_at_least[k] += nodes_with_at_least[k + 1];
    }
  }

  int NodesWithAtLeast(int gpus) const {
    if (gpus > max_gpus_on_node) return 0;
    return nodes_with_at_least[std::max(gpus, 0)];
  }

  bool CouldEverHold(const Layout& layout) const {
    return NodesWithAtLeast(layout.per_node) >= layout.nodes;
  }

  // "; 1 of 3 nodes is lost", or "" when none is.
  std::string LostNote() const {
    if (lost_node_count == 0) return "";
    return absl::StrFormat("; %d of %d nodes %s lost", lost_node_count,
                           node_count, lost_node_count == 1 ? "is" : "are");
  }
};

// Why `job` is malformed, if it is. Such a job can never run.
std::optional<std::string> MalformedReason(const JobRequest& job,
                                           const SchedulerConfig& config);

// Why a well-formed `job` can never fit `shape`, if so.
std::optional<std::string> InfeasibleReason(const JobRequest& job,
                                            const ClusterShape& shape);

// A GPU by its position in the working copy (not its NVML index).
struct GpuRef {
  int node = 0;
  int gpu = 0;
};

// A gang placement before it is applied: GPU positions per node, rank order.
struct GangPlan {
  std::vector<std::pair<int, std::vector<int>>> nodes;
};

// --- Queues, LAS levels, usage (scheduler_queue.cc) ---

// The queue name a job or running job is in.
inline absl::string_view QueueName(const std::string& queue) {
  return queue.empty() ? absl::string_view("default") : queue;
}

// The LAS level of `attained_gpu_s` under `policy` (always 0 for FIFO).
int LasLevel(const PolicyConfig& policy, double attained_gpu_s);

// GPUs (whole-GPU equivalents) and GPU bytes held.
struct Usage {
  double gpus = 0;
  double bytes = 0;
};

// The working state of one Schedule() call: a copy of the snapshot that
// placements are applied to, the running jobs (some marked for preemption),
// usage per queue, user and project, and the head-of-queue hold.
// Single-threaded.
class SchedulePass {
 public:
  SchedulePass(const ClusterSnapshot& cluster, const SchedulerConfig& config,
               const std::vector<JobRequest>& queue);
  std::vector<Decision> Run(const std::vector<JobRequest>& queue,
                            int64_t explain_id, Explanation* explanation);

 private:
  // A pending job in a queue list, with its order key worked out once and
  // what DecideTail needs, so that a job decided on the fast path is never
  // loaded again (at 100,000 pending jobs, loading each JobRequest in
  // scheduling order, a cache miss per job, was most of a pass).
  struct QueueEntry {
    // OrderKey, then the position in the queue (so the order is total).
    std::tuple<int, int, int64_t, size_t> key;
    const JobRequest* job = nullptr;
    int64_t job_id = 0;
    int64_t time_limit_s = 0;
    // Index in shapes_ (-1 when the fast path is off for this pass).
    int shape = -1;
    // Nothing but its shape and order key can change its decision: a
    // well-formed shape that fits the cluster, not preempted for a job
    // (preempted_for), no victims stopping, no excluded nodes, not a gang
    // interleave packing could place.
    bool plain = false;
    bool preemptible = false;
  };

  // What decides a job's fit and wait reason: kind, size, placement.
  using ShapeKey = std::tuple<int, double, int64_t, int, int, int, int>;
  struct Shape {
    // The first job of the shape (its fit and reason stand for all).
    const JobRequest* rep = nullptr;
    // Well-formed and feasible on this cluster.
    bool plain = false;
    // The capacity_version_ at which a job of the shape was last seen not to
    // fit, per honor_hold (KnownNotToFit without hashing), and its wait
    // reason as of reason_at (WaitReason's, which depends only on the shape
    // and the state).
    int64_t no_fit_at[2] = {-1, -1};
    int64_t reason_at = -1;
    std::string reason;
  };

  // What decides whether Place(job, honor_hold) succeeds, besides the state.
  using FitKeyT = std::tuple<int, double, int64_t, int, int, int, int, bool>;

  // --- Interleave packing (PolicyConfig.interleave; the header's rule) ---

  // A running job, or a job placed by this call (running == -1), on the
  // GPUs of a group.
  struct GroupMember {
    int64_t job_id = 0;
    const InterleaveProfile* profile = nullptr;
    // Index into running_, or -1 for a placement of this call.
    int running = -1;
  };
  // Jobs with identical placements: they share those GPUs.
  struct PackGroup {
    Placement placement;
    int gpus = 0;
    std::vector<GroupMember> members;
  };

  // What a waiting experiment's reason depends on besides its shape.
  struct ExperimentFacts {
    // It would fit now but for the hold.
    bool blocked_by_hold = false;
    // Some GPU has room for it but runs max_tasks_per_gpu tasks.
    bool task_limited = false;
    // The most free bytes on any GPU.
    int64_t max_free = 0;
  };

  // What a waiting gang's reason depends on besides its shape.
  struct GangFacts {
    // It would fit now but for the hold.
    bool blocked_by_hold = false;
    // The most whole free GPUs on any node, and the nodes with at least the
    // per-node count of its first layout that this cluster could hold.
    int max_free = 0;
    int big_enough = 0;
  };

  // --- Free-capacity indexes (indexed_ only) ---
  //
  // Kept equal to what the linear scans would compute from nodes_ and
  // held_: every change to either goes through NodeChanged(n).

  // Best-fit key of GPU (n, g) in its memory class: (free bytes, whole free
  // GPUs on node n, rank of n's name, GPU index, n, g): the linear scan's
  // order (room left, whole free, name, index, scan order) within a class.
  using ExpKey = std::tuple<int64_t, int, int, int, int, int>;
  // The GPUs of one memory size that can take another task (usable, on a
  // schedulable node, below max_tasks_per_gpu).
  struct MemoryClass {
    int64_t memory_bytes = 0;
    absl::btree_set<ExpKey> gpus;
    // Free bytes of every GPU of the class, at the task limit or not (wait
    // reasons).
    absl::btree_multiset<int64_t> free_all;
  };
  // (name rank, n) of the schedulable nodes with one count of whole free GPUs.
  using NodeBucket = absl::btree_set<std::pair<int, int>>;

  // scheduler.cc: deciding one job (validity, quota, placement, preemption,
  // packing, the hold), in the order the rules apply.
  void Decide(const JobRequest& job, int position, Decision& decision);
  void DecideInner(const JobRequest& job, Decision& decision);
  void Account(const JobRequest& job, const Placement& placement);
  bool Place(const JobRequest& job, bool honor_hold, Placement& placement);
  static FitKeyT FitKey(const JobRequest& job, bool honor_hold);
  bool KnownNotToFit(const JobRequest& job, bool honor_hold) const;
  bool FitsNow(const JobRequest& job, bool honor_hold) const;

  // scheduler_queue.cc: queue order (priority, LAS level, DRF share), the
  // tail's fast path, usage and quotas.
  QueueEntry MakeEntry(const JobRequest& job, size_t position);
  static void OrderEntries(std::vector<QueueEntry>& jobs);
  bool DecideTail(const QueueEntry& e, Decision& decision);
  std::tuple<int, int, int64_t> OrderKey(const JobRequest& job) const;
  double DominantShare(const std::string& queue) const;
  Usage UsageOf(const Placement& placement) const;
  void AddUsage(absl::string_view queue, const std::string& user,
                const std::string& project, const Usage& u, int sign);
  double DemandGpus(const JobRequest& job) const;
  std::optional<std::string> QuotaReason(const JobRequest& job) const;

  // scheduler_preemption.cc: who may preempt whom, and the victim search.
  bool OutranksForPreemption(int a_priority, int a_level, int64_t a_seq,
                             int b_priority, int b_level, int64_t b_seq) const;
  bool MayPreempt(const JobRequest& job, const RunningJob& r) const;
  bool AnyMayBePreempted(const JobRequest& job);
  bool AnyMayBePreempted(int priority, int level, int64_t submit_seq);
  bool WaitsForPreemptor(int64_t preemptor);
  std::optional<std::vector<int64_t>> TryPreempt(const JobRequest& job,
                                                 bool honor_hold);
  bool FitsWithAllFreed(const JobRequest& job, bool honor_hold,
                        const std::vector<int>& freed);
  void ApplyRunning(int i, int sign);
  const std::vector<std::pair<int, std::vector<int>>>& RunningGpus(int i);

  // scheduler_reservation.cc: the head-of-queue hold.
  bool MayUseHold(const JobRequest& job) const;
  bool MayUseHold(int priority, int level, int64_t submit_seq,
                  int64_t time_limit_s, bool preemptible) const;
  void HoldForExperiment(const JobRequest& job);
  void HoldForGang(const JobRequest& job);
  double HoldEta(const JobRequest& job);
  std::string BlockedByHoldReason() const;

  // scheduler_experiment.cc: placing experiments (a share of one GPU).
  std::optional<GpuRef> FindExperimentGpu(const JobRequest& job,
                                          bool honor_hold) const;
  std::optional<GpuRef> FindExperimentGpuIndexed(const JobRequest& job,
                                                 bool honor_hold) const;
  std::optional<GpuRef> FindExperimentGpuLinear(const JobRequest& job,
                                                bool honor_hold) const;
  bool PlaceExperiment(const JobRequest& job, bool honor_hold,
                       Placement& placement);
  ExperimentFacts ExperimentWaitFacts(const JobRequest& job) const;
  std::string ExperimentWaitReason(const JobRequest& job,
                                   const ExperimentFacts& f) const;

  // scheduler_gang.cc: placing gangs (PACK and SPREAD) on whole GPUs.
  int GangFreeCount(int n, bool honor_hold) const;
  std::vector<int> PickGpus(int n, int count, bool honor_hold) const;
  std::optional<GangPlan> FindGang(const JobRequest& job,
                                   bool honor_hold) const;
  std::optional<GangPlan> FindGangIndexed(const JobRequest& job,
                                          bool honor_hold) const;
  bool GangFitsIndexed(const JobRequest& job, bool honor_hold) const;
  std::optional<GangPlan> FindGangLinear(const JobRequest& job,
                                         bool honor_hold) const;
  bool PlaceGang(const JobRequest& job, bool honor_hold, Placement& placement);
  Layouts PossibleLayouts(const JobRequest& job) const;
  GangFacts GangWaitFacts(const JobRequest& job) const;
  std::string GangWaitReason(const JobRequest& job, const GangFacts& f) const;

  // scheduler_interleave.cc: interleave packing onto running groups.
  static std::string PlacementKey(const Placement& placement);
  void InitInterleave(const std::vector<JobRequest>& queue);
  void AddGroupMember(const Placement& placement, GroupMember member);
  bool GroupTakes(const JobRequest& job, const PackGroup& g) const;
  std::pair<double, double> GroupFigures(
      std::vector<const InterleaveProfile*> members);
  bool TryInterleave(const JobRequest& job, Decision& decision);

  // scheduler_explain.cc: wait reasons and Scheduler::Explain.
  void Explain(const JobRequest& job, const Decision& decision, int position);
  std::optional<std::string> NodeShortfall(const JobRequest& job, int n) const;
  std::string WaitReason(const JobRequest& job);

  // scheduler_index.cc: the free-capacity indexes.
  void BuildIndexes();
  void NodeChanged(int n);
  static std::vector<NodeState> MutableCopy(
      const std::vector<NodeState>& nodes);

  // Inline: every GPU lookup asks it.
  bool IsHeld(int node, int gpu) const { return held_[node][gpu]; }

  // The free-capacity indexes (scheduler_index.cc).
  std::vector<MemoryClass> classes_;
  // class_of_[n][g]: index in classes_, -1 for an unusable GPU or one on an
  // unschedulable node. exp_key_[n][g]: its key in that class, if there.
  std::vector<std::vector<int>> class_of_;
  std::vector<std::vector<std::optional<ExpKey>>> exp_key_;
  // free_key_[n][g]: its entry in the class's free_all, if there.
  std::vector<std::vector<std::optional<int64_t>>> free_key_;
  std::vector<int> name_rank_;
  // Whole free GPUs of node n (0 when unschedulable), and those not held.
  std::vector<int> whole_free_;
  std::vector<int> unheld_free_;
  // Whether node n is in the buckets (schedulable nodes, once indexed).
  std::vector<bool> node_indexed_;
  // [count]: the nodes with that many whole free (resp. whole free, unheld)
  // GPUs.
  std::vector<NodeBucket> all_buckets_;
  std::vector<NodeBucket> unheld_buckets_;

  const SchedulerConfig& config_;
  const PolicyConfig& policy_;
  // False: the linear scans (SchedulerConfig.linear_search).
  const bool indexed_;
  const ClusterShape shape_;
  const std::vector<NodeState>& cluster_nodes_;
  // The snapshot with this call's placements applied (and preemption
  // victims' GPUs freed), positions as in cluster_nodes_.
  std::vector<NodeState> nodes_;
  absl::flat_hash_map<std::string, int> node_index_;
  const std::vector<RunningJob>& running_;
  // RunningGpus(i), once worked out.
  std::vector<std::optional<std::vector<std::pair<int, std::vector<int>>>>>
      running_gpus_;
  const std::vector<JobRequest>& queue_;
  // evicted_[i]: running_[i] is preempted by this call.
  std::vector<bool> evicted_;
  // running_ indices of the victims the last successful TryPreempt chose.
  std::vector<int> last_victims_;
  // Per priority, the deepest LAS level and the latest submit_seq among the
  // preemptible running jobs not evicted; rebuilt after evictions.
  std::optional<std::map<int, std::pair<int, int64_t>>> preemptible_summary_;
  // Ids of the queue's jobs (filled on first use) and of those placed by
  // this call.
  absl::flat_hash_set<int64_t> queued_ids_;
  absl::flat_hash_set<int64_t> placed_;
  // Jobs of each group (JobRequest.group) holding GPUs: running ones and
  // this call's placements (group limits).
  absl::flat_hash_map<std::string, int> group_running_;
  // Whether DecideTail may decide jobs in this pass: the indexed search
  // (KnownNotToFit), backfill on (no strict-FIFO reasons), no quotas (no
  // per-user reasons), a cluster with GPUs.
  const bool tail_ok_;
  absl::flat_hash_map<ShapeKey, int> shape_ids_;
  std::vector<Shape> shapes_;
  // Bumped by every AddUsage (queue shares are cached against it).
  int64_t usage_version_ = 0;
  // WaitReason's sentences by (shape, facts). BlockedByHoldReason is the same
  // for every job after the hold is taken.
  absl::node_hash_map<
      std::tuple<int, double, int64_t, int, int, int, bool, bool, int64_t, int>,
      std::string>
      reasons_;
  // The last sentence per shape and the state_version_ it was made at.
  absl::flat_hash_map<std::tuple<int, double, int64_t, int, int, int>,
                      std::pair<int64_t, const std::string*>>
      last_reason_;
  // Bumped by every change to nodes_ or held_ (NodeChanged) and by taking
  // the hold.
  int64_t state_version_ = 0;
  // Bumped by every change that may add free capacity (freeing a running
  // job's GPUs, ApplyRunning(-1)). Everything else a pass does (placements,
  // the hold) only takes capacity away, and whether a job fits is monotone
  // in free capacity: a shape that did not fit at this version still does
  // not, however many placements came since.
  int64_t capacity_version_ = 0;
  // FitKey -> the capacity_version_ at which Place last failed for it.
  absl::flat_hash_map<FitKeyT, int64_t> not_fitting_;
  double total_gpus_ = 0;
  double total_bytes_ = 0;
  absl::flat_hash_map<std::string, Usage> queue_usage_;
  absl::flat_hash_map<std::string, double> user_gpus_;
  absl::flat_hash_map<std::string, double> project_gpus_;
  int preemption_searches_ = 0;
  // Strict FIFO: the first job that waits for GPUs.
  int64_t fifo_blocker_ = 0;
  int64_t explain_id_ = 0;
  Explanation* explanation_ = nullptr;
  int holder_priority_ = 0;
  int64_t holder_submit_seq_ = 0;
  int holder_level_ = 0;
  double hold_eta_s_ = -1;
  // held_[node][gpu]: reserved for the head-of-queue job, same shape as nodes_.
  std::vector<std::vector<bool>> held_;
  bool hold_taken_ = false;
  int64_t holder_job_id_ = 0;
  // What the hold covers, for reasons: "nodes a and b", "GPU 3 on a".
  std::string held_description_;
  // Interleave packing: whether this call may pack (InitInterleave), the
  // groups of jobs sharing GPUs by PlacementKey, searches that failed, and
  // GroupFigures by the members' profiles.
  bool interleave_active_ = false;
  std::vector<PackGroup> groups_;
  absl::flat_hash_map<std::string, size_t> group_of_;
  // (shape, profile) -> the state_version_ at which it last found no group.
  absl::flat_hash_map<std::vector<double>, int64_t> interleave_failed_;
  absl::flat_hash_map<std::vector<double>, std::pair<double, double>> figures_;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_SCHEDULER_INTERNAL_H_
