// Scheduler: the free-capacity indexes (SchedulerConfig.linear_search off):
// per GPU memory size, the GPUs that can take another task in best-fit
// order; per count, the schedulable nodes with that many whole free GPUs.
// Kept equal to what the linear scans would compute from nodes_ and held_:
// every change to either goes through NodeChanged(n). Also the pass's
// working copy of the nodes (MutableCopy).

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

void SchedulePass::BuildIndexes() {
  const int node_count = static_cast<int>(nodes_.size());
  // Equal names share a rank, as they compare equal in the linear scans.
  std::vector<int> by_name(node_count);
  std::iota(by_name.begin(), by_name.end(), 0);
  std::stable_sort(by_name.begin(), by_name.end(), [this](int a, int b) {
    return nodes_[a].name < nodes_[b].name;
  });
  name_rank_.assign(node_count, 0);
  for (int i = 0; i < node_count; ++i) {
    const bool same = i > 0 && nodes_[by_name[i]].name ==
                                   nodes_[by_name[i - 1]].name;
    name_rank_[by_name[i]] = same ? name_rank_[by_name[i - 1]] : i;
  }
  size_t max_gpus = 0;
  class_of_.resize(node_count);
  exp_key_.resize(node_count);
  free_key_.resize(node_count);
  for (int n = 0; n < node_count; ++n) {
    const NodeState& node = nodes_[n];
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
  for (int n = 0; n < node_count; ++n) NodeChanged(n);
}

// Re-indexes node `n` after its GPUs or its held_ marks changed.
// Only the entries whose keys changed are touched.
void SchedulePass::NodeChanged(int n) {
  ++state_version_;
  if (!indexed_) return;
  const NodeState& node = nodes_[n];
  if (!node.schedulable) return;  // Never indexed.
  int whole_free = 0;
  int unheld_free = 0;
  for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
    if (!IsWholeFree(node.gpus[g])) continue;
    ++whole_free;
    if (!IsHeld(n, g)) ++unheld_free;
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
    if (gpu.task_count < config_.max_tasks_per_gpu) {
      key = ExpKey{free, whole_free, name_rank_[n], gpu.index, n, g};
    }
    if (key != exp_key_[n][g]) {
      if (exp_key_[n][g]) c.gpus.erase(*exp_key_[n][g]);
      if (key) c.gpus.insert(*key);
      exp_key_[n][g] = key;
    }
  }
}

// `nodes` without what the pass never reads or changes (GPU UUIDs and
// NVLink peers, read from the snapshot): no allocation per GPU.
std::vector<NodeState> SchedulePass::MutableCopy(
    const std::vector<NodeState>& nodes) {
  std::vector<NodeState> copy(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    copy[n].name = nodes[n].name;
    copy[n].schedulable = nodes[n].schedulable;
    copy[n].container_runtime = nodes[n].container_runtime;
    copy[n].cgroups = nodes[n].cgroups;
    copy[n].gpus.resize(nodes[n].gpus.size());
    for (size_t g = 0; g < nodes[n].gpus.size(); ++g) {
      const GpuState& from = nodes[n].gpus[g];
      GpuState& to = copy[n].gpus[g];
      to.index = from.index;
      to.memory_total_bytes = from.memory_total_bytes;
      to.reserved_bytes = from.reserved_bytes;
      to.task_count = from.task_count;
    }
  }
  return copy;
}

}  // namespace trainctl::sched::internal
