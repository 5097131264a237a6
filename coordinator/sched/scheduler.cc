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

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

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
//    kRetryLater with waited_s >= reservation_min_wait_s takes the one hold
//    of the call, even if it finds nothing to hold. It holds, among schedulable nodes and ignoring current use:
//    - a gang: for the first of its layouts (fewest nodes first) that enough
//      schedulable nodes could hold when empty, the `nodes` nodes with the
//      most GPUs (ties: more whole free GPUs now, then name) having at least
//      `per node` GPUs each. Every GPU of those nodes is held.
//    - an experiment: the one GPU with the largest memory whose reservation
//      fits it (ties: more free bytes now, then node name, GPU index).
//    Jobs later in the queue are never placed on a held GPU. Jobs earlier in
//    the queue were decided before the hold existed.
// 4. Lookups (data structures only; the rules above decide): experiments find
//    their best-fit GPU in one ordered set per GPU memory size, keyed by
//    (free bytes, whole free GPUs on the node, node name, GPU index), with a
//    lower_bound on the reservation; gangs find nodes in per-count buckets of
//    whole free GPUs (with and without the held GPUs). Every change to a node
//    (placement, preemption trial, hold) re-indexes that node. Wait reasons
//    are shared by jobs of one shape while the cluster is unchanged. Cost:
//    O(Q log Q) to order Q pending jobs, then O(log GPUs) per lookup instead
//    of O(GPUs); SchedulerConfig.linear_search keeps the scans as the
//    reference (scheduler_index_test.cc). The queue is read once, in order,
//    into compact entries; after the hold, a waiting job of a shape that
//    already failed to fit since capacity was last added is decided from its
//    entry alone (DecideTail), with the same outcome and reason.

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

// A gang's layouts; inline up to 16 (no allocation per job in a long queue).
using Layouts = absl::InlinedVector<Layout, 16>;

// The layouts a (valid) gang accepts, fewest nodes first, using at most
// `max_nodes` nodes.
Layouts GangLayouts(const JobRequest& job, int max_nodes) {
  if (job.nodes >= 1) return {Layout{job.nodes, job.gpus_per_node}};
  Layouts layouts;
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
  // nodes_with_at_least[k]: nodes with k or more usable GPUs (k <= max).
  std::vector<int> nodes_with_at_least;

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

// "45s", "25m", "2h05m".
std::string ShortDuration(double seconds) {
  const int64_t s = static_cast<int64_t>(std::ceil(std::max(seconds, 0.0)));
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm", (s + 59) / 60);
  const int64_t m = (s + 59) / 60;
  return absl::StrFormat("%dh%02dm", m / 60, m % 60);
}

// "2 GPUs", "0.5 GPU", "1.25 GPUs".
std::string GpuAmount(double gpus) {
  return absl::StrFormat("%g %s", std::round(gpus * 1000) / 1000,
                         gpus == 1.0 || (gpus > 0 && gpus < 1.0) ? "GPU" : "GPUs");
}

// The queue name a job or running job is in.
absl::string_view QueueName(const std::string& queue) {
  return queue.empty() ? absl::string_view("default") : queue;
}

// The LAS level of `attained_gpu_s` under `policy` (always 0 for FIFO).
int LasLevel(const PolicyConfig& policy, double attained_gpu_s) {
  if (policy.order != QueueOrder::kLas) return 0;
  int level = 0;
  for (double t : policy.las_thresholds_gpu_s) {
    if (attained_gpu_s >= t) ++level;
  }
  return level;
}

// The hard quota for `name` in `quotas` ("*" as the fallback), if any.
std::optional<double> QuotaOf(const std::map<std::string, double>& quotas,
                              const std::string& name) {
  if (quotas.empty()) return std::nullopt;
  auto it = quotas.find(name);
  if (it == quotas.end()) it = quotas.find("*");
  if (it == quotas.end()) return std::nullopt;
  return it->second;
}

// GPUs (whole-GPU equivalents) and GPU bytes held.
struct Usage {
  double gpus = 0;
  double bytes = 0;
};

// Marks the nodes named in `excluded` unschedulable for its lifetime and
// restores them after (JobRequest.excluded_nodes). Costs nothing for a job
// without exclusions.
class ExcludedNodesScope {
 public:
  ExcludedNodesScope(std::vector<NodeState>& nodes,
                     const std::vector<std::string>& excluded)
      : nodes_(nodes) {
    if (excluded.empty()) return;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (!nodes_[n].schedulable) continue;
      if (std::find(excluded.begin(), excluded.end(), nodes_[n].name) !=
          excluded.end()) {
        nodes_[n].schedulable = false;
        flipped_.push_back(n);
      }
    }
  }
  ~ExcludedNodesScope() {
    for (size_t n : flipped_) nodes_[n].schedulable = true;
  }
  ExcludedNodesScope(const ExcludedNodesScope&) = delete;
  ExcludedNodesScope& operator=(const ExcludedNodesScope&) = delete;

 private:
  std::vector<NodeState>& nodes_;
  std::vector<size_t> flipped_;
};

// The working state of one Schedule() call: a copy of the snapshot that
// placements are applied to, the running jobs (some marked for preemption),
// usage per queue, user and project, and the head-of-queue hold.
// Single-threaded.
class SchedulePass {
 public:
  SchedulePass(const ClusterSnapshot& cluster, const SchedulerConfig& config,
               const std::vector<JobRequest>& queue)
      : config_(config),
        policy_(config.policy),
        // Pre-flight exclusions (JobRequest.excluded_nodes) are applied by
        // marking nodes unschedulable per job, which the linear scans
        // honour; the indexes are built once per pass.
        indexed_(!config.linear_search &&
                 std::none_of(queue.begin(), queue.end(), [](const JobRequest& j) {
                   return !j.excluded_nodes.empty();
                 })),
        shape_(cluster),
        cluster_nodes_(cluster.nodes),
        nodes_(MutableCopy(cluster.nodes)),
        running_(cluster.running),
        queue_(queue),
        tail_ok_(indexed_ && config.policy.backfill &&
                 config.policy.user_gpu_quota.empty() &&
                 config.policy.project_gpu_quota.empty() &&
                 shape_.node_count > 0 && shape_.gpu_count > 0) {
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
    for (const RunningJob& r : running_) {
      const Usage u = UsageOf(r.placement);
      AddUsage(QueueName(r.queue), r.user, r.project, u, +1);
    }
    if (indexed_) BuildIndexes();
    InitInterleave(queue);
  }

