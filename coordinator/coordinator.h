#ifndef TRAINCTL_COORDINATOR_COORDINATOR_H_
#define TRAINCTL_COORDINATOR_COORDINATOR_H_

// The coordinator's core: cluster state (nodes, jobs, tasks), the job life
// cycle, scheduling on every change, the NCCL rendezvous. No gRPC, no threads
// of its own, no system clock: the transport (grpc_service.h) calls in, agents
// are reached through AgentConnection, time comes from a Clock and advances
// through Tick().
//
// Scheduling passes are coalesced: a change asks for a pass over the pending
// queue at the end of its call; calls that arrive together (queued on the
// lock) share one pass, and each call returns once the pass covering it has
// run (RequestScheduleLocked).
//
// A job's states (docs/design.md §2; the edge tables of jobs, tasks and
// nodes are in state_machine.h). Every change goes through one function per
// machine (TransitionLocked, TaskToLocked, NodeToLocked); an edge not in the
// table changes nothing and is reported (logged as an error, counted in
// Stats().illegal_transitions, fatal where assertions are on):
//
//   PENDING ──placed──▶ SCHEDULED ──all ranks started──▶ RUNNING ──all exit 0──▶ SUCCEEDED
//    ▲  │ └─infeasible─▶ FAILED      │                      │
//    │  └──cancel──▶ CANCELLED ◀─────┴──────cancel──────────┤
//    │                               │ a rank fails / its node is lost / a start fails
//    │                               ▼                      ▼
//    └──── restarts left: new attempt ◀──────── attempt failed ──▶ FAILED (final)
//    ▲                                                      │ past --time-limit ──▶ FAILED (TIMEOUT)
//    └──── preempted (SCHEDULED/RUNNING, preemptible): new attempt; not a restart
//
// Preemption: when the scheduler decides that a job needs running
// preemptible jobs' GPUs (sched::Outcome::kPreempting), each victim's tasks
// get SIGTERM then SIGKILL after stop_grace, and the victim goes back to
// PENDING as a new attempt with preemptions + 1 and preempted_for_job_id set:
// it is not placed again until that job is placed or gone (no ping-pong).
// The preemptor is placed by a later pass, once the victims' tasks have exited
// and freed their GPUs.
//
// Pre-flight (preflight.h, docs/preflight.md): a gang that wants one stays
// SCHEDULED while its tasks run the agents' probe (TaskRef.attempt =
// kPreflightAttemptBase + run, with their own rendezvous group and token).
// Pass: the same tasks restart as the job's own, on the same GPUs. Fail: the
// culprit nodes join Job.preflight.excluded and the job goes back to PENDING
// as a new attempt that uses up no restart; after preflight_max_failures
// failed runs it goes to FAILED. A node of the placement lost while the
// pre-flight runs aborts it (even when that node's probe had already passed):
// the gang goes back to PENDING as a new attempt, no restart used up.
//
// A node's and a task's states: state_machine.h.
//
// A task holds its GPU reservation while STARTING, RUNNING or STOPPING, also
// after its job has ended or moved to a new attempt, so GPUs are never given
// out twice while a process may still run on them.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/asha.h"
#include "coordinator/diagnosis.h"
#include "coordinator/preflight.h"
#include "coordinator/rendezvous.h"
#include "coordinator/sched/packer.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/state_machine.h"
#include "coordinator/state_store.h"
#include "coordinator/usage_history.h"
#include "trainctl/v1/preflight.pb.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/telemetry.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// The coordinator's end of one agent's stream. Send() and Close() only queue
// work (they never call back into the Coordinator), so the Coordinator calls
// them under its lock and messages to one agent keep their order. Once the
// Coordinator has returned from AgentDisconnected(node, conn) it never uses
// `conn` again. Implemented by the gRPC reactor, and by fakes in tests.
class AgentConnection {
 public:
  virtual ~AgentConnection() = default;
  // Queues `msg` for the agent (taken by value: callers done with theirs
  // move it in, sparing a copy of a StartTask and its environment).
  virtual void Send(v1::CoordinatorMessage msg) = 0;
  // Ends the stream with `status` (e.g. a newer connection of the same node
  // took over).
  virtual void Close(const absl::Status& status) = 0;
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
  // Jobs one user may have PENDING (held ones included) at once, and jobs
  // the whole cluster may have PENDING; 0: no limit. A submit that would go
  // over either is RESOURCE_EXHAUSTED naming the limit, and nothing of it is
  // stored (Slurm's MaxSubmitJobs per association and MaxJobCount, whose
  // default is 10,000). Defaults: 50,000 per user (five full job arrays),
  // 500,000 in all, about 0.7 KiB of the coordinator's memory each.
  int64_t max_pending_jobs_per_user = 50'000;
  int64_t max_pending_jobs = 500'000;
  // Run each task as its job's user (StartTask.run_as_user = JobSpec.user):
  // on with authentication (--tokens-file), when the user is who the token
  // says; off without it, when the user is only the client's claim and tasks
  // run as the agents' own account.
  bool run_jobs_as_user = false;
  // Jobs of "root" (uid 0 on the nodes) may run (--allow-root-jobs); off:
  // such a submit is PERMISSION_DENIED, and an agent refuses a job user that
  // maps to uid 0.
  bool allow_root_jobs = false;
  // Metric points a job may store (ReportMetrics), all keys and attempts
  // together. 100,000 points is a point every step for 100k steps, about
  // 5 MB of SQLite rows per job; past it reports are refused with
  // RESOURCE_EXHAUSTED (never silently dropped).
  int64_t max_metric_points_per_job = 100000;
  // Per-job utilization history (GetJobUsage): every usage_sample_period
  // Tick() records one sample per job with live tasks from the latest
  // heartbeats, keeping the newest usage_history_samples (default 2 s x 300
  // = the last 10 minutes). Histories of ended jobs are kept for the newest
  // usage_finished_jobs of them.
  absl::Duration usage_sample_period = absl::Seconds(2);
  int usage_history_samples = 300;
  int usage_finished_jobs = 256;
  // Auto-packing of experiments that opt in (JobSpec.auto_pack).
  sched::PackerConfig packer;
  DiagnosisConfig diagnosis;
  // Optional observers for metrics (empty: not called). They run outside the
  // coordinator's lock, on the thread of the call that caused them, so they
  // must be thread-safe and must not call back into the Coordinator.
  // Durations are measured with the injected Clock.
  //
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
  // Threads that answer the waiting ranks when rank 0 publishes its
  // ncclUniqueId (RendezvousTable's fanout_threads): 0 means 4, or the
  // host's hardware threads where fewer; 1 answers them all on the
  // publishing call.
  int rendezvous_fanout_threads = 0;

