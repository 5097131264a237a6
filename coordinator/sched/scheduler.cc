#include "coordinator/sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

// How one Schedule() call works (the header lists the policy; this is the
// exact rule set):
//
// 1. The queue is stably sorted by priority (higher first), then submit_seq
//    (lower first). Each job is decided in that order against a working copy
//    of the snapshot; a placement is applied to the copy at once, so later
//    jobs see it and placements never overlap.
// 2. Odd input (fraction outside (0, 1], negative bytes, gangs of 0 GPUs, an
//    unknown kind, max_tasks_per_gpu < 1) is kInfeasible before anything else.
//    Then a cluster with no nodes makes the job kRetryLater ("no nodes have
//    registered yet"), and so does one whose nodes report no GPU at all (a CPU
//    node registering first must not fail every job). Then infeasibility is
//    judged against the whole cluster, lost nodes included, ignoring use.
//    A GPU with memory_total_bytes <= 0 is ignored everywhere.
// 3. Head-of-queue reservation ("hold"): the first job of the call that ends
//    kRetryLater takes the one hold of the call, even if it finds nothing to
//    hold. It holds, among schedulable nodes and ignoring current use:
//    - a gang: for the first of its layouts (fewest nodes first) that enough
//      schedulable nodes could hold when empty, the `nodes` nodes with the
//      most GPUs (ties: more whole free GPUs now, then name) having at least
//      `per node` GPUs each. Every GPU of those nodes is held.
//    - an experiment: the one GPU with the largest memory whose reservation
//      fits it (ties: more free bytes now, then node name, GPU index).
//    Jobs later in the queue are never placed on a held GPU. Jobs earlier in
//    the queue were decided before the hold existed.

namespace trainctl::sched {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
// Lists in user-facing reasons show at most this many items (STYLE.md 11).
constexpr size_t kMaxListed = 3;

// "80.0 GiB".
std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.1f GiB", static_cast<double>(bytes) / kBytesPerGiB);
}

// "1 GPU", "4 GPUs".
std::string Gpus(int64_t n) {
  return absl::StrFormat("%d %s", n, n == 1 ? "GPU" : "GPUs");
}

// "a", "a or b", "a, b or c", "a, b, c or 2 more" (conjunction "or"/"and").
std::string JoinList(const std::vector<std::string>& items,
                     absl::string_view conjunction) {
  if (items.empty()) return "";
  if (items.size() > kMaxListed) {
    std::vector<std::string> shown(items.begin(), items.begin() + kMaxListed);
    return absl::StrFormat("%s %s %d more", absl::StrJoin(shown, ", "),
                           conjunction, items.size() - kMaxListed);
  }
  if (items.size() == 1) return items[0];
  std::vector<std::string> head(items.begin(), items.end() - 1);
  return absl::StrFormat("%s %s %s", absl::StrJoin(head, ", "), conjunction,
                         items.back());
}

bool IsUsable(const GpuState& gpu) { return gpu.memory_total_bytes > 0; }

// A whole, free GPU: usable and holding no task.
bool IsWholeFree(const GpuState& gpu) {
  return IsUsable(gpu) && gpu.reserved_bytes == 0 && gpu.task_count == 0;
}

// Unreserved bytes of `gpu`, never negative.
int64_t FreeBytes(const GpuState& gpu) {
  if (!IsUsable(gpu)) return 0;
  return std::max<int64_t>(
      0, gpu.memory_total_bytes - std::max<int64_t>(gpu.reserved_bytes, 0));
}

int UsableGpuCount(const NodeState& node) {
  return static_cast<int>(
      std::count_if(node.gpus.begin(), node.gpus.end(), IsUsable));
}

int WholeFreeCount(const NodeState& node) {
  return static_cast<int>(
      std::count_if(node.gpus.begin(), node.gpus.end(), IsWholeFree));
}

// `per_node` whole GPUs on each of `nodes` nodes.
struct Layout {
  int nodes = 0;
  int per_node = 0;
};

// "8 GPUs on one node", "4 free GPUs on each of 2 nodes".
std::string DescribeLayout(const Layout& layout, bool free) {
  std::string gpus =
      absl::StrFormat("%d %s%s", layout.per_node, free ? "free " : "",
                      layout.per_node == 1 ? "GPU" : "GPUs");
  if (layout.nodes == 1) return absl::StrCat(gpus, " on one node");
  return absl::StrFormat("%s on each of %d nodes", gpus, layout.nodes);
}