  // Decides every job of `queue`; decisions in scheduling order.
  std::vector<Decision> Run(const std::vector<JobRequest>& queue,
                            int64_t explain_id, Explanation* explanation) {
    explain_id_ = explain_id;
    explanation_ = explanation;
    // One list per queue, configured queues first.
    struct QueueList {
      std::string name;
      double weight = 1.0;
      std::vector<QueueEntry> jobs;
      size_t next = 0;
      // DominantShare(name) / weight as of usage_version_ == share_version.
      double share = 0;
      int64_t share_version = -1;
    };
    std::vector<QueueList> lists;
    absl::flat_hash_map<std::string, size_t> list_of;
    for (const QueueConfig& q : policy_.queues) {
      list_of[q.name] = lists.size();
      lists.push_back({q.name, q.weight > 0 ? q.weight : 1.0, {}, 0});
    }
    // Two sequential sweeps over `queue` (the only times most jobs are
    // loaded): the list of each job (so each list is allocated once), then
    // order keys and what the tail's fast path needs.
    std::vector<uint32_t> list_index(queue.size());
    {
      size_t last_list = SIZE_MAX;
      absl::string_view last_name;
      std::vector<size_t> counts(lists.size(), 0);
      for (size_t i = 0; i < queue.size(); ++i) {
        const absl::string_view name = QueueName(queue[i].queue);
        if (last_list == SIZE_MAX || name != last_name) {
          auto it = list_of.find(name);
          if (it == list_of.end()) {
            it = list_of.emplace(std::string(name), lists.size()).first;
            lists.push_back({std::string(name), 1.0, {}, 0});
            counts.push_back(0);
          }
          last_list = it->second;
          last_name = name;
        }
        list_index[i] = static_cast<uint32_t>(last_list);
        ++counts[last_list];
      }
      for (size_t l = 0; l < lists.size(); ++l) lists[l].jobs.reserve(counts[l]);
    }
    for (size_t i = 0; i < queue.size(); ++i) {
      lists[list_index[i]].jobs.push_back(MakeEntry(queue[i], i));
    }
    for (QueueList& list : lists) OrderEntries(list.jobs);
    std::vector<Decision> decisions;
    decisions.reserve(queue.size());
    for (size_t left = queue.size(); left > 0; --left) {
      QueueList* best = nullptr;
      std::tuple<int, int, double, int64_t> best_key;
      for (QueueList& list : lists) {
        if (list.next == list.jobs.size()) continue;
        const auto [neg_priority, level, seq, position] =
            list.jobs[list.next].key;
        double share = 0.0;
        if (lists.size() > 1) {
          if (list.share_version != usage_version_) {
            list.share = DominantShare(list.name) / list.weight;
            list.share_version = usage_version_;
          }
          share = list.share;
        }
        auto key = std::make_tuple(neg_priority, level, share, seq);
        if (best == nullptr || key < best_key) {
          best = &list;
          best_key = key;
        }
      }
      const QueueEntry& entry = best->jobs[best->next++];
      const int position = static_cast<int>(decisions.size()) + 1;
      Decision& decision = decisions.emplace_back();
      if (!DecideTail(entry, decision)) Decide(*entry.job, position, decision);
    }
    return decisions;
  }

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

  QueueEntry MakeEntry(const JobRequest& job, size_t position) {
    QueueEntry e;
    const auto [neg_priority, level, seq] = OrderKey(job);
    e.key = {neg_priority, level, seq, position};
    e.job = &job;
    e.job_id = job.job_id;
    e.time_limit_s = job.time_limit_s;
    e.preemptible = job.preemptible;
    if (!tail_ok_) return e;
    const ShapeKey key{static_cast<int>(job.kind), job.gpu_fraction,
                       job.gpu_memory_bytes, job.nodes, job.gpus_per_node,
                       job.total_gpus, static_cast<int>(job.placement)};
    auto [it, added] =
        shape_ids_.try_emplace(key, static_cast<int>(shapes_.size()));
    if (added) {
      Shape& shape = shapes_.emplace_back();
      shape.rep = &job;
      shape.plain = !MalformedReason(job, config_).has_value() &&
                    !InfeasibleReason(job, shape_).has_value();
    }
    e.shape = it->second;
    // A gang that interleave packing may place on a running group
    // (TryInterleave) takes the full rules.
    e.plain = shapes_[e.shape].plain && job.preempted_for == 0 &&
              !job.victims_stopping && job.excluded_nodes.empty() &&
              !(interleave_active_ && job.kind == JobKind::kGang &&
                job.interleave.usable());
    return e;
  }

  // Sorts one queue list by key. Jobs arrive mostly in submit order (the
  // coordinator's queue is; requeued jobs come late): each (priority, LAS
  // level) class is gathered by a stable counting pass, and only its
  // unsorted suffix is sorted and merged in. O(Q) for a sorted queue,
  // O(Q + k log k) for k jobs out of place.
  static void OrderEntries(std::vector<QueueEntry>& jobs) {
    auto by_key = [](const QueueEntry& a, const QueueEntry& b) {
      return a.key < b.key;
    };
    if (std::is_sorted(jobs.begin(), jobs.end(), by_key)) return;
    // (neg_priority, level) -> count; few classes.
    std::vector<std::pair<std::pair<int, int>, size_t>> classes;
    size_t last = 0;
    std::vector<uint16_t> class_of(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      const std::pair<int, int> c(std::get<0>(jobs[i].key),
                                  std::get<1>(jobs[i].key));
      if (classes.empty() || classes[last].first != c) {
        last = std::find_if(classes.begin(), classes.end(),
                            [&c](const auto& x) { return x.first == c; }) -
               classes.begin();
        if (last == classes.size() || classes.size() >= UINT16_MAX) {
          if (classes.size() >= UINT16_MAX) {  // Pathological: plain sort.
            std::sort(jobs.begin(), jobs.end(), by_key);
            return;
          }
          classes.push_back({c, 0});
        }
      }
      ++classes[last].second;
      class_of[i] = static_cast<uint16_t>(last);
    }
    std::vector<size_t> rank(classes.size());
    std::iota(rank.begin(), rank.end(), 0);
    std::sort(rank.begin(), rank.end(), [&classes](size_t a, size_t b) {
      return classes[a].first < classes[b].first;
    });
    std::vector<size_t> begin(classes.size());
    size_t offset = 0;
    for (size_t r : rank) {
      begin[r] = offset;
      offset += classes[r].second;
    }
    std::vector<size_t> fill = begin;
    std::vector<QueueEntry> out(jobs.size());
    for (size_t i = 0; i < jobs.size(); ++i) {
      out[fill[class_of[i]]++] = std::move(jobs[i]);
    }
    for (size_t c = 0; c < classes.size(); ++c) {
      auto first = out.begin() + static_cast<ptrdiff_t>(begin[c]);
      auto end = first + static_cast<ptrdiff_t>(classes[c].second);
      auto mid = std::is_sorted_until(first, end, by_key);
      if (mid == end) continue;
      std::sort(mid, end, by_key);
      std::inplace_merge(first, mid, end, by_key);
    }
    jobs = std::move(out);
  }

  // The tail's fast path: decides `e` without loading its JobRequest when
  // the full rules (DecideInner) would make it kRetryLater and change
  // nothing: the head-of-queue hold is taken, the job is plain, a job of its
  // shape already failed to fit the cluster as it is now (with or without
  // the hold, as this job may use it), and it may not preempt (no searches
  // left or nothing it outranks). Its reason is its shape's, shared. Returns
  // false, deciding nothing, when the full rules must run. Once the cluster
  // is full this decides the long tail of the queue in O(1) per job; the
  // differential test (scheduler_index_test.cc) checks it decides exactly
  // as the linear scans do.
  bool DecideTail(const QueueEntry& e, Decision& decision) {
    if (!tail_ok_ || !hold_taken_ || !e.plain || e.job_id == explain_id_) {
      return false;
    }
    const auto& [neg_priority, level, seq, position] = e.key;
    Shape& shape = shapes_[e.shape];
    const JobRequest& rep = *shape.rep;
    const bool honor_hold =
        !MayUseHold(-neg_priority, level, seq, e.time_limit_s, e.preemptible);
    if (shape.no_fit_at[honor_hold] != capacity_version_) {
      if (!KnownNotToFit(rep, honor_hold)) return false;
      shape.no_fit_at[honor_hold] = capacity_version_;
    }
    if (policy_.preemption &&
        preemption_searches_ < policy_.max_preemption_searches &&
        AnyMayBePreempted(-neg_priority, level, seq)) {
      return false;
    }
    decision.job_id = e.job_id;
    decision.outcome = Outcome::kRetryLater;
    if (config_.wait_reasons) {
      if (shape.reason_at != state_version_) {
        shape.reason = WaitReason(rep);
        shape.reason_at = state_version_;
      }
      decision.reason = shape.reason;
    }
    return true;
  }

  // (-priority, LAS level, submit_seq): smaller goes first.
  std::tuple<int, int, int64_t> OrderKey(const JobRequest& job) const {
    return {-job.priority, LasLevel(policy_, job.attained_gpu_s),
            job.submit_seq};
  }

