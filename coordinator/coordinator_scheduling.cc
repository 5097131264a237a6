// Coordinator: the scheduler's view of the cluster (snapshot, pending queue),
// coalesced scheduling passes, and what a pass decides: attempts started,
// preempted, failed. Declared in coordinator.h.

#include "coordinator/coordinator.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "common/secrets.h"
#include "common/logging.h"
#include "coordinator/job_lifecycle.h"

namespace trainctl::coord {

const sched::ClusterSnapshot& Coordinator::SnapshotLocked() const {
  return view_.Snapshot(jobs_, nodes_, draining_, ToUnixMs(clock_->Now()));
}

std::vector<sched::JobRequest> Coordinator::PendingQueueLocked(
    absl::flat_hash_map<int64_t, TrimmedArray>* trimmed) const {
  return view_.Queue(jobs_, nodes_, draining_, ToUnixMs(clock_->Now()), trimmed);
}

Coordinator::EventLock::EventLock(Coordinator* c) : c_(c) {
  c_->passes_.EnterWait();
  c_->mu_.Lock();
  c_->passes_.LeaveWait();
  c_->passes_.Entered();
}

Coordinator::EventLock::~EventLock() {
  // Whatever way the section ends (an error return included), a pass left
  // to it runs here unless yet another event waits to run it.
  Deferred deferred;
  if (c_->passes_.MustRunNow(c_->clock_->Now())) {
    CommitHold hold(c_->store_);
    c_->RunRequestedPassLocked(deferred);
  }
  c_->mu_.Unlock();
  RunDeferred(deferred);
}

void Coordinator::RequestScheduleLocked(Deferred& deferred) {
  passes_.Request(clock_->Now());
  ServeScheduleLocked(deferred);
}

bool Coordinator::ServeScheduleLocked(Deferred& deferred) {
  if (!passes_.requested()) return true;
  // Else the event waiting for mu_ runs it at its end.
  if (!passes_.MustRunNow(clock_->Now())) return false;
  RunRequestedPassLocked(deferred);
  return true;
}

void Coordinator::RunRequestedPassLocked(Deferred& deferred) {
  passes_.Clear();
  ScheduleLocked(deferred);
}

void Coordinator::ScheduleLocked(Deferred& deferred) {
  while (SchedulePassLocked(deferred)) {
  }
}

bool Coordinator::SchedulePassLocked(Deferred& deferred) {
  absl::flat_hash_map<int64_t, TrimmedArray> trimmed;
  std::vector<sched::JobRequest> queue = PendingQueueLocked(&trimmed);
  if (queue.empty()) {
    PackPendingLocked(deferred);
    return false;
  }
  const absl::Time pass_start = clock_->Now();
  const std::vector<sched::Decision> decisions =
      scheduler_.Schedule(SnapshotLocked(), queue);
  // The snapshot's walk left the ports in use in nodes_.snapshot_ports(); this
  // pass's placements add theirs.
  nodes_.BeginPass();
  // The queue's jobs by id, for the decisions (a hash lookup each instead of
  // a btree walk: the pass decides every pending job). jobs_ gains and loses
  // no job while the decisions are applied, so the pointers stay valid.
  // Only the queue's: the tasks of a job array left out of it are many.
  absl::flat_hash_map<int64_t, v1::Job*> queued;
  queued.reserve(queue.size());
  for (const sched::JobRequest& r : queue) {
    auto it = jobs_.find(r.job_id);
    if (it != jobs_.end()) queued.emplace(r.job_id, &it->second);
  }
  for (const sched::Decision& d : decisions) {
    auto it = queued.find(d.job_id);
    if (it == queued.end()) continue;
    v1::Job& job = *it->second;
    switch (d.outcome) {
      case sched::Outcome::kPlaced:
        // A placement earlier in this pass may have blocked it (singleton).
        if (job.state() != v1::JOB_STATE_PENDING || jobs_.deps().Blocked(job.id())) break;
        StartAttemptLocked(job, d.placement, deferred);
        break;
      case sched::Outcome::kInfeasible:
        if (job.spec().hold()) {
          // Accepted for nodes that will join: it waits.
          const std::string reason =
              absl::StrCat("held (--hold): cannot run on this cluster yet: ", d.reason);
          if (job.reason() != reason) job.set_reason(reason);
          break;
        }
        if (TransitionLocked(job, v1::JOB_STATE_FAILED,
                             absl::StrCat("cannot run on this cluster: ", d.reason),
                             deferred)) {
          PersistLocked(job);
        }
        break;
      case sched::Outcome::kRetryLater:
        // Usually the sentence of the last pass: compared, not rewritten.
        if (std::string why = WaitReason(job, d.reason); job.reason() != why) {
          job.set_reason(std::move(why));
        }
        break;
      case sched::Outcome::kPreempting:
        // Placed by a later pass, once the victims' tasks have exited.
        job.set_reason(d.reason);
        for (int64_t victim : d.preempt) {
          auto vt = jobs_.find(victim);
          if (vt == jobs_.end()) continue;
          PreemptLocked(vt->second, job.id(), deferred);
        }
        break;
    }
  }
  nodes_.EndPass();
  // The tasks of arrays left out of the pass (SchedulerView::FollowUpTrimmed).
  const SchedulerView::FollowUp follow_up = view_.FollowUpTrimmed(trimmed, jobs_);
  for (const auto& [id, reason] : follow_up.fail) {
    v1::Job& job = jobs_.at(id);
    if (TransitionLocked(job, v1::JOB_STATE_FAILED, reason, deferred)) PersistLocked(job);
  }
  PackPendingLocked(deferred);
  if (config_.hooks.on_schedule_pass) {
    deferred.push_back([this, took = clock_->Now() - pass_start]() {
      config_.hooks.on_schedule_pass(took);
    });
  }
  return follow_up.pass_again;
}

absl::flat_hash_map<std::string, absl::flat_hash_set<int>>
Coordinator::PortsInUseLocked(const std::string* only_host) const {
  absl::flat_hash_map<std::string, absl::flat_hash_set<int>> used;
  jobs_.ForEachActive([&](const v1::Job& job) {
    if (job.tasks().empty()) return;
    const std::string& host = nodes_.PortHost(job.tasks(0).node());
    if (only_host != nullptr && host != *only_host) return;
    for (const v1::Task& t : job.tasks()) {
      if (HoldsGpus(job, t)) {
        used[host].insert(job.master_port());
        if (job.jax_port() > 0) used[host].insert(job.jax_port());
        break;
      }
    }
  });
  return used;
}

int Coordinator::AllocatePortLocked(NodeEntry& node) {
  // In a pass, one scan of the active jobs serves all its placements (was:
  // one scan per placement, O(pending jobs) each). Agents that share a host
  // (each offering some of its GPUs) share its ports: they are counted by
  // address.
  const std::string& host = nodes_.PortHost(node.node.name());
  NodeRegistry::PortsByHost scanned;
  NodeRegistry::PortsByHost* by_host = nodes_.pass_ports();
  if (by_host == nullptr) {
    scanned = PortsInUseLocked(&host);
    by_host = &scanned;
  }
  return NodeRegistry::AllocatePort(node, (*by_host)[host]);
}

void Coordinator::StartAttemptLocked(v1::Job& job,
                                     const sched::Placement& placement,
                                     Deferred& deferred) {
  // The edge is checked before anything of the job changes: a job that may
  // not be placed keeps its tasks, token and port.
  if (!IsValidJobEdge(job.state(), v1::JOB_STATE_SCHEDULED)) {
    ReportIllegalTransitionLocked(absl::InternalError(
        absl::StrCat("job ", job.id(), ": placed while ", v1::JobState_Name(job.state()))));
    return;
  }
  job.clear_tasks();
  job.set_attempt_token(NewSecretToken());
  std::vector<std::string> rank_hosts;
  for (v1::Task& t : TaskStarts::PlaceRanks(job.spec(), placement, [&](const std::string& n) {
         auto it = nodes_.find(n);
         return it == nodes_.end() ? nullptr : &it->second.node;
       })) {
    rank_hosts.push_back(t.node());
    TaskToLocked(job, *job.add_tasks() = std::move(t), v1::TASK_STATE_STARTING);
  }
  job.set_world_size(job.tasks_size());
  job.set_placement_seq(jobs_.TakePlacementSeq());
  job.clear_preempted_for_job_id();
  // The jobs preempted for this one may start again now that it is placed
  // (the no-ping-pong rule: a victim is not restarted until its preemptor is
  // placed or gone); their records are
  // stored with the same group commit as this placement.
  for (int64_t v : draining_.TakeVictims(job.id())) {
    auto it = jobs_.find(v);
    if (it == jobs_.end() || it->second.preempted_for_job_id() != job.id()) continue;
    it->second.clear_preempted_for_job_id();
    PersistLocked(it->second);
  }
  NodeEntry& master = nodes_[placement.nodes[0].node];
  job.set_master_addr(master.node.address());
  job.set_master_port(AllocatePortLocked(master));
  // JAX's coordinator service (JAX_COORDINATOR_ADDRESS): only a gang needs one.
  job.set_jax_port(job.tasks_size() > 1 ? AllocatePortLocked(master) : 0);
  TransitionLocked(job, v1::JOB_STATE_SCHEDULED, "", deferred);
  // Old agents and agents missing their probe program run none (preflight_runs.h).
  bool agents_run_probes = true;
  for (const sched::NodeAssignment& na : placement.nodes) {
    const NodeEntry& n = nodes_[na.node];
    agents_run_probes = agents_run_probes && n.probe_tasks &&
                        n.node.preflight_probe_error().empty();
  }
  const int node_count = static_cast<int>(placement.nodes.size());
  if (preflight_.Wanted(job, node_count, agents_run_probes)) {
    // The job's own rendezvous opens and its tasks start once it passes.
    BeginPreflightLocked(job);
    return;
  }
  if (!agents_run_probes && preflight_.Wanted(job, node_count, true)) {
    TC_LOG_WARN("job {}: starts without a pre-flight: an agent of its nodes cannot run "
                "probes (older than probe tasks, or no probe program: trainctl why)", job.id());
  }
  rendezvous_.Open(job.id(), job.attempt(), job.attempt_token(), std::move(rank_hosts),
                   clock_->Now());
  PersistLocked(job);
  LaunchTasksLocked(job, deferred);
}

// Sends the StartTasks of `job`'s tasks once its SCHEDULED record is durable
// (the group commit's ticket; see SendStartsWhenStored).
v1::CoordinatorMessage Coordinator::BuildStartTaskLocked(const v1::Job& job,
                                                         const v1::Task& t,
                                                         bool agent_store) const {
  auto node = nodes_.find(t.node());
  const JobTable::Env* exported = jobs_.ExportedEnv(job);
  if (exported == nullptr) {
    // LoadLocked and SubmitJobs keep a shared environment in memory while a
    // job refers to it: this is a bug, and the task would start without it.
    TC_LOG_ERROR("job {}: the exported environment it shares with job {} is not in memory; "
                 "its task starts without it",
                 job.id(), job.exported_env_job_id());
  }
  return starts_.Build(job, t, node != nodes_.end() ? &node->second.node : nullptr, exported,
                       agent_store);
}

void Coordinator::LaunchTasksLocked(const v1::Job& job, Deferred& deferred) {
  // Rank 0's agent hosts the gang's PyTorch store (Node.torch_store).
  const bool agent_store =
      job.world_size() > 1 && nodes_[job.tasks(0).node()].node.torch_store();
  std::vector<v1::CoordinatorMessage> starts;
  starts.reserve(job.tasks_size());
  for (const v1::Task& t : job.tasks()) {
    starts.push_back(BuildStartTaskLocked(job, t, agent_store));
  }
  // Sent once the SCHEDULED record is durable (after mu_ is released: the
  // callback takes it; with a synchronous store it runs at once).
  deferred.push_back([this, ticket = last_ticket_, id = job.id(),
                      attempt = job.attempt(), seq = job.placement_seq(),
                      starts = std::move(starts)]() mutable {
    store_->WhenDurable(ticket, [this, id, attempt, seq, starts = std::move(starts)](
                                    absl::Status stored) mutable {
      SendStartsWhenStored(id, attempt, seq, std::move(starts), std::move(stored));
    });
  });
}

void Coordinator::SendStartsWhenStored(int64_t job_id, int attempt,
                                       int64_t placement_seq,
                                       std::vector<v1::CoordinatorMessage> starts,
                                       absl::Status stored) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  const v1::Job& job = it->second;
  if (job.attempt() != attempt || job.placement_seq() != placement_seq) return;
  if (!stored.ok()) {
    TC_LOG_ERROR("job {} attempt {}: not started, its placement was not stored: {}",
                 job_id, attempt, stored.ToString());
    return;
  }
  for (v1::CoordinatorMessage& msg : starts) {
    const v1::TaskRef& ref = msg.start_task().task();
    for (const v1::Task& t : job.tasks()) {
      if (t.rank() == ref.rank() && t.state() == v1::TASK_STATE_STARTING) {
        SendLocked(t.node(), std::move(msg));
        break;
      }
    }
  }
}

