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
        shape_(cluster),
        nodes_(cluster.nodes),
        running_(cluster.running) {
    held_.reserve(nodes_.size());
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
    for (const JobRequest& job : queue) pending_.insert({job.job_id, false});
    evicted_.assign(running_.size(), false);
    for (const RunningJob& r : running_) {
      const Usage u = UsageOf(r.placement);
      AddUsage(QueueName(r.queue), r.user, r.project, u, +1);
    }
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
      std::vector<const JobRequest*> jobs;
      size_t next = 0;
    };
    std::vector<QueueList> lists;
    absl::flat_hash_map<std::string, size_t> list_of;
    for (const QueueConfig& q : policy_.queues) {
      list_of[q.name] = lists.size();
      lists.push_back({q.name, q.weight > 0 ? q.weight : 1.0, {}, 0});
    }
    for (const JobRequest& job : queue) {
      const std::string name(QueueName(job.queue));
      auto [it, added] = list_of.insert({name, lists.size()});
      if (added) lists.push_back({name, 1.0, {}, 0});
      lists[it->second].jobs.push_back(&job);
    }
    for (QueueList& list : lists) {
      std::stable_sort(list.jobs.begin(), list.jobs.end(),
                       [this](const JobRequest* a, const JobRequest* b) {
                         return OrderKey(*a) < OrderKey(*b);
                       });
    }
    std::vector<Decision> decisions;
    decisions.reserve(queue.size());
    for (size_t left = queue.size(); left > 0; --left) {
      QueueList* best = nullptr;
      std::tuple<int, int, double, int64_t> best_key;
      for (QueueList& list : lists) {
        if (list.next == list.jobs.size()) continue;
        const JobRequest& head = *list.jobs[list.next];
        const auto [neg_priority, level, seq] = OrderKey(head);
        auto key = std::make_tuple(neg_priority, level,
                                   lists.size() == 1
                                       ? 0.0
                                       : DominantShare(list.name) / list.weight,
                                   seq);
        if (best == nullptr || key < best_key) {
          best = &list;
          best_key = key;
        }
      }
      const JobRequest& job = *best->jobs[best->next++];
      decisions.push_back(Decide(job, static_cast<int>(decisions.size()) + 1));
    }
    return decisions;
  }

 private:
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
    if (!hold_taken_) return false;
    if (hold_eta_s_ >= 0 && job.time_limit_s > 0 &&
        static_cast<double>(job.time_limit_s) <= hold_eta_s_) {
      return true;
    }
    // A preemptible job the holder may preempt (MayPreempt's rule) cannot
    // delay it either.
    if (!policy_.preemption || !job.preemptible) return false;
    if (job.priority != holder_priority_) return job.priority < holder_priority_;
    return LasLevel(policy_, job.attained_gpu_s) > holder_level_ ||
           job.submit_seq > holder_submit_seq_;
  }

  // Whether `job` may preempt running job `r`.
  bool MayPreempt(const JobRequest& job, const RunningJob& r) const {
    if (!r.preemptible) return false;
    if (r.priority < job.priority) return true;
    if (r.priority > job.priority) return false;
    if (LasLevel(policy_, r.attained_gpu_s) >
        LasLevel(policy_, job.attained_gpu_s)) {
      return true;
    }
    return r.submit_seq > job.submit_seq;  // It overtook `job`.
  }

  // Frees (sign -1) or re-takes (+1) the GPUs of running job `r` in nodes_.
  void ApplyRunning(const RunningJob& r, int sign) {
    for (const NodeAssignment& a : r.placement.nodes) {
      auto it = node_index_.find(a.node);
      if (it == node_index_.end()) continue;
      for (GpuState& gpu : nodes_[it->second].gpus) {
        if (std::find(a.gpu_indices.begin(), a.gpu_indices.end(), gpu.index) ==
            a.gpu_indices.end()) {
          continue;
        }
        gpu.reserved_bytes = std::max<int64_t>(
            0, gpu.reserved_bytes + sign * r.placement.reserved_bytes_per_gpu);
        gpu.task_count = std::max(0, gpu.task_count + sign);
      }
    }
  }

  bool FitsNow(const JobRequest& job, bool honor_hold) const {
    return job.kind == JobKind::kExperiment
               ? FindExperimentGpu(job, honor_hold).has_value()
               : FindGang(job, honor_hold).has_value();
  }

  // Finds running jobs whose preemption lets `job` fit; on success frees
  // their GPUs in nodes_, marks them evicted and returns their ids.
  std::optional<std::vector<int64_t>> TryPreempt(const JobRequest& job,
                                                 bool honor_hold) {
    std::vector<int> candidates;
    for (int i = 0; i < static_cast<int>(running_.size()); ++i) {
      if (!evicted_[i] && MayPreempt(job, running_[i])) candidates.push_back(i);
    }
    if (candidates.empty()) return std::nullopt;
    if (preemption_searches_ >= policy_.max_preemption_searches) {
      return std::nullopt;
    }
    ++preemption_searches_;
    // Lowest rank first: lowest priority, deepest LAS level, latest submit.
    std::sort(candidates.begin(), candidates.end(), [this](int a, int b) {
      const RunningJob& x = running_[a];
      const RunningJob& y = running_[b];
      return std::make_tuple(x.priority, -LasLevel(policy_, x.attained_gpu_s),
                             -x.submit_seq) <
             std::make_tuple(y.priority, -LasLevel(policy_, y.attained_gpu_s),
                             -y.submit_seq);
    });
    std::vector<int> chosen;
    bool fits = false;
    for (int c : candidates) {
      ApplyRunning(running_[c], -1);
      chosen.push_back(c);
      if (FitsNow(job, honor_hold)) {
        fits = true;
        break;
      }
    }
    if (!fits) {
      for (int c : chosen) ApplyRunning(running_[c], +1);
      return std::nullopt;
    }
    // Spare victims it does not need, the most valuable (last chosen) first.
    std::vector<int> victims;
    for (int i = static_cast<int>(chosen.size()) - 2; i >= 0; --i) {
      ApplyRunning(running_[chosen[i]], +1);
      if (!FitsNow(job, honor_hold)) {
        ApplyRunning(running_[chosen[i]], -1);
        victims.push_back(chosen[i]);
      }
    }
    victims.push_back(chosen.back());
    std::vector<int64_t> ids;
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
      ApplyRunning(running_[i], -1);
      released.push_back(i);
      if (FitsNow(job, /*honor_hold=*/false)) {
        eta = running_[i].remaining_s;
        break;
      }
    }
    for (int i : released) ApplyRunning(running_[i], +1);
    return eta;
  }

  void Account(const JobRequest& job, const Placement& placement) {
    AddUsage(QueueName(job.queue), job.user, job.project, UsageOf(placement),
             +1);
    pending_[job.job_id] = true;  // placed
  }

  bool Place(const JobRequest& job, bool honor_hold, Placement& placement) {
    return job.kind == JobKind::kExperiment
               ? PlaceExperiment(job, honor_hold, placement)
               : PlaceGang(job, honor_hold, placement);
  }

  Decision Decide(const JobRequest& job, int position) {
    Decision decision;
    {
      // Nodes excluded for this job count as unschedulable while it is
      // decided (placement, preemption, its hold), and only then.
      ExcludedNodesScope excluded(nodes_, job.excluded_nodes);
      decision = DecideInner(job);
    }
    if (job.job_id == explain_id_ && explanation_ != nullptr) {
      Explain(job, decision, position);
    }
    return decision;
  }

  Decision DecideInner(const JobRequest& job) {
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
    if (job.preempted_for != 0) {
      auto it = pending_.find(job.preempted_for);
      if (it != pending_.end() && !it->second) {
        decision.outcome = Outcome::kRetryLater;
        decision.reason = absl::StrFormat(
            "was preempted for job %d and waits until it starts",
            job.preempted_for);
        return decision;
      }
    }
    if (std::optional<std::string> quota = QuotaReason(job)) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = absl::StrCat("over quota: ", *quota);
      return decision;
    }
    if (!policy_.backfill && fifo_blocker_ != 0) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = absl::StrFormat(
          "waiting for job %d, earlier in the queue, to start (strict FIFO)",
          fifo_blocker_);
      return decision;
    }
    const bool honor_hold = !MayUseHold(job);
    if (Place(job, honor_hold, decision.placement)) {
      decision.outcome = Outcome::kPlaced;
      Account(job, decision.placement);
      return decision;
    }
    if (job.victims_stopping) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason =
          "waiting for the jobs it preempted to stop and free their GPUs";
      return decision;
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
        return decision;
      }
    }
    decision.outcome = Outcome::kRetryLater;
    if (config_.wait_reasons || job.job_id == explain_id_) {
      decision.reason = job.kind == JobKind::kExperiment
                            ? ExperimentWaitReason(job)
                            : GangWaitReason(job);
    }
    if (!policy_.backfill && fifo_blocker_ == 0) fifo_blocker_ = job.job_id;
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
      decision.eta_s = hold_eta_s_;
      if (hold_eta_s_ >= 0) {
        absl::StrAppend(&decision.reason, "; holds a reservation on ",
                        held_description_, ", estimated start in ",
                        ShortDuration(hold_eta_s_));
      }
    }
    return decision;
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
    if (job.preempted_for != 0) {
      auto it = pending_.find(job.preempted_for);
      if (it != pending_.end() && !it->second) e.preempted_for = job.preempted_for;
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
    const bool spread = job.placement == GangPlacement::kSpread;
    std::vector<Layout> layouts = GangLayouts(job, node_count);
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
               holder_job_id_, held_description_) +
           (hold_eta_s_ >= 0 ? absl::StrCat(" (estimated in ",
                                            ShortDuration(hold_eta_s_), ")")
                             : std::string());
  }

  const SchedulerConfig& config_;
  const PolicyConfig& policy_;
  const ClusterShape shape_;
  // The snapshot with this call's placements applied (and preemption
  // victims' GPUs freed).
  std::vector<NodeState> nodes_;
  absl::flat_hash_map<std::string, int> node_index_;
  std::vector<RunningJob> running_;
  // evicted_[i]: running_[i] is preempted by this call.
  std::vector<bool> evicted_;
  // Job id -> placed by this call, for every job of the queue.
  absl::flat_hash_map<int64_t, bool> pending_;
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
