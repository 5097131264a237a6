#include "coordinator/sched/muri_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>
#include <vector>

namespace trainctl::sched::muri {

YarnAllocator::YarnAllocator(const GpuCluster& cluster)
    : cluster_(cluster),
      free_(static_cast<size_t>(std::max(cluster.num_nodes, 0)),
            cluster.gpus_per_node) {}

int YarnAllocator::total_free_gpus() const {
  return std::accumulate(free_.begin(), free_.end(), 0);
}

std::optional<GpuPlacement> YarnAllocator::TryPlace(int num_gpu) {
  const int per_node = cluster_.gpus_per_node;
  if (num_gpu <= 0 || per_node <= 0) return std::nullopt;
  const int num_nodes = static_cast<int>(free_.size());
  if (num_gpu <= per_node) {
    for (int n = 0; n < num_nodes; ++n) {
      if (free_[n] >= num_gpu) {
        free_[n] -= num_gpu;
        return GpuPlacement{{n, num_gpu}};
      }
    }
    return std::nullopt;
  }
  // Cross-node: whole idle nodes first, then one node for the remainder.
  const int full_nodes = num_gpu / per_node;
  const int last_gpus = num_gpu % per_node;
  std::vector<int> full;
  for (int n = 0; n < num_nodes && static_cast<int>(full.size()) < full_nodes;
       ++n) {
    if (free_[n] == per_node) full.push_back(n);
  }
  if (static_cast<int>(full.size()) < full_nodes) return std::nullopt;
  int last = -1;
  if (last_gpus != 0) {
    for (int n = 0; n < num_nodes; ++n) {
      if (std::find(full.begin(), full.end(), n) != full.end()) continue;
      if (free_[n] >= last_gpus) {
        last = n;
        break;
      }
    }
    if (last < 0) return std::nullopt;
  }
  GpuPlacement placement;
  for (int n : full) {
    free_[n] = 0;
    placement.push_back({n, per_node});
  }
  if (last >= 0) {
    free_[last] -= last_gpus;
    placement.push_back({last, last_gpus});
  }
  std::sort(placement.begin(), placement.end(),
            [](const NodeShare& a, const NodeShare& b) {
              return a.node < b.node;
            });
  return placement;
}

bool YarnAllocator::Reserve(const GpuPlacement& placement) {
  for (const NodeShare& share : placement) {
    if (share.node < 0 || share.node >= static_cast<int>(free_.size()) ||
        free_[share.node] < share.gpus) {
      return false;
    }
  }
  for (const NodeShare& share : placement) free_[share.node] -= share.gpus;
  return true;
}

namespace {

Decision EmptyDecision(int table_size) {
  Decision d;
  d.run.assign(static_cast<size_t>(table_size), false);
  d.placement.resize(static_cast<size_t>(table_size));
  return d;
}

}  // namespace

Decision ScheduleShortestFirst(const GpuCluster& cluster, ShortestKey key,
                               std::vector<ShortestFirstJob>& runnable,
                               int table_size) {
  // Upstream sorts the persistent runnable list with Python's stable sort.
  if (key == ShortestKey::kRemainingTime) {
    std::stable_sort(runnable.begin(), runnable.end(),
                     [](const ShortestFirstJob& a, const ShortestFirstJob& b) {
                       return a.remaining_time_s < b.remaining_time_s;
                     });
  } else {
    std::stable_sort(runnable.begin(), runnable.end(),
                     [](const ShortestFirstJob& a, const ShortestFirstJob& b) {
                       return a.remaining_gpu_time_s < b.remaining_gpu_time_s;
                     });
  }
  Decision d = EmptyDecision(table_size);
  YarnAllocator alloc(cluster);
  for (const ShortestFirstJob& job : runnable) {
    std::optional<GpuPlacement> p = alloc.TryPlace(job.num_gpu);
    if (!p.has_value()) continue;
    d.run[job.job] = true;
    d.placement[job.job] = *std::move(p);
  }
  return d;
}

TiresiasQueues MakeTiresiasQueues(const TiresiasConfig& config) {
  TiresiasQueues q;
  q.queues.resize(static_cast<size_t>(config.num_queues()));
  return q;
}

int TiresiasQueueAfter(const TiresiasConfig& config, int queue,
                       double attained_gpu_s) {
  if (queue < config.num_queues() - 1 &&
      attained_gpu_s >= config.thresholds_gpu_s[queue]) {
    return queue + 1;
  }
  return queue;
}

void TiresiasMove(TiresiasQueues& queues, JobIndex job, int from, int to) {
  std::vector<JobIndex>& src = queues.queues[from];
  auto it = std::find(src.begin(), src.end(), job);
  if (it == src.end()) return;
  src.erase(it);
  queues.queues[to].push_back(job);
}

Decision ScheduleTiresias(int total_gpus, TiresiasQueues& queues,
                          absl::Span<const TiresiasJob> jobs) {
  Decision d = EmptyDecision(static_cast<int>(jobs.size()));
  int free_gpus = total_gpus;
  for (const std::vector<JobIndex>& queue : queues.queues) {
    for (JobIndex j : queue) {
      if (free_gpus >= jobs[j].num_gpu) {
        d.run[j] = true;
        free_gpus -= jobs[j].num_gpu;
      }
    }
  }
  // Not-admitted jobs go behind admitted ones, each group in order.
  for (std::vector<JobIndex>& queue : queues.queues) {
    std::stable_partition(queue.begin(), queue.end(),
                          [&](JobIndex j) { return d.run[j]; });
  }
  return d;
}

std::optional<double> TiresiasNextDemotion(const TiresiasConfig& config,
                                           int queue, int num_gpu,
                                           double executed_time_s,
                                           double now_s) {
  if (queue >= config.num_queues() - 1 || num_gpu <= 0) return std::nullopt;
  const double steps = std::ceil(config.thresholds_gpu_s[queue] / num_gpu);
  return (steps - executed_time_s) + now_s;
}

Decision ScheduleFifo(const GpuCluster& cluster,
                      absl::Span<const FifoJob> arrival_order, bool backfill,
                      int table_size) {
  Decision d = EmptyDecision(table_size);
  YarnAllocator alloc(cluster);
  // Running jobs keep their GPUs.
  for (const FifoJob& job : arrival_order) {
    if (job.placement.has_value() && alloc.Reserve(*job.placement)) {
      d.run[job.job] = true;
      d.placement[job.job] = *job.placement;
    }
  }
  for (const FifoJob& job : arrival_order) {
    if (job.placement.has_value()) continue;
    std::optional<GpuPlacement> p = alloc.TryPlace(job.num_gpu);
    if (!p.has_value()) {
      if (backfill) continue;
      break;
    }
    d.run[job.job] = true;
    d.placement[job.job] = *std::move(p);
  }
  return d;
}

}  // namespace trainctl::sched::muri
