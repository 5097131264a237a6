#include "coordinator/usage_history.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/container/flat_hash_set.h"

namespace trainctl::coord {

UsageHistory::UsageHistory(UsageHistoryConfig config) : config_(std::move(config)) {}

void UsageHistory::RecordTaskUsage(const v1::TaskUsage& usage) {
  absl::MutexLock lock(&mu_);
  TaskLive& live = task_usage_[{usage.job_id(), usage.attempt(), usage.rank()}];
  live.usage = usage;
  if (usage.gpu_memory_known()) {
    live.peak_gpu_memory_bytes =
        std::max(live.peak_gpu_memory_bytes, usage.gpu_memory_bytes());
  }
}

int64_t UsageHistory::PeakGpuMemoryBytes(int64_t job_id, int attempt, int rank) const {
  absl::MutexLock lock(&mu_);
  auto it = task_usage_.find({job_id, attempt, rank});
  return it == task_usage_.end() ? 0 : it->second.peak_gpu_memory_bytes;
}

absl::Status UsageHistory::ReportThroughput(int64_t job_id, double samples_per_s) {
  if (!std::isfinite(samples_per_s) || samples_per_s < 0) {
    return absl::InvalidArgumentError(
        "samples_per_s: must be a finite number >= 0");
  }
  absl::MutexLock lock(&mu_);
  throughput_[job_id] = samples_per_s;
  return absl::OkStatus();
}

std::optional<double> UsageHistory::Throughput(int64_t job_id) const {
  absl::MutexLock lock(&mu_);
  auto it = throughput_.find(job_id);
  if (it == throughput_.end()) return std::nullopt;
  return it->second;
}

std::optional<v1::JobUsageSample> UsageHistory::SampleJobLocked(
    int64_t now_ms, const UsageJob& job) const {
  v1::JobUsageSample s;
  s.set_time_ms(now_ms);
  // The distinct GPUs the job's tasks own (a gang's local ranks may list
  // the same GPUs).
  absl::flat_hash_set<std::pair<std::string, int>> seen;
  std::vector<const UsageGpu*> owned;
  double own_util_sum = 0;
  bool own_util_known = true;
  const int tasks = static_cast<int>(job.tasks.size());
  for (const UsageTask& t : job.tasks) {
    for (const UsageGpu& g : t.gpus) {
      if (seen.insert({g.node, g.index}).second) owned.push_back(&g);
    }
    s.set_cpu_cores(s.cpu_cores() + t.cpu_cores);
    auto ut = task_usage_.find({job.job_id, job.attempt, t.rank});
    if (ut == task_usage_.end()) {
      own_util_known = false;
      continue;
    }
    const v1::TaskUsage& u = ut->second.usage;
    s.set_cpu_pct(s.cpu_pct() + u.cpu_pct());
    if (u.gpu_util_pct() >= 0) {
      own_util_sum += u.gpu_util_pct();
    } else {
      own_util_known = false;
    }
    if (u.gpu_memory_known()) {
      s.set_gpu_memory_used_bytes(s.gpu_memory_used_bytes() + u.gpu_memory_bytes());
    } else {
      // No per-process figure: an even share of each GPU's used memory.
      for (const UsageGpu& g : t.gpus) {
        s.set_gpu_memory_used_bytes(s.gpu_memory_used_bytes() +
                                    g.memory_used_bytes / std::max(1, g.tasks_on));
      }
    }
  }
  if (tasks == 0 || owned.empty()) return std::nullopt;
  double device_sum = 0;
  bool gpm = true;
  double sm_sum = 0, occupancy_sum = 0, dram_sum = 0;
  for (const UsageGpu* g : owned) {
    device_sum += g->utilization_pct;
    s.set_gpu_memory_total_bytes(s.gpu_memory_total_bytes() + g->memory_total_bytes);
    s.set_tasks_on_gpus(std::max(s.tasks_on_gpus(), g->tasks_on));
    gpm = gpm && g->gpm;
    sm_sum += g->sm_active_pct;
    occupancy_sum += g->sm_occupancy_pct;
    dram_sum += g->dram_bw_pct;
  }
  const double gpus = static_cast<double>(owned.size());
  s.set_device_util_pct(device_sum / gpus);
  if (gpm) {
    s.set_activity_source(v1::GPU_ACTIVITY_SOURCE_GPM);
    s.set_sm_active_pct(sm_sum / gpus);
    s.set_sm_occupancy_pct(occupancy_sum / gpus);
    s.set_dram_bw_pct(dram_sum / gpus);
  } else {
    s.set_activity_source(v1::GPU_ACTIVITY_SOURCE_UTILIZATION);
  }
  s.set_gpu_util_pct(own_util_known ? own_util_sum / tasks : s.device_util_pct());
  s.set_tasks(tasks);
  return s;
}

void UsageHistory::Sample(int64_t now_ms, const std::vector<UsageJob>& live,
                          absl::FunctionRef<bool(int64_t)> is_active) {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_set<TaskKey> live_keys;
  absl::flat_hash_set<int64_t> sampled;
  for (const UsageJob& job : live) {
    for (const UsageTask& t : job.tasks) live_keys.insert({job.job_id, job.attempt, t.rank});
    std::optional<v1::JobUsageSample> s = SampleJobLocked(now_ms, job);
    if (!s.has_value()) continue;
    // Used GPU-seconds: each distinct GPU once, at the largest share any of
    // the job's tasks holds of it.
    std::map<std::pair<std::string, int>, const UsageGpu*> gpus;
    for (const UsageTask& t : job.tasks) {
      for (const UsageGpu& g : t.gpus) {
        const UsageGpu*& at = gpus[{g.node, g.index}];
        if (at == nullptr || g.share > at->share) at = &g;
      }
    }
    const double period_s = absl::ToDoubleSeconds(config_.sample_period);
    std::map<std::string, double>& used = used_[{job.job_id, job.attempt}];
    for (const auto& [where, g] : gpus) {
      const double activity = (g->gpm ? g->sm_active_pct : g->utilization_pct) / 100.0;
      used[where.first] += std::clamp(activity, 0.0, 1.0) * std::clamp(g->share, 0.0, 1.0) * period_s;
    }
    std::deque<v1::JobUsageSample>& h = history_[job.job_id];
    h.push_back(*std::move(s));
    while (static_cast<int>(h.size()) > std::max(1, config_.history_samples)) {
      h.pop_front();
    }
    sampled.insert(job.job_id);
  }
  // Histories of jobs that stopped running are kept for the newest
  // finished_jobs of them.
  for (const auto& [id, h] : history_) {
    auto at = std::find(finished_history_.begin(), finished_history_.end(), id);
    if (sampled.contains(id)) {
      // Running (again, after a requeue): not up for eviction.
      if (at != finished_history_.end()) finished_history_.erase(at);
    } else if (at == finished_history_.end()) {
      finished_history_.push_back(id);
    }
  }
  while (static_cast<int>(finished_history_.size()) > std::max(0, config_.finished_jobs)) {
    history_.erase(finished_history_.front());
    finished_history_.pop_front();
  }
  // Per-task usage of tasks that are gone.
  for (auto it = task_usage_.begin(); it != task_usage_.end();) {
    if (live_keys.contains(it->first)) {
      ++it;
    } else {
      it = task_usage_.erase(it);
    }
  }
  for (auto it = used_.begin(); it != used_.end();) {
    if (is_active(it->first.first)) {
      ++it;
    } else {
      it = used_.erase(it);
    }
  }
  for (auto it = throughput_.begin(); it != throughput_.end();) {
    if (is_active(it->first)) {
      ++it;
    } else {
      throughput_.erase(it++);
    }
  }
}

std::map<std::string, double> UsageHistory::TakeUsedGpuSeconds(int64_t job_id, int attempt) {
  absl::MutexLock lock(&mu_);
  auto it = used_.find({job_id, attempt});
  if (it == used_.end()) return {};
  std::map<std::string, double> out = std::move(it->second);
  used_.erase(it);
  return out;
}

std::vector<int64_t> UsageHistory::JobsWithHistory() const {
  absl::MutexLock lock(&mu_);
  std::vector<int64_t> ids;
  ids.reserve(history_.size());
  for (const auto& [id, h] : history_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

absl::StatusOr<std::vector<v1::JobUsage>> UsageHistory::GetJobUsage(
    const std::vector<UsageJobLabel>& jobs, int max_samples) const {
  if (max_samples < 0) {
    return absl::InvalidArgumentError("max_samples: must not be negative");
  }
  std::vector<v1::JobUsage> out;
  out.reserve(jobs.size());
  for (const UsageJobLabel& label : jobs) {
    v1::JobUsage& u = out.emplace_back();
    u.set_job_id(label.job_id);
    u.set_job_name(label.name);
    u.set_sample_period_ms(absl::ToInt64Milliseconds(config_.sample_period));
    // Copied under the lock; diagnosed outside it.
    std::vector<v1::JobUsageSample> all;
    {
      absl::MutexLock lock(&mu_);
      auto ht = history_.find(label.job_id);
      if (ht == history_.end()) continue;
      all.assign(ht->second.begin(), ht->second.end());
    }
    for (const v1::UsageFinding& f : Diagnose(all, label.auto_pack, config_.diagnosis)) {
      *u.add_findings() = f;
    }
    const size_t skip = max_samples > 0 && all.size() > static_cast<size_t>(max_samples)
                            ? all.size() - max_samples
                            : 0;
    for (size_t i = skip; i < all.size(); ++i) *u.add_samples() = std::move(all[i]);
  }
  return out;
}

}  // namespace trainctl::coord
