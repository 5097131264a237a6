#ifndef TRAINCTL_WORKER_NCCL_METRICS_REPORTER_H_
#define TRAINCTL_WORKER_NCCL_METRICS_REPORTER_H_

// The training process's side of metric reporting: `loss`,
// `val_loss`, `samples_per_s`... go to the coordinator's ReportMetrics,
// authenticated by the attempt's TRAINCTL_TOKEN, in batches.
//
// Batching, and its trade-off: the coordinator makes each report durable (one
// SQLite transaction, one fsync) before it replies, which costs about a
// millisecond or more. A trainer reporting every step of a 10 ms step would
// spend a large share of its time waiting, so Report() only buffers; the
// buffer is sent, in one RPC and one transaction, when it holds
// `max_buffered_points` points or its oldest point is `flush_interval` old
// (checked at each Report(); there is no background thread), and on Flush().
// What a crash of the trainer can lose is therefore what it had not flushed:
// at most max_buffered_points points or flush_interval of them. Call Flush()
// where a point must be durable (end of an epoch, before exit).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "trainctl/v1/metrics.pb.h"
#include "worker/nccl/rank_env.h"

namespace trainctl::worker {

// Sends one report (the transport; gRPC in production, a fake in tests).
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  // Errors: the coordinator's (see Coordinator.ReportMetrics in
  // service.proto); UNAVAILABLE when it cannot be reached.
  virtual absl::Status Send(const v1::ReportMetricsRequest& request) = 0;
};

// A MetricsSink over the coordinator's gRPC API at `address` (host:port),
// with a 10 s deadline per call.
// Errors: INVALID_ARGUMENT when `address` is empty.
absl::StatusOr<std::unique_ptr<MetricsSink>> NewGrpcMetricsSink(
    const std::string& address);

// Plain values with their defaults.
struct MetricsReporterOptions {
  // Send when this many points are buffered (at most 1000, the coordinator's
  // limit per report).
  int max_buffered_points = 64;
  // Send at the first Report() after the oldest buffered point is this old.
  absl::Duration flush_interval = absl::Seconds(1);
  // Points kept while the coordinator is unreachable; past it Report()
  // refuses new points (RESOURCE_EXHAUSTED) rather than drop old ones.
  int max_pending_points = 100000;
};

// Buffers and sends one process's metric points. Thread-safe (one mutex; a
// send happens under it, so concurrent reporters wait for it).
class MetricsReporter {
 public:
  // `sink` and `clock` are not owned and must outlive the reporter.
  MetricsReporter(const RankEnv& env, MetricsSink* sink, const Clock* clock,
                  MetricsReporterOptions options = {});

  // Buffers (key, value, step); sends the buffer when it is due (above).
  // Errors: INVALID_ARGUMENT for a point the coordinator would refuse
  // (CheckMetricPoint, common/metric_rules.h: a key not of 1-128
  // [A-Za-z0-9_.:/-], a value that is not finite, a negative samples_per_s,
  // a negative step); the point is not buffered;
  // RESOURCE_EXHAUSTED when max_pending_points are waiting; and the errors
  // of a send it triggered, as Flush().
  absl::Status Report(const std::string& key, double value, int64_t step);

  // Sends every buffered point now (in reports of at most 1000) and returns
  // once the coordinator has stored them. On UNAVAILABLE the points stay
  // buffered for the next try; on any other error (PERMISSION_DENIED: not this
  // attempt's token; RESOURCE_EXHAUSTED: the job's cap...) the refused report
  // is dropped, since sending it again cannot succeed.
  absl::Status Flush();

  // Points buffered, not yet stored.
  int Pending() const;

 private:
  absl::Status FlushLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const RankEnv env_;
  MetricsSink* const sink_;
  const Clock* const clock_;
  const MetricsReporterOptions options_;
  mutable absl::Mutex mu_;
  std::vector<v1::MetricPoint> buffer_ ABSL_GUARDED_BY(mu_);
  absl::Time oldest_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_NCCL_METRICS_REPORTER_H_