  // Pre-flight of gangs (preflight.h, docs/preflight.md). A gang whose
  // spec.preflight is ON, or AUTO with preflight_auto set and a placement on
  // more than one node, runs the agents' probe (a short NCCL all-reduce on
  // the reserved GPUs) before its processes start. Off by default in this
  // struct so embedders and tests opt in; the daemon turns it on
  // (--preflight-auto, default true).
  bool preflight_auto = false;
  // A probe rank without a result this long after the pre-flight began is
  // hung (MISSING): its node is excluded. The probes themselves give up
  // (TIMED_OUT) after 3/4 of it, so healthy ranks waiting on a hung peer
  // report first.
  absl::Duration preflight_timeout = absl::Seconds(60);
  PreflightPolicy preflight_policy;
  // Failed pre-flights after which the job FAILS (each failed one excludes
  // nodes and places the gang again).
  int preflight_max_failures = 3;
  // The probe's all-reduce: buffer bytes, timed and untimed iterations.
  // 64 MiB x 10 takes well under a second on NVLink or 100 Gb/s networks
  // and is large enough to reach most of the bus bandwidth (nccl-tests
  // curves flatten from about 32 MiB).
  int64_t preflight_bytes = int64_t{64} << 20;
  int preflight_iters = 10;
  int preflight_warmup = 3;
};

// One GPU as last reported by its node's heartbeat (Coordinator::Stats()).
struct GpuStats {
  std::string node;
  // True when the node is READY; a lost node's samples are stale.
  bool node_ready = false;
  int index = 0;
  std::string uuid;
  // Product name, e.g. "NVIDIA H200".
  std::string model;
  int64_t memory_used_bytes = 0;
  int64_t memory_total_bytes = 0;
  // 0-100.
  int utilization_pct = 0;
  double power_w = 0;
  int temperature_c = 0;
  // A live task (STARTING, RUNNING, STOPPING) holds a reservation on it:
  // the job's own, a pre-flight probe, or an earlier attempt's still
  // draining. A GPU shared by packed trials counts once.
  bool allocated = false;
};

// GPU use of one job that has live tasks in its current attempt.
struct JobGpuStats {
  int64_t job_id = 0;
  std::string job_name;
  // Mean utilization_pct (0-100) of the distinct GPUs its live tasks own.
  double utilization_pct = 0;
  // How many GPUs that mean is over.
  int gpus = 0;
};

// Events since this coordinator started (not loaded from the store: a new
// process, or a standby taking over, starts at 0), for Prometheus counters.
// Each only grows.
struct CoordinatorCounters {
  // Jobs accepted by SubmitJob (a retry with the same request id adds none).
  int64_t jobs_submitted = 0;
  // Jobs that reached a final state, indexed by v1::JobState (SUCCEEDED,
  // FAILED, CANCELLED; the others stay 0).
  std::array<int64_t, v1::JobState_ARRAYSIZE> jobs_finished{};
  // Job attempts placed (PENDING -> SCHEDULED), later attempts included.
  int64_t placements = 0;
  // Attempts requeued after a rank failed, a start failed or a node was
  // lost, with restarts left (JobSpec.max_restarts).
  int64_t restarts = 0;
  // Auto-packed trials requeued after a CUDA out-of-memory error (asking
  // for more memory; RequeueAfterOomLocked).
  int64_t oom_requeues = 0;
  // Running or scheduled jobs preempted for another job.
  int64_t preemptions = 0;
  // Pre-flight runs that ended, by v1::PreflightVerdict (PASSED, FAILED,
  // ABORTED; the others stay 0).
  std::array<int64_t, v1::PreflightVerdict_ARRAYSIZE> preflight_runs{};
  // Agent registrations accepted (first ones and re-registrations).
  int64_t agent_registrations = 0;
  // FetchUniqueId long-polls from ranks directly, and from node relays
  // (agents fetching once for their node's ranks: relayed_ranks set), and
  // the ranks those relays named.
  int64_t rendezvous_fetches_direct = 0;
  int64_t rendezvous_fetches_relayed = 0;
  int64_t rendezvous_ranks_relayed = 0;
};

// A read-only snapshot of the coordinator for metrics (Coordinator::Stats()).
struct CoordinatorStats {
  // Jobs per state, indexed by v1::JobState (UNSPECIFIED stays 0); counts
  // every job the coordinator knows, finished history included.
  std::array<int64_t, v1::JobState_ARRAYSIZE> jobs_by_state{};
  // Jobs whose full record is held in memory; the others (retired: final,
  // no live task, stored) are held as a summary of a few bytes and read from
  // the store on demand. Eviction happens in Tick().
  int64_t jobs_in_memory = 0;
  // Jobs waiting to be scheduled (PENDING).
  int64_t pending_jobs = 0;
  // The same by named queue (JobSpec.queue; "" counts as "default"). Queues
  // of the scheduler config with nothing pending are listed with 0.
  std::map<std::string, int64_t> pending_by_queue;
  int nodes_ready = 0;
  int nodes_lost = 0;
  // Every GPU of every known node, ordered by node name then as registered.
  std::vector<GpuStats> gpus;
  // Jobs whose current attempt has live tasks, by job id.
  std::vector<JobGpuStats> jobs;
  // State transitions of jobs, tasks or nodes the coordinator tried that
  // its state machines (state_machine.h) forbid, since start: a bug when
  // not 0 (each is logged as an error).
  int64_t illegal_transitions = 0;
  // TaskUsage samples in heartbeats ignored since start because the
  // reporting node does not run that task of the job's current attempt
  // (another node's task, an ended task, an earlier attempt, an unknown job).
  int64_t ignored_task_usage = 0;
  CoordinatorCounters counters;
};

// Thread-safe: one mutex guards all state. Callbacks passed to *Async methods
// run outside the lock, on whichever thread completes them (the caller's, an
// agent stream's, or Tick()'s).
class Coordinator {
 public:
  using JobDone = absl::AnyInvocable<void(absl::StatusOr<v1::Job>)>;
  using LogsDone = absl::AnyInvocable<void(absl::StatusOr<v1::GetLogsResponse>)>;

