#include "worker/nccl/metrics_reporter.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/metric_rules.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"
#include "worker/nccl/rendezvous_client.h"

namespace trainctl::worker {
namespace {

constexpr int kMaxPointsPerReport = 1000;
constexpr absl::Duration kRpcDeadline = absl::Seconds(10);

class GrpcMetricsSink : public MetricsSink {
 public:
  explicit GrpcMetricsSink(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::Coordinator::NewStub(std::move(channel))) {}

  absl::Status Send(const v1::ReportMetricsRequest& request) override {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
    v1::ReportMetricsResponse response;
    return FromGrpcStatus(stub_->ReportMetrics(&context, request, &response));
  }

 private:
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsSink>> NewGrpcMetricsSink(
    const std::string& address) {
  if (address.empty()) {
    return absl::InvalidArgumentError(
        "coordinator address is empty: expected host:port (TRAINCTL_COORDINATOR)");
  }
  return std::make_unique<GrpcMetricsSink>(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
}

MetricsReporter::MetricsReporter(const RankEnv& env, MetricsSink* sink,
                                 const Clock* clock, MetricsReporterOptions options)
    : env_(env), sink_(sink), clock_(clock), options_(options) {}

absl::Status MetricsReporter::Report(const std::string& key, double value,
                                     int64_t step) {
  // The coordinator's rule, checked here so that one bad point is refused
  // alone, not with the batch it would have been sent in.
  if (absl::Status s = CheckMetricPoint("metric", key, value, step); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(buffer_.size()) >= options_.max_pending_points) {
    return absl::ResourceExhaustedError(absl::StrCat(
        options_.max_pending_points,
        " metric points are waiting to be sent (is the coordinator at ",
        env_.coordinator, " reachable?); this one was not kept"));
  }
  const absl::Time now = clock_->Now();
  if (buffer_.empty()) oldest_ = now;
  v1::MetricPoint& p = buffer_.emplace_back();
  p.set_key(key);
  p.set_value(value);
  p.set_step(step);
  if (static_cast<int>(buffer_.size()) >= options_.max_buffered_points ||
      now - oldest_ >= options_.flush_interval) {
    return FlushLocked();
  }
  return absl::OkStatus();
}

absl::Status MetricsReporter::Flush() {
  absl::MutexLock lock(&mu_);
  return FlushLocked();
}

int MetricsReporter::Pending() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(buffer_.size());
}

absl::Status MetricsReporter::FlushLocked() {
  while (!buffer_.empty()) {
    const size_t n = std::min<size_t>(buffer_.size(), kMaxPointsPerReport);
    v1::ReportMetricsRequest request;
    request.set_job_id(env_.job_id);
    request.set_attempt(env_.attempt);
    request.set_rank(env_.rank);
    request.set_token(env_.token);
    for (size_t i = 0; i < n; ++i) *request.add_points() = buffer_[i];
    absl::Status sent = sink_->Send(request);
    if (absl::IsUnavailable(sent)) return sent;  // kept for the next try
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<ptrdiff_t>(n));
    oldest_ = clock_->Now();
    if (!sent.ok()) {
      return absl::Status(sent.code(),
                          absl::StrCat(n, " metric point(s) refused: ", sent.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace trainctl::worker