  double DominantShare(const std::string& queue) const {
    auto it = queue_usage_.find(queue);
    if (it == queue_usage_.end()) return 0;
    const double g = total_gpus_ > 0 ? it->second.gpus / total_gpus_ : 0;
    const double b = total_bytes_ > 0 ? it->second.bytes / total_bytes_ : 0;
    return std::max(g, b);
  }

  // GPUs and bytes `placement` holds on the snapshot's GPUs.
  Usage UsageOf(const Placement& placement) const {
    Usage u;
    for (const NodeAssignment& a : placement.nodes) {
      auto it = node_index_.find(a.node);
      for (int index : a.gpu_indices) {
        u.bytes += static_cast<double>(placement.reserved_bytes_per_gpu);
        double share = 1.0;
        if (it != node_index_.end()) {
          for (const GpuState& gpu : nodes_[it->second].gpus) {
            if (gpu.index == index && gpu.memory_total_bytes > 0) {
              share = std::min(
                  1.0, static_cast<double>(placement.reserved_bytes_per_gpu) /
                           static_cast<double>(gpu.memory_total_bytes));
            }
          }
        }
        u.gpus += share;
      }
    }
    return u;
  }

  void AddUsage(absl::string_view queue, const std::string& user,
                const std::string& project, const Usage& u, int sign) {
    ++usage_version_;
    Usage& q = queue_usage_[std::string(queue)];
    q.gpus += sign * u.gpus;
    q.bytes += sign * u.bytes;
    user_gpus_[user] += sign * u.gpus;
    project_gpus_[project] += sign * u.gpus;
  }

  // GPUs `job` asks for (fractions of the largest GPU for experiments).
  double DemandGpus(const JobRequest& job) const {
    if (job.kind == JobKind::kGang) {
      return job.nodes >= 1 ? double{1} * job.nodes * job.gpus_per_node
                            : job.total_gpus;
    }
    if (job.gpu_memory_bytes > 0 && shape_.max_gpu_memory_bytes > 0) {
      return std::min(1.0, static_cast<double>(job.gpu_memory_bytes) /
                               static_cast<double>(shape_.max_gpu_memory_bytes));
    }
    return std::min(1.0, job.gpu_fraction);
  }

  // Why a quota keeps `job` waiting, if one does.
  std::optional<std::string> QuotaReason(const JobRequest& job) const {
    const double want = DemandGpus(job);
    constexpr double kSlack = 1e-9;
    if (std::optional<double> limit = QuotaOf(policy_.user_gpu_quota, job.user)) {
      auto it = user_gpus_.find(job.user);
      const double used = it == user_gpus_.end() ? 0 : it->second;
      if (used + want > *limit + kSlack) {
        return absl::StrFormat(
            "user %s: quota %s, %s in use, this job needs %s",
            job.user.empty() ? "(none)" : job.user, GpuAmount(*limit),
            GpuAmount(std::max(used, 0.0)), GpuAmount(want));
      }
    }
    if (std::optional<double> limit =
            QuotaOf(policy_.project_gpu_quota, job.project)) {
      auto it = project_gpus_.find(job.project);
      const double used = it == project_gpus_.end() ? 0 : it->second;
      if (used + want > *limit + kSlack) {
        return absl::StrFormat(
            "project %s: quota %s, %s in use, this job needs %s",
            job.project.empty() ? "(none)" : job.project, GpuAmount(*limit),
            GpuAmount(std::max(used, 0.0)), GpuAmount(want));
      }
    }
    return std::nullopt;
  }

  // Whether `job`, after the holder in queue order, may use held GPUs: it
  // cannot delay the holder.
  bool MayUseHold(const JobRequest& job) const {
    return MayUseHold(job.priority, LasLevel(policy_, job.attained_gpu_s),
                      job.submit_seq, job.time_limit_s, job.preemptible);
  }

  // MayUseHold for a job of these values (the tail's fast path has them
  // without the JobRequest).
  bool MayUseHold(int priority, int level, int64_t submit_seq,
                  int64_t time_limit_s, bool preemptible) const {
    if (!hold_taken_) return false;
    if (hold_eta_s_ >= 0 && time_limit_s > 0 &&
        static_cast<double>(time_limit_s) <= hold_eta_s_) {
      return true;
    }
    // A preemptible job the holder may preempt (MayPreempt's rule) cannot
    // delay it either.
    if (!policy_.preemption || !preemptible) return false;
    return OutranksForPreemption(holder_priority_, holder_level_,
                                 holder_submit_seq_, priority, level,
                                 submit_seq);
  }

  // Whether a job of (priority, LAS level, submit_seq) `a` may preempt a
  // preemptible job `b`: lower priority, or equal priority and a deeper
  // level; with overtake_preemption also equal priority and level and `b`
  // submitted later. Jobs of one level do not preempt each other by default:
  // they would take turns at every scheduling event (LAS's round robin at
  // event granularity), paying a restart each time.
  bool OutranksForPreemption(int a_priority, int a_level, int64_t a_seq,
                             int b_priority, int b_level, int64_t b_seq) const {
    if (b_priority != a_priority) return b_priority < a_priority;
    if (b_level != a_level) return b_level > a_level;
    return policy_.overtake_preemption && b_seq > a_seq;
  }

  // Whether `job` may preempt running job `r`.
  bool MayPreempt(const JobRequest& job, const RunningJob& r) const {
    if (!r.preemptible) return false;
    return OutranksForPreemption(
        job.priority, LasLevel(policy_, job.attained_gpu_s), job.submit_seq,
        r.priority, LasLevel(policy_, r.attained_gpu_s), r.submit_seq);
  }

  // Frees (sign -1) or re-takes (+1) the GPUs of running job `r` in nodes_.
  void ApplyRunning(int i, int sign) {
    if (sign < 0) ++capacity_version_;
    const RunningJob& r = running_[i];
    for (const auto& [n, positions] : RunningGpus(i)) {
      for (int g : positions) {
        GpuState& gpu = nodes_[n].gpus[g];
        gpu.reserved_bytes = std::max<int64_t>(
            0, gpu.reserved_bytes + sign * r.placement.reserved_bytes_per_gpu);
        gpu.task_count = std::max(0, gpu.task_count + sign);
      }
      NodeChanged(n);
    }
  }

  // The GPUs of running_[i] as (node position, GPU positions) in nodes_,
  // nodes not in the snapshot left out; worked out on first use.
  const std::vector<std::pair<int, std::vector<int>>>& RunningGpus(int i) {
    if (running_gpus_.empty()) running_gpus_.resize(running_.size());
    std::optional<std::vector<std::pair<int, std::vector<int>>>>& gpus =
        running_gpus_[i];
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

  // Whether `job` would fit (FitsNow) once the running jobs `freed` were
  // stopped, without changing nodes_: O(GPUs of `freed` + nodes x layouts).
  // Exact when the running jobs' reservations are counted in their GPUs'
  // state, as ClusterSnapshot requires.
  bool FitsWithAllFreed(const JobRequest& job, bool honor_hold,
                        const std::vector<int>& freed) {
    // (node, GPU position) -> tasks and bytes freed on it.
    absl::flat_hash_map<std::pair<int, int>, std::pair<int, int64_t>> gpus;
    for (int i : freed) {
      for (const auto& [n, positions] : RunningGpus(i)) {
        for (int g : positions) {
          auto& [tasks, bytes] = gpus[{n, g}];
          tasks += 1;
          bytes += running_[i].placement.reserved_bytes_per_gpu;
        }
      }
    }
    // A freed GPU as ApplyRunning(-1) would leave it (it clamps at 0).
    auto after = [&](int n, int g, const std::pair<int, int64_t>& f) {
      GpuState gpu = nodes_[n].gpus[g];
      gpu.reserved_bytes = std::max<int64_t>(0, gpu.reserved_bytes - f.second);
      gpu.task_count = std::max(0, gpu.task_count - f.first);
      return gpu;
    };
    if (job.kind == JobKind::kExperiment) {
      for (const auto& [ng, f] : gpus) {
        const auto [n, g] = ng;
        if (!nodes_[n].schedulable || (honor_hold && IsHeld(n, g))) continue;
        const GpuState gpu = after(n, g, f);
        if (IsUsable(gpu) && gpu.task_count < config_.max_tasks_per_gpu &&
            ReservationBytes(job, gpu.memory_total_bytes) <= FreeBytes(gpu)) {
          return true;
        }
      }
      // The GPUs not freed did not fit before (Place failed).
      return false;
    }
    std::vector<int> free(nodes_.size());
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      free[n] = GangFreeCount(n, honor_hold);
    }
    for (const auto& [ng, f] : gpus) {
      const auto [n, g] = ng;
      if (!nodes_[n].schedulable || (honor_hold && IsHeld(n, g))) continue;
      free[n] += static_cast<int>(IsWholeFree(after(n, g, f))) -
                 static_cast<int>(IsWholeFree(nodes_[n].gpus[g]));
    }
    for (const Layout& layout :
         GangLayouts(job, static_cast<int>(nodes_.size()))) {
      int fitting = 0;
      for (int count : free) fitting += count >= layout.per_node;
      if (fitting >= layout.nodes) return true;
    }
    return false;
  }