  // Loads the state from `store` (not owned; must outlive the Coordinator).
  // Nodes come back disconnected: each has node_timeout from now to
  // re-register before its tasks count as lost.
  // Errors: those of StateStore::Load().
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      CoordinatorConfig config, StateStore* store, const Clock* clock);

  // Waits until every write it queued is durable and every StartTask held
  // back for one has been sent (or dropped).
  ~Coordinator();

  // Waits until every write queued so far is durable and every StartTask
  // held back for one has been sent (or dropped); returns the status of the
  // last write. For tests and shutdown: agent messages are answered without
  // waiting for the disk, so a StartTask may follow HandleAgentMessage's
  // return (on the store's commit thread).
  absl::Status WaitForWrites() ABSL_LOCKS_EXCLUDED(mu_);

  // Calls that may change what can be placed (submit, cancel, agent
  // messages, registrations, Tick) blocked on the coordinator's lock right
  // now. Each such call ends with a scheduling pass over the whole pending
  // queue, unless one of these is waiting: then the pass at the end of the
  // waiting call serves both (passes are coalesced; see
  // RequestScheduleLocked). For tests and metrics; the value may be stale.
  int EventsWaitingForLock() const { return events_waiting_.load(); }

  // ------------------------------------------------------------ user API

  // Validates, stores (durably) and queues a job, then schedules. A repeated
  // non-empty `request_id` returns the job first submitted with it.
  // Errors: INVALID_ARGUMENT naming the field; UNAVAILABLE when the store
  // failed (the job is then not accepted).
  absl::StatusOr<int64_t> SubmitJob(const v1::JobSpec& spec,
                                    const std::string& request_id);

  // SubmitJob without blocking the caller: `done` gets the job id once the
  // job's write is durable (on the store's commit thread, or inline when the
  // store is synchronous or the call fails early). The gRPC layer uses this
  // so that no server thread waits for an fsync. Errors: as SubmitJob. A
  // spec with JobSpec.array is an array of its own (array_job_id = its id;
  // the cross-spec rules of SubmitJobsAsync do not apply).
  using SubmitDone = absl::AnyInvocable<void(absl::StatusOr<int64_t>) &&>;
  void SubmitJobAsync(const v1::JobSpec& spec, const std::string& request_id,
                      SubmitDone done);

  // Many jobs in one call (SubmitJobs; `trainctl sweep`, `submit --array`),
  // all or nothing: every spec is validated and checked against the cluster
  // first, then every job is queued under one commit hold, so the jobs'
  // records go to the store in one transaction (one fsync), and one
  // scheduling pass follows. `done` gets the ids, consecutive and in spec
  // order, once that write is durable. Specs with JobSpec.array form one job
  // array: array_job_id is set to the first job's id. A repeated non-empty
  // `request_id` returns the ids first given for it (it is kept on the first
  // job). Errors: INVALID_ARGUMENT naming the spec's index and field
  // ("specs[3].gpus: ...") or the array rule broken, or an empty or too long
  // (kMaxArrayTasks) list; FAILED_PRECONDITION naming the index of a job no
  // node could ever hold; PERMISSION_DENIED as SubmitJob; UNAVAILABLE when
  // the store refused or failed the write (then no job of the call is
  // accepted; with a synchronous store, records of the jobs before the
  // refused one may stay until their ids are given out again).
  using SubmitJobsDone =
      absl::AnyInvocable<void(absl::StatusOr<std::vector<int64_t>>) &&>;
  void SubmitJobsAsync(std::vector<v1::JobSpec> specs,
                       const std::string& request_id, SubmitJobsDone done);

  // A job array from one spec (SubmitJobArray; `trainctl submit --array`):
  // the jobs SubmitJobsAsync makes of one copy of `spec` per task id, with
  // JobSpec.array set (task_count = task_ids.size(), `max_running`), ids in
  // task_ids order. The spec is validated once, and its exported
  // environment is kept once, in the first job's record (the others refer to
  // it: Job.exported_env_job_id), never copied per task. Errors: as
  // SubmitJobsAsync, but INVALID_ARGUMENT names "spec.FIELD" (spec.array
  // set; any field SubmitJob refuses), "task_ids" (empty, more than
  // kMaxArrayTasks), "task_ids[i]" (negative, repeated) or "max_running"
  // (negative, or with auto-pack).
  void SubmitJobArrayAsync(v1::JobSpec spec, const std::vector<int>& task_ids,
                           int max_running, const std::string& request_id,
                           SubmitJobsDone done);

  // The job as users see it (no attempt token). A retired job is read from
  // the store. A final state is returned only once it is stored (waiting for
  // the store's commit when it is not yet), so no crash takes back an end a
  // client saw; other states are the live ones, stored or not. Errors:
  // NOT_FOUND; those of StateStore::ReadJobs; UNAVAILABLE when the final
  // state could not be stored.
  absl::StatusOr<v1::Job> GetJob(int64_t job_id) const;
  // GetJob without the wait: the live state, stored or not. For what never
  // changes (the owner, the spec), and for code on the store's callback
  // thread (a submit's `done`), where waiting for a later commit would wait
  // on itself. Errors: those of GetJob but UNAVAILABLE.
  absl::StatusOr<v1::Job> PeekJob(int64_t job_id) const;

  // Newest first; `states` empty means all; at most `limit` (0: 1000).
  // Retired jobs (IsRetired) are filtered on their in-memory summary and only
  // the ones returned are read from the store, outside the lock; one that
  // cannot be read is left out (logged).
  // A non-empty `sweep_id` keeps only that sweep's trials (looked up in an
  // index, so a long history of other jobs costs nothing); an unknown sweep
  // gives an empty list. A non-empty `user` keeps only jobs whose spec.user
  // is that user (the user API's view for non-admins); `limit` counts the
  // jobs kept. Final states are returned once stored, as by GetJob (a
  // failed write is logged).
  // A non-zero `array_job_id` keeps only that job array's tasks (the ids
  // from array_job_id to array_job_id + task_count - 1, which a job array
  // always has); an unknown array gives an empty list.
  std::vector<v1::Job> ListJobs(const std::vector<v1::JobState>& states,
                                int limit,
                                const std::string& sweep_id = "",
                                const std::string& user = "",
                                int64_t array_job_id = 0) const;

  // Cancels a job that is not final: its live tasks get SIGTERM, then SIGKILL
  // after the grace period. The cancel is written to the store before the
  // reply; a failed write is logged (the cancel still holds in memory).
  // Errors: NOT_FOUND; FAILED_PRECONDITION naming the final state (and its
  // reason) when the job has already ended: nothing was cancelled.
  absl::StatusOr<v1::Job> CancelJob(int64_t job_id);

  // Calls `done` with the job once it is final and that state is stored (a
  // crash never takes back an end a waiter saw), or at `timeout` from now with
  // its current state (the caller checks the state). Errors: NOT_FOUND;
  // UNAVAILABLE when the final state could not be stored.
  void WaitJobAsync(int64_t job_id, absl::Duration timeout, JobDone done);

  // Every node with its GPUs and the tasks placed on each GPU.
  std::vector<v1::NodeView> ListNodes() const;

  // Why a job waits (`trainctl why`): for a PENDING job, a scheduling pass
  // over the cluster as it is now explains it: quota, what each node lacks,
  // the reservation it waits behind and its estimated start. For any other
  // state, its state and reason. Cost: one scheduling pass (no change is
  // made). Errors: NOT_FOUND.
  absl::StatusOr<v1::WhyJobResponse> WhyJob(int64_t job_id) const;

  // Reads a rank's log of the job's current attempt from its agent.
  // Errors: NOT_FOUND (job, or rank not placed); FAILED_PRECONDITION when the
  // node is not connected (the message names the path on that host);
  // DEADLINE_EXCEEDED when the agent does not answer in log_read_timeout.
  void GetLogsAsync(int64_t job_id, int rank, int64_t offset, int max_bytes,
                    LogsDone done);

  // ------------------------------------------------------------ metrics

  // Most points one ReportMetrics call may carry.
  static constexpr int kMaxPointsPerReport = 1000;

  // Stores the points a process of job req.job_id reports, stamped with the
  // receive time, attempt and rank; durable (one store transaction for the
  // whole report) before it returns. Stored outside the coordinator's lock,
  // so metric writes never hold up scheduling or agents.
  // Errors: INVALID_ARGUMENT naming the field (no points or more than
  // kMaxPointsPerReport, a key not of 1-128 [A-Za-z0-9_.:/-], a value that is
  // not finite, a negative step, a negative `samples_per_s`: CheckMetricPoint
  // in common/metric_rules.h; a rank outside the attempt); UNAUTHENTICATED
  // when req.token is empty; NOT_FOUND for an unknown job; PERMISSION_DENIED
  // when req.attempt is not the job's current attempt or the token is not its
  // token; RESOURCE_EXHAUSTED when the job would pass
  // max_metric_points_per_job; UNAVAILABLE when the store failed (nothing of
  // the report is stored).
  // Early stopping: when the job is a sweep trial with spec.early_stop and a
  // point of its metric reaches a new rung, the ASHA rule (asha.h) may stop
  // the trial: it is cancelled, its reason saying why. The report itself
  // still succeeds.
  absl::StatusOr<v1::ReportMetricsResponse> ReportMetrics(
      const v1::ReportMetricsRequest& req);

  // The job's metric series, ordered by key, with last/min/max per key; the
  // points unless req.summary_only. Cost: reads the job's points (at most
  // max_metric_points_per_job) from the store, outside the lock.
  // Errors: NOT_FOUND for an unknown job; INVALID_ARGUMENT for a malformed
  // key; those of StateStore::ReadMetrics.
  absl::StatusOr<v1::GetMetricsResponse> GetMetrics(
      const v1::GetMetricsRequest& req) const;

  // ------------------------------------------------------------ agents

  // First message of an agent's stream: records the node (inventory,
  // address), marks it READY and reconciles its running tasks: a task the
  // coordinator does not expect there is stopped; a task it expects but the
  // agent does not report is lost. An older connection of the same node is
  // closed. On success the first message sent on `conn` is the RegisterAck
  // (lease_ms = node_timeout), before any StartTask or StopTask.
  // A task reported running on a GPU that is now gone or smaller than what is
  // reserved on it is stopped and counts as lost.
  // A name held by another agent that is still connected and heartbeating
  // is refused; the same agent instance (RegisterNode.agent_instance_id)
  // reconnecting takes its node back, closing its older stream.
  // A GPU (by UUID) offered by another node that is not lost is refused:
  // two agents on one host offering the same GPU would have it given to two
  // jobs.
  // Errors: INVALID_ARGUMENT for a bad inventory (empty name, duplicate GPU
  // index or UUID, bad port range); ALREADY_EXISTS when another connected
  // agent holds the node name, or another node whose agent is connected
  // offers one of its GPUs (the message names that node and its address; the
  // agent exits); UNAVAILABLE when the GPU's other node has lost its agent
  // but is not yet lost (the agent registers again later), or when the store
  // failed. Nothing is sent on `conn` and nothing changes then.
  absl::Status RegisterAgent(const v1::RegisterNode& reg, AgentConnection* conn);

  // The stream of `conn` ended. The node stays READY until its heartbeats
  // time out (the agent may reconnect).
  void AgentDisconnected(const std::string& node, AgentConnection* conn);

  // A heartbeat, task status or log chunk from a registered agent.
  // Everything is attributed to `node`: a task status or log chunk about
  // another node's task changes nothing. A heartbeat of an agent that
  // registered with `fences` is answered with a LeaseGrant of node_timeout
  // (the agent kills its tasks when its lease ends unrenewed, so a cut-off
  // host keeps no rank that was restarted elsewhere).
  // Errors: FAILED_PRECONDITION when `conn` is not the node's current
  // connection; INVALID_ARGUMENT for a malformed message; PERMISSION_DENIED
  // for a log chunk answering a read sent to another node.
  absl::Status HandleAgentMessage(const std::string& node, AgentConnection* conn,
                                  const v1::AgentMessage& msg);

  // ------------------------------------------------------------ rendezvous

  // See RendezvousTable::Publish.
  absl::Status PublishUniqueId(const v1::PublishUniqueIdRequest& req);
  // See RendezvousTable::FetchAsync; the timeout is req.timeout_ms (0:
  // 120 s, at most 3600 s).
  void FetchUniqueIdAsync(const v1::FetchUniqueIdRequest& req,
                          RendezvousTable::FetchDone done);
  // See RendezvousTable::FetchIdsAsync (relayed_ranks, id_count,
  // arrivals_only of `req`); `done` gets all the attempt's ids. Counts the
  // call in CoordinatorCounters (direct or relayed).
  void FetchUniqueIdsAsync(const v1::FetchUniqueIdRequest& req,
                           RendezvousTable::FetchIdsDone done);

  // Sets TRAINCTL_COORDINATOR for tasks started from now on (the server knows
  // its port only once bound).
  void SetAdvertiseAddress(std::string address);

  // ------------------------------------------------------------ telemetry

  // Utilization history and diagnosis of `job_ids` (empty: every job that
  // has a history), the newest `max_samples` samples each (0: all). A job
  // that exists but has no samples yet comes back with none. With `job_ids`
  // empty, a non-empty `user` keeps only jobs whose spec.user is that user
  // (the user API's view for non-admins); requested ids are not filtered:
  // the caller checks access to each (the gRPC layer does, as for GetJob).
  // The histories are copied and diagnosed outside the coordinator's lock.
  // Errors: NOT_FOUND naming a requested job that does not exist;
  // INVALID_ARGUMENT for a negative max_samples.
  absl::StatusOr<std::vector<v1::JobUsage>> GetJobUsage(
      const std::vector<int64_t>& job_ids, int max_samples,
      const std::string& user = "") const;

  // The latest throughput a job reports, samples/s: ReportMetrics forwards
  // its `samples_per_s` points (kThroughputMetricKey, common/metric_rules.h).
  // The packer compares the sum over the trials of a GPU as trials are added
  // (back-off on flat or falling throughput).
  // Errors: NOT_FOUND for an unknown job; INVALID_ARGUMENT for a negative or
  // non-finite value.
  absl::Status ReportThroughput(int64_t job_id, double samples_per_s);

  // ------------------------------------------------------------ time

  // Applies every timeout due at clock->Now(): lost nodes (their tasks fail),
  // rendezvous and wait deadlines, unanswered log reads; records a usage
  // sample per running job every usage_sample_period and then retries
  // pending auto-packed trials (their admission depends on measurements);
  // drops the records of jobs that retired (final, no live task, stored)
  // from memory, keeping a summary (reads then go to the store). The server
  // calls it about every 100 ms; tests call it after advancing a FakeClock.
  void Tick();

  // ------------------------------------------------------------ metrics

  // A snapshot for metrics. Cost: O(states + nodes + GPUs + active jobs'
  // and draining tasks); the finished history is not scanned (the per-state job counts
  // are kept up to date as jobs change). No errors.
  CoordinatorStats Stats() const;

 private:
  struct Waiter {
    absl::Time deadline;
    JobDone done;
  };
  struct LogRead {
    absl::Time deadline;
    int64_t job_id;
    int rank;
    LogsDone done;
    // The node asked; only its answer is taken.
    std::string node;
  };
  struct NodeEntry {
    v1::Node node;
    AgentConnection* conn = nullptr;
    absl::Time last_heartbeat;
    // Round-robin cursor in the node's MASTER_PORT range.
    int next_port = 0;
    // GPU index -> utilization smoothed over heartbeats (each new sample
    // weighs half), 0-100; what the packer looks at.
    absl::flat_hash_map<int, double> util_avg;
    // GPU index -> GPM counters smoothed the same way, percent 0-100; only
    // GPUs whose last heartbeat carried GPM (a GPU that stops reporting GPM
    // is dropped and judged by utilization).
    struct GpmAvg {
      double sm_active = 0;
      double sm_occupancy = 0;
      double dram_bw = 0;
    };
    absl::flat_hash_map<int, GpmAvg> gpm_avg;
    // The agent fences itself (RegisterNode.fences): each heartbeat is
    // answered with a LeaseGrant.
    bool fences = false;
    // RegisterNode.agent_instance_id of the agent holding the node.
    std::string instance_id;
    // Processes the agent reported running at registration that hold no
    // reservation here (an unknown job, an earlier attempt, an aborted
    // pre-flight's probe, a task already taken for ended) and were told to
    // stop: which GPUs they hold is unknown, so the node gets no placement
    // until the agent reports each one's exit (at most stop_grace). Rebuilt
    // at every registration; cleared when the node is lost.
    absl::flat_hash_set<std::tuple<int64_t, int, int>> stopping_unplaced;
  };
  // A connected holder of a node name counts as gone after this many
  // heartbeat intervals without a heartbeat (its host died without closing
  // the stream): a new agent may then take the name over.
  static constexpr int kHolderSilentHeartbeats = 3;
  // OK when `reg` may take node reg.node.name: nobody holds it, the holder's
  // stream is gone or is `conn`, the holder is the same agent instance
  // (RegisterNode.agent_instance_id), or it has been silent for
  // kHolderSilentHeartbeats heartbeat intervals. Errors: ALREADY_EXISTS
  // naming the holder's address, otherwise.
  // OK when no other node that is not lost offers a GPU with a UUID of
  // reg.node's (UUIDs are the same for a GPU whichever agent finds it).
  // Errors: ALREADY_EXISTS naming the other node and GPU when that node's
  // agent is connected; UNAVAILABLE when it is disconnected but not yet lost.
  // The job as GetJob shows it, now; `durable_at` gets the ticket to wait
  // for when its state is final (else it is left as it is).
  absl::StatusOr<v1::Job> JobNow(int64_t job_id, WriteTicket* durable_at) const
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status CheckGpusFreeLocked(const v1::RegisterNode& reg) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckNodeNameFreeLocked(const v1::RegisterNode& reg,
                                       AgentConnection* conn) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task of an earlier attempt of a job that still holds GPUs.
  struct DrainingTask {
    int64_t job_id;
    int attempt;
    v1::Task task;
    // The placement_seq of its attempt.
    int64_t placement_seq = 0;
  };
  // Callbacks collected under the lock, run after it is released.
  using Deferred = std::vector<absl::AnyInvocable<void() &&>>;

  Coordinator(CoordinatorConfig config, StateStore* store, const Clock* clock);
  absl::Status LoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After loading: while the stored records reserve more of a GPU than it
  // has (records left stale by failed store writes), the task of the
  // earliest placement there is taken as ended (LOST, "its end was not
  // stored") and its job goes on as after any lost task. Returns how many
  // tasks were resolved so.
  int ResolveStaleReservationsLocked(Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `specs`, submitted now, keep the PENDING jobs within
  // CoordinatorConfig.max_pending_jobs and, for each user, within
  // max_pending_jobs_per_user. Errors: RESOURCE_EXHAUSTED naming the limit,
  // its flag, the jobs pending and the jobs asked for.
  absl::Status PendingLimitLocked(const std::vector<v1::JobSpec>& specs) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The one place a job changes state (state_machine.h's job table) and
  // where the effects of an edge happen (attempt records, rendezvous, a new
  // attempt, waiters). An edge not in the table changes nothing and is
  // reported (ReportIllegalTransitionLocked); returns whether the job moved.
  bool TransitionLocked(v1::Job& job, v1::JobState to, absl::string_view reason,
                        Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One edge of a job's state machine, as its listeners see it: the job
  // already in state `to` (reason, start and end times set).
  struct JobEdge {
    v1::Job& job;
    v1::JobState from;
    v1::JobState to;
    absl::string_view reason;
    // The coordinator's clock at the edge, Unix ms.
    int64_t now_ms;
    Deferred& deferred;
  };
  // An effect of job edges (attempt records, the rendezvous, a new attempt's
  // draining tasks, the pre-flight, waiters); called under mu_ by
  // TransitionLocked for every edge, in registration order.
  using JobEdgeListener = std::function<void(const JobEdge&)>;
  // Registers the parts' listeners (at construction).
  void AddJobEdgeListenersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The one place a task of `job` changes state (state_machine.h's task
  // table); an illegal edge changes nothing and is reported. Returns whether
  // the task moved.
  bool TaskToLocked(const v1::Job& job, v1::Task& task, v1::TaskState to)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The same for a node (state_machine.h's node table).
  bool NodeToLocked(NodeEntry& node, v1::NodeState to) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An edge the coordinator itself tried that its state machines forbid: a
  // bug. Logged as an error, counted in Stats().illegal_transitions (the
  // cluster simulation and the request fuzzer fail on it), and fatal in
  // builds with assertions.
  void ReportIllegalTransitionLocked(const absl::Status& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Persists `job`; logs (does not return) a store failure after the fact
  // (only submit and cancel can refuse the user). `lazily`: a change whose
  // loss in a crash the next agent registration repairs (a task's RUNNING):
  // the write rides with the next commit (StateStore::EnqueuePutJobLazily)
  // instead of costing one of its own.
  void PersistLocked(const v1::Job& job, bool lazily = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps active_ in step with `job` (called on every job change).
  void TrackLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ids of active_ (a copy, for loops that change jobs).
  std::vector<int64_t> ActiveIdsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls fn(job) for every active job in id order, walking active_ and
  // jobs_ side by side (both are in id order) instead of a lookup per id: a
  // scheduling pass visits every active job several times (snapshot, queue,
  // ports, packer), and at 100,000 pending jobs the lookups were a large
  // part of its cost. fn must not add or remove jobs.
  template <typename Fn>
  void ForEachActiveLocked(Fn fn) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    WalkActive(active_, jobs_, fn);
  }
  template <typename Fn>
  void ForEachActiveMutableLocked(Fn fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    WalkActive(active_, jobs_, fn);
  }
  // The walk of ForEachActive*Locked over `jobs` (const or not).
  template <typename Ids, typename Jobs, typename Fn>
  static void WalkActive(const Ids& active, Jobs& jobs, Fn& fn) {
    auto it = jobs.begin();
    for (int64_t id : active) {
      // Usually the next job; a few retired ones may lie between.
      for (int step = 0; step < 8 && it != jobs.end() && it->first < id; ++step) {
        ++it;
      }
      if (it == jobs.end() || it->first < id) it = jobs.lower_bound(id);
      fn(it != jobs.end() && it->first == id ? it->second : jobs.at(id));
    }
  }
  void ScheduleLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One pass of ScheduleLocked: the scheduler's decisions on the pending
  // queue, then the packer's. Returns whether another pass is due (a job
  // array was cut shorter than what the pass could place).
  bool SchedulePassLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Coalesced scheduling passes. An event that may change what can be placed
  // (submit, cancel, task exit, node change, time limit...) calls this at the
  // end of its locked section instead of ScheduleLocked(). The pass runs
  // there and then (same lock, same commit), unless another event is already
  // waiting for mu_ (events_waiting_): then the pass at the end of that
  // event's section serves both, so a burst of N events costs one pass, not
  // N passes over the whole queue. A burst is cut after
  // kMaxCoalescedEvents events (a steady stream of events never starves the
  // queue). Returns true when the pass was left to another event: the
  // caller must call AwaitSchedulePass() after releasing mu_.
  bool RequestScheduleLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SubmitJobAsync (one spec, `batch` false: errors name "spec.field") and
  // SubmitJobsAsync (`batch` true: "specs[i].field").
  // `exported_from_first`: specs after the first carry no exported
  // environment of their own and export the first's (SubmitJobArrayAsync);
  // otherwise any that carry one equal to the first's are made to share it.
  void SubmitBatchAsync(std::vector<v1::JobSpec> specs,
                        const std::string& request_id, bool batch,
                        SubmitJobsDone done, bool exported_from_first = false)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks (without holding mu_) until the pass an earlier
  // RequestScheduleLocked() left to another event has run; runs it itself
  // once no event waits for mu_. So when a public method returns, the pass
  // covering its event has run, as if it had run inline.
  void AwaitSchedulePass() ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the pass requested by earlier events unless other events still
  // wait for mu_ (then the last of them runs it), within the bounds above.
  // Every event's section ends with it (or with RequestScheduleLocked).
  // Returns false when a requested pass is still left to run.
  bool ServeScheduleLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // AwaitSchedulePass()'s condition: the requested pass ran, or no event
  // waits that would run it.
  bool SchedulePassDueLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Clears the request and runs the pass it asked for.
  void RunRequestedPassLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes mu_ for an event (see RequestScheduleLocked), counted in
  // events_waiting_ while it blocks.
  class ABSL_SCOPED_LOCKABLE EventLock {
   public:
    explicit EventLock(Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_);
    ~EventLock() ABSL_UNLOCK_FUNCTION();
    EventLock(const EventLock&) = delete;
    EventLock& operator=(const EventLock&) = delete;

   private:
    Coordinator* const c_;
  };
  // The pending tasks of one job array or sweep left out of a scheduling
  // pass by PendingQueueLocked (`trimmed`, in id order), and the last task
  // of it the pass does see (`last_included`).
  struct TrimmedArray {
    int64_t last_included = 0;
    // How many such tasks the queue may hold (see PendingQueueLocked).
    int cap = 0;
    std::vector<int64_t> trimmed;
  };
  // Every PENDING job as the scheduler sees it. With `trimmed`, the
  // first-attempt tasks of a job array (or trials of a sweep) that make the
  // same request as its first pending one (SameSchedulingRequest) are cut
  // after as many as a pass could place or preempt for, plus one: one per
  // schedulable GPU for whole-GPU tasks, one per T GPUs for gangs of T,
  // max_tasks_per_gpu per GPU for shares. Those left out are listed by the
  // array's id (a negative key for a sweep). Identical requests are decided
  // in id order, so the pass decides as it would on the full queue, and a
  // 10,000-task array costs a pass a few dozen requests.
  std::vector<sched::JobRequest> PendingQueueLocked(
      absl::flat_hash_map<int64_t, TrimmedArray>* trimmed = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Free capacity per GPU, and the jobs holding GPUs (their time limits, for
  // the reservation's ETA; owners, for quotas and fair share).
  // The scheduler's view, rebuilt in place in snapshot_cache_ (valid until
  // the next call).
  const sched::ClusterSnapshot& SnapshotLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops `victim`'s live tasks (grace period) and requeues it as a new
  // attempt, preempted for job `by`.
  void PreemptLocked(v1::Job& victim, int64_t by, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Marks lost every READY node without a heartbeat for node_timeout at
  // `now` (their tasks fail). Returns whether any was.
  bool ExpireStaleNodesLocked(absl::Time now, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every WaitJobAsync whose deadline is at or before `now` with
  // the job as it is.
  void ExpireWaitersLocked(absl::Time now, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops and fails (TIMEOUT) every running job past its time limit at
  // `now`. Returns whether any was.
  bool EnforceTimeLimitsLocked(absl::Time now, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places job's attempt (SCHEDULED, tasks STARTING) and queues its write;
  // the StartTask messages go out from `deferred` only once that write is
  // durable (a task never runs on the strength of state a crash can lose).
  void StartAttemptLocked(v1::Job& job, const sched::Placement& placement,
                          Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends held-back StartTask messages of job `job_id`'s attempt `attempt`
  // (placement `placement_seq`) whose task is still STARTING: a cancel, a
  // requeue or a lost node in the meantime drops them. `stored` is the status
  // of the write that placed the attempt; on error nothing is sent.
  void SendStartsWhenStored(int64_t job_id, int attempt, int64_t placement_seq,
                            std::vector<v1::CoordinatorMessage> starts,
                            absl::Status stored) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits (without mu_) until the write `ticket` is durable. Errors:
  // UNAVAILABLE when it failed.
  absl::Status WaitStored(WriteTicket ticket) const ABSL_LOCKS_EXCLUDED(mu_);
  // The ticket of the latest write queued (last_ticket_), read under mu_.
  WriteTicket LastTicket() const ABSL_LOCKS_EXCLUDED(mu_);
  // Calls `done(job)` once the write `ticket` is durable (inline when it is
  // already; else on the store's commit thread), or UNAVAILABLE when it
  // failed. For answers that show a final state (WaitJobAsync).
  void AnswerWhenStored(WriteTicket ticket, absl::StatusOr<v1::Job> job,
                        JobDone done) const ABSL_LOCKS_EXCLUDED(mu_);
  // Queues `job`'s write (StateStore::EnqueuePutJob, or EnqueuePutJobLazily
  // when `lazily`) and returns its status; the ticket goes into last_ticket_.
  absl::Status EnqueueJobLocked(const v1::Job& job, bool lazily = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int AllocatePortLocked(NodeEntry& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The host a node's MASTER_PORTs are counted on: its address, or its name
  // when it has none (or is unknown; then the reference is to `node`).
  // Agents sharing a host share its ports.
  const std::string& PortHostLocked(const std::string& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // MASTER_PORTs held by jobs with live tasks, by the host of rank 0's node
  // (PortHostLocked; only `only_host`'s when not null). O(active jobs).
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> PortsInUseLocked(
      const std::string* only_host) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task of the current attempt ended or could not start; decides the
  // attempt's fate.
  void OnTaskEndedLocked(v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the current attempt: stops live tasks, then restarts or fails.
  void FailAttemptLocked(v1::Job& job, const std::string& why, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopTaskLocked(const v1::Job& job, v1::Task& task)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLocked(const std::string& node, v1::CoordinatorMessage msg)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After a re-registration: tasks on a GPU that is gone or now smaller than
  // what is reserved on it are stopped and count as lost, so reservations
  // never exceed a GPU's memory.
  void StopTasksThatNoLongerFitLocked(NodeEntry& e, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkNodeLostLocked(NodeEntry& node, const std::string& why,
                          Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleTaskStatusLocked(const std::string& node, const v1::TaskStatus& st,
                              Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes waiters of a job that just became final.
  void NotifyFinalLocked(const v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands usage_ the TaskUsage samples of heartbeat `hb` for tasks `node`
  // runs: a live task of that rank in its job's current attempt, placed on
  // `node`. Any other sample is ignored (a node never speaks for another
  // node's task; a running maximum like the peak memory would keep a forged
  // value for good), counted in ignored_task_usage_ and logged once per
  // heartbeat.
  void RecordTaskUsageLocked(const std::string& node, const v1::Heartbeat& hb)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands usage_ the live tasks of every active job for one sample (Tick()),
  // then gives the packer the throughput of GPUs whose trials all report.
  void SampleUsageLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places pending auto-packed trials through the packer.
  void PackPendingLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An auto-packed trial's task ran out of GPU memory: requeues the job with
  // a larger memory request and caps its GPU. False when it already had the
  // whole GPU (the attempt then fails as any other).
  bool RequeueAfterOomLocked(v1::Job& job, const v1::Task& task,
                             Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Live auto-packed tasks on GPU `gpu` of `node`.
  // Every schedulable GPU as the packer sees it at `now_ms` (Unix ms): its
  // measurements (smoothed utilization and GPM counters), other jobs'
  // reservations, and the auto-packed trials on it.
  std::vector<sched::PackGpu> PackGpusLocked(int64_t now_ms) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int AutoPackedOnGpuLocked(const std::string& node, int gpu) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static v1::Job Redacted(const v1::Job& job);
  // Redacted, with the running attempt's GPU-hours counted up to now and
  // the job's stored metric points.
  v1::Job ForUserLocked(const v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // GPUs the current attempt's tasks hold (AttemptRecord.gpus).
  double AttemptGpusLocked(const v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Experiment record: opens an AttemptRecord when an attempt is placed and
  // closes it (outcome, ranks, GPU-hours) when the attempt ends.
  void RecordAttemptLocked(v1::Job& job, v1::JobState from, v1::JobState to,
                           int64_t now_ms) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void RunDeferred(Deferred& deferred);
  // The job `id`: from jobs_, or for a retired job its record read from the
  // store into `*scratch`. Errors: NOT_FOUND; those of StateStore::ReadJobs
  // (DATA_LOSS also when a retired job's record is missing).
  absl::StatusOr<const v1::Job*> LookupLocked(int64_t id, v1::Job* scratch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether job `id` exists (in memory or retired).
  bool KnownLocked(int64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The exported environment `job` launches with: its own
  // spec.exported_env, or the one it shares (Job.exported_env_job_id) from
  // shared_envs_. Null only when a shared one is missing from memory, which
  // LoadLocked and the submit path rule out.
  const google::protobuf::Map<std::string, std::string>* ExportedEnvLocked(
      const v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Counts `job` (just put into jobs_) as a user of the environment it
  // shares, if any. `Release...` undoes it as the job leaves jobs_, dropping
  // the environment with its last user.
  void HoldSharedEnvLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseSharedEnvLocked(const v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The exported environment stored in job `holder`'s record (in memory or
  // read from the store). Errors: DATA_LOSS when the record cannot be read
  // (records are never deleted).
  absl::StatusOr<google::protobuf::Map<std::string, std::string>> HolderEnvLocked(
      int64_t holder) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After loading: reads each environment that loaded jobs share into
  // shared_envs_, from the holder in jobs_ or else from the store. Errors:
  // DATA_LOSS when a holder's record cannot be read (records are never
  // deleted, so the store lost it).
  absl::Status LoadSharedEnvsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves retired jobs whose record is stored from jobs_ to retired_ (drops
  // the record from memory). Called from Tick() and after loading, never
  // while a caller holds a reference into jobs_.
  void EvictRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Index of `user` in user_names_ (added when new).
  uint32_t UserIndexLocked(const std::string& user) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records whether the latest write of job `id` reached the store.
  void NoteStoredLocked(int64_t id, const absl::Status& stored)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- pre-flight (docs/preflight.md)
  // Whether `job`, just placed on `nodes` nodes, runs a pre-flight first.
  bool PreflightWantedLocked(const v1::Job& job, int nodes) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens a pre-flight run over the job's (just placed) tasks: its own
  // rendezvous group and token, probe StartTasks to the agents, a deadline.
  void BeginPreflightLocked(v1::Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The StartTask of `task` of `job` (its current attempt, or its pre-flight
  // probe while one runs): TaskRef, the job's command and workdir, the
  // launch environment (docs/design.md §4; launch_env.h). `agent_store`:
  // rank 0's agent hosts the gang's PyTorch store.
  v1::CoordinatorMessage BuildStartTaskLocked(const v1::Job& job, const v1::Task& task,
                                              bool agent_store) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sends StartTask for every task of the job (the job's own command).
  void LaunchTasksLocked(const v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A probe task ended: fills its rank record; once all ended, or one
  // errored (the rest are stopped), judges the run.
  void OnProbeEndedLocked(v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Judges the current run (EvaluatePreflight) and applies it: pass starts
  // the job's tasks on the same placement; fail excludes nodes and requeues
  // the gang, or fails the job at preflight_max_failures.
  void FinishPreflightLocked(v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Judges the runs past their deadline at `now`; returns whether any was.
  bool ExpirePreflightsLocked(absl::Time now, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorConfig config_;
  std::string advertise_address_ ABSL_GUARDED_BY(mu_);
  // StateStore::ClusterId(), read at load; sent in every RegisterAck.
  std::string cluster_id_ ABSL_GUARDED_BY(mu_);
  StateStore* const store_;
  // The ticket of the last write queued (StateStore::EnqueuePut*); a reply
  // that needs its write durable waits for it after releasing mu_.
  WriteTicket last_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  const Clock* const clock_;
  const sched::Scheduler scheduler_;
  RendezvousTable rendezvous_;
  // Rendezvous counters (CoordinatorCounters), atomics outside mu_: fetches
  // run without the coordinator's lock.
  std::atomic<int64_t> rendezvous_fetches_direct_{0};
  std::atomic<int64_t> rendezvous_fetches_relayed_{0};
  std::atomic<int64_t> rendezvous_ranks_relayed_{0};

  mutable absl::Mutex mu_;
  // Threads of events (calls that end with RequestScheduleLocked) blocked on
  // mu_ now; read without mu_ (a stale value only moves a pass).
  std::atomic<int> events_waiting_{0};
  // A pass was requested and left to a later event (RequestScheduleLocked).
  bool schedule_requested_ ABSL_GUARDED_BY(mu_) = false;
  // Set while ScheduleLocked applies a pass's decisions; AllocatePortLocked
  // then takes the ports in use from snapshot_ports_ (PortsInUseLocked(
  // nullptr), filled by the pass's SnapshotLocked walk) and adds the ports
  // it hands out (nothing in a pass frees a port).
  bool in_pass_ ABSL_GUARDED_BY(mu_) = false;
  mutable absl::flat_hash_map<std::string, absl::flat_hash_set<int>>
      snapshot_ports_ ABSL_GUARDED_BY(mu_);
  // Events served by the requested pass so far, and when the first of them
  // asked for it.
  int coalesced_events_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time schedule_requested_at_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<int64_t, v1::Job> jobs_ ABSL_GUARDED_BY(mu_);
  // Jobs that are not final or still have live tasks: the only ones
  // scheduling, placement and reconciliation look at, so a long history of
  // finished jobs costs nothing per event.
  absl::btree_set<int64_t> active_ ABSL_GUARDED_BY(mu_);
  // Retired jobs (final, no live task, stored) evicted from jobs_: the few
  // bytes ListJobs filters on. Their records are read from the store on
  // demand. At 1M finished jobs this map is ~20 MB where full records were
  // ~1.9 GB (bench/results/history.json).
  struct RetiredEntry {
    // Index into user_names_.
    uint32_t user = 0;
    // A v1::JobState (final).
    uint8_t state = 0;
  };
  absl::btree_map<int64_t, RetiredEntry> retired_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> user_names_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> user_index_ ABSL_GUARDED_BY(mu_);
  // Jobs that became inactive since the last EvictRetiredLocked().
  std::vector<int64_t> evict_candidates_ ABSL_GUARDED_BY(mu_);
  // Exported environments stored once for many jobs (Job.exported_env_job_id):
  // the holder job's id -> a copy of its spec.exported_env, and how many
  // jobs in jobs_ refer to it. Filled at submit and at load (from the
  // holder's record, read from the store when the holder has retired);
  // dropped when the last job referring to it leaves jobs_, so a launch
  // never reads the store for it.
  struct SharedExportedEnv {
    google::protobuf::Map<std::string, std::string> env;
    int64_t refs = 0;
  };
  absl::flat_hash_map<int64_t, SharedExportedEnv> shared_envs_ ABSL_GUARDED_BY(mu_);
  // Jobs whose latest store write failed: kept in memory (the store's record
  // is stale) until a later write succeeds.
  absl::flat_hash_set<int64_t> unsaved_ ABSL_GUARDED_BY(mu_);
  int64_t next_job_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Job.placement_seq of the next placement.
  int64_t next_placement_seq_ ABSL_GUARDED_BY(mu_) = 1;
  // Request id -> job id, for every job with one, retired jobs included
  // (idempotent submit).
  absl::flat_hash_map<std::string, int64_t> request_ids_ ABSL_GUARDED_BY(mu_);
  // Sweep id -> ids of its trials, ascending (ListJobs' sweep filter).
  absl::flat_hash_map<std::string, std::vector<int64_t>> sweep_jobs_
      ABSL_GUARDED_BY(mu_);
  absl::btree_map<std::string, NodeEntry> nodes_ ABSL_GUARDED_BY(mu_);
  // Per job array or sweep cut by the last pass: its cut
  // (TrimmedArray::cap) and the reason the tasks left out were given
  // (SchedulePassLocked).
  absl::flat_hash_map<int64_t, std::pair<int, std::string>> trimmed_reasons_
      ABSL_GUARDED_BY(mu_);
  // SnapshotLocked's result, kept between calls so unchanged nodes cost no
  // allocation.
  mutable sched::ClusterSnapshot snapshot_cache_ ABSL_GUARDED_BY(mu_);
  std::vector<DrainingTask> draining_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, std::vector<Waiter>> waiters_ ABSL_GUARDED_BY(mu_);
  // Preemptor job id -> the jobs preempted for it that still wait for it to
  // be placed (preempted_for_job_id); cleared when it is placed
  // (StartAttemptLocked), so a preemptor queued again later (itself
  // preempted) does not hold its old victims back.
  absl::flat_hash_map<int64_t, std::vector<int64_t>> victims_of_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<int64_t, LogRead> log_reads_ ABSL_GUARDED_BY(mu_);
  int64_t next_log_request_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<JobEdgeListener> job_edge_listeners_ ABSL_GUARDED_BY(mu_);
  // Illegal transitions tried so far (ReportIllegalTransitionLocked).
  int64_t illegal_transitions_ ABSL_GUARDED_BY(mu_) = 0;
  // Heartbeat TaskUsage samples ignored (RecordTaskUsageLocked).
  int64_t ignored_task_usage_ ABSL_GUARDED_BY(mu_) = 0;
  // Events since start (Stats().counters); bumped where each event happens,
  // under mu_ already held there.
  CoordinatorCounters counters_ ABSL_GUARDED_BY(mu_);
  // Jobs per state (Stats()), changed wherever a job enters jobs_ or changes
  // state.
  std::array<int64_t, v1::JobState_ARRAYSIZE> jobs_by_state_ ABSL_GUARDED_BY(mu_){};
  // PENDING jobs per JobSpec.user (CoordinatorConfig.max_pending_jobs_per_user).
  absl::flat_hash_map<std::string, int64_t> pending_by_user_ ABSL_GUARDED_BY(mu_);
  // When each rendezvous group opened at placement (for
  // on_rendezvous_published); an entry goes at the first publish or when the
  // group closes.
  absl::flat_hash_map<std::pair<int64_t, int>, absl::Time> rendezvous_opened_
      ABSL_GUARDED_BY(mu_);
  // ASHA rungs per sweep id (rebuilt from Job.rung_values at load).
  absl::flat_hash_map<std::string, AshaRungs> asha_ ABSL_GUARDED_BY(mu_);
  // Metric points stored per job (loaded from the store, then counted as
  // reports arrive; a report reserves its points here before it is stored).
  absl::flat_hash_map<int64_t, int64_t> metric_points_ ABSL_GUARDED_BY(mu_);
  // Telemetry: per-task usage, per-job histories, reported throughput.
  // Its own mutex (usage_history.h); called with or without mu_ held.
  UsageHistory usage_;
  // The auto-packer's learned state (caps per GPU).
  sched::Packer packer_ ABSL_GUARDED_BY(mu_);
  absl::Time next_usage_sample_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Deadline of each running pre-flight, by job id (set when it begins; not
  // stored: a restart requeues a job caught mid-pre-flight).
  absl::flat_hash_map<int64_t, absl::Time> preflight_deadline_ ABSL_GUARDED_BY(mu_);
};

// True for SUCCEEDED, FAILED and CANCELLED.
bool IsFinal(v1::JobState state);
// True for STARTING, RUNNING and STOPPING: the process may be alive and holds
// its GPUs.
bool IsLive(v1::TaskState state);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_COORDINATOR_H_