// The layouts a (valid) gang accepts, fewest nodes first, using at most
// `max_nodes` nodes.
std::vector<Layout> GangLayouts(const JobRequest& job, int max_nodes) {
  if (job.nodes >= 1) return {Layout{job.nodes, job.gpus_per_node}};
  std::vector<Layout> layouts;
  for (int k = 1; k <= job.total_gpus && k <= max_nodes; ++k) {
    if (job.total_gpus % k == 0) layouts.push_back({k, job.total_gpus / k});
  }
  return layouts;
}

// What the whole cluster has, lost nodes included, ignoring use.
struct ClusterShape {
  int node_count = 0;
  int lost_node_count = 0;
  int64_t gpu_count = 0;
  int max_gpus_on_node = 0;
  int64_t max_gpu_memory_bytes = 0;
  std::vector<int> gpus_on_node;

  explicit ClusterShape(const ClusterSnapshot& cluster) {
    node_count = static_cast<int>(cluster.nodes.size());
    for (const NodeState& node : cluster.nodes) {
      if (!node.schedulable) ++lost_node_count;
      const int gpus = UsableGpuCount(node);
      gpus_on_node.push_back(gpus);
      gpu_count += gpus;
      max_gpus_on_node = std::max(max_gpus_on_node, gpus);
      for (const GpuState& gpu : node.gpus) {
        max_gpu_memory_bytes =
            std::max(max_gpu_memory_bytes, gpu.memory_total_bytes);
      }
    }
  }

  int NodesWithAtLeast(int gpus) const {
    return static_cast<int>(std::count_if(gpus_on_node.begin(),
                                          gpus_on_node.end(),
                                          [gpus](int n) { return n >= gpus; }));
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
                                           const SchedulerConfig& config) {
  switch (job.kind) {
    case JobKind::kExperiment:
      if (job.gpu_memory_bytes < 0) {
        return absl::StrFormat(
            "asks for %d bytes of GPU memory; the amount must be positive",
            job.gpu_memory_bytes);
      }
      if (job.gpu_memory_bytes == 0 &&
          !(job.gpu_fraction > 0.0 && job.gpu_fraction <= 1.0)) {
        return absl::StrFormat(
            "asks for a GPU fraction of %g; it must be above 0 and at most 1",
            job.gpu_fraction);
      }
      if (config.max_tasks_per_gpu < 1) {
        return absl::StrFormat(
            "cannot run: the scheduler allows %d tasks per GPU "
            "(max_tasks_per_gpu)",
            config.max_tasks_per_gpu);
      }
      return std::nullopt;
    case JobKind::kGang:
      if (job.nodes < 0) {
        return absl::StrFormat("asks for %d nodes; a gang needs at least 1",
                               job.nodes);
      }
      if (job.nodes >= 1 && job.gpus_per_node < 1) {
        return absl::StrFormat(
            "asks for %d GPUs per node; a gang needs at least 1",
            job.gpus_per_node);
      }
      if (job.nodes == 0 && job.total_gpus < 1) {
        return absl::StrFormat("asks for %d GPUs; a gang needs at least 1",
                               job.total_gpus);
      }
      return std::nullopt;
  }
  return std::string("has an unknown job kind");
}

// Why a well-formed `job` can never fit `shape`, if so.
std::optional<std::string> InfeasibleReason(const JobRequest& job,
                                            const ClusterShape& shape) {
  if (job.kind == JobKind::kExperiment) {
    // A fractional reservation never exceeds its GPU; only bytes can.
    if (job.gpu_memory_bytes > shape.max_gpu_memory_bytes) {
      return absl::StrFormat(
          "needs %s of GPU memory but the largest GPU has %s",
          GiB(job.gpu_memory_bytes), GiB(shape.max_gpu_memory_bytes));
    }
    return std::nullopt;
  }
  const int64_t needed =
      job.nodes >= 1 ? int64_t{job.nodes} * job.gpus_per_node : job.total_gpus;
  if (needed > shape.gpu_count) {
    return absl::StrFormat("needs %s but the cluster has %d", Gpus(needed),
                           shape.gpu_count);
  }
  if (job.nodes >= 1) {
    const Layout layout{job.nodes, job.gpus_per_node};
    if (layout.per_node > shape.max_gpus_on_node) {
      return absl::StrFormat("needs %s but the largest node has %d",
                             DescribeLayout(layout, /*free=*/false),
                             shape.max_gpus_on_node);
    }
    const int big_enough = shape.NodesWithAtLeast(layout.per_node);
    if (big_enough < layout.nodes) {
      return absl::StrFormat("needs %s but only %d %s %d or more GPUs",
                             DescribeLayout(layout, /*free=*/false), big_enough,
                             big_enough == 1 ? "node has" : "nodes have",
                             layout.per_node);
    }
    return std::nullopt;
  }
  // total_gpus: some K (K divides total_gpus) must have K nodes big enough.
  std::vector<std::string> tried;
  for (const Layout& layout : GangLayouts(job, shape.node_count)) {
    if (shape.CouldEverHold(layout)) return std::nullopt;
    tried.push_back(DescribeLayout(layout, /*free=*/false));
  }
  return absl::StrFormat(
      "needs %s split evenly across nodes, but no such layout fits this "
      "cluster of %d nodes whose largest has %s (tried %s)",
      Gpus(job.total_gpus), shape.node_count, Gpus(shape.max_gpus_on_node),
      JoinList(tried, "or"));
}

// A GPU by its position in the working copy (not its NVML index).
struct GpuRef {
  int node = 0;
  int gpu = 0;
};

// A gang placement before it is applied: GPU positions per node, rank order.
struct GangPlan {
  std::vector<std::pair<int, std::vector<int>>> nodes;
};

// The working state of one Schedule() call: a copy of the snapshot that
// placements are applied to, and the head-of-queue hold. Single-threaded.
class SchedulePass {
 public:
  SchedulePass(const ClusterSnapshot& cluster, const SchedulerConfig& config)
      : config_(config), shape_(cluster), nodes_(cluster.nodes) {
    held_.reserve(nodes_.size());
    for (const NodeState& node : nodes_) {
      held_.emplace_back(node.gpus.size(), false);
    }
  }