void Coordinator::SendLocked(const std::string& node, v1::CoordinatorMessage msg) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.conn == nullptr) {
    TC_LOG_WARN("node {} is not connected; dropped a message to it", node);
    return;
  }
  it->second.conn->Send(std::move(msg));
}

void Coordinator::StopTaskLocked(const v1::Job& job, v1::Task& task) {
  TaskToLocked(job, task, v1::TASK_STATE_STOPPING);
  SendLocked(task.node(), StopMessage(RefOf(job, task), config_.stop_grace));
}

void Coordinator::PreemptLocked(v1::Job& victim, int64_t by, Deferred& deferred) {
  if (victim.state() != v1::JOB_STATE_SCHEDULED &&
      victim.state() != v1::JOB_STATE_RUNNING) {
    return;
  }
  for (v1::Task& t : *victim.mutable_tasks()) {
    if (IsLive(t.state())) StopTaskLocked(victim, t);
  }
  victim.set_preemptions(victim.preemptions() + 1);
  ++counters_.preemptions;
  victim.set_preempted_for_job_id(by);
  draining_.AddVictim(by, victim.id());
  TransitionLocked(victim, v1::JOB_STATE_PENDING,
                   absl::StrCat("preempted for job ", by, " (preemption ",
                                victim.preemptions(), "); requeued as attempt ",
                                victim.attempt() + 1, ", restarts once job ", by,
                                " has started"),
                   deferred);
  PersistLocked(victim);
}

