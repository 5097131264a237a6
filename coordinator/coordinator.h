#ifndef TRAINCTL_COORDINATOR_COORDINATOR_H_
#define TRAINCTL_COORDINATOR_COORDINATOR_H_

// The coordinator's core: cluster state (nodes, jobs, tasks), the job life
// cycle, scheduling on every change, the NCCL rendezvous. No gRPC, no threads
// of its own, no system clock: the transport (grpc_service.h) calls in, agents
// are reached through AgentConnection, time comes from a Clock and advances
// through Tick().
//
// A façade over parts (docs/design.md §1): JobTable, NodeRegistry,
// DrainingTasks, SchedulerView, PassCoalescer, TaskStarts, ExperimentStore,
// JobWaiters, LogRelay, Measurements, RendezvousTable. Each owns its state
// and has its own test; the Coordinator holds the lock, wires them, applies
// job transitions in one place and persists. What a task's end means for its
// job is decided by a pure function (job_lifecycle.h).
//
// Scheduling passes are coalesced: a change asks for a pass over the pending
// queue in its call; calls that arrive together (queued on the lock) share
// one pass, run by the last of them as it releases the lock. No call waits
// for a pass another call will run (RequestScheduleLocked).
//
// The states of jobs, tasks and nodes, preemption and pre-flight are drawn
// once, in docs/design.md §2; the edge tables are in state_machine.h. Every
// change goes through one function per machine (TransitionLocked,
// TaskToLocked, NodeToLocked); an edge not in the table changes nothing and
// is reported (logged as an error, counted in Stats().illegal_transitions,
// fatal where assertions are on).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/cluster_views.h"
#include "coordinator/coordinator_config.h"
#include "coordinator/draining_tasks.h"
#include "coordinator/experiment_store.h"
#include "coordinator/job_facts.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/dependency.h"
#include "coordinator/job_table.h"
#include "coordinator/job_waiters.h"
#include "coordinator/log_relay.h"
#include "coordinator/measurements.h"
#include "coordinator/node_registry.h"
#include "coordinator/pass_coalescer.h"
#include "coordinator/scheduler_view.h"
#include "coordinator/preflight_runs.h"
#include "coordinator/rendezvous.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/state_machine.h"
#include "coordinator/state_store.h"
#include "coordinator/task_starts.h"
#include "trainctl/v1/preflight.pb.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// The caller of a submit as the transport authenticated it (auth.h's
// Principal): a request id that another user's job was submitted with is
// refused to a caller who is not an admin, so a guessed or colliding
// request id never hands over someone else's job. The default (admin)
// checks nothing: in-process callers, and the insecure mode where every
// caller is allowed everything.
struct SubmitCaller {
  std::string user;
  bool admin = true;
};

