#ifndef TRAINCTL_COORDINATOR_PROMETHEUS_METRICS_H_
#define TRAINCTL_COORDINATOR_PROMETHEUS_METRICS_H_

// The coordinator's Prometheus metrics: gauges and counters refreshed from a
// CoordinatorStats snapshot and latency histograms fed by the core's
// observers (CoordinatorConfig::on_schedule_pass, on_rendezvous_published,
// on_job_placed), served as text at http://ADDR:PORT/metrics by
// prometheus-cpp's Exposer.
//
// Series (labels in braces):
//   trainctl_jobs{state}                        jobs per state (pending ... cancelled)
//   trainctl_jobs_in_memory                     jobs held whole in memory
//   trainctl_queue_length{queue}                pending jobs; one queue, "default"
//   trainctl_nodes{state}                       nodes per state (ready, lost)
//   trainctl_node_service_state{node}           0 in service, 1 draining,
//                                               2 drained, 3 down
//   trainctl_gpu_utilization_ratio{node,gpu,uuid,model}     0-1
//   trainctl_gpu_memory_used_bytes{node,gpu,uuid,model}
//   trainctl_gpu_memory_total_bytes{node,gpu,uuid,model}
//   trainctl_gpu_power_watts{node,gpu,uuid,model}
//   trainctl_gpu_temperature_celsius{node,gpu,uuid,model}
//   trainctl_gpus_allocated{node}               GPUs some live task holds
//   trainctl_jobs_submitted_total               counter
//   trainctl_jobs_finished_total{state}         counter: succeeded, failed, cancelled
//   trainctl_job_placements_total               counter: attempts placed
//   trainctl_job_restarts_total{reason}         counter: failure, out_of_memory
//   trainctl_preemptions_total                  counter
//   trainctl_preflight_runs_total{verdict}      counter: passed, failed, aborted
//   trainctl_agent_registrations_total          counter
//   trainctl_rendezvous_fetches_total{via}      counter: FetchUniqueId long-polls,
//                                               via="direct" (a rank) or "relay"
//                                               (a node's agent, once per attempt)
//   trainctl_rendezvous_relayed_ranks_total     counter: ranks named by relays
//   trainctl_schedule_pass_seconds              histogram
//   trainctl_rendezvous_publish_seconds         histogram: placement to rank 0's publish
//   trainctl_job_queue_wait_seconds             histogram: queued to placed
// and, only with Options::per_job_series (one series per running job: a
// busy cluster's churn of job ids makes many short series),
//   trainctl_job_gpu_utilization_ratio{job_id,job_name}     0-1, mean over its GPUs
// GPU series exist for GPUs of READY nodes only (a lost node's last samples
// are stale); job series for jobs whose current attempt has live tasks. A
// series whose GPU, node or job is gone is removed at the next Refresh().
// Counters count from the coordinator's start (CoordinatorCounters); every
// labelled counter series exists from Create(), at 0.

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/labels.h"
#include "prometheus/registry.h"
#include "trainctl/v1/accounting.pb.h"

namespace trainctl::coord {

// Owns the registry and, when given an address, the HTTP endpoint serving it
// (its own civetweb threads). Thread-safe: Refresh() and the Observe*
// methods may be called from any thread, concurrently with scrapes.
class PrometheusMetrics {
 public:
  struct Options {
    // Export trainctl_job_gpu_utilization_ratio{job_id,job_name}, a series
    // per running job (--metrics-job-series). Off by default: no series has
    // a per-job label.
    bool per_job_series = false;
  };

  // Registers every family. `listen` is "ADDR:PORT" for the HTTP endpoint
  // (port 0: any free port, see port()); empty: no endpoint (tests read the
  // registry through TextExposition()).
  // Errors: UNAVAILABLE when the endpoint cannot listen on `listen` (address
  // in use, bad address); INTERNAL for a metric prometheus-cpp refuses.
  static absl::StatusOr<std::unique_ptr<PrometheusMetrics>> Create(
      const std::string& listen, Options options);
  static absl::StatusOr<std::unique_ptr<PrometheusMetrics>> Create(
      const std::string& listen) {
    return Create(listen, Options());
  }

  ~PrometheusMetrics();
  PrometheusMetrics(const PrometheusMetrics&) = delete;
  PrometheusMetrics& operator=(const PrometheusMetrics&) = delete;

  // Sets every gauge from `stats`; adds series for new GPUs, nodes and jobs
  // and removes those no longer in `stats` (or whose node is not READY).
  // Adds to each counter what stats.counters grew by since the last call
  // (all of it when it went down: a new Coordinator counting from 0). No
  // errors.
  void Refresh(const CoordinatorStats& stats);

