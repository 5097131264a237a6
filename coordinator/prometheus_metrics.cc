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
// Queued to placed: at once on an idle cluster, hours behind a busy one.
const prometheus::Histogram::BucketBoundaries kQueueWaitBuckets = {
    0.1, 1, 10, 30, 60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, 86400};

// The final states and pre-flight verdicts that have counter series.
constexpr v1::JobState kFinalStates[] = {
    v1::JOB_STATE_SUCCEEDED, v1::JOB_STATE_FAILED, v1::JOB_STATE_CANCELLED};
constexpr v1::PreflightVerdict kEndVerdicts[] = {v1::PREFLIGHT_VERDICT_PASSED,
                                                 v1::PREFLIGHT_VERDICT_FAILED,
                                                 v1::PREFLIGHT_VERDICT_ABORTED};

// "JOB_STATE_PENDING" -> "pending".
std::string StateLabel(v1::JobState state) {
  return absl::AsciiStrToLower(
      absl::StripPrefix(v1::JobState_Name(state), "JOB_STATE_"));
}

// "PREFLIGHT_VERDICT_PASSED" -> "passed".
std::string VerdictLabel(v1::PreflightVerdict verdict) {
  return absl::AsciiStrToLower(
      absl::StripPrefix(v1::PreflightVerdict_Name(verdict), "PREFLIGHT_VERDICT_"));
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// Adds what `now` grew by since `*last` to `counter`; sets *last = now. Below
// the last value: a new Coordinator counting from 0, all of whose events are
// new.
void Advance(prometheus::Counter& counter, int64_t now, int64_t* last) {
  const int64_t grew = now >= *last ? now - *last : now;
  if (grew > 0) counter.Increment(static_cast<double>(grew));
  *last = now;
}

}  // namespace

