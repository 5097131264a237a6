// Scheduler: the working state of one pass (PassState): the copy of the
// nodes, held marks, running jobs' GPUs freed and re-taken, and the
// free-capacity index kept in step.

#include "coordinator/sched/pass_state.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace trainctl::sched::internal {

PassState::PassState(const ClusterSnapshot& cluster,
                     const SchedulerConfig& config, bool indexed)
    : config_(config),
      indexed_(indexed),
      shape_(cluster),
      cluster_nodes_(cluster.nodes),
      nodes_(MutableCopy(cluster.nodes)),
      running_(cluster.running),
      index_(config.max_tasks_per_gpu) {
  held_.reserve(nodes_.size());
  node_index_.reserve(nodes_.size());
  for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
    const NodeState& node = nodes_[n];
    held_.emplace_back(node.gpus.size(), false);
    node_index_[node.name] = n;
    if (!node.schedulable) continue;
    for (const GpuState& gpu : node.gpus) {
      if (!IsUsable(gpu)) continue;
      total_gpus_ += 1;
      total_bytes_ += static_cast<double>(gpu.memory_total_bytes);
    }
  }
  evicted_.assign(running_.size(), false);
  if (indexed_) {
    index_.Build(nodes_, held_);
    state_version_ += static_cast<int64_t>(nodes_.size());
  }
}

int PassState::GangFreeCount(int n, bool honor_hold) const {
  if (indexed_) return index_.FreeCount(n, honor_hold);
  const NodeState& node = nodes_[n];
  if (!node.schedulable) return 0;
  int count = 0;
  for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
    if (IsWholeFree(node.gpus[g]) && !(honor_hold && IsHeld(n, g))) ++count;
  }
  return count;
}

Usage PassState::UsageOf(const Placement& placement) const {
  Usage u;
  for (const NodeAssignment& a : placement.nodes) {
    auto it = node_index_.find(a.node);
    for (int index : a.gpu_indices) {
      double share = 1.0;
      double bytes = static_cast<double>(placement.reserved_bytes_per_gpu);
      if (it != node_index_.end()) {
        for (const GpuState& gpu : nodes_[it->second].gpus) {
          if (gpu.index == index && gpu.memory_total_bytes > 0) {
            bytes = static_cast<double>(PlacementBytesOn(placement, gpu));
            share = std::min(
                1.0, bytes / static_cast<double>(gpu.memory_total_bytes));
          }
        }
      }
      u.bytes += bytes;
      u.gpus += share;
    }
  }
  return u;
}

void PassState::Hold(int n, int g) {
  held_[n][g] = true;
  NodeChanged(n);
}

void PassState::HoldNode(int n) {
  std::fill(held_[n].begin(), held_[n].end(), true);
  NodeChanged(n);
}

void PassState::ApplyRunning(int i, int sign) {
  if (sign < 0) ++capacity_version_;
  const RunningJob& r = running_[i];
  for (const auto& [n, positions] : RunningGpus(i)) {
    for (int g : positions) {
      GpuState& gpu = nodes_[n].gpus[g];
      gpu.reserved_bytes = std::max<int64_t>(
          0, gpu.reserved_bytes + sign * PlacementBytesOn(r.placement, gpu));
      gpu.task_count = std::max(0, gpu.task_count + sign);
    }
    NodeChanged(n);
  }
}

const PassState::NodeGpus& PassState::RunningGpus(int i) {
  if (running_gpus_.empty()) running_gpus_.resize(running_.size());
  std::optional<NodeGpus>& gpus = running_gpus_[i];
  if (!gpus) {
    gpus.emplace();
    for (const NodeAssignment& a : running_[i].placement.nodes) {
      auto it = node_index_.find(a.node);
      if (it == node_index_.end()) continue;
      std::vector<int> positions;
      const std::vector<GpuState>& node_gpus = nodes_[it->second].gpus;
      for (int g = 0; g < static_cast<int>(node_gpus.size()); ++g) {
        if (std::find(a.gpu_indices.begin(), a.gpu_indices.end(),
                      node_gpus[g].index) != a.gpu_indices.end()) {
          positions.push_back(g);
        }
      }
      gpus->emplace_back(it->second, std::move(positions));
    }
  }
  return *gpus;
}

// `nodes` without what the pass never reads or changes (GPU UUIDs and
// NVLink peers, read from the snapshot): no allocation per GPU.
std::vector<NodeState> PassState::MutableCopy(
    const std::vector<NodeState>& nodes) {
  std::vector<NodeState> copy(nodes.size());
  for (size_t n = 0; n < nodes.size(); ++n) {
    copy[n].name = nodes[n].name;
    copy[n].schedulable = nodes[n].schedulable;
    copy[n].out_of_service = nodes[n].out_of_service;
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
