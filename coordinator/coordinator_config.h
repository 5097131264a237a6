#ifndef TRAINCTL_COORDINATOR_COORDINATOR_CONFIG_H_
#define TRAINCTL_COORDINATOR_COORDINATOR_CONFIG_H_

// The coordinator's settings (trainctl-coordinator's flags, coordinator/main.cc)
// and the hooks metrics observe it through. A value: copied into the
// Coordinator at creation and never changed there.

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "coordinator/diagnosis.h"
#include "coordinator/preflight.h"
#include "coordinator/sched/packer.h"
#include "coordinator/sched/scheduler.h"
#include "trainctl/v1/accounting.pb.h"

namespace trainctl::coord {

// What may be queued and stored per user, per cluster and per job. A submit
// or report that would go over a limit is RESOURCE_EXHAUSTED naming it, and
// nothing of it is stored.
struct AdmissionLimits {
  // Jobs one user may have PENDING (held ones included) at once, and jobs
  // the whole cluster may have PENDING; 0: no limit (Slurm's MaxSubmitJobs
  // per association and MaxJobCount, whose default is 10,000). Defaults:
  // 50,000 per user (five full job arrays), 500,000 in all, about 0.7 KiB of
  // the coordinator's memory each.
  int64_t max_pending_jobs_per_user = 50'000;
  int64_t max_pending_jobs = 500'000;
  // Metric points a job may store (ReportMetrics), all keys and attempts
  // together. 100,000 points is a point every step for 100k steps, about
  // 5 MB of SQLite rows per job; past it reports are refused (never
  // silently dropped).
  int64_t max_metric_points_per_job = 100000;
};

// Per-job utilization history (GetJobUsage, Measurements): every
// sample_period Tick() records one sample per job with live tasks from the
// latest heartbeats, keeping the newest history_samples (default 2 s x 300 =
// the last 10 minutes). Histories of ended jobs are kept for the newest
// finished_jobs of them.
struct UsageConfig {
  absl::Duration sample_period = absl::Seconds(2);
  int history_samples = 300;
  int finished_jobs = 256;
};

// Optional observers for metrics (empty: not called). They run outside the
// coordinator's lock, on the thread of the call that caused them, so they
// must be thread-safe and must not call back into the Coordinator.
// Durations are measured with the injected Clock.
struct CoordinatorHooks {
  // Called after each scheduling pass that had pending jobs, with the time
  // the pass took (the scheduler's decisions and starting placed attempts).
  std::function<void(absl::Duration)> on_schedule_pass;
  // Called once per rendezvous group when rank 0 first publishes its id,
  // with the time from the group's opening (the attempt was placed) to the
  // publish. Groups restored from the store at start-up are not measured.
  std::function<void(absl::Duration)> on_rendezvous_published;
  // Called once per job attempt placed (PENDING -> SCHEDULED) with the time
  // it waited in the queue: from its submit, or for a later attempt from the
  // end of the one before (a restart, a preemption, a failed pre-flight).
  std::function<void(absl::Duration)> on_job_placed;
  // Called once per attempt that ended (SCHEDULED or RUNNING -> anything but
  // RUNNING), after the Coordinator's lock is released, with its accounting
  // record (UsageRecordOf: times, GPUs, allocated and used GPU-seconds).
  // trainctl-coordinator hands it to Accounting::Record.
  std::function<void(const v1::UsageRecord&)> on_attempt_ended;
};

// Pre-flight of gangs (preflight.h, docs/preflight.md). A gang whose
// spec.preflight is ON, or AUTO with auto_enabled set and a placement on more
// than one node, runs the agents' probe (a short NCCL all-reduce on the
// reserved GPUs) before its processes start.
struct PreflightConfig {
  // Off by default in this struct so embedders and tests opt in; the daemon
  // turns it on (--preflight-auto, default true).
  bool auto_enabled = false;
  // A probe rank without a result this long after the pre-flight began is
  // hung (MISSING): its node is excluded. The probes themselves give up
  // (TIMED_OUT) after 3/4 of it, so healthy ranks waiting on a hung peer
  // report first.
  absl::Duration timeout = absl::Seconds(60);
  PreflightPolicy policy;
  // Failed pre-flights after which the job FAILS (each failed one excludes
  // nodes and places the gang again).
  int max_failures = 3;
  // The probe's all-reduce: buffer bytes, timed and untimed iterations.
  // 64 MiB x 10 takes well under a second on NVLink or 100 Gb/s networks
  // and is large enough to reach most of the bus bandwidth (nccl-tests
  // curves flatten from about 32 MiB).
  int64_t bytes = int64_t{64} << 20;
  int iters = 10;
  int warmup = 3;
  // A node that pre-flights excluded this many times within
  // auto_drain_window is drained automatically, with the count and the last
  // verdict as the reason (node_admin.h AutoDrain); 0 turns it off. Three in
  // an hour: one exclusion may be the job's own fault (a wrong NCCL setting),
  // three jobs blaming the same node within the hour rarely are.
  int auto_drain_exclusions = 3;
  absl::Duration auto_drain_window = absl::Hours(1);
};

struct CoordinatorConfig {
  // A node without a heartbeat for this long is lost and its tasks fail.
  absl::Duration node_timeout = absl::Seconds(10);
  // Heartbeat period agents are told to use.
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // SIGTERM-to-SIGKILL grace when tasks are stopped.
  absl::Duration stop_grace = absl::Seconds(10);
  // How long a log read waits for the agent's answer.
  absl::Duration log_read_timeout = absl::Seconds(10);
  // Address tasks use to reach the coordinator (TRAINCTL_COORDINATOR).
  std::string advertise_address = "127.0.0.1:50051";
  sched::SchedulerConfig scheduler;
  // Shared directory (the same path on every node, e.g. an NFS mount) under
  // which each job gets TRAINCTL_CHECKPOINT_DIR = <checkpoint_root>/<job id>,
  // the same for all its attempts; empty: no checkpoint directory. Fixed at
  // submit (Job.checkpoint_dir), so changing the flag later leaves older jobs
  // where they were.
  std::string checkpoint_root;
  AdmissionLimits limits;
  // Run each task as its job's user (StartTask.run_as_user = JobSpec.user):
  // on with authentication (--tokens-file), when the user is who the token
  // says; off without it, when the user is only the client's claim and tasks
  // run as the agents' own account.
  bool run_jobs_as_user = false;
  // Jobs of "root" (uid 0 on the nodes) may run (--allow-root-jobs); off:
  // such a submit is PERMISSION_DENIED, and an agent refuses a job user that
  // maps to uid 0.
  bool allow_root_jobs = false;
  // Every job's tasks also get Slurm's srun variables (--slurm-env; one
  // job's: JobSpec.slurm_env). coordinator/launch_env.h lists them.
  bool slurm_env = false;
  UsageConfig usage;
  // Auto-packing of experiments that opt in (JobSpec.auto_pack).
  sched::PackerConfig packer;
  DiagnosisConfig diagnosis;
  CoordinatorHooks hooks;
  // Threads that answer the waiting ranks when rank 0 publishes its
  // ncclUniqueId (RendezvousTable's fanout_threads): 0 means 4, or the
  // host's hardware threads where fewer; 1 answers them all on the
  // publishing call.
  int rendezvous_fanout_threads = 0;
  PreflightConfig preflight;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_COORDINATOR_CONFIG_H_
