#include "coordinator/experiment_store.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/metric_rules.h"
#include "common/secrets.h"
#include "coordinator/job_facts.h"
#include "coordinator/job_spec.h"

namespace trainctl::coord {
namespace {

constexpr double kMsPerHour = 3600.0 * 1000.0;

v1::AttemptOutcome OutcomeOf(v1::JobState to) {
  switch (to) {
    case v1::JOB_STATE_SUCCEEDED:
      return v1::ATTEMPT_OUTCOME_SUCCEEDED;
    case v1::JOB_STATE_FAILED:
      return v1::ATTEMPT_OUTCOME_FAILED;
    case v1::JOB_STATE_CANCELLED:
      return v1::ATTEMPT_OUTCOME_CANCELLED;
    case v1::JOB_STATE_PENDING:
      return v1::ATTEMPT_OUTCOME_RESTARTED;
    default:
      return v1::ATTEMPT_OUTCOME_UNSPECIFIED;
  }
}

}  // namespace

absl::Status ExperimentStore::CheckReport(const v1::ReportMetricsRequest& req,
                                          int max_points) {
  if (req.points_size() == 0 || req.points_size() > max_points) {
    return absl::InvalidArgumentError(
        absl::StrCat("points: need 1 to ", max_points, " points, got ", req.points_size()));
  }
  for (int i = 0; i < req.points_size(); ++i) {
    const v1::MetricPoint& p = req.points(i);
    if (absl::Status s =
            CheckMetricPoint(absl::StrCat("points[", i, "]"), p.key(), p.value(), p.step());
        !s.ok()) {
      return s;
    }
  }
  if (req.token().empty()) {
    return absl::UnauthenticatedError(
        "token: missing; a metric report needs the TRAINCTL_TOKEN of the job "
        "attempt (set in the task's environment by trainctl)");
  }
  return absl::OkStatus();
}

void ExperimentStore::Summarize(std::vector<v1::MetricPoint> points, bool summary_only,
                                v1::GetMetricsResponse* resp) {
  v1::MetricSeries* series = nullptr;
  for (v1::MetricPoint& p : points) {
    if (series == nullptr || series->key() != p.key()) {
      series = resp->add_series();
      series->set_key(p.key());
      series->set_min(p.value());
      series->set_max(p.value());
    }
    series->set_count(series->count() + 1);
    series->set_last(p.value());
    series->set_last_step(p.step());
    series->set_min(std::min(series->min(), p.value()));
    series->set_max(std::max(series->max(), p.value()));
    if (!summary_only) *series->add_points() = std::move(p);
  }
}

void ExperimentStore::LoadRungs(const v1::Job& job) {
  for (const auto& [step, value] : job.rung_values()) {
    rungs_[job.spec().sweep_id()][step][job.id()] = value;
  }
}

absl::StatusOr<int64_t> ExperimentStore::Reserve(int64_t job_id, int64_t n) {
  int64_t& count = points_[job_id];
  if (count + n > max_points_per_job_) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job ", job_id, " has stored ", count, " metric points; ", n,
        " more would pass the cap of ", max_points_per_job_,
        " per job (report less often, e.g. every 10 steps)"));
  }
  count += n;
  return count;
}

void ExperimentStore::Unreserve(int64_t job_id, int64_t n) { points_[job_id] -= n; }

int64_t ExperimentStore::Points(int64_t job_id) const {
  auto it = points_.find(job_id);
  return it == points_.end() ? 0 : it->second;
}

int64_t ExperimentStore::PointsLeft(int64_t job_id) const {
  return std::max<int64_t>(0, max_points_per_job_ - Points(job_id));
}

