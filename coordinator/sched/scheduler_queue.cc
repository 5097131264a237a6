// Scheduler: queue order. Splits the pending jobs into their named queues,
// orders each (priority, LAS level, submit order) and picks the next job
// across queues by priority, LAS level and weighted dominant share (DRF);
// decides the tail of the queue on a fast path when its outcome is already
// known; keeps usage per queue, user and project for shares and quotas.

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {
namespace {

// "2 GPUs", "0.5 GPU", "1.25 GPUs".
std::string GpuAmount(double gpus) {
  return absl::StrFormat("%g %s", std::round(gpus * 1000) / 1000,
                         gpus == 1.0 || (gpus > 0 && gpus < 1.0) ? "GPU" : "GPUs");
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

}  // namespace

int LasLevel(const PolicyConfig& policy, double attained_gpu_s) {
  if (policy.order != QueueOrder::kLas) return 0;
  int level = 0;
  for (double t : policy.las_thresholds_gpu_s) {
    if (attained_gpu_s >= t) ++level;
  }
  return level;
}

// Decides every job of `queue`; decisions in scheduling order.
std::vector<Decision> SchedulePass::Run(const std::vector<JobRequest>& queue,
                                        int64_t explain_id,
                                        Explanation* explanation) {
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

SchedulePass::QueueEntry SchedulePass::MakeEntry(const JobRequest& job,
                                                 size_t position) {
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
            job.group_max_running == 0 &&
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
void SchedulePass::OrderEntries(std::vector<QueueEntry>& jobs) {
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
bool SchedulePass::DecideTail(const QueueEntry& e, Decision& decision) {
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
std::tuple<int, int, int64_t> SchedulePass::OrderKey(
    const JobRequest& job) const {
  return {-job.priority, LasLevel(policy_, job.attained_gpu_s),
          job.submit_seq};
}

double SchedulePass::DominantShare(const std::string& queue) const {
  auto it = queue_usage_.find(queue);
  if (it == queue_usage_.end()) return 0;
  const double g = total_gpus_ > 0 ? it->second.gpus / total_gpus_ : 0;
  const double b = total_bytes_ > 0 ? it->second.bytes / total_bytes_ : 0;
  return std::max(g, b);
}

// GPUs and bytes `placement` holds on the snapshot's GPUs.
Usage SchedulePass::UsageOf(const Placement& placement) const {
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
            share = std::min(1.0, bytes / static_cast<double>(gpu.memory_total_bytes));
          }
        }
      }
      u.bytes += bytes;
      u.gpus += share;
    }
  }
  return u;
}

void SchedulePass::AddUsage(absl::string_view queue, const std::string& user,
                            const std::string& project, const Usage& u,
                            int sign) {
  ++usage_version_;
  Usage& q = queue_usage_[std::string(queue)];
  q.gpus += sign * u.gpus;
  q.bytes += sign * u.bytes;
  user_gpus_[user] += sign * u.gpus;
  project_gpus_[project] += sign * u.gpus;
}

// GPUs `job` asks for (fractions of the largest GPU for experiments).
double SchedulePass::DemandGpus(const JobRequest& job) const {
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
std::optional<std::string> SchedulePass::QuotaReason(
    const JobRequest& job) const {
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

}  // namespace trainctl::sched::internal
