// Coordinator: measurements and what acts on them. Usage goes to the
// UsageHistory component (usage_history.h): the heartbeat samples a node may
// report, the live tasks at each sample, GetJobUsage; the auto-packer
// (sched::Packer) places and backs off auto-packed trials from those
// measurements. Declared in coordinator.h.

#include "coordinator/coordinator.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/metric_rules.h"
#include "common/secrets.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"

namespace trainctl::coord {

absl::StatusOr<std::vector<v1::JobUsage>> Coordinator::GetJobUsage(
    const std::vector<int64_t>& job_ids, int max_samples,
    const std::string& user) const {
  if (max_samples < 0) {
    return absl::InvalidArgumentError("max_samples: must not be negative");
  }
  const std::vector<int64_t> ids =
      job_ids.empty() ? measured_.usage().JobsWithHistory() : job_ids;
  std::vector<UsageJobLabel> labels;
  {
    absl::MutexLock lock(&mu_);
    for (int64_t id : ids) {
      // A retired job's record is read from the store (at most
      // usage_finished_jobs of them have a history).
      v1::Job scratch;
      TC_ASSIGN_OR_RETURN(const v1::Job* found, LookupLocked(id, &scratch));
      if (job_ids.empty() && !user.empty() && found->spec().user() != user) continue;
      labels.push_back({id, found->spec().name(), found->spec().auto_pack()});
    }
  }
  // Assembled and diagnosed outside the coordinator's lock.
  return measured_.usage().GetJobUsage(labels, max_samples);
}

absl::Status Coordinator::ReportThroughput(int64_t job_id, double samples_per_s) {
  absl::MutexLock lock(&mu_);
  if (!jobs_.Known(job_id)) {
    return absl::NotFoundError(absl::StrCat("job ", job_id, " does not exist"));
  }
  return measured_.usage().ReportThroughput(job_id, samples_per_s);
}

void Coordinator::PackPendingLocked(Deferred& deferred) {
  std::vector<v1::Job*> pending;
  jobs_.ForEachActiveMutable([&](v1::Job& job) {
    if (job.state() == v1::JOB_STATE_PENDING && job.spec().auto_pack()) {
      pending.push_back(&job);
    }
  });
  if (pending.empty()) return;
  std::stable_sort(pending.begin(), pending.end(), [](const v1::Job* a, const v1::Job* b) {
    return a->spec().priority() > b->spec().priority();
  });
  const int64_t now_ms = ToUnixMs(clock_->Now());
  std::vector<sched::PackGpu> gpus = measured_.PackGpus(SnapshotLocked(), jobs_, nodes_, now_ms);
  // Choose() depends only on the GPUs, the memory request and the sweep, and
  // the GPUs change only when a trial is placed: a (request, sweep) refused
  // once this pass is refused again (a sweep's trials share one request, so
  // a long queue costs one evaluation).
  absl::flat_hash_map<std::pair<int64_t, std::string>, std::string> refused;
  for (v1::Job* job : pending) {
    const int64_t request =
        std::max(job->auto_pack_memory_bytes(), job->spec().gpu_memory_bytes());
    sched::PackChoice c;
    if (auto it = refused.find({request, job->spec().sweep_id()}); it != refused.end()) {
      c.reason = it->second;
    } else {
      c = measured_.packer().Choose(gpus, request, now_ms, job->spec().sweep_id(),
                         /*declared=*/job->spec().gpu_memory_bytes() > 0);
    }
    if (!c.gpu.has_value()) {
      refused.emplace(std::make_pair(request, job->spec().sweep_id()), c.reason);
      std::string reason = c.reason;
      if (job->oom_count() > 0) {
        absl::StrAppendFormat(&reason,
                              "; it ran out of GPU memory %d time(s) and now "
                              "asks for %.1f GiB",
                              job->oom_count(),
                              job->auto_pack_memory_bytes() / double(int64_t{1} << 30));
      }
      job->set_reason(reason);
      continue;
    }
    sched::PackGpu& p = gpus[*c.gpu];
    sched::Placement placement;
    placement.nodes.push_back({p.node, {p.index}});
    placement.reserved_bytes_per_gpu = c.reserved_bytes;
    TC_LOG_INFO("auto-pack: job {} goes to GPU {} on {} as trial {} there "
                "(measured {:.0f}% busy{}, {} MiB used; plan {} trials), reserving {} MiB",
                job->id(), p.index, p.node, p.trials.size() + 1, p.util_pct,
                p.gpm ? absl::StrFormat(", SM activity %.0f%%, DRAM bandwidth %.0f%%",
                                        p.sm_active_pct, p.dram_bw_pct)
                      : std::string(),
                p.memory_used_bytes >> 20, measured_.packer().Planned(p.node, p.index),
                c.reserved_bytes >> 20);
    StartAttemptLocked(*job, placement, deferred);
    sched::PackedTrial& placed = p.trials.emplace_back();
    placed.job_id = job->id();
    placed.start_ms = now_ms;
    placed.reserved_bytes = c.reserved_bytes;
    placed.group = job->spec().sweep_id();
    refused.clear();  // The GPUs changed.
  }
}

bool Coordinator::RequeueAfterOomLocked(v1::Job& job, const v1::Task& task,
                                        Deferred& deferred) {
  if (task.gpu_indices().empty()) return false;
  const int gpu = task.gpu_indices(0);
  const NodeEntry* e = nullptr;
  if (auto it = nodes_.find(task.node()); it != nodes_.end()) e = &it->second;
  int64_t total = 0;
  if (e != nullptr) {
    for (const v1::Gpu& g : e->node.gpus()) {
      if (g.index() == gpu) total = g.memory_total_bytes();
    }
  }
  const int64_t request = std::max(job.auto_pack_memory_bytes(),
                                   task.reserved_bytes_per_gpu());
  if (total <= 0 || request >= total) return false;
  const int64_t peak = measured_.usage().PeakGpuMemoryBytes(job.id(), job.attempt(), task.rank());
  // The trial itself has exited; it ran with the live ones.
  const int trials = Measurements::AutoPackedOnGpu(jobs_, task.node(), gpu) + 1;
  const int64_t next =
      measured_.packer().OnOutOfMemory(task.node(), gpu, trials, peak, request, total);
  job.set_auto_pack_memory_bytes(next);
  job.set_oom_count(job.oom_count() + 1);
  ++counters_.oom_requeues;
  const std::string why = absl::StrFormat(
      "attempt %d ran out of GPU memory on GPU %d of %s with %d trials there; "
      "requeued asking for %.1f GiB, and that GPU now takes at most %d trials",
      job.attempt(), gpu, task.node(), trials, next / double(int64_t{1} << 30),
      measured_.packer().Cap(task.node(), gpu));
  for (v1::Task& t : *job.mutable_tasks()) {
    if (IsLive(t.state())) StopTaskLocked(job, t);
  }
  TransitionLocked(job, v1::JOB_STATE_PENDING, why, deferred);
  PersistLocked(job);
  return true;
}

// ---------------------------------------------------------------- metrics

absl::StatusOr<v1::ReportMetricsResponse> Coordinator::ReportMetrics(
    const v1::ReportMetricsRequest& req) {
  TC_RETURN_IF_ERROR(ExperimentStore::CheckReport(req, kMaxPointsPerReport));
  const int64_t job_id = req.job_id();
  const int64_t n = req.points_size();
  std::vector<v1::MetricPoint> points(req.points().begin(), req.points().end());
  int64_t stored_after;
  {
    absl::MutexLock lock(&mu_);
    v1::Job scratch;
    TC_ASSIGN_OR_RETURN(const v1::Job* found, LookupLocked(job_id, &scratch));
    const v1::Job& job = *found;
    if (req.attempt() != job.attempt()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "attempt ", req.attempt(), " is not job ", job_id,
          "'s current attempt (", job.attempt(), "); only its ranks may report"));
    }
    if (job.attempt_token().empty() || !SameSecret(req.token(), job.attempt_token())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "token: not the token of job ", job_id, " attempt ", job.attempt()));
    }
    if (req.rank() < 0 || req.rank() >= std::max(1, job.world_size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "rank: ", req.rank(), " is outside job ", job_id, "'s ",
          job.world_size(), " ranks"));
    }
    // Reserved now, so concurrent reports cannot pass the cap together.
    TC_ASSIGN_OR_RETURN(stored_after, experiments_.Reserve(job_id, n));
    const int64_t now_ms = ToUnixMs(clock_->Now());
    for (v1::MetricPoint& p : points) {
      p.set_time_ms(now_ms);
      p.set_attempt(job.attempt());
      p.set_rank(req.rank());
    }
  }
  absl::Status stored = store_->AppendMetrics(job_id, points);
  if (!stored.ok()) {
    absl::MutexLock lock(&mu_);
    experiments_.Unreserve(job_id, n);
    return absl::UnavailableError(
        absl::StrCat("the metrics were not stored: ", stored.message()));
  }
  // Reported throughput feeds the auto-packer's back-off and probe (newest
  // point of the report wins).
  for (auto p = points.rbegin(); p != points.rend(); ++p) {
    if (p->key() == kThroughputMetricKey) {
      // The value was checked above, so this fails only for a job that no
      // longer exists; the points are stored either way.
      if (absl::Status s = ReportThroughput(job_id, p->value()); !s.ok()) {
        TC_LOG_WARN("job {}: reported {} not passed to the auto-packer: {}", job_id,
                    kThroughputMetricKey, s.ToString());
      }
      break;
    }
  }
  // Early stopping (ASHA) of a sweep trial by its metric.
  Deferred deferred;
  {
    EventLock lock(this);
    auto it = jobs_.find(job_id);
    if (it != jobs_.end() && it->second.spec().has_early_stop() &&
        !IsFinal(it->second.state()) && it->second.attempt() == req.attempt()) {
      v1::Job& job = it->second;
      const ExperimentStore::EarlyStop verdict = experiments_.OnReport(job, points);
      if (verdict.stop_reason.has_value()) {
        for (v1::Task& t : *job.mutable_tasks()) {
          if (IsLive(t.state())) StopTaskLocked(job, t);
        }
        TransitionLocked(job, v1::JOB_STATE_CANCELLED, *verdict.stop_reason, deferred);
        RequestScheduleLocked(deferred);
      }
      if (verdict.recorded) PersistLocked(job);
    }
  }
  RunDeferred(deferred);
  v1::ReportMetricsResponse resp;
  resp.set_stored_points(stored_after);
  return resp;
}

absl::StatusOr<v1::GetMetricsResponse> Coordinator::GetMetrics(
    const v1::GetMetricsRequest& req) const {
  if (!req.key().empty()) TC_RETURN_IF_ERROR(CheckMetricKey("key", req.key()));
  v1::GetMetricsResponse resp;
  {
    absl::MutexLock lock(&mu_);
    if (!jobs_.Known(req.job_id())) {
      return absl::NotFoundError(
          absl::StrCat("job ", req.job_id(), " does not exist"));
    }
    resp.set_points_left(experiments_.PointsLeft(req.job_id()));
  }
  TC_ASSIGN_OR_RETURN(std::vector<v1::MetricPoint> points,
                      store_->ReadMetrics(req.job_id(), req.key()));
  ExperimentStore::Summarize(std::move(points), req.summary_only(), &resp);
  return resp;
}

}  // namespace trainctl::coord
