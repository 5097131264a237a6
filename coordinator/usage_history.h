#ifndef TRAINCTL_COORDINATOR_USAGE_HISTORY_H_
#define TRAINCTL_COORDINATOR_USAGE_HISTORY_H_

// What the coordinator has measured of its jobs: the latest usage of each
// task (TaskUsage from heartbeats) with the task's peak GPU memory, the
// per-job utilization history sampled every sample_period (GetJobUsage,
// `trainctl top`), its diagnosis (diagnosis.h), and the throughput jobs
// report (samples/s, for the auto-packer's back-off).
//
// It holds telemetry only, never job state. Which task is live, where it
// runs and which attempt is current belong to the Coordinator and change
// with its events, so the Coordinator decides them under its own lock and
// hands them in as values: it records only the heartbeat samples of tasks
// the reporting node runs (RecordTaskUsage), and says which tasks are live
// when it samples (Sample). Nothing here has to change in the same step as a
// job: a sample recorded a moment late is telemetry a moment old.
//
// Thread-safe: one mutex of its own guards everything, so readers
// (GetJobUsage's assembly and diagnosis, `trainctl top` polling) run without
// the Coordinator's lock. The Coordinator may call in while holding its own
// lock (lock order: Coordinator, then UsageHistory); nothing here calls out.
// No clock: times come in as arguments.

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/diagnosis.h"
#include "trainctl/v1/telemetry.pb.h"

namespace trainctl::coord {

struct UsageHistoryConfig {
  // Period of the samples, reported with them (JobUsage.sample_period_ms);
  // the caller calls Sample() at this period.
  absl::Duration sample_period = absl::Seconds(2);
  // Samples kept per job, newest (at least 1).
  int history_samples = 300;
  // Jobs no longer sampled whose history is kept, newest (0: none).
  int finished_jobs = 256;
  DiagnosisConfig diagnosis;
};

// One GPU a live task owns, as its node last reported it.
struct UsageGpu {
  std::string node;
  int index = 0;
  // 0-100.
  int utilization_pct = 0;
  int64_t memory_used_bytes = 0;
  int64_t memory_total_bytes = 0;
  // Live tasks holding this GPU, every job's (its own, and tasks of earlier
  // attempts still draining, included).
  int tasks_on = 1;
  // True when the node reports GPM counters for this GPU (the three below,
  // percent 0-100 of the whole GPU; see v1::Gpu).
  bool gpm = false;
  double sm_active_pct = 0;
  double sm_occupancy_pct = 0;
  double dram_bw_pct = 0;
  // The task's share of this GPU: 1 for a whole GPU, the reserved fraction
  // of its memory for a share (TaskShareOfGpu). Used GPU-seconds count it.
  double share = 1.0;
};

// One live task of a job's current attempt, as Sample() sees it.
struct UsageTask {
  int rank = 0;
  // CPU cores it may use: its node's CPUs over the local world size (0 when
  // its node is unknown).
  double cpu_cores = 0;
  // The GPUs it owns that its node reports (a GPU the node no longer has is
  // left out).
  std::vector<UsageGpu> gpus;
};

// The live tasks of one job's current attempt.
struct UsageJob {
  int64_t job_id = 0;
  int attempt = 0;
  std::vector<UsageTask> tasks;
};

// What GetJobUsage names a job by (from the Coordinator's record of it).
struct UsageJobLabel {
  int64_t job_id = 0;
  std::string name;
  // JobSpec.auto_pack: the diagnosis then says the packer already shares its
  // GPU.
  bool auto_pack = false;
};

class UsageHistory {
 public:
  explicit UsageHistory(UsageHistoryConfig config);

  UsageHistory(const UsageHistory&) = delete;
  UsageHistory& operator=(const UsageHistory&) = delete;

  // Keeps `usage` as the latest sample of task (job, attempt, rank) and
  // raises its peak GPU memory when usage.gpu_memory_known. The caller has
  // checked that the reporting node runs that task: nothing is checked here.
  // No errors.
  void RecordTaskUsage(const v1::TaskUsage& usage) ABSL_LOCKS_EXCLUDED(mu_);

