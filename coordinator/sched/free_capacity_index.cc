// Scheduler: the free-capacity indexes (SchedulerConfig.linear_search off):
// per GPU memory size, the GPUs that can take another task in best-fit
// order; per count, the schedulable nodes with that many whole free GPUs.
// Kept equal to what the linear scans would compute from the pass's nodes and
// held marks: every change to either goes through NodeChanged(n).

#include "coordinator/sched/free_capacity_index.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace trainctl::sched::internal {

void FreeCapacityIndex::Build(const std::vector<NodeState>& nodes,
                              const HeldGpus& held) {
  const int node_count = static_cast<int>(nodes.size());
  // Equal names share a rank, as they compare equal in the linear scans.
  std::vector<int> by_name(node_count);
  std::iota(by_name.begin(), by_name.end(), 0);
  std::stable_sort(by_name.begin(), by_name.end(), [&nodes](int a, int b) {
    return nodes[a].name < nodes[b].name;
  });
  name_rank_.assign(node_count, 0);
  for (int i = 0; i < node_count; ++i) {
    const bool same =
        i > 0 && nodes[by_name[i]].name == nodes[by_name[i - 1]].name;
    name_rank_[by_name[i]] = same ? name_rank_[by_name[i - 1]] : i;
  }
  size_t max_gpus = 0;
  class_of_.resize(node_count);
  exp_key_.resize(node_count);
  free_key_.resize(node_count);
  for (int n = 0; n < node_count; ++n) {
    const NodeState& node = nodes[n];
    max_gpus = std::max(max_gpus, node.gpus.size());
    class_of_[n].assign(node.gpus.size(), -1);
    exp_key_[n].assign(node.gpus.size(), std::nullopt);
    free_key_[n].assign(node.gpus.size(), std::nullopt);
    if (!node.schedulable) continue;
    for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
      const GpuState& gpu = node.gpus[g];
      if (!IsUsable(gpu)) continue;
      auto it = std::find_if(classes_.begin(), classes_.end(),
                             [&](const MemoryClass& c) {
                               return c.memory_bytes == gpu.memory_total_bytes;
                             });
      if (it == classes_.end()) {
        classes_.emplace_back().memory_bytes = gpu.memory_total_bytes;
        it = classes_.end() - 1;
      }
      class_of_[n][g] = static_cast<int>(it - classes_.begin());
    }
  }
  all_buckets_.assign(max_gpus + 1, NodeBucket());
  unheld_buckets_.assign(max_gpus + 1, NodeBucket());
  whole_free_.assign(node_count, 0);
  unheld_free_.assign(node_count, 0);
  node_indexed_.assign(node_count, false);
  for (int n = 0; n < node_count; ++n) NodeChanged(nodes, held, n);
}

void FreeCapacityIndex::NodeChanged(const std::vector<NodeState>& nodes,
                                    const HeldGpus& held, int n) {
  const NodeState& node = nodes[n];
  if (!node.schedulable) return;  // Never indexed.
  int whole_free = 0;
  int unheld_free = 0;
  for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
    if (!IsWholeFree(node.gpus[g])) continue;
    ++whole_free;
    if (!held[n][g]) ++unheld_free;
  }
  const std::pair<int, int> entry(name_rank_[n], n);
  if (!node_indexed_[n] || whole_free != whole_free_[n]) {
    if (node_indexed_[n]) all_buckets_[whole_free_[n]].erase(entry);
    all_buckets_[whole_free].insert(entry);
    whole_free_[n] = whole_free;
  }
  if (!node_indexed_[n] || unheld_free != unheld_free_[n]) {
    if (node_indexed_[n]) unheld_buckets_[unheld_free_[n]].erase(entry);
    unheld_buckets_[unheld_free].insert(entry);
    unheld_free_[n] = unheld_free;
  }
  node_indexed_[n] = true;
  for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
    const GpuState& gpu = node.gpus[g];
    if (class_of_[n][g] < 0) continue;
    MemoryClass& c = classes_[class_of_[n][g]];
    const int64_t free = FreeBytes(gpu);
    if (free_key_[n][g] != free) {
      if (free_key_[n][g]) c.free_all.erase(c.free_all.find(*free_key_[n][g]));
      c.free_all.insert(free);
      free_key_[n][g] = free;
    }
    std::optional<ExpKey> key;
    if (gpu.task_count < max_tasks_per_gpu_) {
      key = ExpKey{free, whole_free, name_rank_[n], gpu.index, n, g};
    }
    if (key != exp_key_[n][g]) {
      if (exp_key_[n][g]) c.gpus.erase(*exp_key_[n][g]);
      if (key) c.gpus.insert(*key);
      exp_key_[n][g] = key;
    }
  }
}

std::optional<GpuRef> FreeCapacityIndex::BestExperimentGpu(
    const JobRequest& job, bool honor_hold, const HeldGpus& held) const {
  std::optional<GpuRef> best;
  // (room left after placing, then ExpKey's ties).
  std::tuple<int64_t, int, int, int, int, int> best_key;
  for (const MemoryClass& c : classes_) {
    const int64_t want = ReservationBytes(job, c.memory_bytes);
    auto it = c.gpus.lower_bound(
        ExpKey{want, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN, INT32_MIN});
    for (; it != c.gpus.end(); ++it) {
      const auto& [free, whole_free, rank, index, n, g] = *it;
      if (honor_hold && held[n][g]) continue;
      auto key = std::make_tuple(free - want, whole_free, rank, index, n, g);
      if (!best || key < best_key) {
        best = GpuRef{n, g};
        best_key = key;
      }
      break;
    }
  }
  return best;
}

bool FreeCapacityIndex::AnyLayoutFits(const Layouts& layouts,
                                      bool honor_hold) const {
  const std::vector<NodeBucket>& buckets = Buckets(honor_hold);
  const int max_count = static_cast<int>(buckets.size()) - 1;
  for (const Layout& layout : layouts) {
    int64_t fitting = 0;
    for (int k = std::max(layout.per_node, 1); k <= max_count; ++k) {
      fitting += static_cast<int64_t>(buckets[k].size());
    }
    if (fitting >= layout.nodes) return true;
  }
  return false;
}

}  // namespace trainctl::sched::internal
