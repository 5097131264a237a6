#include "coordinator/prometheus_metrics.h"

#include <exception>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace trainctl::coord {
namespace {

// Scheduling passes take microseconds to (with thousands of pending jobs)
// tens of milliseconds.
const prometheus::Histogram::BucketBoundaries kScheduleBuckets = {
    0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1};
// From placement to rank 0's publish: process start, imports, CUDA init.
const prometheus::Histogram::BucketBoundaries kRendezvousBuckets = {
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

// "JOB_STATE_PENDING" -> "pending".
std::string StateLabel(v1::JobState state) {
  return absl::AsciiStrToLower(
      absl::StripPrefix(v1::JobState_Name(state), "JOB_STATE_"));
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

PrometheusMetrics::PrometheusMetrics()
    : registry_(std::make_shared<prometheus::Registry>()) {
  using prometheus::BuildGauge;
  using prometheus::BuildHistogram;
  jobs_ = &BuildGauge()
               .Name("trainctl_jobs")
               .Help("Jobs known to the coordinator, by state")
               .Register(*registry_);
  jobs_in_memory_ = &BuildGauge()
                         .Name("trainctl_jobs_in_memory")
                         .Help("Jobs whose full record the coordinator holds in "
                               "memory; finished ones are read from the store")
                         .Register(*registry_)
                         .Add({});
  queue_length_ = &BuildGauge()
                       .Name("trainctl_queue_length")
                       .Help("Jobs waiting to be scheduled, by queue")
                       .Register(*registry_);
  nodes_ = &BuildGauge()
                .Name("trainctl_nodes")
                .Help("Nodes known to the coordinator, by state")
                .Register(*registry_);
  gpu_utilization_ = &BuildGauge()
                          .Name("trainctl_gpu_utilization_ratio")
                          .Help("GPU utilization (0-1) at the node's last heartbeat")
                          .Register(*registry_);
  gpu_memory_used_ = &BuildGauge()
                          .Name("trainctl_gpu_memory_used_bytes")
                          .Help("GPU memory in use at the node's last heartbeat")
                          .Register(*registry_);
  gpu_memory_total_ = &BuildGauge()
                           .Name("trainctl_gpu_memory_total_bytes")
                           .Help("GPU memory in all")
                           .Register(*registry_);
  gpu_power_ = &BuildGauge()
                    .Name("trainctl_gpu_power_watts")
                    .Help("GPU power draw at the node's last heartbeat")
                    .Register(*registry_);
  gpu_temperature_ = &BuildGauge()
                          .Name("trainctl_gpu_temperature_celsius")
                          .Help("GPU temperature at the node's last heartbeat")
                          .Register(*registry_);
  job_gpu_utilization_ =
      &BuildGauge()
           .Name("trainctl_job_gpu_utilization_ratio")
           .Help("Mean utilization (0-1) of the GPUs a running job's tasks own")
           .Register(*registry_);
  schedule_pass_ = &BuildHistogram()
                        .Name("trainctl_schedule_pass_seconds")
                        .Help("Time of one scheduling pass over the pending jobs")
                        .Register(*registry_)
                        .Add({}, kScheduleBuckets);
  rendezvous_publish_ =
      &BuildHistogram()
           .Name("trainctl_rendezvous_publish_seconds")
           .Help("Time from a job attempt's placement to rank 0 publishing "
                 "its NCCL unique id")
           .Register(*registry_)
           .Add({}, kRendezvousBuckets);
  // Series that always exist, at 0 until the first Refresh().
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (s == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(s)) continue;
    jobs_->Add({{"state", StateLabel(static_cast<v1::JobState>(s))}});
  }
  queue_series_["default"] = &queue_length_->Add({{"queue", "default"}});
  nodes_->Add({{"state", "ready"}});
  nodes_->Add({{"state", "lost"}});
}

PrometheusMetrics::~PrometheusMetrics() = default;

absl::StatusOr<std::unique_ptr<PrometheusMetrics>> PrometheusMetrics::Create(
    const std::string& listen) {
  std::unique_ptr<PrometheusMetrics> m;
  try {
    m.reset(new PrometheusMetrics());
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("prometheus metrics: ", e.what()));
  }
  if (listen.empty()) return m;
  try {
    m->exposer_ = std::make_unique<prometheus::Exposer>(listen);
    m->exposer_->RegisterCollectable(m->registry_);
    const std::vector<int> ports = m->exposer_->GetListeningPorts();
    m->port_ = ports.empty() ? 0 : ports[0];
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", listen, ": ", e.what(),
        " (is the port in use? pick another with --metrics-listen)"));
  }
  return m;
}

