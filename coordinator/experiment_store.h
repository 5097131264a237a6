#ifndef TRAINCTL_COORDINATOR_EXPERIMENT_STORE_H_
#define TRAINCTL_COORDINATOR_EXPERIMENT_STORE_H_

// What the coordinator keeps of experiments beyond job state: how many
// metric points each job has stored (against the per-job cap), the ASHA rungs
// of each sweep (early stopping, asha.h), and the attempt records of a job
// (AttemptRecord: when each attempt ran, on how many GPUs, how it ended,
// its GPU-hours).
//
// ExperimentStore is not thread-safe: called under the coordinator's lock,
// which guards it. The metric points themselves live in the StateStore; this
// part only counts them. The attempt-record functions are pure: they change
// the job proto they are given and nothing else.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "coordinator/asha.h"
#include "coordinator/node_registry.h"
#include "trainctl/v1/accounting.pb.h"
#include "trainctl/v1/metrics.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

class ExperimentStore {
 public:
  // `max_points_per_job`: the metric points one job may store
  // (CoordinatorConfig.limits.max_metric_points_per_job).
  explicit ExperimentStore(int64_t max_points_per_job)
      : max_points_per_job_(max_points_per_job) {}

  // The checks of a metric report before any lookup: 1 to `max_points`
  // points, each valid (CheckMetricPoint, common/metric_rules.h), a token.
  // Errors: INVALID_ARGUMENT naming points[i] and the rule; UNAUTHENTICATED
  // when the token is missing.
  static absl::Status CheckReport(const v1::ReportMetricsRequest& req, int max_points);
  // Whether `req` comes from a rank of `job`'s current attempt: its attempt,
  // token and a rank below world size. Errors: PERMISSION_DENIED naming the
  // attempt or the token; INVALID_ARGUMENT naming the rank.
  static absl::Status CheckReporter(const v1::Job& job, const v1::ReportMetricsRequest& req);
  // The newest throughput (kThroughputMetricKey, samples/s) among `points`,
  // in report order; nullopt when none is one.
  static std::optional<double> LatestThroughput(const std::vector<v1::MetricPoint>& points);
  // GPUs the current attempt's tasks of `job` hold (AttemptRecord.gpus): a
  // whole GPU counts 1, a share its reserved part of the GPU's memory as
  // `nodes` report it.
  static double AttemptGpus(const v1::Job& job, const NodeRegistry& nodes);
  // Fills resp.series from `points` ordered by key, then as appended (as the
  // StateStore reads them): per key the count, last value and step, min and
  // max, and the points themselves unless `summary_only`.
  static void Summarize(std::vector<v1::MetricPoint> points, bool summary_only,
                        v1::GetMetricsResponse* resp);

  // At load: job `job_id` has `points` points stored.
  void SetPoints(int64_t job_id, int64_t points) { points_[job_id] = points; }
  // At load: the rung values job.rung_values() holds go back into its
  // sweep's rungs.
  void LoadRungs(const v1::Job& job);

  // Counts `n` more points of job `job_id` before they are stored, so
  // concurrent reports cannot pass the cap together; returns the job's count
  // with them. Errors: RESOURCE_EXHAUSTED naming the job, its count and the
  // cap when they would pass it (nothing is counted then).
  absl::StatusOr<int64_t> Reserve(int64_t job_id, int64_t n);
  // Takes back a Reserve whose points were not stored.
  void Unreserve(int64_t job_id, int64_t n);
  // Points job `job_id` has stored (0 for a job that reported none).
  int64_t Points(int64_t job_id) const;
  // Points job `job_id` may still store (never negative).
  int64_t PointsLeft(int64_t job_id) const;

  // What a report meant for an early-stopped sweep trial.
  struct EarlyStop {
    // A new rung value was recorded in job.rung_values (the job must be
    // stored again).
    bool recorded = false;
    // Set when the ASHA rule stops the trial: why, for the job's reason, and
    // the step of the rung it fell short at (Job.stopped_early_at_step).
    std::optional<std::string> stop_reason;
    int64_t stop_step = 0;
  };
  // The trial `job` (spec.early_stop set) reported `points`: each point of
  // its early-stop metric is judged against the sweep's rungs (AshaOnReport)
  // in order, until one stops the trial. Records rung values in `job`.
  EarlyStop OnReport(v1::Job& job, const std::vector<v1::MetricPoint>& points);

 private:
  const int64_t max_points_per_job_;
  absl::flat_hash_map<int64_t, int64_t> points_;
  // Sweep id -> its rungs.
  absl::flat_hash_map<std::string, AshaRungs> rungs_;
};

// The attempt record an edge of `job` from `from` to `to` at `now_ms` (Unix
// ms) opens or closes: placing an attempt (-> SCHEDULED) opens one with
// `gpus` (the GPUs its tasks hold, fractions counted as such); leaving
// SCHEDULED or RUNNING for anything but RUNNING closes the open one of the
// current attempt: end time, outcome, reason, each rank's end and log path,
// and its GPU-hours (gpus x wall time), added to job.gpu_hours. Other edges
// change nothing.
void RecordAttemptEdge(v1::Job& job, v1::JobState from, v1::JobState to, int64_t now_ms,
                       double gpus);

// The accounting record (accounting.proto) of `job`'s last attempt record,
// which has just ended: who (spec user, project, queue), when (the record's
// start and end, ms), its outcome (and whether a preemption ended it), GPUs
// (the record's gpus, split per node over the tasks' GPUs, each with its
// Gpu.gpu_type, "unknown" for a node no longer registered), allocated
// GPU-seconds (gpus x wall time, as the record's gpu_hours x 3600) and used
// GPU-seconds (`used_by_node`, UsageHistory::TakeUsedGpuSeconds). Pure; an
// empty record (job_id 0) when `job` has no ended attempt.
v1::UsageRecord UsageRecordOf(const v1::Job& job, const NodeRegistry& nodes,
                              const std::map<std::string, double>& used_by_node);

// `job` with its running attempt's GPU-hours counted up to `now_ms` (Unix
// ms) in its last record and in job.gpu_hours, as a user reading it now
// expects; unchanged when no attempt is running.
void CountRunningGpuHours(v1::Job& job, int64_t now_ms);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_EXPERIMENT_STORE_H_
