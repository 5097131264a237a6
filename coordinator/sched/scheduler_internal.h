#ifndef TRAINCTL_COORDINATOR_SCHED_SCHEDULER_INTERNAL_H_
#define TRAINCTL_COORDINATOR_SCHED_SCHEDULER_INTERNAL_H_

// Private to the files that implement Scheduler (scheduler.cc, the phase
// classes of schedule_pass.h and their tests): the helpers they share. Pure
// like the rest of tc_sched: no proto, no gRPC, no clock, no threads.

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
  // Not schedulable: lost, disconnected or stopping unplaced processes; and,
  // counted apart, taken out of service by an admin (drained or down).
  int lost_node_count = 0;
  int out_of_service_node_count = 0;
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
      if (!node.out_of_service.empty()) {
        ++out_of_service_node_count;
      } else if (!node.schedulable) {
        ++lost_node_count;
      }
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

  // "; 1 of 3 nodes is lost", "; 2 of 3 nodes are drained or down", both,
  // or "" when every node is schedulable.
  std::string LostNote() const {
    std::string out;
    if (lost_node_count > 0) {
      out = absl::StrFormat("; %d of %d nodes %s lost", lost_node_count, node_count,
                            lost_node_count == 1 ? "is" : "are");
    }
    if (out_of_service_node_count > 0) {
      out += absl::StrFormat("; %d of %d nodes %s drained or down (trainctl nodes)",
                             out_of_service_node_count, node_count,
                             out_of_service_node_count == 1 ? "is" : "are");
    }
    return out;
  }
};

// Why `job` is malformed, if it is. Such a job can never run.
std::optional<std::string> MalformedReason(const JobRequest& job,
                                           const SchedulerConfig& config);

// Why a well-formed `job` can never fit `shape`, if so.
std::optional<std::string> InfeasibleReason(const JobRequest& job,
                                            const ClusterShape& shape);

// Why `job` could never run on the nodes of `nodes` its node selection
// allows, using only GPUs of `gpu_types` (empty: any), lost nodes included,
// ignoring use; the reason names the selection ("no node satisfies
// --gpu-type b200 (the cluster has a100 x4, h100 x4)", "with --gpu-type
// h100: needs 8 GPUs but the cluster has 4"). nullopt when it could. O(GPUs).
std::optional<std::string> SelectionInfeasibleOn(
    const std::vector<NodeState>& nodes, const JobRequest& job,
    const std::vector<std::string>& gpu_types);

// A GPU by its position in the working copy (not its NVML index).
struct GpuRef {
  int node = 0;
  int gpu = 0;
};

// A gang placement before it is applied: GPU positions per node, rank order.
struct GangPlan {
  std::vector<std::pair<int, std::vector<int>>> nodes;
};

// --- Queues, LAS levels, usage (queue_ranking.cc) ---

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

// Whether a job of (priority, LAS level, submit_seq) `a` may preempt a
// preemptible job `b` under `policy` (preemption.cc).
bool OutranksForPreemption(const PolicyConfig& policy, int a_priority,
                           int a_level, int64_t a_seq, int b_priority,
                           int b_level, int64_t b_seq);

// GPUs `job` asks for, in whole-GPU equivalents: a gang's GPU count, an
// experiment's fraction of the largest GPU (`max_gpu_memory_bytes`) for a
// byte request, else its gpu_fraction, at most 1 (queue_ranking.cc).
double DemandGpus(const JobRequest& job, int64_t max_gpu_memory_bytes);

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

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_SCHEDULER_INTERNAL_H_
