// Scheduler: gangs (GangPlacer; all-or-nothing on whole free GPUs). PACK
// tries layouts fewest nodes first on best-fit nodes; SPREAD most nodes first
// on the emptiest nodes; within a node, GPUs of one NVLink island when one
// has enough. From the per-count node buckets or by the reference scan of
// every node; placing one, and why one waits.

#include "coordinator/sched/gang_placer.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace trainctl::sched::internal {

// `count` whole free GPUs of node `n` (it has enough), as positions sorted
// by GPU index: from the smallest NVLink island with enough free GPUs, else
// the lowest indices.
std::vector<int> GangPlacer::PickGpus(int n, int count, bool honor_hold) const {
  const std::vector<GpuState>& gpus = state_.nodes()[n].gpus;
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
    // The working copy leaves the peers out; the snapshot has them.
    for (int peer : state_.cluster_nodes()[n].gpus[g].nvlink_peers) {
      auto it = position_of_index.find(peer);
      if (it != position_of_index.end()) parent[find(g)] = find(it->second);
    }
  }
  // Free positions per island root, in index order.
  absl::flat_hash_map<int, std::vector<int>> free_by_island;
  for (int g : order) {
    if (IsWholeFree(gpus[g]) && !(honor_hold && state_.IsHeld(n, g))) {
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
    if (IsWholeFree(gpus[g]) && !(honor_hold && state_.IsHeld(n, g))) {
      picked.push_back(g);
    }
  }
  return picked;
}

// Where `job` would go now: the first layout (fewest nodes) that fits, on
// the best-fit nodes (fewest free GPUs left, then name).
std::optional<GangPlan> GangPlacer::Find(const JobRequest& job,
                                         bool honor_hold) const {
  return state_.indexed() ? FindIndexed(job, honor_hold)
                          : FindLinear(job, honor_hold);
}

// FindGang from the per-count node buckets: nodes with >= per_node free
// GPUs are the buckets per_node..max, already in (count, name) order.
// O(layouts x (GPUs per node + nodes taken x log nodes)).
std::optional<GangPlan> GangPlacer::FindIndexed(const JobRequest& job,
                                                bool honor_hold) const {
  const std::vector<FreeCapacityIndex::NodeBucket>& buckets =
      state_.index().Buckets(honor_hold);
  const int max_count = static_cast<int>(buckets.size()) - 1;
  const bool spread = job.placement == GangPlacement::kSpread;
  Layouts layouts = GangLayouts(job, static_cast<int>(state_.nodes().size()));
  if (spread) std::reverse(layouts.begin(), layouts.end());
  for (const Layout& layout : layouts) {
    if (layout.per_node > max_count) continue;
    int64_t fitting = 0;
    for (int k = std::max(layout.per_node, 1); k <= max_count; ++k) {
      fitting += static_cast<int64_t>(buckets[k].size());
    }
    if (fitting < layout.nodes) continue;
    GangPlan plan;
    plan.nodes.reserve(layout.nodes);
    // PACK: best fit (fewest free GPUs first); SPREAD: emptiest first.
    for (int i = 0; i <= max_count - layout.per_node &&
                    static_cast<int>(plan.nodes.size()) < layout.nodes;
         ++i) {
      const int k = spread ? max_count - i : layout.per_node + i;
      if (k < 1) continue;
      for (const auto& [rank, n] : buckets[k]) {
        if (static_cast<int>(plan.nodes.size()) == layout.nodes) break;
        plan.nodes.emplace_back(n, PickGpus(n, layout.per_node, honor_hold));
      }
    }
    return plan;
  }
  return std::nullopt;
}

bool GangPlacer::Fits(const JobRequest& job, bool honor_hold) const {
  if (!state_.indexed()) return Find(job, honor_hold).has_value();
  return state_.index().AnyLayoutFits(
      GangLayouts(job, static_cast<int>(state_.nodes().size())), honor_hold);
}

