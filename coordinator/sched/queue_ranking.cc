// Scheduler: queue order (QueueRanking). Order keys (priority, LAS level,
// submit order), sorting a queue list, usage per queue (weighted dominant
// share, DRF), per user and project (quotas) and per job group.

#include "coordinator/sched/queue_ranking.h"

#include <algorithm>
#include <cmath>
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

namespace trainctl::sched::internal {
namespace {

// "2 GPUs", "0.5 GPU", "1.25 GPUs".
std::string GpuAmount(double gpus) {
  return absl::StrFormat(
      "%g %s", std::round(gpus * 1000) / 1000,
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

QueueRanking::QueueRanking(const PolicyConfig& policy, double total_gpus,
                           double total_bytes, int64_t max_gpu_memory_bytes)
    : policy_(policy),
      total_gpus_(total_gpus),
      total_bytes_(total_bytes),
      max_gpu_memory_bytes_(max_gpu_memory_bytes) {}

int LasLevel(const PolicyConfig& policy, double attained_gpu_s) {
  if (policy.order != QueueOrder::kLas) return 0;
  int level = 0;
  for (double t : policy.las_thresholds_gpu_s) {
    if (attained_gpu_s >= t) ++level;
  }
  return level;
}

// Sorts one queue list by key. Jobs arrive mostly in submit order (the
// coordinator's queue is; requeued jobs come late): each (priority, LAS
// level) class is gathered by a stable counting pass, and only its
// unsorted suffix is sorted and merged in. O(Q) for a sorted queue,
// O(Q + k log k) for k jobs out of place.
void QueueRanking::OrderEntries(std::vector<QueueEntry>& jobs) {
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

// (-priority, LAS level, submit_seq): smaller goes first.
std::tuple<int, int, int64_t> QueueRanking::OrderKey(
    const JobRequest& job) const {
  return {-job.priority, LasLevel(policy_, job.attained_gpu_s), job.submit_seq};
}

double QueueRanking::DominantShare(const std::string& queue) const {
  auto it = queue_usage_.find(queue);
  if (it == queue_usage_.end()) return 0;
  const double g = total_gpus_ > 0 ? it->second.gpus / total_gpus_ : 0;
  const double b = total_bytes_ > 0 ? it->second.bytes / total_bytes_ : 0;
  return std::max(g, b);
}

void QueueRanking::AddUsage(absl::string_view queue, const std::string& user,
                            const std::string& project, const Usage& u,
                            int sign) {
  ++usage_version_;
  Usage& q = queue_usage_[std::string(queue)];
  q.gpus += sign * u.gpus;
  q.bytes += sign * u.bytes;
  user_gpus_[user] += sign * u.gpus;
  project_gpus_[project] += sign * u.gpus;
}

double DemandGpus(const JobRequest& job, int64_t max_gpu_memory_bytes) {
  if (job.kind == JobKind::kGang) {
    return job.nodes >= 1 ? double{1} * job.nodes * job.gpus_per_node
                          : job.total_gpus;
  }
  if (job.gpu_memory_bytes > 0 && max_gpu_memory_bytes > 0) {
    return std::min(1.0, static_cast<double>(job.gpu_memory_bytes) /
                             static_cast<double>(max_gpu_memory_bytes));
  }
  return std::min(1.0, job.gpu_fraction);
}

std::optional<std::string> QueueRanking::QuotaReason(
    const JobRequest& job) const {
  const double want = DemandGpus(job, max_gpu_memory_bytes_);
  constexpr double kSlack = 1e-9;
  if (std::optional<double> limit = QuotaOf(policy_.user_gpu_quota, job.user)) {
    auto it = user_gpus_.find(job.user);
    const double used = it == user_gpus_.end() ? 0 : it->second;
    if (used + want > *limit + kSlack) {
      return absl::StrFormat("user %s: quota %s, %s in use, this job needs %s",
                             job.user.empty() ? "(none)" : job.user,
                             GpuAmount(*limit), GpuAmount(std::max(used, 0.0)),
                             GpuAmount(want));
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

int QueueRanking::GroupRunning(const std::string& group) const {
  auto it = group_running_.find(group);
  return it == group_running_.end() ? 0 : it->second;
}

}  // namespace trainctl::sched::internal