// Thread-safe: one mutex (mu_) guards the parts that have no lock of their
// own. Callbacks passed to *Async methods
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
  int EventsWaitingForLock() const { return passes_.waiting(); }

  // ------------------------------------------------------------ user API


  // Validates, stores (durably) and queues a job, then schedules. A repeated
  // non-empty `request_id` returns the job first submitted with it.
  // Errors: INVALID_ARGUMENT naming the field; PERMISSION_DENIED for root's
  // jobs where refused; UNAVAILABLE when the store failed (the job is then
  // not accepted).
  absl::StatusOr<int64_t> SubmitJob(const v1::JobSpec& spec,
                                    const std::string& request_id);

  // SubmitJob without blocking the caller (no server thread waits for an
  // fsync): `done` gets the job id once the job's write is durable (on the
  // store's commit thread, or inline when the store is synchronous or the
  // call fails early). A repeated request id first used by a job that is
  // not `caller`'s is refused (PERMISSION_DENIED naming both users). Errors:
  // as SubmitJob. A spec with JobSpec.array is an array of its own.
  using SubmitDone = absl::AnyInvocable<void(absl::StatusOr<int64_t>) &&>;
  void SubmitJobAsync(const v1::JobSpec& spec, const std::string& request_id,
                      SubmitDone done, const SubmitCaller& caller = {});

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
                       const std::string& request_id, SubmitJobsDone done,
                       const SubmitCaller& caller = {});

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
                           SubmitJobsDone done, const SubmitCaller& caller = {});

  // The job as users see it (no attempt token). A retired job is read from
  // the store. A final state is returned only once it is stored (waiting for
  // the store's commit when it is not yet), so no crash takes back an end a
  // client saw; other states are the live ones, stored or not. Errors:
  // NOT_FOUND; those of StateStore::ReadJobs; UNAVAILABLE when the final
  // state could not be stored.
  absl::StatusOr<v1::Job> GetJob(int64_t job_id) const;
  // The scheduling policy from the coordinator's configuration (queues,
  // quotas, order); immutable, so no lock.
  const sched::PolicyConfig& Policy() const { return config_.scheduler.policy; }
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
  // `reason` is Job.reason (what `describe` shows): a user's cancel, or the
  // end of a `trainctl shell` session (session_relay.h).
  absl::StatusOr<v1::Job> CancelJob(int64_t job_id,
                                    const std::string& reason = "cancelled by user");

  // Calls `done` with the job once it is final and that state is stored (a
  // crash never takes back an end a waiter saw), or at `timeout` from now with
  // its current state (the caller checks the state). Errors: NOT_FOUND;
  // UNAVAILABLE when the final state could not be stored.
  void WaitJobAsync(int64_t job_id, absl::Duration timeout, JobDone done);

  // Every node with its GPUs and the tasks placed on each GPU.
  std::vector<v1::NodeView> ListNodes() const;

  // Drains, resumes or downs nodes for user `by` (`trainctl node ...`;
  // node_admin.h has the rules): the new admin state is stored before the
  // reply, a DOWN stops and requeues what runs there (no restart used), and
  // a scheduling pass follows. Returns the nodes' views. Errors:
  // INVALID_ARGUMENT naming the field (ValidateUpdateNodes); NOT_FOUND for
  // an unregistered node (nothing changed); FAILED_PRECONDITION when
  // a node cannot be verified (CanVerifyLocked); UNAVAILABLE when the store
  // refused it.
  // With `verify` (RESUME), each node out of service gets a verify job
  // (JobSpec.verify_node), placed on it at once; the node resumes when the
  // job succeeds (the response names the jobs).
  absl::StatusOr<v1::UpdateNodesResponse> UpdateNodes(const v1::UpdateNodesRequest& req,
                                                      const std::string& by);

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
  // whole report, outside the coordinator's lock) before it returns.
  // Errors: INVALID_ARGUMENT naming the field (ExperimentStore::CheckReport:
  // 1 to kMaxPointsPerReport points, CheckMetricPoint's rules; a rank outside
  // the attempt); UNAUTHENTICATED when req.token is empty; NOT_FOUND for an
  // unknown job; PERMISSION_DENIED for another attempt or token
  // (ExperimentStore::CheckReporter); RESOURCE_EXHAUSTED past
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
  // address), marks it READY and reconciles its running tasks (recovery.h's
  // Reconcile: unexpected ones are stopped, expected ones not reported are
  // lost, and so are tasks on a GPU now gone or too small). On success the
  // first message sent on `conn` is the RegisterAck (lease_ms =
  // node_timeout), before any StartTask or StopTask. Names and GPUs follow
  // NodeRegistry's identity rules (CheckNameFree, CheckGpusFree).
  // Errors: INVALID_ARGUMENT for a bad inventory (NodeRegistry::Validate);
  // ALREADY_EXISTS when another connected agent holds the node name or
  // offers one of its GPUs (naming that node and its address); UNAVAILABLE
  // when the GPU's other node has lost its agent but is not yet lost, or the
  // store failed. Nothing is sent on `conn` and nothing changes then.
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
  // sample per running job every usage.sample_period and then retries
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
  // The job as GetJob shows it, now; `durable_at` gets the ticket to wait
  // for when its state is final (else it is left as it is).
  absl::StatusOr<v1::Job> JobNow(int64_t job_id, WriteTicket* durable_at) const
      ABSL_LOCKS_EXCLUDED(mu_);

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
  // ---- job dependencies (dependency.h; the index is jobs_.deps()): thin
  // wiring only. The facts of job `id` a dependency judges, or nullopt for
  // an unknown job (a store read error is logged and gives a job that still
  // waits, state UNSPECIFIED).
  std::optional<DepJobFacts> DepFactsLocked(int64_t id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submit: checks the dependencies of `jobs` (the call's new jobs, ids
  // consecutive) with CheckDependencyAtSubmit. Errors: those of it, and
  // INVALID_ARGUMENT for a string that does not parse; the field is
  // spec.dependency, or specs[i].dependency for a `batch` call.
  absl::Status CheckDependenciesLocked(const std::vector<v1::Job>& jobs, bool batch,
                                       const SubmitCaller& caller) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Evaluates every job marked in jobs_.deps() (iteratively: the ends it
  // causes mark their own dependents): a satisfied one is unblocked (and a
  // scheduling pass requested), a waiting one blocked with the reason, a
  // never-satisfiable one CANCELLED with the reason and persisted.
  void EvaluateDependenciesLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  void ScheduleLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One pass of ScheduleLocked: the scheduler's decisions on the pending
  // queue, then the packer's. Returns whether another pass is due (a job
  // array was cut shorter than what the pass could place).
  bool SchedulePassLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Coalesced scheduling passes (PassCoalescer): an event that may change
  // what can be placed calls this in its locked section. The pass runs as
  // its EventLock ends (same commit), unless another event waits for mu_:
  // then the last event of the burst runs one pass for all (or Tick(), at
  // the latest). No caller waits for a pass left to another event.
  void RequestScheduleLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SubmitJobAsync (one spec, `batch` false: errors name "spec.field") and
  // SubmitJobsAsync (`batch` true: "specs[i].field").
  // `exported_from_first`: specs after the first carry no exported
  // environment of their own and export the first's (SubmitJobArrayAsync);
  // otherwise any that carry one equal to the first's are made to share it.
  void SubmitBatchAsync(std::vector<v1::JobSpec> specs,
                        const std::string& request_id, bool batch,
                        SubmitJobsDone done, const SubmitCaller& caller,
                        bool exported_from_first = false) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs the pass requested by earlier events unless other events still
  // wait for mu_ (then the last of them runs it), within the bounds above.
  // Returns false when a requested pass is still left to run.
  bool ServeScheduleLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Clears the request and runs the pass it asked for.
  void RunRequestedPassLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes mu_ for an event (see RequestScheduleLocked), counted in
  // passes_ while it blocks; on release, runs a pass left to this event
  // (its callbacks run once mu_ is released).
  class ABSL_SCOPED_LOCKABLE EventLock {
   public:
    explicit EventLock(Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_);
    ~EventLock() ABSL_UNLOCK_FUNCTION();
    EventLock(const EventLock&) = delete;
    EventLock& operator=(const EventLock&) = delete;

   private:
    Coordinator* const c_;
  };
  // SchedulerView::Queue over the parts, now.
  std::vector<sched::JobRequest> PendingQueueLocked(
      absl::flat_hash_map<int64_t, TrimmedArray>* trimmed = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // SchedulerView::Snapshot over the parts, now (valid until the next call).
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
  // OK when `caller` may reuse the request id first given to job `first`
  // (a retry gets that job's ids): an admin, or the job's owner. Errors:
  // PERMISSION_DENIED naming both users; those of LookupLocked.
  absl::Status CheckRequestOwnerLocked(int64_t first, const SubmitCaller& caller) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  // MASTER_PORTs held by jobs with live tasks, by the host of rank 0's node
  // (PortHostLocked; only `only_host`'s when not null). O(active jobs).
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> PortsInUseLocked(
      const std::string* only_host) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A task of the current attempt ended or could not start; decides the
  // attempt's fate.
  void OnTaskEndedLocked(v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies what a task end means for the job (job_lifecycle.h): judges
  // the pre-flight, stops live tasks and restarts or fails, or succeeds;
  // persists once.
  void ApplyAttemptStepLocked(v1::Job& job, const AttemptStep& step, Deferred& deferred)
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
  // Takes each live task on `node` for which `pred` holds as LOST with
  // `message` (told to stop first when `stop`); each job goes on as after a
  // lost task (OnTaskEndedLocked) and is persisted.
  void LoseTasksLocked(const std::string& node,
                       absl::FunctionRef<bool(const v1::Job&, const v1::Task&)> pred,
                       const std::string& message, bool stop, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void HandleTaskStatusLocked(const std::string& node, const v1::TaskStatus& st,
                              Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Completes waiters of a job that just became final.
  void NotifyFinalLocked(const v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Places pending auto-packed trials through the packer.
  void PackPendingLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An auto-packed trial's task ran out of GPU memory: requeues the job with
  // a larger memory request and caps its GPU. False when it already had the
  // whole GPU (the attempt then fails as any other).
  bool RequeueAfterOomLocked(v1::Job& job, const v1::Task& task,
                             Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RedactedJob, with the running attempt's GPU-hours counted up to now and
  // the job's stored metric points.
  v1::Job ForUserLocked(const v1::Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void RunDeferred(Deferred& deferred);
  // The job `id`: from jobs_, or for a retired job its record read from the
  // store into `*scratch`. Errors: NOT_FOUND; those of StateStore::ReadJobs
  // (DATA_LOSS also when a retired job's record is missing).
  absl::StatusOr<const v1::Job*> LookupLocked(int64_t id, v1::Job* scratch) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves retired jobs whose record is stored from jobs_ to retired_ (drops
  // the record from memory). Called from Tick() and after loading, never
  // while a caller holds a reference into jobs_.
  void EvictRetiredLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- node admin states (node_admin.h decides, these apply)
  // Stores `admin` as node `name`'s admin state and applies it (a DOWN
  // requeues what runs there). Returns the write's ticket. Errors:
  // UNAVAILABLE when it cannot be stored (nothing changed).
  absl::StatusOr<WriteTicket> SetNodeAdminLocked(const std::string& name, v1::NodeAdmin admin,
                                                 Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops the tasks of every job holding `node` and requeues the jobs,
  // counted as preemptions (no restart used), with RequeueReason(node); a
  // drain's deadline spares the node's verify job, a DOWN fails it. True
  // when any job was requeued.
  bool RequeueFromNodeLocked(const v1::Node& node, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails the verify jobs (NodeAdmin.verify_job_id) sent back to PENDING (a
  // lost node, an aborted pre-flight): they never enter the queue, so they
  // would wait forever; their end leaves the node out of service with the
  // reason.
  void FailStrandedVerifiesLocked(Deferred& deferred) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Requeues what still runs on drained nodes whose deadline passed (not
  // their verify jobs), and fails stranded verify jobs; true when any job
  // was requeued.
  bool EnforceDrainDeadlinesLocked(absl::Time now, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // resume --verify: node_admin.h's CanVerify for node `name` (registered)
  // with the facts the parts know. Errors: FAILED_PRECONDITION saying which.
  absl::Status CanVerifyLocked(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores and places the verify job of node `name` for user `by`; returns
  // its id. Errors: UNAVAILABLE when it cannot be stored.
  absl::StatusOr<int64_t> StartVerifyLocked(const std::string& name, const std::string& by,
                                            Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A verify job ended: its node resumes (succeeded) or stays out of
  // service with the verdict (AdminAfterVerify).
  void OnVerifyEndedLocked(const v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---- pre-flight (docs/preflight.md): PreflightRuns decides, these apply.
  // Opens a run over the job's (just placed) tasks: its rendezvous group,
  // the probes' StartTasks.
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
  // A probe ended: stops the rest after a failure; judges the run when due.
  void OnProbeEndedLocked(v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Judges the run: pass starts the job's ranks on the same placement; fail
  // stops the probes and requeues or fails the job.
  void FinishPreflightLocked(v1::Job& job, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Judges the runs past their deadline at `now`; returns whether any was.
  bool ExpirePreflightsLocked(absl::Time now, Deferred& deferred)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorConfig config_;
  StateStore* const store_;
  // The ticket of the last write queued (StateStore::EnqueuePut*); a reply
  // that needs its write durable waits for it after releasing mu_.
  WriteTicket last_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  const Clock* const clock_;
  const sched::Scheduler scheduler_;
  // The NCCL rendezvous: groups, fetch counts, time to the first publish.
  // Its own lock.
  RendezvousTable rendezvous_;

  // Lock order: mu_, then the locks of the parts that have their own
  // (RendezvousTable, UsageHistory, the StateStore). The parts below marked
  // ABSL_GUARDED_BY(mu_) have no lock of their own: mu_ guards them, and an
  // event that changes several of them does so in one locked section.
  mutable absl::Mutex mu_;
  // When the scheduling pass an event asked for runs (its waiting count is
  // atomic, read without mu_).
  PassCoalescer passes_;
  // Every job, active or retired, and the indexes over them.
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  // The nodes, their agents' streams, heartbeats and MASTER_PORTs.
  NodeRegistry nodes_ ABSL_GUARDED_BY(mu_);
  // Metric point counts, ASHA rungs.
  ExperimentStore experiments_ ABSL_GUARDED_BY(mu_);
  // WaitJob callers.
  JobWaiters waiters_ ABSL_GUARDED_BY(mu_);
  // Log reads relayed to agents.
  LogRelay logs_ ABSL_GUARDED_BY(mu_);
  // The scheduler's inputs (snapshot, queue), built from the parts above.
  SchedulerView view_ ABSL_GUARDED_BY(mu_);
  // Builds the StartTask messages (launch contract, coordinator address).
  TaskStarts starts_ ABSL_GUARDED_BY(mu_);
  // Tasks of earlier attempts still holding GPUs; who preempted whom (a
  // victim's entry is taken when its preemptor is placed, StartAttemptLocked,
  // so a preemptor queued again later does not hold its old victims back).
  DrainingTasks draining_ ABSL_GUARDED_BY(mu_);
  std::vector<JobEdgeListener> job_edge_listeners_ ABSL_GUARDED_BY(mu_);
  // Events since start (Stats().counters); bumped where each event happens,
  // under mu_ already held there.
  CoordinatorCounters counters_ ABSL_GUARDED_BY(mu_);
  // Usage history (its own lock: read without mu_) and the auto-packer
  // (guarded by mu_).
  Measurements measured_;
  // Pre-flight runs: records, deadlines, verdicts.
  PreflightRuns preflight_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_COORDINATOR_H_
