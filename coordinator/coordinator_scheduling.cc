// Coordinator: the scheduler's view of the cluster (snapshot, pending queue),
// coalesced scheduling passes, and what a pass decides: attempts started,
// preempted, failed. Declared in coordinator.h.

#include "coordinator/coordinator.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/secrets.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/job_spec.h"
#include "coordinator/launch_env.h"

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
        if (job.reason() != d.reason) job.set_reason(d.reason);
        if (job.preflight().excluded_size() > 0) {
          std::vector<std::string> names;
          for (const v1::ExcludedNode& e : job.preflight().excluded()) {
            names.push_back(e.node());
          }
          absl::StrAppend(job.mutable_reason(), "; excluded by pre-flight: ",
                          absl::StrJoin(names, ", "),
                          " (`trainctl describe` says why)");
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
  // The tasks of an array left out of the pass wait for the same reason as
  // the last one it decided, or fail with it (they would not fit either).
  // Had that one started, the cut was too tight: pass again.
  // The reasons are not copied again while the array's cut and reason are
  // those of the last pass (SchedulerView::TrimReasonUnchanged): with the same cut the tasks
  // left out are those of the last pass but the ones that moved into the
  // queue, and each already has the reason.
  bool again = false;
  absl::flat_hash_map<int64_t, std::pair<int, std::string>> reasons;
  for (auto& [array, cut] : trimmed) {
    if (cut.trimmed.empty()) continue;
    auto last = jobs_.find(cut.last_included);
    if (last == jobs_.end()) continue;
    const v1::Job& decided = last->second;
    if (decided.state() != v1::JOB_STATE_PENDING &&
        decided.state() != v1::JOB_STATE_FAILED) {
      again = true;
      continue;
    }
    if (decided.state() == v1::JOB_STATE_PENDING) {
      const bool unchanged = view_.TrimReasonUnchanged(array, cut.cap, decided.reason());
      reasons.emplace(array, std::make_pair(cut.cap, decided.reason()));
      if (unchanged) continue;
    }
    for (int64_t id : cut.trimmed) {
      auto it = jobs_.find(id);
      if (it == jobs_.end() || it->second.state() != v1::JOB_STATE_PENDING) continue;
      v1::Job& job = it->second;
      if (decided.state() == v1::JOB_STATE_PENDING) {
        if (job.reason() != decided.reason()) job.set_reason(decided.reason());
      } else if (TransitionLocked(job, v1::JOB_STATE_FAILED, decided.reason(), deferred)) {
        PersistLocked(job);
      }
    }
  }
  view_.SetTrimReasons(std::move(reasons));
  PackPendingLocked(deferred);
  if (config_.on_schedule_pass) {
    deferred.push_back([this, took = clock_->Now() - pass_start]() {
      config_.on_schedule_pass(took);
    });
  }
  return again;
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
  int rank = 0;
  std::vector<std::string> rank_hosts;
  for (size_t node_rank = 0; node_rank < placement.nodes.size(); ++node_rank) {
    const sched::NodeAssignment& na = placement.nodes[node_rank];
    const v1::Node& node = nodes_[na.node].node;
    const int tasks = TasksPerNode(job.spec(), static_cast<int>(na.gpu_indices.size()));
    for (int local = 0; local < tasks; ++local) {
      v1::Task* t = job.add_tasks();
      t->set_rank(rank++);
      t->set_local_rank(local);
      t->set_local_world_size(tasks);
      t->set_node_rank(static_cast<int>(node_rank));
      t->set_node(na.node);
      int64_t node_gpu_bytes = 0;
      for (int idx : na.gpu_indices) {
        t->add_gpu_indices(idx);
        for (const v1::Gpu& g : node.gpus()) {
          if (g.index() != idx) continue;
          t->add_gpu_uuids(g.uuid());
          node_gpu_bytes = std::max(node_gpu_bytes, g.memory_total_bytes());
        }
      }
      // Whole GPUs: each is held whole (TaskBytesOnGpu); the bytes shown
      // are this node's GPU size, not the gang's smallest.
      t->set_whole_gpus(placement.whole_gpus);
      t->set_reserved_bytes_per_gpu(placement.whole_gpus ? node_gpu_bytes
                                                         : placement.reserved_bytes_per_gpu);
      TaskToLocked(job, *t, v1::TASK_STATE_STARTING);
      rank_hosts.push_back(na.node);
    }
  }
  job.set_world_size(rank);
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
  job.set_jax_port(rank > 1 ? AllocatePortLocked(master) : 0);
  TransitionLocked(job, v1::JOB_STATE_SCHEDULED, "", deferred);
  if (PreflightWantedLocked(job, static_cast<int>(placement.nodes.size()))) {
    // The job's own rendezvous opens and its tasks start once it passes.
    BeginPreflightLocked(job);
    return;
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
  v1::CoordinatorMessage msg;
  v1::StopTask* stop = msg.mutable_stop_task();
  *stop->mutable_task() = RefOf(job, task);
  stop->set_grace_ms(absl::ToInt64Milliseconds(config_.stop_grace));
  SendLocked(task.node(), std::move(msg));
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

}  // namespace trainctl::coord