bool Coordinator::EnforceTimeLimitsLocked(absl::Time now, Deferred& deferred) {
  bool any = false;
  const int64_t now_ms = ToUnixMs(now);
  for (int64_t id : jobs_.ActiveIds()) {
    v1::Job& job = jobs_.at(id);
    const int64_t limit = job.spec().time_limit_ms();
    if (limit <= 0 || job.state() != v1::JOB_STATE_RUNNING ||
        job.start_time_ms() <= 0 || now_ms - job.start_time_ms() < limit) {
      continue;
    }
    for (v1::Task& t : *job.mutable_tasks()) {
      if (IsLive(t.state())) StopTaskLocked(job, t);
    }
    TransitionLocked(
        job, v1::JOB_STATE_FAILED,
        absl::StrCat("TIMEOUT: ran past its time limit of ",
                     absl::FormatDuration(absl::Milliseconds(limit)),
                     " (--time-limit); its tasks were stopped"),
        deferred);
    PersistLocked(job);
    any = true;
  }
  return any;
}

void Coordinator::FailAttemptLocked(v1::Job& job, const std::string& why,
                                    Deferred& deferred) {
  ApplyAttemptStepLocked(job, RestartOrFail(job, why), deferred);
}

void Coordinator::ApplyAttemptStepLocked(v1::Job& job, const AttemptStep& step,
                                         Deferred& deferred) {
  switch (step.kind) {
    case AttemptStep::Kind::kJudgePreflight:
      OnProbeEndedLocked(job, deferred);
      return;
    case AttemptStep::Kind::kRestart:
    case AttemptStep::Kind::kFail:
      for (v1::Task& t : *job.mutable_tasks()) {
        if (IsLive(t.state())) StopTaskLocked(job, t);
      }
      if (step.kind == AttemptStep::Kind::kRestart) ++counters_.restarts;
      TransitionLocked(job,
                       step.kind == AttemptStep::Kind::kRestart ? v1::JOB_STATE_PENDING
                                                                : v1::JOB_STATE_FAILED,
                       step.reason, deferred);
      break;
    case AttemptStep::Kind::kSucceed:
      // A job that never reported RUNNING (all its ranks ended before the
      // last start report) passes through RUNNING.
      if (job.state() == v1::JOB_STATE_SCHEDULED) {
        TransitionLocked(job, v1::JOB_STATE_RUNNING, "", deferred);
      }
      TransitionLocked(job, v1::JOB_STATE_SUCCEEDED, "", deferred);
      break;
    case AttemptStep::Kind::kWait:
      if (IsFinal(job.state()) || job.state() == v1::JOB_STATE_PENDING) return;
      break;
    case AttemptStep::Kind::kRequeueAfterOom:
      return;  // OnTaskEndedLocked's
  }
  PersistLocked(job);
}