ExperimentStore::EarlyStop ExperimentStore::OnReport(
    v1::Job& job, const std::vector<v1::MetricPoint>& points) {
  EarlyStop out;
  const v1::EarlyStop& cfg = job.spec().early_stop();
  AshaRungs& rungs = rungs_[job.spec().sweep_id()];
  for (const v1::MetricPoint& p : points) {
    if (p.key() != cfg.metric()) continue;
    const AshaVerdict v = AshaOnReport(cfg, rungs, job.id(), p.step(), p.value());
    if (!v.recorded) continue;
    out.recorded = true;
    (*job.mutable_rung_values())[v.rung_step] = v.value;
    if (!v.stop) continue;
    out.stop_step = v.rung_step;
    out.stop_reason = absl::StrFormat(
        "stopped early (ASHA): %s %g at step %d is not within the best 1/%d "
        "of the %d other trial(s) at that rung (cutoff %g)",
        cfg.metric(), v.value, v.rung_step,
        cfg.reduction_factor() == 0 ? 3 : cfg.reduction_factor(), v.others, v.cutoff);
    break;
  }
  return out;
}

void RecordAttemptEdge(v1::Job& job, v1::JobState from, v1::JobState to, int64_t now_ms,
                       double gpus) {
  if (to == v1::JOB_STATE_SCHEDULED) {
    v1::AttemptRecord* r = job.add_attempts();
    r->set_attempt(job.attempt());
    r->set_start_time_ms(now_ms);
    r->set_gpus(gpus);
    return;
  }
  const bool ended = (from == v1::JOB_STATE_SCHEDULED || from == v1::JOB_STATE_RUNNING) &&
                     to != v1::JOB_STATE_RUNNING;
  if (!ended || job.attempts_size() == 0) return;
  v1::AttemptRecord* r = job.mutable_attempts(job.attempts_size() - 1);
  if (r->attempt() != job.attempt() || r->end_time_ms() != 0) return;
  r->set_end_time_ms(now_ms);
  r->set_outcome(to == v1::JOB_STATE_CANCELLED && job.stopped_early_at_step() > 0
                     ? v1::ATTEMPT_OUTCOME_STOPPED_EARLY
                     : OutcomeOf(to));
  r->set_reason(job.reason());
  for (const v1::Task& t : job.tasks()) {
    v1::RankRecord* rank = r->add_ranks();
    rank->set_rank(t.rank());
    rank->set_node(t.node());
    rank->set_state(
        std::string(absl::StripPrefix(v1::TaskState_Name(t.state()), "TASK_STATE_")));
    rank->set_exit_code(t.exit_code());
    rank->set_signal(t.signal());
    rank->set_log_path(t.log_path());
  }
  const int64_t ms = std::max<int64_t>(0, now_ms - r->start_time_ms());
  r->set_gpu_hours(r->gpus() * static_cast<double>(ms) / kMsPerHour);
  job.set_gpu_hours(job.gpu_hours() + r->gpu_hours());
}

