#include "coordinator/sched/muri_policy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"

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

MuriLDecision ScheduleMuriL(const GpuCluster& cluster,
                            std::vector<MuriLJob>& runnable,
                            const InterleaveConfig& config, int table_size) {
  std::stable_sort(runnable.begin(), runnable.end(),
                   [](const MuriLJob& a, const MuriLJob& b) {
                     return a.attained_gpu_s < b.attained_gpu_s;
                   });
  const int n = static_cast<int>(runnable.size());
  const int per_slot = std::max(config.max_jobs, 1);
  // Positions into `runnable` per GPU count, in order; GPU counts in order
  // of first appearance.
  std::vector<int> classes;
  std::map<int, std::vector<int>> of_class;
  for (int i = 0; i < n; ++i) {
    auto [it, added] = of_class.try_emplace(runnable[i].num_gpu);
    if (added) classes.push_back(runnable[i].num_gpu);
    it->second.push_back(i);
  }
  // 2. Candidates.
  std::vector<bool> marked(n, false);
  std::map<int, size_t> chosen;
  {
    YarnAllocator probe(cluster);
    for (int i = 0; i < n; ++i) {
      if (marked[i]) continue;
      const int k = runnable[i].num_gpu;
      if (!probe.TryPlace(k).has_value()) continue;
      const std::vector<int>& list = of_class[k];
      const size_t from = chosen[k];
      const size_t to = std::min(from + per_slot, list.size());
      for (size_t t = from; t < to; ++t) marked[list[t]] = true;
      chosen[k] = to;
    }
  }
  // A group: positions into `runnable`.
  using Group = std::vector<int>;
  std::map<int, std::vector<Group>> groups;
  int64_t required = 0;
  for (int k : classes) {
    const std::vector<int>& list = of_class[k];
    for (size_t t = 0; t < chosen[k]; ++t) {
      groups[k].push_back({list[t]});
      required += k;
    }
  }
  auto profiles_of = [&](const Group& g) {
    std::vector<const InterleaveProfile*> p;
    for (int i : g) p.push_back(runnable[i].profile);
    return p;
  };
  // (interleaved iteration time, utilization) by the members' profiles:
  // jobs of one model share a profile, so the many pairs of a long queue
  // are a few distinct questions.
  absl::flat_hash_map<std::vector<double>, std::pair<double, double>> memo;
  auto figures = [&](const Group& g) {
    std::vector<const InterleaveProfile*> p = profiles_of(g);
    std::vector<double> key = CanonicalGroupKey(p);
    auto it = memo.find(key);
    if (it != memo.end()) return it->second;
    const auto span = absl::MakeConstSpan(p);
    const std::pair<double, double> f(InterleavedIterationTime(span, config),
                                      InterleaveUtilization(span, config));
    memo.emplace(std::move(key), f);
    return f;
  };
  auto usable = [&](const Group& g) {
    for (int i : g) {
      if (runnable[i].profile == nullptr || !runnable[i].profile->usable()) {
        return false;
      }
    }
    return true;
  };
  // 3. Packing rounds.
  const int64_t capacity = cluster.total_gpus();
  for (int round = 0; round < per_slot && required > capacity; ++round) {
    for (int k : classes) {
      std::vector<Group>& list = groups[k];
      const int m = static_cast<int>(list.size());
      // Edges (weight, u, v), u < v, best first.
      std::vector<std::tuple<double, int, int>> edges;
      for (int u = 0; u < m; ++u) {
        if (!usable(list[u])) continue;
        for (int v = u + 1; v < m; ++v) {
          if (!usable(list[v]) ||
              static_cast<int>(list[u].size() + list[v].size()) > per_slot) {
            continue;
          }
          Group both = list[u];
          both.insert(both.end(), list[v].begin(), list[v].end());
          const double w = figures(both).second;
          if (w > 0) edges.emplace_back(w, u, v);
        }
      }
      std::stable_sort(edges.begin(), edges.end(),
                       [](const auto& a, const auto& b) {
                         return std::get<0>(a) > std::get<0>(b);
                       });
      std::vector<int> mate(m, -1);
      for (const auto& [w, u, v] : edges) {
        if (mate[u] < 0 && mate[v] < 0) {
          mate[u] = v;
          mate[v] = u;
        }
      }
      // Upstream's listing: a pair at its larger index, singletons in place;
      // pairs merge while the demand exceeds the cluster.
      std::vector<Group> next;
      for (int u = 0; u < m; ++u) {
        const int v = mate[u];
        if (v >= 0 && v > u) continue;
        if (v < 0) {
          next.push_back(list[u]);
          continue;
        }
        if (required > capacity) {
          Group merged = list[v];
          merged.insert(merged.end(), list[u].begin(), list[u].end());
          next.push_back(std::move(merged));
          required -= k;
        } else {
          next.push_back(list[v]);
          next.push_back(list[u]);
        }
      }
      list = std::move(next);
    }
  }
  // 4. Autopack, order, admission.
  struct Ready {
    int num_gpu;
    Group members;
    double key;
  };
  std::vector<Ready> ready;
  for (int k : classes) {
    for (Group& g : groups[k]) {
      if (g.size() > 1) {
        double apart = 0;
        for (int i : g) apart += runnable[i].profile->solo_time();
        const double together = figures(g).first;
        if (!(together <= apart)) {
          for (int i : g) ready.push_back({k, {i}, runnable[i].attained_gpu_s});
          continue;
        }
      }
      double key = runnable[g[0]].attained_gpu_s;
      for (int i : g) key = std::min(key, runnable[i].attained_gpu_s);
      ready.push_back({k, g, key});
    }
  }
  std::stable_sort(ready.begin(), ready.end(),
                   [](const Ready& a, const Ready& b) { return a.key < b.key; });
  std::vector<const Ready*> admitted;
  {
    YarnAllocator probe(cluster);
    for (const Ready& r : ready) {
      if (probe.TryPlace(r.num_gpu).has_value()) admitted.push_back(&r);
    }
  }
  // 5. Placement, larger GPU counts first.
  std::stable_sort(admitted.begin(), admitted.end(),
                   [](const Ready* a, const Ready* b) {
                     return a->num_gpu > b->num_gpu;
                   });
  MuriLDecision out;
  out.decision.run.assign(table_size, false);
  out.decision.placement.assign(table_size, {});
  YarnAllocator alloc(cluster);
  for (const Ready* r : admitted) {
    std::optional<GpuPlacement> p = alloc.TryPlace(r->num_gpu);
    if (!p.has_value()) continue;
    std::vector<JobIndex> members;
    for (int i : r->members) {
      const JobIndex j = runnable[i].job;
      out.decision.run[j] = true;
      out.decision.placement[j] = *p;
      members.push_back(j);
    }
    double time;
    if (r->members.size() == 1) {
      const InterleaveProfile* x = runnable[r->members[0]].profile;
      time = x != nullptr ? x->solo_time() : 0;
    } else {
      time = figures(r->members).first;
    }
    out.groups.push_back(std::move(members));
    out.group_time.push_back(time);
  }
  return out;
}

}  // namespace trainctl::sched::muri