  // Whether any running job not yet evicted is one `job` may preempt
  // (MayPreempt), in O(log priorities) instead of O(running jobs).
  bool AnyMayBePreempted(const JobRequest& job) {
    return AnyMayBePreempted(job.priority, LasLevel(policy_, job.attained_gpu_s),
                             job.submit_seq);
  }

  // AnyMayBePreempted for a job of (priority, LAS level, submit_seq).
  bool AnyMayBePreempted(int priority, int level, int64_t submit_seq) {
    if (!preemptible_summary_) {
      preemptible_summary_.emplace();
      for (int i = 0; i < static_cast<int>(running_.size()); ++i) {
        const RunningJob& r = running_[i];
        if (evicted_[i] || !r.preemptible) continue;
        auto [it, added] = preemptible_summary_->insert(
            {r.priority, {LasLevel(policy_, r.attained_gpu_s), r.submit_seq}});
        if (!added) {
          it->second.first =
              std::max(it->second.first, LasLevel(policy_, r.attained_gpu_s));
          it->second.second = std::max(it->second.second, r.submit_seq);
        }
      }
    }
    if (preemptible_summary_->empty()) return false;
    if (preemptible_summary_->begin()->first < priority) return true;
    auto it = preemptible_summary_->find(priority);
    if (it == preemptible_summary_->end()) return false;
    // A superset of OutranksForPreemption at equal priority: a deeper level
    // somewhere, or (overtake_preemption) a later submit somewhere.
    return it->second.first > level ||
           (policy_.overtake_preemption && it->second.second > submit_seq);
  }

  // Whether `preemptor` is a job of this call's queue not placed yet.
  bool WaitsForPreemptor(int64_t preemptor) {
    if (queued_ids_.empty()) {
      queued_ids_.reserve(queue_.size());
      for (const JobRequest& j : queue_) queued_ids_.insert(j.job_id);
    }
    return queued_ids_.contains(preemptor) && !placed_.contains(preemptor);
  }

  bool FitsNow(const JobRequest& job, bool honor_hold) const {
    if (job.kind == JobKind::kExperiment) {
      return FindExperimentGpu(job, honor_hold).has_value();
    }
    return indexed_ ? GangFitsIndexed(job, honor_hold)
                    : FindGang(job, honor_hold).has_value();
  }

  // Whether FindGangIndexed would find a plan, without making it.
  bool GangFitsIndexed(const JobRequest& job, bool honor_hold) const {
    const std::vector<NodeBucket>& buckets =
        honor_hold ? unheld_buckets_ : all_buckets_;
    const int max_count = static_cast<int>(buckets.size()) - 1;
    for (const Layout& layout :
         GangLayouts(job, static_cast<int>(nodes_.size()))) {
      int64_t fitting = 0;
      for (int k = std::max(layout.per_node, 1); k <= max_count; ++k) {
        fitting += static_cast<int64_t>(buckets[k].size());
      }
      if (fitting >= layout.nodes) return true;
    }
    return false;
  }

  // Finds running jobs whose preemption lets `job` fit; on success frees
  // their GPUs in nodes_, marks them evicted and returns their ids.
  std::optional<std::vector<int64_t>> TryPreempt(const JobRequest& job,
                                                 bool honor_hold) {
    if (preemption_searches_ >= policy_.max_preemption_searches) {
      return std::nullopt;
    }
    if (!AnyMayBePreempted(job)) return std::nullopt;
    std::vector<int> candidates;
    for (int i = 0; i < static_cast<int>(running_.size()); ++i) {
      if (!evicted_[i] && MayPreempt(job, running_[i])) candidates.push_back(i);
    }
    if (candidates.empty()) return std::nullopt;
    ++preemption_searches_;
    // Fitting is monotone in what is freed, so when stopping every candidate
    // is not enough, no prefix of them is: the search below would free them
    // all one by one and give up.
    if (indexed_ && !FitsWithAllFreed(job, honor_hold, candidates)) {
      return std::nullopt;
    }
    // Lowest rank first: lowest priority, deepest LAS level, latest submit.
    std::vector<std::tuple<int, int, int64_t, int>> ranked;
    ranked.reserve(candidates.size());
    for (int c : candidates) {
      const RunningJob& r = running_[c];
      ranked.emplace_back(r.priority, -LasLevel(policy_, r.attained_gpu_s),
                          -r.submit_seq, c);
    }
    std::sort(ranked.begin(), ranked.end());
    for (size_t i = 0; i < ranked.size(); ++i) {
      candidates[i] = std::get<3>(ranked[i]);
    }
    std::vector<int> chosen;
    bool fits = false;
    for (int c : candidates) {
      ApplyRunning(c, -1);
      chosen.push_back(c);
      if (FitsNow(job, honor_hold)) {
        fits = true;
        break;
      }
    }
    if (!fits) {
      for (int c : chosen) ApplyRunning(c, +1);
      return std::nullopt;
    }
    // Spare victims it does not need, the most valuable (last chosen) first.
    std::vector<int> victims;
    for (int i = static_cast<int>(chosen.size()) - 2; i >= 0; --i) {
      ApplyRunning(chosen[i], +1);
      if (!FitsNow(job, honor_hold)) {
        ApplyRunning(chosen[i], -1);
        victims.push_back(chosen[i]);
      }
    }
    victims.push_back(chosen.back());
    std::vector<int64_t> ids;
    preemptible_summary_.reset();
    for (int v : victims) {
      evicted_[v] = true;
      const RunningJob& r = running_[v];
      AddUsage(QueueName(r.queue), r.user, r.project, UsageOf(r.placement), -1);
      ids.push_back(r.job_id);
    }
    std::sort(ids.begin(), ids.end());
    return ids;
  }

  // Seconds until the held GPUs free up enough for `job`, from the time
  // limits of the running jobs on them; -1 when unknown.
  double HoldEta(const JobRequest& job) {
    std::vector<int> on_hold;
    for (int i = 0; i < static_cast<int>(running_.size()); ++i) {
      if (evicted_[i]) continue;
      bool touches = false;
      for (const NodeAssignment& a : running_[i].placement.nodes) {
        auto it = node_index_.find(a.node);
        if (it == node_index_.end()) continue;
        const std::vector<GpuState>& gpus = nodes_[it->second].gpus;
        for (int g = 0; g < static_cast<int>(gpus.size()); ++g) {
          if (held_[it->second][g] &&
              std::find(a.gpu_indices.begin(), a.gpu_indices.end(),
                        gpus[g].index) != a.gpu_indices.end()) {
            touches = true;
          }
        }
      }
      if (touches) on_hold.push_back(i);
    }
    std::sort(on_hold.begin(), on_hold.end(), [this](int a, int b) {
      const double x = running_[a].remaining_s;
      const double y = running_[b].remaining_s;
      // Unknown ends (< 0) last.
      return std::make_tuple(x < 0, x) < std::make_tuple(y < 0, y);
    });
    double eta = -1;
    std::vector<int> released;
    for (int i : on_hold) {
      if (running_[i].remaining_s < 0) break;
      ApplyRunning(i, -1);
      released.push_back(i);
      if (FitsNow(job, /*honor_hold=*/false)) {
        eta = running_[i].remaining_s;
        break;
      }
    }
    for (int i : released) ApplyRunning(i, +1);
    return eta;
  }

