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

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/metric_rules.h"
#include "common/status_macros.h"

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
    if (job.state() == v1::JOB_STATE_PENDING && job.spec().auto_pack() &&
        !jobs_.deps().Blocked(job.id())) {
      pending.push_back(&job);
    }
  });
  if (pending.empty()) return;
  std::stable_sort(pending.begin(), pending.end(), [](const v1::Job* a, const v1::Job* b) {
    return a->spec().priority() > b->spec().priority();
  });
  const int64_t now_ms = ToUnixMs(clock_->Now());
  for (Measurements::PackedPlacement& p : measured_.PlanPacking(
           pending, measured_.PackGpus(SnapshotLocked(), jobs_, nodes_, now_ms), now_ms)) {
    // A placement just before may have blocked it (singleton).
    if (p.job->state() != v1::JOB_STATE_PENDING || jobs_.deps().Blocked(p.job->id())) continue;
    StartAttemptLocked(*p.job, p.placement, deferred);
  }
}

bool Coordinator::RequeueAfterOomLocked(v1::Job& job, const v1::Task& task,
                                        Deferred& deferred) {
  std::optional<Measurements::OomRequeue> r =
      measured_.OnOutOfMemory(job, task, jobs_, nodes_);
  if (!r.has_value()) return false;
  job.set_auto_pack_memory_bytes(r->next_request_bytes);
  job.set_oom_count(job.oom_count() + 1);
  ++counters_.oom_requeues;
  for (v1::Task& t : *job.mutable_tasks()) {
    if (IsLive(t.state())) StopTaskLocked(job, t);
  }
  TransitionLocked(job, v1::JOB_STATE_PENDING, r->why, deferred);
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
    TC_RETURN_IF_ERROR(ExperimentStore::CheckReporter(job, req));
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
  // The value was checked above, so this fails only for a job that no
  // longer exists; the points are stored either way.
  if (std::optional<double> v = ExperimentStore::LatestThroughput(points)) {
    if (absl::Status s = ReportThroughput(job_id, *v); !s.ok()) {
      TC_LOG_WARN("job {}: throughput not passed to the auto-packer: {}", job_id, s.ToString());
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
        job.set_stopped_early_at_step(verdict.stop_step);
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