v1::UsageRecord UsageRecordOf(const v1::Job& job, const NodeRegistry& nodes,
                              const std::map<std::string, double>& used_by_node) {
  v1::UsageRecord r;
  if (job.attempts_size() == 0) return r;
  const v1::AttemptRecord& a = job.attempts(job.attempts_size() - 1);
  if (a.end_time_ms() == 0) return r;
  r.set_job_id(job.id());
  r.set_attempt(a.attempt());
  r.set_user(job.spec().user());
  r.set_project(job.spec().project());
  r.set_queue(job.spec().queue().empty() ? "default" : job.spec().queue());
  r.set_name(job.spec().name());
  r.set_start_time_ms(a.start_time_ms());
  r.set_end_time_ms(a.end_time_ms());
  r.set_outcome(a.outcome());
  r.set_preempted(a.outcome() == v1::ATTEMPT_OUTCOME_RESTARTED &&
                  job.preempted_for_job_id() != 0);
  r.set_reason(a.reason());
  r.set_gpus(a.gpus());
  r.set_gpu_seconds_allocated(a.gpu_hours() * 3600.0);
  // Per node, in the order of the tasks: GPUs held and their type.
  std::vector<v1::UsageSlice> slices;
  std::set<std::pair<std::string, int>> seen;
  for (const v1::Task& t : job.tasks()) {
    auto node = nodes.find(t.node());
    for (int index : OwnedGpus(t)) {
      if (!seen.insert({t.node(), index}).second) continue;
      double share = TaskShareOfGpu(t, 0);
      std::string type = "unknown";
      if (node != nodes.end()) {
        for (const v1::Gpu& g : node->second.node.gpus()) {
          if (g.index() != index) continue;
          share = TaskShareOfGpu(t, g.memory_total_bytes());
          if (!g.gpu_type().empty()) type = g.gpu_type();
        }
      }
      auto at = std::find_if(slices.begin(), slices.end(), [&](const v1::UsageSlice& s) {
        return s.node() == t.node() && s.gpu_type() == type;
      });
      if (at == slices.end()) {
        at = slices.insert(slices.end(), v1::UsageSlice());
        at->set_node(t.node());
        at->set_gpu_type(type);
      }
      at->set_gpus(at->gpus() + share);
    }
  }
  double used = 0;
  std::set<std::string> given;
  for (v1::UsageSlice& s : slices) {
    auto u = used_by_node.find(s.node());
    // A node's used seconds go to its first slice (a node has one GPU type).
    if (u != used_by_node.end() && given.insert(s.node()).second) {
      s.set_gpu_seconds_used(u->second);
      used += u->second;
    }
  }
  // A node with samples but no slice (it left the registry): counted in the
  // total all the same.
  for (const auto& [node, u] : used_by_node) {
    if (std::none_of(slices.begin(), slices.end(),
                     [&](const v1::UsageSlice& s) { return s.node() == node; })) {
      used += u;
    }
  }
  r.set_gpu_seconds_used(used);
  for (v1::UsageSlice& s : slices) *r.add_slices() = std::move(s);
  return r;
}

void CountRunningGpuHours(v1::Job& job, int64_t now_ms) {
  if (job.attempts_size() == 0) return;
  v1::AttemptRecord* last = job.mutable_attempts(job.attempts_size() - 1);
  if (last->end_time_ms() != 0 || last->start_time_ms() <= 0) return;
  const int64_t ms = std::max<int64_t>(0, now_ms - last->start_time_ms());
  last->set_gpu_hours(last->gpus() * static_cast<double>(ms) / kMsPerHour);
  job.set_gpu_hours(job.gpu_hours() + last->gpu_hours());
}

absl::Status ExperimentStore::CheckReporter(const v1::Job& job,
                                            const v1::ReportMetricsRequest& req) {
  if (req.attempt() != job.attempt()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "attempt ", req.attempt(), " is not job ", job.id(), "'s current attempt (",
        job.attempt(), "); only its ranks may report"));
  }
  if (job.attempt_token().empty() || !SameSecret(req.token(), job.attempt_token())) {
    return absl::PermissionDeniedError(
        absl::StrCat("token: not the token of job ", job.id(), " attempt ", job.attempt()));
  }
  if (req.rank() < 0 || req.rank() >= std::max(1, job.world_size())) {
    return absl::InvalidArgumentError(absl::StrCat("rank: ", req.rank(), " is outside job ",
                                                   job.id(), "'s ", job.world_size(),
                                                   " ranks"));
  }
  return absl::OkStatus();
}

double ExperimentStore::AttemptGpus(const v1::Job& job, const NodeRegistry& nodes) {
  double gpus = 0;
  for (const v1::Task& t : job.tasks()) {
    auto node = nodes.find(t.node());
    for (int index : OwnedGpus(t)) {
      double share = TaskShareOfGpu(t, 0);
      if (node != nodes.end()) {
        for (const v1::Gpu& g : node->second.node.gpus()) {
          if (g.index() == index) share = TaskShareOfGpu(t, g.memory_total_bytes());
        }
      }
      gpus += share;
    }
  }
  return gpus;
}

std::optional<double> ExperimentStore::LatestThroughput(
    const std::vector<v1::MetricPoint>& points) {
  for (auto p = points.rbegin(); p != points.rend(); ++p) {
    if (p->key() == kThroughputMetricKey) return p->value();
  }
  return std::nullopt;
}

}  // namespace trainctl::coord