  Decision Decide(const JobRequest& job) {
    Decision decision;
    decision.job_id = job.job_id;
    if (std::optional<std::string> reason = MalformedReason(job, config_)) {
      decision.outcome = Outcome::kInfeasible;
      decision.reason = *std::move(reason);
      return decision;
    }
    if (shape_.node_count == 0) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = "no nodes have registered yet";
      return decision;
    }
    if (shape_.gpu_count == 0) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = "no node with a GPU has registered yet";
      return decision;
    }
    if (std::optional<std::string> reason = InfeasibleReason(job, shape_)) {
      decision.outcome = Outcome::kInfeasible;
      decision.reason = *std::move(reason);
      return decision;
    }
    const bool placed = job.kind == JobKind::kExperiment
                            ? PlaceExperiment(job, decision.placement)
                            : PlaceGang(job, decision.placement);
    if (placed) {
      decision.outcome = Outcome::kPlaced;
      return decision;
    }
    decision.outcome = Outcome::kRetryLater;
    decision.reason = job.kind == JobKind::kExperiment
                          ? ExperimentWaitReason(job)
                          : GangWaitReason(job);
    if (!hold_taken_) {
      hold_taken_ = true;
      holder_job_id_ = job.job_id;
      if (job.kind == JobKind::kExperiment) {
        HoldForExperiment(job);
      } else {
        HoldForGang(job);
      }
    }
    return decision;
  }

 private:
  bool IsHeld(int node, int gpu) const { return held_[node][gpu]; }

  // --- Experiments ---

  // The best-fit GPU for `job` now, skipping held GPUs if `honor_hold`.
  std::optional<GpuRef> FindExperimentGpu(const JobRequest& job,
                                          bool honor_hold) const {
    std::optional<GpuRef> best;
    // (room left after placing, whole free GPUs on the node, name, index).
    std::tuple<int64_t, int, absl::string_view, int> best_key;
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      const NodeState& node = nodes_[n];
      if (!node.schedulable) continue;
      const int whole_free = WholeFreeCount(node);
      for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
        const GpuState& gpu = node.gpus[g];
        if (!IsUsable(gpu) || (honor_hold && IsHeld(n, g))) continue;
        if (gpu.task_count >= config_.max_tasks_per_gpu) continue;
        const int64_t want = ReservationBytes(job, gpu.memory_total_bytes);
        const int64_t free = FreeBytes(gpu);
        if (want > free) continue;
        auto key = std::make_tuple(free - want, whole_free,
                                   absl::string_view(node.name), gpu.index);
        if (!best || key < best_key) {
          best = GpuRef{n, g};
          best_key = key;
        }
      }
    }
    return best;
  }

  bool PlaceExperiment(const JobRequest& job, Placement& placement) {
    std::optional<GpuRef> ref = FindExperimentGpu(job, /*honor_hold=*/true);
    if (!ref) return false;
    NodeState& node = nodes_[ref->node];
    GpuState& gpu = node.gpus[ref->gpu];
    const int64_t want = ReservationBytes(job, gpu.memory_total_bytes);
    gpu.reserved_bytes = std::max<int64_t>(gpu.reserved_bytes, 0) + want;
    ++gpu.task_count;
    placement.nodes.push_back(NodeAssignment{node.name, {gpu.index}});
    placement.reserved_bytes_per_gpu = want;
    return true;
  }

  std::string ExperimentWaitReason(const JobRequest& job) const {
    if (hold_taken_ && FindExperimentGpu(job, /*honor_hold=*/false)) {
      return BlockedByHoldReason();
    }
    std::string want;
    if (job.gpu_memory_bytes > 0) {
      want = absl::StrFormat("%s free on one GPU", GiB(job.gpu_memory_bytes));
    } else if (job.gpu_fraction >= 1.0) {
      want = "a whole free GPU";
    } else {
      want = absl::StrFormat(
          "%g%% of one GPU free (%s on the largest GPU)",
          job.gpu_fraction * 100.0,
          GiB(ReservationBytes(job, shape_.max_gpu_memory_bytes)));
    }
    int64_t max_free = 0;
    bool task_limited = false;
    for (const NodeState& node : nodes_) {
      if (!node.schedulable) continue;
      for (const GpuState& gpu : node.gpus) {
        if (!IsUsable(gpu)) continue;
        max_free = std::max(max_free, FreeBytes(gpu));
        if (ReservationBytes(job, gpu.memory_total_bytes) <= FreeBytes(gpu)) {
          task_limited = true;  // Room enough, so the task count blocks it.
        }
      }
    }
    std::string now =
        task_limited
            ? absl::StrFormat(
                  "every GPU with that much free memory already runs %d "
                  "tasks, the limit",
                  config_.max_tasks_per_gpu)
            : absl::StrFormat("at most %s free on any GPU", GiB(max_free));
    return absl::StrFormat("waiting for %s (now %s%s)", want, now,
                           shape_.LostNote());
  }

  void HoldForExperiment(const JobRequest& job) {
    std::optional<GpuRef> best;
    // (-memory, -free bytes now, name, index).
    std::tuple<int64_t, int64_t, absl::string_view, int> best_key;
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      const NodeState& node = nodes_[n];
      if (!node.schedulable) continue;
      for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
        const GpuState& gpu = node.gpus[g];
        if (!IsUsable(gpu)) continue;
        if (ReservationBytes(job, gpu.memory_total_bytes) >
            gpu.memory_total_bytes) {
          continue;
        }
        auto key = std::make_tuple(-gpu.memory_total_bytes, -FreeBytes(gpu),
                                   absl::string_view(node.name), gpu.index);
        if (!best || key < best_key) {
          best = GpuRef{n, g};
          best_key = key;
        }
      }
    }
    if (!best) return;
    held_[best->node][best->gpu] = true;
    const NodeState& node = nodes_[best->node];
    held_description_ =
        absl::StrFormat("GPU %d on %s", node.gpus[best->gpu].index, node.name);
  }

  // --- Gangs ---

  // Whole free GPUs of node `n` a gang may take now.
  int GangFreeCount(int n, bool honor_hold) const {
    const NodeState& node = nodes_[n];
    if (!node.schedulable) return 0;
    int count = 0;
    for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
      if (IsWholeFree(node.gpus[g]) && !(honor_hold && IsHeld(n, g))) ++count;
    }
    return count;
  }

  // `count` whole free GPUs of node `n` (it has enough), as positions sorted
  // by GPU index: from the smallest NVLink island with enough free GPUs, else
  // the lowest indices.
  std::vector<int> PickGpus(int n, int count, bool honor_hold) const {
    const std::vector<GpuState>& gpus = nodes_[n].gpus;
    const int size = static_cast<int>(gpus.size());
    std::vector<int> order(size);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return gpus[a].index < gpus[b].index; });

    // Islands: connected components of nvlink_peers, by union-find.
    absl::flat_hash_map<int, int> position_of_index;
    for (int g = 0; g < size; ++g) position_of_index[gpus[g].index] = g;
    std::vector<int> parent(size);
    std::iota(parent.begin(), parent.end(), 0);
    auto find = [&parent](int g) {
      while (parent[g] != g) g = parent[g] = parent[parent[g]];
      return g;
    };
    for (int g = 0; g < size; ++g) {
      for (int peer : gpus[g].nvlink_peers) {
        auto it = position_of_index.find(peer);
        if (it != position_of_index.end()) parent[find(g)] = find(it->second);
      }
    }
    // Free positions per island root, in index order.
    absl::flat_hash_map<int, std::vector<int>> free_by_island;
    for (int g : order) {
      if (IsWholeFree(gpus[g]) && !(honor_hold && IsHeld(n, g))) {
        free_by_island[find(g)].push_back(g);
      }
    }
    const std::vector<int>* best = nullptr;
    for (const auto& [root, free] : free_by_island) {
      if (static_cast<int>(free.size()) < count) continue;
      if (best == nullptr || free.size() < best->size() ||
          (free.size() == best->size() &&
           gpus[free[0]].index < gpus[(*best)[0]].index)) {
        best = &free;
      }
    }
    std::vector<int> picked;
    if (best != nullptr) {
      picked.assign(best->begin(), best->begin() + count);
      return picked;
    }
    for (int g : order) {
      if (static_cast<int>(picked.size()) == count) break;
      if (IsWholeFree(gpus[g]) && !(honor_hold && IsHeld(n, g))) {
        picked.push_back(g);
      }
    }
    return picked;
  }

  // Where `job` would go now: the first layout (fewest nodes) that fits, on
  // the best-fit nodes (fewest free GPUs left, then name).
  std::optional<GangPlan> FindGang(const JobRequest& job,
                                   bool honor_hold) const {
    const int node_count = static_cast<int>(nodes_.size());
    std::vector<int> free(node_count);
    for (int n = 0; n < node_count; ++n) free[n] = GangFreeCount(n, honor_hold);
    for (const Layout& layout : GangLayouts(job, node_count)) {
      std::vector<int> candidates;
      for (int n = 0; n < node_count; ++n) {
        if (free[n] >= layout.per_node) candidates.push_back(n);
      }
      if (static_cast<int>(candidates.size()) < layout.nodes) continue;
      std::sort(candidates.begin(), candidates.end(), [&](int a, int b) {
        return std::make_tuple(free[a], absl::string_view(nodes_[a].name)) <
               std::make_tuple(free[b], absl::string_view(nodes_[b].name));
      });
      GangPlan plan;
      for (int i = 0; i < layout.nodes; ++i) {
        const int n = candidates[i];
        plan.nodes.emplace_back(n, PickGpus(n, layout.per_node, honor_hold));
      }
      return plan;
    }
    return std::nullopt;
  }

  bool PlaceGang(const JobRequest& job, Placement& placement) {
    std::optional<GangPlan> plan = FindGang(job, /*honor_hold=*/true);
    if (!plan) return false;
    int64_t per_gpu = -1;
    for (const auto& [n, positions] : plan->nodes) {
      NodeState& node = nodes_[n];
      NodeAssignment assignment;
      assignment.node = node.name;
      for (int g : positions) {
        GpuState& gpu = node.gpus[g];
        gpu.reserved_bytes = gpu.memory_total_bytes;
        ++gpu.task_count;
        assignment.gpu_indices.push_back(gpu.index);
        if (per_gpu < 0 || gpu.memory_total_bytes < per_gpu) {
          per_gpu = gpu.memory_total_bytes;
        }
      }
      placement.nodes.push_back(std::move(assignment));
    }
    placement.reserved_bytes_per_gpu = per_gpu;
    return true;
  }

  std::string GangWaitReason(const JobRequest& job) const {
    if (hold_taken_ && FindGang(job, /*honor_hold=*/false)) {
      return BlockedByHoldReason();
    }
    std::vector<Layout> layouts;
    std::vector<std::string> wanted;
    for (const Layout& layout : GangLayouts(job, shape_.node_count)) {
      if (!shape_.CouldEverHold(layout)) continue;
      layouts.push_back(layout);
      wanted.push_back(DescribeLayout(layout, /*free=*/true));
    }
    // Not empty: the job passed InfeasibleReason.
    const Layout& first = layouts.front();
    int max_free = 0;
    int big_enough = 0;
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      const int free = GangFreeCount(n, /*honor_hold=*/false);
      max_free = std::max(max_free, free);
      if (free >= first.per_node) ++big_enough;
    }
    std::string now =
        max_free < first.per_node
            ? absl::StrFormat("at most %s on any node",
                              absl::StrFormat("%d free %s", max_free,
                                              max_free == 1 ? "GPU" : "GPUs"))
            : absl::StrFormat("only %d %s %d or more free GPUs", big_enough,
                              big_enough == 1 ? "node has" : "nodes have",
                              first.per_node);
    return absl::StrFormat("waiting for %s (now %s%s)", JoinList(wanted, "or"),
                           now, shape_.LostNote());
  }

  void HoldForGang(const JobRequest& job) {
    const int node_count = static_cast<int>(nodes_.size());
    for (const Layout& layout : GangLayouts(job, node_count)) {
      std::vector<int> candidates;
      for (int n = 0; n < node_count; ++n) {
        if (nodes_[n].schedulable &&
            UsableGpuCount(nodes_[n]) >= layout.per_node) {
          candidates.push_back(n);
        }
      }
      if (static_cast<int>(candidates.size()) < layout.nodes) continue;
      // Most GPUs first, then most whole free GPUs now, then name.
      auto key = [this](int n) {
        return std::make_tuple(-UsableGpuCount(nodes_[n]),
                               -WholeFreeCount(nodes_[n]),
                               absl::string_view(nodes_[n].name));
      };
      std::sort(candidates.begin(), candidates.end(),
                [&](int a, int b) { return key(a) < key(b); });
      std::vector<std::string> names;
      for (int i = 0; i < layout.nodes; ++i) {
        const int n = candidates[i];
        std::fill(held_[n].begin(), held_[n].end(), true);
        names.push_back(nodes_[n].name);
      }
      held_description_ = absl::StrCat(names.size() == 1 ? "node " : "nodes ",
                                       JoinList(names, "and"));
      return;
    }
  }

  // For a job that would fit now but for the hold.
  std::string BlockedByHoldReason() const {
    return absl::StrFormat(
        "waiting for job %d, earlier in the queue, which has reserved %s "
        "until enough of it drains",
        holder_job_id_, held_description_);
  }

  const SchedulerConfig& config_;
  const ClusterShape shape_;
  // The snapshot with this call's placements applied.
  std::vector<NodeState> nodes_;
  // held_[node][gpu]: reserved for the head-of-queue job, same shape as nodes_.
  std::vector<std::vector<bool>> held_;
  bool hold_taken_ = false;
  int64_t holder_job_id_ = 0;
  // What the hold covers, for reasons: "nodes a and b", "GPU 3 on a".
  std::string held_description_;
};

}  // namespace