  // The largest per-process GPU memory measured for the task, bytes; 0 when
  // none was (or the task is no longer live at the last Sample()).
  int64_t PeakGpuMemoryBytes(int64_t job_id, int attempt, int rank) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Keeps the latest throughput job `job_id` reports, samples/s. The caller
  // has checked that the job exists.
  // Errors: INVALID_ARGUMENT for a negative or non-finite value (nothing
  // kept).
  absl::Status ReportThroughput(int64_t job_id, double samples_per_s)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The latest throughput of `job_id`, samples/s; nullopt when it reported
  // none (or was inactive at the last Sample()).
  std::optional<double> Throughput(int64_t job_id) const ABSL_LOCKS_EXCLUDED(mu_);

  // Takes one sample at `now_ms` (Unix ms) per job of `live` that has live
  // tasks on GPUs its node reports (and adds the sample's used GPU-seconds,
  // TakeUsedGpuSeconds): GPU utilization (the processes' own
  // where every task reports it, else the GPUs'), the GPUs' GPM counters
  // (mean over its GPUs, where every one reports them), GPU memory (per-process
  // where known, else each GPU's used memory split over the tasks on it),
  // CPU use and cores. A job's history keeps the newest history_samples;
  // jobs not sampled now are kept as finished, the newest finished_jobs of
  // them. Then forgets the usage of tasks not in `live` and the throughput
  // of jobs for which `is_active` (not final, or with live tasks) is false.
  // Cost: O(live tasks x their GPUs + kept histories x finished_jobs).
  // No errors.
  void Sample(int64_t now_ms, const std::vector<UsageJob>& live,
              absl::FunctionRef<bool(int64_t)> is_active) ABSL_LOCKS_EXCLUDED(mu_);

  // The used GPU-seconds of attempt (job_id, attempt) per node, summed over
  // the samples Sample() took of it, and forgets them. Per sample and per
  // GPU the attempt owns: activity x share x sample_period, where activity
  // is the GPU's SM-active fraction when the node reports GPM counters
  // (the fraction of time SMs had work: closer to "doing work" than NVML
  // utilization, which counts any kernel running) and else NVML utilization
  // (0-1). A GPU shared by several jobs' tasks reports one activity; each
  // counts its own share of it. Empty when no sample was taken. No errors.
  std::map<std::string, double> TakeUsedGpuSeconds(int64_t job_id, int attempt)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Ids of the jobs that have a history now, ascending.
  std::vector<int64_t> JobsWithHistory() const ABSL_LOCKS_EXCLUDED(mu_);

  // One JobUsage per job of `jobs`, in that order: its label, the sample
  // period (ms), the newest `max_samples` samples oldest first (0: all) and
  // the diagnosis of the whole kept history. A job without a history comes
  // back with no samples and no findings.
  // Errors: INVALID_ARGUMENT for a negative max_samples.
  absl::StatusOr<std::vector<v1::JobUsage>> GetJobUsage(
      const std::vector<UsageJobLabel>& jobs, int max_samples) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The latest usage of one task.
  struct TaskLive {
    v1::TaskUsage usage;
    // Largest per-process GPU memory seen, bytes (0: not measured).
    int64_t peak_gpu_memory_bytes = 0;
  };
  // (job id, attempt, rank).
  using TaskKey = std::tuple<int64_t, int, int>;

  // The sample of `job` at `now_ms`; nullopt when it has no live task on a
  // GPU its node reports.
  std::optional<v1::JobUsageSample> SampleJobLocked(int64_t now_ms,
                                                    const UsageJob& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const UsageHistoryConfig config_;
  mutable absl::Mutex mu_;
  std::map<TaskKey, TaskLive> task_usage_ ABSL_GUARDED_BY(mu_);
  // Per-job samples, oldest first.
  absl::flat_hash_map<int64_t, std::deque<v1::JobUsageSample>> history_
      ABSL_GUARDED_BY(mu_);
  // Jobs with a history that the last Sample() did not sample, oldest first.
  std::deque<int64_t> finished_history_ ABSL_GUARDED_BY(mu_);
  // Used GPU-seconds per (job id, attempt), per node, since the attempt's
  // first sample (TakeUsedGpuSeconds); forgotten with inactive jobs.
  std::map<std::pair<int64_t, int>, std::map<std::string, double>> used_ ABSL_GUARDED_BY(mu_);
  // Reported throughput per job, samples/s.
  absl::flat_hash_map<int64_t, double> throughput_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_USAGE_HISTORY_H_