void PrometheusMetrics::Refresh(const CoordinatorStats& stats) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (s == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(s)) continue;
    jobs_->Add({{"state", StateLabel(static_cast<v1::JobState>(s))}})
        .Set(static_cast<double>(stats.jobs_by_state[s]));
  }
  jobs_in_memory_->Set(static_cast<double>(stats.jobs_in_memory));
  // Queues seen before and absent now read 0 (a queue removed from the
  // config keeps its series until restart).
  for (auto& [queue, gauge] : queue_series_) gauge->Set(0);
  for (const auto& [queue, pending] : stats.pending_by_queue) {
    prometheus::Gauge*& gauge = queue_series_[queue];
    if (gauge == nullptr) gauge = &queue_length_->Add({{"queue", queue}});
    gauge->Set(static_cast<double>(pending));
  }
  nodes_->Add({{"state", "ready"}}).Set(stats.nodes_ready);
  nodes_->Add({{"state", "lost"}}).Set(stats.nodes_lost);

  std::set<prometheus::Labels> seen;
  for (const GpuStats& g : stats.gpus) {
    if (!g.node_ready) continue;
    prometheus::Labels labels = {{"node", g.node},
                                 {"gpu", absl::StrCat(g.index)},
                                 {"uuid", g.uuid},
                                 {"model", g.model}};
    auto it = gpu_series_.find(labels);
    if (it == gpu_series_.end()) {
      GpuGauges gauges{&gpu_utilization_->Add(labels),
                       &gpu_memory_used_->Add(labels),
                       &gpu_memory_total_->Add(labels), &gpu_power_->Add(labels),
                       &gpu_temperature_->Add(labels)};
      it = gpu_series_.emplace(labels, gauges).first;
    }
    it->second.utilization->Set(g.utilization_pct / 100.0);
    it->second.memory_used->Set(static_cast<double>(g.memory_used_bytes));
    it->second.memory_total->Set(static_cast<double>(g.memory_total_bytes));
    it->second.power->Set(g.power_w);
    it->second.temperature->Set(g.temperature_c);
    seen.insert(std::move(labels));
  }
  for (auto it = gpu_series_.begin(); it != gpu_series_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    gpu_utilization_->Remove(it->second.utilization);
    gpu_memory_used_->Remove(it->second.memory_used);
    gpu_memory_total_->Remove(it->second.memory_total);
    gpu_power_->Remove(it->second.power);
    gpu_temperature_->Remove(it->second.temperature);
    it = gpu_series_.erase(it);
  }

  seen.clear();
  for (const JobGpuStats& j : stats.jobs) {
    prometheus::Labels labels = {{"job_id", absl::StrCat(j.job_id)},
                                 {"job_name", j.job_name}};
    auto it = job_series_.find(labels);
    if (it == job_series_.end()) {
      it = job_series_.emplace(labels, &job_gpu_utilization_->Add(labels)).first;
    }
    it->second->Set(j.utilization_pct / 100.0);
    seen.insert(std::move(labels));
  }
  for (auto it = job_series_.begin(); it != job_series_.end();) {
    if (seen.count(it->first)) {
      ++it;
      continue;
    }
    job_gpu_utilization_->Remove(it->second);
    it = job_series_.erase(it);
  }
}

void PrometheusMetrics::ObserveSchedulePass(absl::Duration took) {
  schedule_pass_->Observe(Seconds(took));
}

void PrometheusMetrics::ObserveRendezvousPublish(absl::Duration took) {
  rendezvous_publish_->Observe(Seconds(took));
}

std::string PrometheusMetrics::TextExposition() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace trainctl::coord