void Coordinator::OnTaskEndedLocked(v1::Job& job, Deferred& deferred) {
  AttemptStep step = DecideAttempt(job);
  if (step.kind == AttemptStep::Kind::kRequeueAfterOom) {
    for (const v1::Task& t : job.tasks()) {
      if (t.rank() == step.rank && RequeueAfterOomLocked(job, t, deferred)) return;
    }
    step = DecideAttempt(job, /*oom_requeue_possible=*/false);
  }
  ApplyAttemptStepLocked(job, step, deferred);
}

// ---------------------------------------------------------------- pre-flight
// What a run means is PreflightRuns'; here it is applied.

void Coordinator::BeginPreflightLocked(v1::Job& job) {
  PreflightRuns::Opening o = preflight_.Begin(job, clock_->Now());
  rendezvous_.Open(job.id(), GroupRef(job.attempt(), o.run), o.token,
                   std::move(o.rank_hosts));
  PersistLocked(job);
  TC_LOG_INFO("job {} attempt {}: pre-flight {}", job.id(), job.attempt(), o.run);
  for (const v1::Task& t : job.tasks()) {
    v1::CoordinatorMessage msg = BuildStartTaskLocked(job, t, /*agent_store=*/false);
    preflight_.MakeProbeStart(job, *msg.mutable_start_task());
    SendLocked(t.node(), std::move(msg));
  }
}