PrometheusMetrics::PrometheusMetrics(Options options)
    : options_(options), registry_(std::make_shared<prometheus::Registry>()) {
  using prometheus::BuildCounter;
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
  node_service_ = &BuildGauge()
                       .Name("trainctl_node_service_state")
                       .Help("A node's service state: 0 in service, 1 draining (drained, "
                             "tasks still running), 2 drained, 3 down (trainctl node "
                             "drain/down; the reason is in `trainctl nodes`)")
                       .Register(*registry_);
  gpu_.utilization = &BuildGauge()
                          .Name("trainctl_gpu_utilization_ratio")
                          .Help("GPU utilization (0-1) at the node's last heartbeat")
                          .Register(*registry_);
  gpu_.memory_used = &BuildGauge()
                          .Name("trainctl_gpu_memory_used_bytes")
                          .Help("GPU memory in use at the node's last heartbeat")
                          .Register(*registry_);
  gpu_.memory_total = &BuildGauge()
                           .Name("trainctl_gpu_memory_total_bytes")
                           .Help("GPU memory in all")
                           .Register(*registry_);
  gpu_.power = &BuildGauge()
                    .Name("trainctl_gpu_power_watts")
                    .Help("GPU power draw at the node's last heartbeat")
                    .Register(*registry_);
  gpu_.temperature = &BuildGauge()
                          .Name("trainctl_gpu_temperature_celsius")
                          .Help("GPU temperature at the node's last heartbeat")
                          .Register(*registry_);
  if (options_.per_job_series) {
    job_gpu_utilization_ =
        &BuildGauge()
             .Name("trainctl_job_gpu_utilization_ratio")
             .Help("Mean utilization (0-1) of the GPUs a running job's tasks own")
             .Register(*registry_);
  }
  gpus_allocated_ = &BuildGauge()
                         .Name("trainctl_gpus_allocated")
                         .Help("GPUs of a ready node that a live task holds a "
                               "reservation on (a shared GPU counts once)")
                         .Register(*registry_);
  gpu_seconds_allocated_ = &BuildCounter()
                               .Name("trainctl_gpu_seconds_allocated_total")
                               .Help("GPU-seconds allocated to ended job attempts, by user, "
                                     "project and GPU type (the first 20 values of each "
                                     "label, then \"other\")")
                               .Register(*registry_);
  gpu_seconds_used_ = &BuildCounter()
                          .Name("trainctl_gpu_seconds_used_total")
                          .Help("GPU-seconds ended job attempts used (GPU activity x "
                                "their share x time), by user, project and GPU type")
                          .Register(*registry_);
  counters_.jobs_submitted = &BuildCounter()
                         .Name("trainctl_jobs_submitted_total")
                         .Help("Jobs accepted since the coordinator started")
                         .Register(*registry_)
                         .Add({});
  auto& finished = BuildCounter()
                       .Name("trainctl_jobs_finished_total")
                       .Help("Jobs that reached a final state since the "
                             "coordinator started, by state")
                       .Register(*registry_);
  for (v1::JobState s : kFinalStates) {
    counters_.jobs_finished[s] = &finished.Add({{"state", StateLabel(s)}});
  }
  counters_.placements = &BuildCounter()
                     .Name("trainctl_job_placements_total")
                     .Help("Job attempts placed on GPUs (pending to scheduled), "
                           "restarted and preempted ones included")
                     .Register(*registry_)
                     .Add({});
  auto& restarts = BuildCounter()
                       .Name("trainctl_job_restarts_total")
                       .Help("Job attempts requeued as a new attempt: after a "
                             "failure with restarts left, or an auto-packed "
                             "trial's CUDA out-of-memory error")
                       .Register(*registry_);
  counters_.restarts_failure = &restarts.Add({{"reason", "failure"}});
  counters_.restarts_oom = &restarts.Add({{"reason", "out_of_memory"}});
  counters_.preemptions = &BuildCounter()
                      .Name("trainctl_preemptions_total")
                      .Help("Scheduled or running jobs preempted for another job")
                      .Register(*registry_)
                      .Add({});
  auto& preflight = BuildCounter()
                        .Name("trainctl_preflight_runs_total")
                        .Help("Gang pre-flight runs that ended, by verdict")
                        .Register(*registry_);
  for (v1::PreflightVerdict v : kEndVerdicts) {
    counters_.preflight_runs[v] = &preflight.Add({{"verdict", VerdictLabel(v)}});
  }
  counters_.registrations = &BuildCounter()
                        .Name("trainctl_agent_registrations_total")
                        .Help("Agent registrations accepted (first ones and "
                              "re-registrations after a restart or a lost stream)")
                        .Register(*registry_)
                        .Add({});
  auto& fetches = BuildCounter()
                     .Name("trainctl_rendezvous_fetches_total")
                     .Help("ncclUniqueId long-polls (FetchUniqueId): from ranks "
                           "directly, or from node relays (one per node and "
                           "job attempt)")
                     .Register(*registry_);
  counters_.rendezvous_fetches_direct = &fetches.Add({{"via", "direct"}});
  counters_.rendezvous_fetches_relayed = &fetches.Add({{"via", "relay"}});
  counters_.rendezvous_ranks_relayed = &BuildCounter()
                                   .Name("trainctl_rendezvous_relayed_ranks_total")
                                   .Help("Ranks named by node relays' fetches and "
                                         "arrival reports")
                                   .Register(*registry_)
                                   .Add({});
  histograms_.schedule_pass = &BuildHistogram()
                        .Name("trainctl_schedule_pass_seconds")
                        .Help("Time of one scheduling pass over the pending jobs")
                        .Register(*registry_)
                        .Add({}, kScheduleBuckets);
  histograms_.rendezvous_publish =
      &BuildHistogram()
           .Name("trainctl_rendezvous_publish_seconds")
           .Help("Time from a job attempt's placement to rank 0 publishing "
                 "its NCCL unique id")
           .Register(*registry_)
           .Add({}, kRendezvousBuckets);
  histograms_.job_queue_wait =
      &BuildHistogram()
           .Name("trainctl_job_queue_wait_seconds")
           .Help("Time a job attempt waited to be placed: from its submit, or "
                 "from the end of the attempt before")
           .Register(*registry_)
           .Add({}, kQueueWaitBuckets);
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
    const std::string& listen, Options options) {
  std::unique_ptr<PrometheusMetrics> m;
  try {
    m.reset(new PrometheusMetrics(options));
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
  for (const auto& [node, state] : stats.node_service_states) {
    prometheus::Gauge*& gauge = service_series_[node];
    if (gauge == nullptr) gauge = &node_service_->Add({{"node", node}});
    gauge->Set(std::max(0, static_cast<int>(state) - 1));
  }
  for (auto it = service_series_.begin(); it != service_series_.end();) {
    if (stats.node_service_states.count(it->first)) {
      ++it;
      continue;
    }
    node_service_->Remove(it->second);
    it = service_series_.erase(it);
  }

  const CoordinatorCounters& c = stats.counters;
  CoordinatorCounters& last = last_counters_;
  Advance(*counters_.jobs_submitted, c.jobs_submitted, &last.jobs_submitted);
  for (v1::JobState s : kFinalStates) {
    Advance(*counters_.jobs_finished[s], c.jobs_finished[s], &last.jobs_finished[s]);
  }
  Advance(*counters_.placements, c.placements, &last.placements);
  Advance(*counters_.restarts_failure, c.restarts, &last.restarts);
  Advance(*counters_.restarts_oom, c.oom_requeues, &last.oom_requeues);
  Advance(*counters_.preemptions, c.preemptions, &last.preemptions);
  for (v1::PreflightVerdict v : kEndVerdicts) {
    Advance(*counters_.preflight_runs[v], c.preflight_runs[v], &last.preflight_runs[v]);
  }
  Advance(*counters_.registrations, c.agent_registrations, &last.agent_registrations);
  Advance(*counters_.rendezvous_fetches_direct, c.rendezvous_fetches_direct,
          &last.rendezvous_fetches_direct);
  Advance(*counters_.rendezvous_fetches_relayed, c.rendezvous_fetches_relayed,
          &last.rendezvous_fetches_relayed);
  Advance(*counters_.rendezvous_ranks_relayed, c.rendezvous_ranks_relayed,
          &last.rendezvous_ranks_relayed);

  std::map<std::string, int> allocated;  // by READY node
  std::set<prometheus::Labels> seen;
  for (const GpuStats& g : stats.gpus) {
    if (!g.node_ready) continue;
    allocated[g.node] += g.allocated ? 1 : 0;
    prometheus::Labels labels = {{"node", g.node},
                                 {"gpu", absl::StrCat(g.index)},
                                 {"uuid", g.uuid},
                                 {"model", g.model}};
    auto it = gpu_series_.find(labels);
    if (it == gpu_series_.end()) {
      GpuGauges gauges{&gpu_.utilization->Add(labels),
                       &gpu_.memory_used->Add(labels),
                       &gpu_.memory_total->Add(labels), &gpu_.power->Add(labels),
                       &gpu_.temperature->Add(labels)};
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
    gpu_.utilization->Remove(it->second.utilization);
    gpu_.memory_used->Remove(it->second.memory_used);
    gpu_.memory_total->Remove(it->second.memory_total);
    gpu_.power->Remove(it->second.power);
    gpu_.temperature->Remove(it->second.temperature);
    it = gpu_series_.erase(it);
  }

  for (const auto& [node, n] : allocated) {
    prometheus::Gauge*& gauge = allocated_series_[node];
    if (gauge == nullptr) gauge = &gpus_allocated_->Add({{"node", node}});
    gauge->Set(n);
  }
  for (auto it = allocated_series_.begin(); it != allocated_series_.end();) {
    if (allocated.count(it->first)) {
      ++it;
      continue;
    }
    gpus_allocated_->Remove(it->second);
    it = allocated_series_.erase(it);
  }

  seen.clear();
  for (const JobGpuStats& j : stats.jobs) {
    if (!options_.per_job_series) break;
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
  histograms_.schedule_pass->Observe(Seconds(took));
}

void PrometheusMetrics::ObserveRendezvousPublish(absl::Duration took) {
  histograms_.rendezvous_publish->Observe(Seconds(took));
}

void PrometheusMetrics::ObserveAttemptUsage(const v1::UsageRecord& r) {
  std::lock_guard<std::mutex> lock(mu_);
  auto bounded = [this](const std::string& label, const std::string& value) {
    std::set<std::string>& seen = accounting_labels_[label];
    if (seen.count(value) > 0) return value;
    if (seen.size() < kAccountingLabelLimit) {
      seen.insert(value);
      return value;
    }
    return std::string("other");
  };
  const std::string user = bounded("user", r.user());
  const std::string project = bounded("project", r.project());
  double gpus = 0;
  for (const v1::UsageSlice& s : r.slices()) gpus += s.gpus();
  if (r.slices().empty() || gpus <= 0) {
    const prometheus::Labels labels{{"user", user}, {"project", project},
                                    {"gpu_type", bounded("gpu_type", "unknown")}};
    gpu_seconds_allocated_->Add(labels).Increment(r.gpu_seconds_allocated());
    gpu_seconds_used_->Add(labels).Increment(r.gpu_seconds_used());
    return;
  }
  for (const v1::UsageSlice& s : r.slices()) {
    const prometheus::Labels labels{{"user", user}, {"project", project},
                                    {"gpu_type", bounded("gpu_type", s.gpu_type())}};
    gpu_seconds_allocated_->Add(labels).Increment(r.gpu_seconds_allocated() * s.gpus() / gpus);
    gpu_seconds_used_->Add(labels).Increment(s.gpu_seconds_used());
  }
}

void PrometheusMetrics::ObserveJobQueueWait(absl::Duration waited) {
  histograms_.job_queue_wait->Observe(Seconds(waited));
}

std::string PrometheusMetrics::TextExposition() const {
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace trainctl::coord