  void Account(const JobRequest& job, const Placement& placement) {
    AddUsage(QueueName(job.queue), job.user, job.project, UsageOf(placement),
             +1);
    placed_.insert(job.job_id);
    if (interleave_active_) {
      AddGroupMember(placement, {job.job_id, &job.interleave, -1});
    }
  }

  bool Place(const JobRequest& job, bool honor_hold, Placement& placement) {
    const bool placed = job.kind == JobKind::kExperiment
                            ? PlaceExperiment(job, honor_hold, placement)
                            : PlaceGang(job, honor_hold, placement);
    if (!placed && indexed_) {
      not_fitting_[FitKey(job, honor_hold)] = capacity_version_;
    }
    return placed;
  }

  // What decides whether Place(job, honor_hold) succeeds, besides the state.
  using FitKeyT = std::tuple<int, double, int64_t, int, int, int, int, bool>;
  static FitKeyT FitKey(const JobRequest& job, bool honor_hold) {
    if (job.kind == JobKind::kExperiment) {
      return {0, job.gpu_fraction, job.gpu_memory_bytes, 0, 0, 0, 0, honor_hold};
    }
    return {1, 0.0, 0, job.nodes, job.gpus_per_node, job.total_gpus,
            static_cast<int>(job.placement), honor_hold};
  }

  // Whether a job of the same shape failed to fit since capacity was last
  // added (then this one cannot fit either; see capacity_version_): once the
  // cluster is full, the long tail of the queue costs a hash lookup per job,
  // placements in between included.
  bool KnownNotToFit(const JobRequest& job, bool honor_hold) const {
    if (!indexed_) return false;
    auto it = not_fitting_.find(FitKey(job, honor_hold));
    return it != not_fitting_.end() && it->second == capacity_version_;
  }

  // Decides `job` into `decision` (a default Decision, built in place in
  // the result: no copy per job).
  void Decide(const JobRequest& job, int position, Decision& decision) {
    {
      // Nodes excluded for this job count as unschedulable while it is
      // decided (placement, preemption, its hold), and only then. (A pass
      // with such a job uses the linear scans: the indexes do not see it.)
      ExcludedNodesScope excluded(nodes_, job.excluded_nodes);
      DecideInner(job, decision);
    }
    if (job.job_id == explain_id_ && explanation_ != nullptr) {
      Explain(job, decision, position);
    }
  }