void Coordinator::OnProbeEndedLocked(v1::Job& job, Deferred& deferred) {
  const PreflightRuns::Progress p = PreflightRuns::OnProbeEnded(job);
  for (v1::Task& t : *job.mutable_tasks()) {
    if (IsLive(t.state()) && t.state() != v1::TASK_STATE_STOPPING &&
        absl::c_linear_search(p.stop_ranks, t.rank())) {
      StopTaskLocked(job, t);
    }
  }
  if (p.judge) {
    FinishPreflightLocked(job, deferred);
  } else {
    PersistLocked(job);
  }
}

void Coordinator::FinishPreflightLocked(v1::Job& job, Deferred& deferred) {
  const PreflightRuns::Verdict v = preflight_.Judge(job, clock_->Now());
  ++counters_.preflight_runs[v.verdict];
  TC_LOG_INFO("job {} pre-flight {}: {}", job.id(), v.run,
              job.preflight().runs(job.preflight().runs_size() - 1).reason());
  if (v.verdict != v1::PREFLIGHT_VERDICT_PASSED) {
    // Nodes this run excluded count toward their automatic drain.
    for (const v1::ExcludedNode& x : job.preflight().excluded()) {
      if (x.run() != v.run || nodes_.find(x.node()) == nodes_.end() ||
          !InService(nodes_.at(x.node()).node)) {
        continue;
      }
      if (std::optional<std::string> why =
              nodes_.auto_drain().OnExclusion(x.node(), x.reason(), clock_->Now())) {
        (void)SetNodeAdminLocked(x.node(), AutomaticDrain(*why, clock_->Now()), deferred);
      }
    }
    // Live probes (stopped after a failure, or hung at the deadline) drain
    // under their own key, holding their GPUs until they exit.
    for (v1::Task& t : *job.mutable_tasks()) {
      if (IsLive(t.state()) && t.state() != v1::TASK_STATE_STOPPING) StopTaskLocked(job, t);
    }
    // A verify job has no other node to go to: its verdict is final.
    const bool verify = !job.spec().verify_node().empty();
    TransitionLocked(job, verify ? v1::JOB_STATE_FAILED : v.to,
                     verify ? job.preflight().runs(job.preflight().runs_size() - 1).reason()
                            : v.why,
                     deferred);
    PersistLocked(job);
    return;
  }
  rendezvous_.Close(job.id(), GroupRef(job.attempt(), v.run), "pre-flight passed");
  // The job's own ranks on the same placement: the probes have all exited,
  // so their GPUs pass straight to the job. Each probe's record becomes the
  // rank's: a new task (UNSPECIFIED -> STARTING), nothing of the probe kept.
  std::vector<std::string> hosts;
  for (v1::Task& t : *job.mutable_tasks()) {
    v1::Task rank;
    rank.set_rank(t.rank());
    rank.set_node(t.node());
    *rank.mutable_gpu_indices() = t.gpu_indices();
    *rank.mutable_gpu_uuids() = t.gpu_uuids();
    rank.set_reserved_bytes_per_gpu(t.reserved_bytes_per_gpu());
    rank.set_whole_gpus(t.whole_gpus());
    rank.set_local_rank(t.local_rank());
    rank.set_node_rank(t.node_rank());
    rank.set_local_world_size(t.local_world_size());
    TaskToLocked(job, rank, v1::TASK_STATE_STARTING);
    t = std::move(rank);
    hosts.push_back(t.node());
  }
  job.clear_reason();
  rendezvous_.Open(job.id(), job.attempt(), job.attempt_token(), std::move(hosts),
                   clock_->Now());
  PersistLocked(job);
  LaunchTasksLocked(job, deferred);
}

bool Coordinator::ExpirePreflightsLocked(absl::Time now, Deferred& deferred) {
  const std::vector<int64_t> due = preflight_.TakeDue(now);
  for (int64_t id : due) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !InPreflight(it->second)) continue;
    preflight_.MarkMissing(it->second);
    FinishPreflightLocked(it->second, deferred);
  }
  return !due.empty();
}

}  // namespace trainctl::coord