int64_t ReservationBytes(const JobRequest& job, int64_t gpu_total_bytes) {
  if (job.gpu_memory_bytes > 0) return job.gpu_memory_bytes;
  if (gpu_total_bytes <= 0 || !(job.gpu_fraction > 0.0)) return 0;
  if (job.gpu_fraction >= 1.0) return gpu_total_bytes;
  // Fractions like 0.2 are not exact in binary: 0.2 * 80 GiB comes out a hair
  // above a whole number and would round up one byte, so five 0.2 jobs would
  // not fit one GPU. A product within kTolerance of a whole number is that
  // number; anything else rounds up.
  constexpr long double kTolerance = 1e-3L;  // bytes
  const long double bytes =
      static_cast<long double>(job.gpu_fraction) * gpu_total_bytes;
  const long double nearest = std::round(bytes);
  const long double rounded =
      std::fabs(bytes - nearest) < kTolerance ? nearest : std::ceil(bytes);
  // At least one byte: a share of a GPU is never free of charge, and a GPU
  // with reserved_bytes == 0 must mean whole and free.
  return std::clamp<int64_t>(static_cast<int64_t>(rounded), 1, gpu_total_bytes);
}

Scheduler::Scheduler(SchedulerConfig config) : config_(config) {}

std::vector<Decision> Scheduler::Schedule(
    const ClusterSnapshot& cluster,
    const std::vector<JobRequest>& queue) const {
  std::vector<const JobRequest*> order;
  order.reserve(queue.size());
  for (const JobRequest& job : queue) order.push_back(&job);
  std::stable_sort(order.begin(), order.end(),
                   [](const JobRequest* a, const JobRequest* b) {
                     if (a->priority != b->priority) {
                       return a->priority > b->priority;
                     }
                     return a->submit_seq < b->submit_seq;
                   });
  SchedulePass pass(cluster, config_);
  std::vector<Decision> decisions;
  decisions.reserve(order.size());
  for (const JobRequest* job : order) decisions.push_back(pass.Decide(*job));
  return decisions;
}

}  // namespace trainctl::sched