// The reference: every node, O(GPUs + nodes log nodes) per layout.
std::optional<GangPlan> GangPlacer::FindLinear(const JobRequest& job,
                                               bool honor_hold) const {
  const std::vector<NodeState>& nodes = state_.nodes();
  const int node_count = static_cast<int>(nodes.size());
  std::vector<int> free(node_count);
  for (int n = 0; n < node_count; ++n) {
    free[n] = state_.GangFreeCount(n, honor_hold);
  }
  const bool spread = job.placement == GangPlacement::kSpread;
  Layouts layouts = GangLayouts(job, node_count);
  // SPREAD: the most nodes first.
  if (spread) std::reverse(layouts.begin(), layouts.end());
  for (const Layout& layout : layouts) {
    std::vector<int> candidates;
    for (int n = 0; n < node_count; ++n) {
      if (free[n] >= layout.per_node) candidates.push_back(n);
    }
    if (static_cast<int>(candidates.size()) < layout.nodes) continue;
    // PACK: best fit (fewest free GPUs first); SPREAD: emptiest first.
    std::sort(candidates.begin(), candidates.end(), [&](int a, int b) {
      const int fa = spread ? -free[a] : free[a];
      const int fb = spread ? -free[b] : free[b];
      return std::make_tuple(fa, absl::string_view(nodes[a].name)) <
             std::make_tuple(fb, absl::string_view(nodes[b].name));
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

bool GangPlacer::Place(const JobRequest& job, bool honor_hold,
                       Placement& placement) {
  std::optional<GangPlan> plan = Find(job, honor_hold);
  if (!plan) return false;
  int64_t per_gpu = -1;  // the smallest GPU's size, for display only
  for (const auto& [n, positions] : plan->nodes) {
    NodeState& node = state_.MutableNode(n);
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
    state_.NodeChanged(n);
  }
  placement.reserved_bytes_per_gpu = per_gpu;
  placement.whole_gpus = true;
  return true;
}

// The layouts of `job` this cluster could ever hold (not empty for a job
// that passed InfeasibleReason).
Layouts GangPlacer::PossibleLayouts(const JobRequest& job) const {
  const ClusterShape& shape = state_.shape();
  Layouts layouts;
  for (const Layout& layout : GangLayouts(job, shape.node_count)) {
    if (shape.CouldEverHold(layout)) layouts.push_back(layout);
  }
  return layouts;
}

GangFacts GangPlacer::WaitFacts(const JobRequest& job, bool hold_taken) const {
  GangFacts f;
  if (hold_taken && Fits(job, /*honor_hold=*/false)) {
    f.blocked_by_hold = true;
    return f;
  }
  const int per_node = PossibleLayouts(job).front().per_node;
  if (state_.indexed()) {
    const std::vector<FreeCapacityIndex::NodeBucket>& buckets =
        state_.index().Buckets(/*honor_hold=*/false);
    for (int k = static_cast<int>(buckets.size()) - 1; k >= 0; --k) {
      if (buckets[k].empty()) continue;
      if (f.max_free == 0) f.max_free = k;
      if (k >= per_node) f.big_enough += static_cast<int>(buckets[k].size());
    }
    return f;
  }
  for (int n = 0; n < static_cast<int>(state_.nodes().size()); ++n) {
    const int free = state_.GangFreeCount(n, /*honor_hold=*/false);
    f.max_free = std::max(f.max_free, free);
    if (free >= per_node) ++f.big_enough;
  }
  return f;
}

std::string GangPlacer::WaitReason(const JobRequest& job,
                                   const GangFacts& f) const {
  std::vector<std::string> wanted;
  const Layouts layouts = PossibleLayouts(job);
  for (const Layout& layout : layouts) {
    wanted.push_back(DescribeLayout(layout, /*free=*/true));
  }
  const Layout& first = layouts.front();
  const int max_free = f.max_free;
  const int big_enough = f.big_enough;
  std::string now =
      max_free < first.per_node
          ? absl::StrFormat("at most %s on any node",
                            absl::StrFormat("%d free %s", max_free,
                                            max_free == 1 ? "GPU" : "GPUs"))
          : absl::StrFormat("only %d %s %d or more free GPUs", big_enough,
                            big_enough == 1 ? "node has" : "nodes have",
                            first.per_node);
  return absl::StrFormat("waiting for %s (now %s%s)", JoinList(wanted, "or"),
                         now, state_.shape().LostNote());
}

}  // namespace trainctl::sched::internal