  void DecideInner(const JobRequest& job, Decision& decision) {
    decision.job_id = job.job_id;
    if (std::optional<std::string> reason = MalformedReason(job, config_)) {
      decision.outcome = Outcome::kInfeasible;
      decision.reason = *std::move(reason);
      return;
    }
    if (shape_.node_count == 0) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = "no nodes have registered yet";
      return;
    }
    if (shape_.gpu_count == 0) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = "no node with a GPU has registered yet";
      return;
    }
    if (std::optional<std::string> reason = InfeasibleReason(job, shape_)) {
      decision.outcome = Outcome::kInfeasible;
      decision.reason = *std::move(reason);
      return;
    }
    if (job.preempted_for != 0) {
      if (WaitsForPreemptor(job.preempted_for)) {
        decision.outcome = Outcome::kRetryLater;
        decision.reason = absl::StrFormat(
            "was preempted for job %d and waits until it starts",
            job.preempted_for);
        return;
      }
    }
    if (std::optional<std::string> quota = QuotaReason(job)) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = absl::StrCat("over quota: ", *quota);
      return;
    }
    if (!policy_.backfill && fifo_blocker_ != 0) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = absl::StrFormat(
          "waiting for job %d, earlier in the queue, to start (strict FIFO)",
          fifo_blocker_);
      return;
    }
    const bool honor_hold = !MayUseHold(job);
    if (!KnownNotToFit(job, honor_hold) &&
        Place(job, honor_hold, decision.placement)) {
      decision.outcome = Outcome::kPlaced;
      Account(job, decision.placement);
      return;
    }
    if (job.victims_stopping) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason =
          "waiting for the jobs it preempted to stop and free their GPUs";
      return;
    }
    if (policy_.preemption) {
      if (std::optional<std::vector<int64_t>> victims =
              TryPreempt(job, honor_hold)) {
        Place(job, honor_hold, decision.placement);
        decision.outcome = Outcome::kPreempting;
        decision.preempt = *std::move(victims);
        std::vector<std::string> ids;
        for (int64_t id : decision.preempt) ids.push_back(absl::StrCat(id));
        decision.reason = absl::StrFormat(
            "preempting job%s %s (preemptible, ranked below it)",
            ids.size() == 1 ? "" : "s", JoinList(ids, "and"));
        Account(job, decision.placement);
        return;
      }
    }
    if (TryInterleave(job, decision)) return;
    decision.outcome = Outcome::kRetryLater;
    if (config_.wait_reasons || job.job_id == explain_id_) {
      decision.reason = WaitReason(job);
    }
    if (!policy_.backfill && fifo_blocker_ == 0) fifo_blocker_ = job.job_id;
    if (!hold_taken_ && job.waited_s < policy_.reservation_min_wait_s) {
      // Too young to reserve (Slurm's bf_min_age_reserve): later jobs may
      // take the GPUs it would need until it has waited long enough.
      if (config_.wait_reasons || job.job_id == explain_id_) {
        absl::StrAppend(&decision.reason, "; reserves GPUs once it has waited ",
                        ShortDuration(policy_.reservation_min_wait_s),
                        " (waited ", ShortDuration(std::max(job.waited_s, 0.0)),
                        ")");
      }
      return;
    }
    if (!hold_taken_) {
      hold_taken_ = true;
      holder_job_id_ = job.job_id;
      holder_priority_ = job.priority;
      holder_submit_seq_ = job.submit_seq;
      holder_level_ = LasLevel(policy_, job.attained_gpu_s);
      if (job.kind == JobKind::kExperiment) {
        HoldForExperiment(job);
      } else {
        HoldForGang(job);
      }
      hold_eta_s_ = HoldEta(job);
      ++state_version_;
      decision.eta_s = hold_eta_s_;
      if (hold_eta_s_ >= 0) {
        absl::StrAppend(&decision.reason, "; holds a reservation on ",
                        held_description_, ", estimated start in ",
                        ShortDuration(hold_eta_s_));
      }
    }
    return;
  }

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

  // The identity of a placement: node names and GPU indices in rank order.
  static std::string PlacementKey(const Placement& placement) {
    std::string key;
    for (const NodeAssignment& a : placement.nodes) {
      absl::StrAppend(&key, a.node, ":", absl::StrJoin(a.gpu_indices, ","),
                      ";");
    }
    return key;
  }

  // Groups the running jobs by placement, once per call, when packing is on
  // and some gang of the queue has a usable profile (otherwise packing
  // costs nothing).
  void InitInterleave(const std::vector<JobRequest>& queue) {
    if (!policy_.interleave.enabled) return;
    interleave_active_ =
        std::any_of(queue.begin(), queue.end(), [](const JobRequest& j) {
          return j.kind == JobKind::kGang && j.interleave.usable();
        });
    if (!interleave_active_) return;
    for (int i = 0; i < static_cast<int>(running_.size()); ++i) {
      AddGroupMember(running_[i].placement,
                     {running_[i].job_id, &running_[i].interleave, i});
    }
  }

  void AddGroupMember(const Placement& placement, GroupMember member) {
    const std::string key = PlacementKey(placement);
    auto [it, added] = group_of_.try_emplace(key, groups_.size());
    if (added) {
      PackGroup& g = groups_.emplace_back();
      g.placement = placement;
      for (const NodeAssignment& a : placement.nodes) {
        g.gpus += static_cast<int>(a.gpu_indices.size());
      }
    }
    groups_[it->second].members.push_back(member);
  }

  // Whether `job` may join group `g` apart from the interleave criterion:
  // its GPU count and layout, free of the hold, on schedulable nodes.
  bool GroupTakes(const JobRequest& job, const PackGroup& g) const {
    if (g.gpus != static_cast<int>(DemandGpus(job))) return false;
    if (job.nodes >= 1) {
      if (static_cast<int>(g.placement.nodes.size()) != job.nodes) return false;
      for (const NodeAssignment& a : g.placement.nodes) {
        if (static_cast<int>(a.gpu_indices.size()) != job.gpus_per_node) {
          return false;
        }
      }
    }
    for (const NodeAssignment& a : g.placement.nodes) {
      auto it = node_index_.find(a.node);
      if (it == node_index_.end()) return false;
      const int n = it->second;
      if (!nodes_[n].schedulable) return false;
      if (!hold_taken_) continue;
      const std::vector<GpuState>& gpus = nodes_[n].gpus;
      for (int pos = 0; pos < static_cast<int>(gpus.size()); ++pos) {
        if (IsHeld(n, pos) &&
            std::find(a.gpu_indices.begin(), a.gpu_indices.end(),
                      gpus[pos].index) != a.gpu_indices.end()) {
          return false;
        }
      }
    }
    return true;
  }

  // (interleaved iteration time, utilization) of `members`, memoized by the
  // members' profiles (jobs of one model share a profile, so a long queue
  // asks the same few questions).
  std::pair<double, double> GroupFigures(
      std::vector<const InterleaveProfile*> members) {
    std::vector<double> key = CanonicalGroupKey(members);
    auto it = figures_.find(key);
    if (it != figures_.end()) return it->second;
    const auto span = absl::MakeConstSpan(members);
    std::pair<double, double> figures(0, 0);
    if (InterleaveWorthwhile(span, policy_.interleave)) {
      figures = {InterleavedIterationTime(span, policy_.interleave),
                 InterleaveUtilization(span, policy_.interleave)};
    }
    figures_.emplace(std::move(key), figures);
    return figures;
  }

  // Packs `job` onto the best group that takes it (the header's rule);
  // fills `decision` and applies the placement when it does.
  bool TryInterleave(const JobRequest& job, Decision& decision) {
    if (!interleave_active_ || job.kind != JobKind::kGang ||
        !job.interleave.usable() || job.victims_stopping) {
      return false;
    }
    // A job of the same shape and profile found no group since the last
    // change to the cluster (every placement, packing, preemption and the
    // hold bump state_version_): this one finds none either. So a long
    // queue costs one search per distinct (shape, profile), not per job.
    std::vector<double> key = {static_cast<double>(DemandGpus(job)),
                               static_cast<double>(job.nodes),
                               static_cast<double>(job.gpus_per_node),
                               job.interleave.iteration_time};
    key.insert(key.end(), job.interleave.resource_time.begin(),
               job.interleave.resource_time.end());
    // Exclusions (pre-flight) make a job's view its own: not remembered.
    const bool memo = job.excluded_nodes.empty();
    auto failed = interleave_failed_.find(key);
    if (memo && failed != interleave_failed_.end() &&
        failed->second == state_version_) {
      return false;
    }
    int best = -1;
    double best_utilization = 0;
    size_t best_size = 0;
    std::vector<const InterleaveProfile*> profiles;
    for (int gi = 0; gi < static_cast<int>(groups_.size()); ++gi) {
      const PackGroup& g = groups_[gi];
      if (!GroupTakes(job, g)) continue;
      profiles.clear();
      bool ok = true;
      for (const GroupMember& m : g.members) {
        // Preempted by this call: gone from these GPUs.
        if (m.running >= 0 && evicted_[m.running]) continue;
        if (!m.profile->usable()) {
          ok = false;
          break;
        }
        profiles.push_back(m.profile);
      }
      if (!ok || profiles.empty() ||
          static_cast<int>(profiles.size()) >= policy_.interleave.max_jobs) {
        continue;
      }
      profiles.push_back(&job.interleave);
      const auto [period, utilization] = GroupFigures(profiles);
      if (!(period > 0)) continue;
      if (best < 0 || utilization > best_utilization ||
          (utilization == best_utilization && profiles.size() < best_size)) {
        best = gi;
        best_utilization = utilization;
        best_size = profiles.size();
      }
    }
    if (best < 0) {
      if (memo) interleave_failed_[std::move(key)] = state_version_;
      return false;
    }
    const Placement placement = groups_[best].placement;
    for (const GroupMember& m : groups_[best].members) {
      if (m.running >= 0 && evicted_[m.running]) continue;
      decision.packed_with.push_back(m.job_id);
    }
    std::sort(decision.packed_with.begin(), decision.packed_with.end());
    for (const NodeAssignment& a : placement.nodes) {
      const int n = node_index_.at(a.node);
      for (GpuState& gpu : nodes_[n].gpus) {
        if (std::find(a.gpu_indices.begin(), a.gpu_indices.end(), gpu.index) ==
            a.gpu_indices.end()) {
          continue;
        }
        gpu.reserved_bytes += placement.reserved_bytes_per_gpu;
        gpu.task_count += 1;
      }
      NodeChanged(n);
    }
    decision.outcome = Outcome::kPlaced;
    decision.placement = placement;
    std::vector<std::string> ids;
    for (int64_t id : decision.packed_with) ids.push_back(absl::StrCat(id));
    decision.reason = absl::StrFormat(
        "interleaved with job%s %s on their GPUs (multi-resource packing)",
        ids.size() == 1 ? "" : "s", JoinList(ids, "and"));
    Account(job, placement);
    return true;
  }

  // Fills *explanation_ for `job`, decided as `decision`.
  void Explain(const JobRequest& job, const Decision& decision, int position) {
    Explanation& e = *explanation_;
    e.decision = decision;
    e.position = position;
    e.queue = std::string(QueueName(job.queue));
    if (std::optional<std::string> quota = QuotaReason(job);
        quota && decision.outcome == Outcome::kRetryLater) {
      e.quota = *quota;
    }
    if (job.preempted_for != 0 && WaitsForPreemptor(job.preempted_for)) {
      e.preempted_for = job.preempted_for;
    }
    if (hold_taken_) {
      e.reservation_job = holder_job_id_;
      e.reservation = held_description_;
      e.reservation_eta_s = hold_eta_s_;
    }
    if (decision.outcome != Outcome::kRetryLater) return;
    constexpr size_t kMaxNodeLines = 20;
    int more = 0;
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      std::optional<std::string> line = NodeShortfall(job, n);
      if (!line) continue;
      if (e.nodes.size() < kMaxNodeLines) {
        e.nodes.push_back(*std::move(line));
      } else {
        ++more;
      }
    }
    if (more > 0) {
      e.nodes.push_back(absl::StrFormat("... and %d more nodes", more));
    }
  }

  // What node `n` lacks for `job` now, or nullopt when it could take it
  // (or its share of it).
  std::optional<std::string> NodeShortfall(const JobRequest& job, int n) const {
    const NodeState& node = nodes_[n];
    if (std::find(job.excluded_nodes.begin(), job.excluded_nodes.end(),
                  node.name) != job.excluded_nodes.end()) {
      return absl::StrFormat("%s: excluded for this job by a pre-flight",
                             node.name);
    }
    const int usable = UsableGpuCount(node);
    if (!node.schedulable) {
      return absl::StrFormat("%s: not schedulable (lost or disconnected)",
                             node.name);
    }
    if (usable == 0) return absl::StrFormat("%s: no GPUs", node.name);
    if (job.kind == JobKind::kGang) {
      int per_node = job.gpus_per_node;
      if (job.nodes < 1) {
        per_node = job.total_gpus;
        for (const Layout& l : GangLayouts(job, shape_.node_count)) {
          if (shape_.CouldEverHold(l)) {
            per_node = l.per_node;
            break;
          }
        }
      }
      const int free = GangFreeCount(n, /*honor_hold=*/false);
      if (free < per_node) {
        return absl::StrFormat("%s: %d of %d GPUs free, needs %d", node.name,
                               free, usable, per_node);
      }
      if (GangFreeCount(n, /*honor_hold=*/true) < per_node &&
          holder_job_id_ != job.job_id) {
        return absl::StrFormat("%s: %d of %d GPUs free, but reserved for job %d",
                               node.name, free, usable, holder_job_id_);
      }
      return std::nullopt;
    }
    int64_t best_free = 0;
    int64_t need = 0;
    bool fits = false;
    bool held_only = false;
    for (int g = 0; g < static_cast<int>(node.gpus.size()); ++g) {
      const GpuState& gpu = node.gpus[g];
      if (!IsUsable(gpu)) continue;
      const int64_t want = ReservationBytes(job, gpu.memory_total_bytes);
      need = std::max(need, want);
      best_free = std::max(best_free, FreeBytes(gpu));
      if (want <= FreeBytes(gpu) && gpu.task_count < config_.max_tasks_per_gpu) {
        if (IsHeld(n, g) && holder_job_id_ != job.job_id) {
          held_only = true;
        } else {
          fits = true;
        }
      }
    }
    if (fits) return std::nullopt;
    if (held_only) {
      return absl::StrFormat("%s: has room, but reserved for job %d", node.name,
                             holder_job_id_);
    }
    return absl::StrFormat("%s: at most %s free on a GPU, needs %s", node.name,
                           GiB(best_free), GiB(need));
  }

  bool IsHeld(int node, int gpu) const { return held_[node][gpu]; }

  // --- Experiments ---

  // The best-fit GPU for `job` now, skipping held GPUs if `honor_hold`.
  std::optional<GpuRef> FindExperimentGpu(const JobRequest& job,
                                          bool honor_hold) const {
    return indexed_ ? FindExperimentGpuIndexed(job, honor_hold)
                    : FindExperimentGpuLinear(job, honor_hold);
  }

  // FindExperimentGpu from the indexes: in each memory class the first GPU
  // with free bytes >= the reservation is that class's best fit (the key
  // orders by free bytes, then the same ties as the linear scan); the best
  // of the classes wins. O(classes x log GPUs), plus the held GPUs skipped.
  std::optional<GpuRef> FindExperimentGpuIndexed(const JobRequest& job,
                                                 bool honor_hold) const {
    std::optional<GpuRef> best;
    // (room left after placing, then ExpKey's ties).
    std::tuple<int64_t, int, int, int, int, int> best_key;
    for (const MemoryClass& c : classes_) {
      const int64_t want = ReservationBytes(job, c.memory_bytes);
      auto it = c.gpus.lower_bound(ExpKey{want, INT32_MIN, INT32_MIN,
                                          INT32_MIN, INT32_MIN, INT32_MIN});
      for (; it != c.gpus.end(); ++it) {
        const auto& [free, whole_free, rank, index, n, g] = *it;
        if (honor_hold && IsHeld(n, g)) continue;
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

  // The reference: every GPU of the cluster, O(GPUs).
  std::optional<GpuRef> FindExperimentGpuLinear(const JobRequest& job,
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

  bool PlaceExperiment(const JobRequest& job, bool honor_hold,
                       Placement& placement) {
    std::optional<GpuRef> ref = FindExperimentGpu(job, honor_hold);
    if (!ref) return false;
    NodeState& node = nodes_[ref->node];
    GpuState& gpu = node.gpus[ref->gpu];
    const int64_t want = ReservationBytes(job, gpu.memory_total_bytes);
    gpu.reserved_bytes = std::max<int64_t>(gpu.reserved_bytes, 0) + want;
    ++gpu.task_count;
    placement.nodes.push_back(NodeAssignment{node.name, {gpu.index}});
    placement.reserved_bytes_per_gpu = want;
    NodeChanged(ref->node);
    return true;
  }

  // What a waiting experiment's reason depends on besides its shape.
  struct ExperimentFacts {
    // It would fit now but for the hold.
    bool blocked_by_hold = false;
    // Some GPU has room for it but runs max_tasks_per_gpu tasks.
    bool task_limited = false;
    // The most free bytes on any GPU.
    int64_t max_free = 0;
  };

  ExperimentFacts ExperimentWaitFacts(const JobRequest& job) const {
    ExperimentFacts f;
    if (hold_taken_ && FindExperimentGpu(job, /*honor_hold=*/false)) {
      f.blocked_by_hold = true;
      return f;
    }
    if (indexed_) {
      for (const MemoryClass& c : classes_) {
        if (c.free_all.empty()) continue;
        const int64_t most = *c.free_all.rbegin();
        f.max_free = std::max(f.max_free, most);
        if (ReservationBytes(job, c.memory_bytes) <= most) {
          f.task_limited = true;
        }
      }
      return f;
    }
    for (const NodeState& node : nodes_) {
      if (!node.schedulable) continue;
      for (const GpuState& gpu : node.gpus) {
        if (!IsUsable(gpu)) continue;
        f.max_free = std::max(f.max_free, FreeBytes(gpu));
        if (ReservationBytes(job, gpu.memory_total_bytes) <= FreeBytes(gpu)) {
          f.task_limited = true;  // Room enough, so the task count blocks it.
        }
      }
    }
    return f;
  }

  std::string ExperimentWaitReason(const JobRequest& job,
                                   const ExperimentFacts& f) const {
    if (f.blocked_by_hold) return BlockedByHoldReason();
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
    std::string now =
        f.task_limited
            ? absl::StrFormat(
                  "every GPU with that much free memory already runs %d "
                  "tasks, the limit",
                  config_.max_tasks_per_gpu)
            : absl::StrFormat("at most %s free on any GPU", GiB(f.max_free));
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
    NodeChanged(best->node);
    const NodeState& node = nodes_[best->node];
    held_description_ =
        absl::StrFormat("GPU %d on %s", node.gpus[best->gpu].index, node.name);
  }

  // --- Gangs ---

  // Whole free GPUs of node `n` a gang may take now.
  int GangFreeCount(int n, bool honor_hold) const {
    if (indexed_) return honor_hold ? unheld_free_[n] : whole_free_[n];
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
      // nodes_ leaves the peers out (MutableCopy); the snapshot has them.
      for (int peer : cluster_nodes_[n].gpus[g].nvlink_peers) {
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
    return indexed_ ? FindGangIndexed(job, honor_hold)
                    : FindGangLinear(job, honor_hold);
  }

  // FindGang from the per-count node buckets: nodes with >= per_node free
  // GPUs are the buckets per_node..max, already in (count, name) order.
  // O(layouts x (GPUs per node + nodes taken x log nodes)).
  std::optional<GangPlan> FindGangIndexed(const JobRequest& job,
                                          bool honor_hold) const {
    const std::vector<NodeBucket>& buckets =
        honor_hold ? unheld_buckets_ : all_buckets_;
    const int max_count = static_cast<int>(buckets.size()) - 1;
    const bool spread = job.placement == GangPlacement::kSpread;
    Layouts layouts =
        GangLayouts(job, static_cast<int>(nodes_.size()));
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

  // The reference: every node, O(GPUs + nodes log nodes) per layout.
  std::optional<GangPlan> FindGangLinear(const JobRequest& job,
                                         bool honor_hold) const {
    const int node_count = static_cast<int>(nodes_.size());
    std::vector<int> free(node_count);
    for (int n = 0; n < node_count; ++n) free[n] = GangFreeCount(n, honor_hold);
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
        return std::make_tuple(fa, absl::string_view(nodes_[a].name)) <
               std::make_tuple(fb, absl::string_view(nodes_[b].name));
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

  bool PlaceGang(const JobRequest& job, bool honor_hold, Placement& placement) {
    std::optional<GangPlan> plan = FindGang(job, honor_hold);
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
      NodeChanged(n);
    }
    placement.reserved_bytes_per_gpu = per_gpu;
    return true;
  }

  // What a waiting gang's reason depends on besides its shape.
  struct GangFacts {
    // It would fit now but for the hold.
    bool blocked_by_hold = false;
    // The most whole free GPUs on any node, and the nodes with at least the
    // per-node count of its first layout that this cluster could hold.
    int max_free = 0;
    int big_enough = 0;
  };

  // The layouts of `job` this cluster could ever hold (not empty for a job
  // that passed InfeasibleReason).
  Layouts PossibleLayouts(const JobRequest& job) const {
    Layouts layouts;
    for (const Layout& layout : GangLayouts(job, shape_.node_count)) {
      if (shape_.CouldEverHold(layout)) layouts.push_back(layout);
    }
    return layouts;
  }

  GangFacts GangWaitFacts(const JobRequest& job) const {
    GangFacts f;
    if (hold_taken_ && FitsNow(job, /*honor_hold=*/false)) {
      f.blocked_by_hold = true;
      return f;
    }
    const int per_node = PossibleLayouts(job).front().per_node;
    if (indexed_) {
      for (int k = static_cast<int>(all_buckets_.size()) - 1; k >= 0; --k) {
        if (all_buckets_[k].empty()) continue;
        if (f.max_free == 0) f.max_free = k;
        if (k >= per_node) f.big_enough += static_cast<int>(all_buckets_[k].size());
      }
      return f;
    }
    for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
      const int free = GangFreeCount(n, /*honor_hold=*/false);
      f.max_free = std::max(f.max_free, free);
      if (free >= per_node) ++f.big_enough;
    }
    return f;
  }

  std::string GangWaitReason(const JobRequest& job, const GangFacts& f) const {
    if (f.blocked_by_hold) return BlockedByHoldReason();
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
                           now, shape_.LostNote());
  }

  void HoldForGang(const JobRequest& job) {
    const int node_count = static_cast<int>(nodes_.size());
    for (const Layout& layout : GangLayouts(job, node_count)) {
      std::vector<int> candidates;
      for (int n = 0; n < node_count; ++n) {
        if (nodes_[n].schedulable &&
            shape_.gpus_on_node[n] >= layout.per_node) {
          candidates.push_back(n);
        }
      }
      if (static_cast<int>(candidates.size()) < layout.nodes) continue;
      // Most GPUs first, then most whole free GPUs now, then name.
      auto key = [this](int n) {
        return std::make_tuple(-shape_.gpus_on_node[n],
                               indexed_ ? -whole_free_[n]
                                        : -WholeFreeCount(nodes_[n]),
                               absl::string_view(nodes_[n].name));
      };
      std::sort(candidates.begin(), candidates.end(),
                [&](int a, int b) { return key(a) < key(b); });
      std::vector<std::string> names;
      for (int i = 0; i < layout.nodes; ++i) {
        const int n = candidates[i];
        std::fill(held_[n].begin(), held_[n].end(), true);
        NodeChanged(n);
        names.push_back(nodes_[n].name);
      }
      held_description_ = absl::StrCat(names.size() == 1 ? "node " : "nodes ",
                                       JoinList(names, "and"));
      return;
    }
  }

  // The kRetryLater reason of `job`: ExperimentWaitReason or GangWaitReason.
  // Jobs of one shape waiting for the same facts share one sentence, worked
  // out once per pass.
  std::string WaitReason(const JobRequest& job) {
    // Same shape, nothing changed since: the same sentence.
    const std::tuple<int, double, int64_t, int, int, int> shape =
        job.kind == JobKind::kExperiment
            ? std::make_tuple(0, job.gpu_fraction, job.gpu_memory_bytes, 0, 0,
                              0)
            : std::make_tuple(1, 0.0, int64_t{0}, job.nodes, job.gpus_per_node,
                              job.total_gpus);
    auto [last, added] = last_reason_.try_emplace(shape);
    if (!added && last->second.first == state_version_) {
      return *last->second.second;
    }
    // (shape, blocked by the hold, task limited, most free bytes or GPUs,
    // nodes big enough).
    std::tuple<int, double, int64_t, int, int, int, bool, bool, int64_t, int>
        key;
    const std::string* reason = nullptr;
    if (job.kind == JobKind::kExperiment) {
      const ExperimentFacts f = ExperimentWaitFacts(job);
      key = std::tuple_cat(shape, std::make_tuple(f.blocked_by_hold,
                                                  f.task_limited, f.max_free,
                                                  0));
      auto it = reasons_.find(key);
      if (it == reasons_.end()) {
        it = reasons_.emplace(key, ExperimentWaitReason(job, f)).first;
      }
      reason = &it->second;
    } else {
      const GangFacts f = GangWaitFacts(job);
      key = std::tuple_cat(shape, std::make_tuple(f.blocked_by_hold, false,
                                                  int64_t{f.max_free},
                                                  f.big_enough));
      auto it = reasons_.find(key);
      if (it == reasons_.end()) {
        it = reasons_.emplace(key, GangWaitReason(job, f)).first;
      }
      reason = &it->second;
    }
    // reasons_ is a node map: the pointer stays valid.
    last->second = {state_version_, reason};
    return *reason;
  }

  // For a job that would fit now but for the hold.
  std::string BlockedByHoldReason() const {
    return absl::StrFormat(
               "waiting for job %d, earlier in the queue, which has reserved %s "
               "until enough of it drains",
               holder_job_id_, held_description_) +
           (hold_eta_s_ >= 0 ? absl::StrCat(" (estimated in ",
                                            ShortDuration(hold_eta_s_), ")")
                             : std::string());
  }

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

  void BuildIndexes() {
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
  void NodeChanged(int n) {
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

  // `nodes` without what the pass never reads or changes (GPU UUIDs and
  // NVLink peers, read from the snapshot): no allocation per GPU.
  static std::vector<NodeState> MutableCopy(const std::vector<NodeState>& nodes) {
    std::vector<NodeState> copy(nodes.size());
    for (size_t n = 0; n < nodes.size(); ++n) {
      copy[n].name = nodes[n].name;
      copy[n].schedulable = nodes[n].schedulable;
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
  // Per priority, the deepest LAS level and the latest submit_seq among the
  // preemptible running jobs not evicted; rebuilt after evictions.
  std::optional<std::map<int, std::pair<int, int64_t>>> preemptible_summary_;
  // Ids of the queue's jobs (filled on first use) and of those placed by
  // this call.
  absl::flat_hash_set<int64_t> queued_ids_;
  absl::flat_hash_set<int64_t> placed_;
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
  SchedulePass pass(cluster, config_, queue);
  return pass.Run(queue, /*explain_id=*/0, nullptr);
}

std::optional<Explanation> Scheduler::Explain(
    const ClusterSnapshot& cluster, const std::vector<JobRequest>& queue,
    int64_t job_id) const {
  if (std::none_of(queue.begin(), queue.end(), [job_id](const JobRequest& j) {
        return j.job_id == job_id;
      })) {
    return std::nullopt;
  }
  Explanation explanation;
  SchedulePass pass(cluster, config_, queue);
  pass.Run(queue, job_id, &explanation);
  return explanation;
}

}  // namespace trainctl::sched