  // Records one scheduling pass that took `took` (seconds in the histogram).
  void ObserveSchedulePass(absl::Duration took);
  // Records one rendezvous from placement to rank 0's publish.
  void ObserveRendezvousPublish(absl::Duration took);
  // Records one job attempt placed after waiting `waited` in the queue.
  void ObserveJobQueueWait(absl::Duration waited);
  // Adds an ended attempt's GPU-seconds (accounting.proto) to
  // trainctl_gpu_seconds_allocated_total and trainctl_gpu_seconds_used_total
  // {user, project, gpu_type}, split per GPU type over its slices. Labels
  // are bounded: the first kAccountingLabelLimit distinct values of each
  // label seen since the start get their own series, later ones count
  // under "other" (a counter's series cannot move when a ranking changes;
  // `trainctl usage` has the exact figures). No errors.
  void ObserveAttemptUsage(const v1::UsageRecord& record);
  // Distinct values per accounting label before "other".
  static constexpr size_t kAccountingLabelLimit = 20;

  // The TCP port the endpoint listens on; 0 without an endpoint.
  int port() const { return port_; }

  // Everything in the registry in Prometheus' text format (what a scrape of
  // /metrics returns).
  std::string TextExposition() const;

 private:
  struct GpuGauges {
    prometheus::Gauge* utilization;
    prometheus::Gauge* memory_used;
    prometheus::Gauge* memory_total;
    prometheus::Gauge* power;
    prometheus::Gauge* temperature;
  };

  // The per-GPU families (a series per GPU, labelled by node and index).
  struct GpuFamilies {
    prometheus::Family<prometheus::Gauge>* utilization;
    prometheus::Family<prometheus::Gauge>* memory_used;
    prometheus::Family<prometheus::Gauge>* memory_total;
    prometheus::Family<prometheus::Gauge>* power;
    prometheus::Family<prometheus::Gauge>* temperature;
  };
  // The counters Refresh() advances from CoordinatorCounters.
  struct Counters {
    prometheus::Counter* jobs_submitted;
    // By v1::JobState / v1::PreflightVerdict; null where no series exists.
    std::array<prometheus::Counter*, v1::JobState_ARRAYSIZE> jobs_finished{};
    prometheus::Counter* placements;
    prometheus::Counter* restarts_failure;
    prometheus::Counter* restarts_oom;
    prometheus::Counter* preemptions;
    std::array<prometheus::Counter*, v1::PreflightVerdict_ARRAYSIZE> preflight_runs{};
    prometheus::Counter* registrations;
    prometheus::Counter* rendezvous_fetches_direct;
    prometheus::Counter* rendezvous_fetches_relayed;
    prometheus::Counter* rendezvous_ranks_relayed;
  };
  // The histograms the Observe* methods feed (seconds).
  struct Histograms {
    prometheus::Histogram* schedule_pass;
    prometheus::Histogram* rendezvous_publish;
    prometheus::Histogram* job_queue_wait;
  };

  explicit PrometheusMetrics(Options options);

  const Options options_;

  // Declared first so that it is destroyed last: the endpoint (destroyed
  // before it) may be serving a scrape of it.
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Gauge* jobs_in_memory_;
  prometheus::Family<prometheus::Gauge>* queue_length_;
  prometheus::Family<prometheus::Gauge>* nodes_;
  // Null without Options::per_job_series.
  prometheus::Family<prometheus::Gauge>* job_gpu_utilization_ = nullptr;
  prometheus::Family<prometheus::Gauge>* gpus_allocated_;
  GpuFamilies gpu_;
  Counters counters_;
  Histograms histograms_;

  std::mutex mu_;  // Guards what follows (Refresh() against itself).
  std::map<prometheus::Labels, GpuGauges> gpu_series_;
  std::map<prometheus::Labels, prometheus::Gauge*> job_series_;
  std::map<std::string, prometheus::Gauge*> queue_series_;  // by queue name
  std::map<std::string, prometheus::Gauge*> allocated_series_;  // by node
  prometheus::Family<prometheus::Gauge>* node_service_;
  std::map<std::string, prometheus::Gauge*> service_series_;  // by node
  prometheus::Family<prometheus::Counter>* gpu_seconds_allocated_;
  prometheus::Family<prometheus::Counter>* gpu_seconds_used_;
  // Values with their own series per accounting label (user, project,
  // gpu_type), at most kAccountingLabelLimit each.
  std::map<std::string, std::set<std::string>> accounting_labels_;
  // stats.counters at the last Refresh().
  CoordinatorCounters last_counters_;

  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_PROMETHEUS_METRICS_H_
