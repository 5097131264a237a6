// Coordinator: agents and nodes: registration (identity, reconciliation of
// what an agent runs), task status reports, node loss, the node view.
// Declared in coordinator.h.

#include "coordinator/coordinator.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/gpu_types.h"
#include "coordinator/node_admin.h"
#include "coordinator/recovery.h"
#include "coordinator/submit_checks.h"

namespace trainctl::coord {
namespace {

// Every GPU of `node`, held whole (a verify job's placement).
sched::Placement WholeNode(const v1::Node& node) {
  sched::Placement p;
  p.whole_gpus = true;
  sched::NodeAssignment& na = p.nodes.emplace_back();
  na.node = node.name();
  for (const v1::Gpu& g : node.gpus()) na.gpu_indices.push_back(g.index());
  return p;
}

}  // namespace

absl::Status Coordinator::RegisterAgent(const v1::RegisterNode& reg,
                                       AgentConnection* conn) {
  const v1::Node& n = reg.node();
  TC_RETURN_IF_ERROR(NodeRegistry::Validate(n));
  Deferred deferred;
  {
    EventLock lock(this);
    TC_RETURN_IF_ERROR(nodes_.CheckNameFree(reg, conn, clock_->Now()));
    TC_RETURN_IF_ERROR(nodes_.CheckGpusFree(reg));
    // Stored first: a registration that cannot be stored changes nothing.
    v1::Node updated = n;
    SetGpuTypes(updated);
    auto prior = nodes_.find(n.name());
    updated.set_state(prior == nodes_.end() ? v1::NODE_STATE_UNSPECIFIED
                                            : prior->second.node.state());
    if (absl::Status s = TransitionNode(updated, v1::NODE_STATE_READY); !s.ok()) {
      ReportIllegalTransitionLocked(s);
      return s;
    }
    // The admin state is the coordinator's: kept across registrations, and a
    // GPU the node offered before and lacks now drains it.
    *updated.mutable_admin() = nodes_.AdminOf(n.name());
    if (prior != nodes_.end() && InService(updated)) {
      if (std::string gone = MissingGpus(prior->second.node, n); !gone.empty()) {
        *updated.mutable_admin() = AutomaticDrain(
            absl::StrCat("GPU lost: ", gone, " missing at registration"), clock_->Now());
        TC_LOG_WARN("node {} drained: {}", n.name(), updated.admin().reason());
      }
    }
    // Queued, not waited for: a node record lost to a crash only means the
    // agent registers again (it would anyway, after a restart).
    absl::StatusOr<WriteTicket> stored = store_->EnqueuePutNode(updated);
    if (stored.ok()) last_ticket_ = std::max(last_ticket_, *stored);
    if (!stored.ok()) {
      return absl::UnavailableError(
          absl::StrCat("could not store node ", n.name(), ": ",
                       stored.status().message()));
    }
    auto [entry, was_lost] = nodes_.Admit(reg, std::move(updated), conn, clock_->Now());
    NodeEntry& e = *entry;
    ++counters_.agent_registrations;
    TC_LOG_INFO("node {} registered ({} GPUs, {} running tasks{})", n.name(),
                n.gpus_size(), reg.running_tasks_size(),
                was_lost ? ", was lost" : "");
    // The ack goes first: the agent reads it before anything else.
    conn->Send(nodes_.Ack());

    // Reconcile what the agent runs with what we expect there (recovery.h).
    Reconciliation plan = Reconcile(reg, jobs_);
    e.stopping_unplaced = std::move(plan.unplaced);
    for (const v1::TaskRef& ref : plan.started) {
      v1::TaskStatus running;
      *running.mutable_task() = ref;
      running.set_state(v1::TASK_STATE_RUNNING);
      HandleTaskStatusLocked(n.name(), running, deferred);
    }
    for (const v1::TaskRef& ref : plan.stop) conn->Send(StopMessage(ref, config_.stop_grace));
    // Exits we may have died before storing are applied (HandleTaskStatusLocked
    // ignores tasks no longer live) before anything not reported is lost.
    for (const v1::TaskStatus& st : plan.replay) HandleTaskStatusLocked(n.name(), st, deferred);
    const absl::flat_hash_set<TaskKey>& reported = plan.reported;
    draining_.RemoveIf([&](const DrainingTask& d) {
      return d.task.node() == n.name() &&
             !reported.contains({d.job_id, d.attempt, d.probe_run, d.task.rank()});
    });
    LoseTasksLocked(
        n.name(),
        [&](const v1::Job& job, const v1::Task& t) { return !reported.contains(KeyOf(job, t)); },
        absl::StrCat("was not running when the agent on ", n.name(), " (re)registered"),
        /*stop=*/false, deferred);
    StopTasksThatNoLongerFitLocked(e, deferred);
    RequestScheduleLocked(deferred);
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

void Coordinator::StopTasksThatNoLongerFitLocked(NodeEntry& e, Deferred& deferred) {
  const std::string& name = e.node.name();
  const absl::flat_hash_set<int> bad = OverbookedGpus(e, jobs_, draining_);
  if (bad.empty()) return;
  auto on_bad_gpu = [&](const v1::Task& t) {
    for (int gpu : OwnedGpus(t)) {
      if (bad.contains(gpu)) return true;
    }
    return false;
  };
  draining_.RemoveIf([&](const DrainingTask& d) {
    if (d.task.node() != name || !on_bad_gpu(d.task)) return false;
    SendLocked(name, StopMessage(d.Ref(), config_.stop_grace));
    return true;
  });
  LoseTasksLocked(
      name, [&](const v1::Job&, const v1::Task& t) { return on_bad_gpu(t); },
      absl::StrCat("no longer fits its GPU: node ", name,
                   " re-registered with a GPU missing or smaller"),
      /*stop=*/true, deferred);
}

void Coordinator::AgentDisconnected(const std::string& node, AgentConnection* conn) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.conn != conn) return;
  it->second.conn = nullptr;
  TC_LOG_WARN("node {}: agent stream ended; lost in {} unless it reconnects", node,
              absl::FormatDuration(config_.node_timeout));
}

void Coordinator::HandleTaskStatusLocked(const std::string& node,
                                         const v1::TaskStatus& st,
                                         Deferred& deferred) {
  const v1::TaskRef& ref = st.task();
  const bool ended = st.state() == v1::TASK_STATE_EXITED ||
                     st.state() == v1::TASK_STATE_START_FAILED;
  if (ended) {
    // A process stopped at registration, whose GPUs were unknown, is gone.
    auto nt = nodes_.find(node);
    if (nt != nodes_.end()) {
      nt->second.stopping_unplaced.erase(TaskKey::Of(ref));
    }
  }
  auto jt = jobs_.find(ref.job_id());
  if (jt == jobs_.end() || !IsCurrent(jt->second, ref)) {
    // A task of an earlier attempt: it frees its GPUs when it ends.
    if (ended) {
      // Only the node running the task may report it ended.
      draining_.Ended(TaskKey::Of(ref), node);
    }
    return;
  }
  v1::Job& job = jt->second;
  v1::Task* task = nullptr;
  for (v1::Task& t : *job.mutable_tasks()) {
    if (t.rank() == ref.rank() && t.node() == node) task = &t;
  }
  if (task == nullptr || !IsLive(task->state())) return;
  const int64_t now_ms = ToUnixMs(clock_->Now());
  if (!st.log_path().empty()) task->set_log_path(st.log_path());
  if (st.task().pid() != 0) task->set_pid(st.task().pid());
  if (st.state() == v1::TASK_STATE_RUNNING) {
    if (!st.run_as().empty()) {
      task->set_run_as(st.run_as());
      task->set_uid(st.uid());
    }
    if (task->state() == v1::TASK_STATE_STARTING) {
      TaskToLocked(job, *task, v1::TASK_STATE_RUNNING);
      task->set_start_time_ms(now_ms);
    }
    if (job.state() == v1::JOB_STATE_SCHEDULED && !InPreflight(job) &&
        std::all_of(job.tasks().begin(), job.tasks().end(), [](const v1::Task& t) {
          return t.state() == v1::TASK_STATE_RUNNING;
        })) {
      TransitionLocked(job, v1::JOB_STATE_RUNNING, "", deferred);
    }
    // Lost in a crash, it comes back with the agent's registration (the task
    // is listed as running): not worth a commit of its own.
    PersistLocked(job, /*lazily=*/true);
    return;
  }
  if (!ended) return;
  if (!IsValidTaskEdge(task->state(), st.state())) {
    // The agent's word, not the coordinator's state: refused, not a bug here.
    TC_LOG_WARN("node {}: job {} rank {}: ignoring a report of {} for a task that is {}",
                node, job.id(), task->rank(), v1::TaskState_Name(st.state()),
                v1::TaskState_Name(task->state()));
    return;
  }
  TaskToLocked(job, *task, st.state());
  task->set_exit_code(st.exit_code());
  task->set_signal(st.signal());
  task->set_message(st.message());
  task->set_end_time_ms(now_ms);
  // A probe's result line (the agent read it from the probe's log).
  PreflightRuns::RecordResult(job, *task, st);
  OnTaskEndedLocked(job, deferred);
  PersistLocked(job);
}

void Coordinator::MarkNodeLostLocked(NodeEntry& e, const std::string& why,
                                     Deferred& deferred) {
  NodeToLocked(e, v1::NODE_STATE_LOST);
  if (e.conn != nullptr) {
    e.conn->Close(absl::UnavailableError(why));
    e.conn = nullptr;
  }
  if (absl::StatusOr<WriteTicket> t = store_->EnqueuePutNode(e.node); t.ok()) {
    last_ticket_ = std::max(last_ticket_, *t);
  }
  TC_LOG_WARN("node {} lost: {}", e.node.name(), why);
  e.stopping_unplaced.clear();
  const std::string& name = e.node.name();
  draining_.RemoveIf([&](const DrainingTask& d) { return d.task.node() == name; });

  LoseTasksLocked(
      name, [](const v1::Job&, const v1::Task&) { return true; },
      absl::StrCat("was lost with node ", name, " (", why, ")"), /*stop=*/false, deferred);
  for (int64_t id : jobs_.ActiveIds()) {
    v1::Job& job = jobs_.at(id);
    // A pre-flight whose probe on this node had already ended: passing, it
    // would start the job's ranks on the lost node. Abort it and place the
    // gang again (no restart used up), as after a failed pre-flight.
    const bool placed_here =
        std::any_of(job.tasks().begin(), job.tasks().end(),
                    [&](const v1::Task& t) { return t.node() == name; });
    if (InPreflight(job) && placed_here) {
      for (v1::Task& t : *job.mutable_tasks()) {
        if (IsLive(t.state()) && t.state() != v1::TASK_STATE_STOPPING) {
          StopTaskLocked(job, t);
        }
      }
      TransitionLocked(job, v1::JOB_STATE_PENDING,
                       absl::StrCat("pre-flight aborted: node ", name,
                                    " was lost after its probe ended (", why,
                                    "); the gang is placed and probed again"),
                       deferred);
      PersistLocked(job);
    }
  }
}

bool Coordinator::ExpireStaleNodesLocked(absl::Time now, Deferred& deferred) {
  const std::vector<std::string> stale = nodes_.Stale(now);
  for (const std::string& name : stale) {
    NodeEntry& e = nodes_[name];
    MarkNodeLostLocked(
        e,
        absl::StrCat("no heartbeat for ",
                     absl::FormatDuration(absl::Trunc(now - e.last_heartbeat,
                                                      absl::Milliseconds(100)))),
        deferred);
  }
  return !stale.empty();
}

absl::StatusOr<v1::UpdateNodesResponse> Coordinator::UpdateNodes(
    const v1::UpdateNodesRequest& req, const std::string& by) {
  TC_RETURN_IF_ERROR(ValidateUpdateNodes(req));
  Deferred deferred;
  WriteTicket ticket = 0;
  v1::UpdateNodesResponse out;
  {
    EventLock lock(this);
    for (const std::string& name : req.nodes()) {
      if (nodes_.find(name) == nodes_.end()) {
        return absl::NotFoundError(absl::StrCat("nodes: no node ", name, " is registered"));
      }
      if (req.verify()) TC_RETURN_IF_ERROR(CanVerifyLocked(name));
    }
    const absl::Time now = clock_->Now();
    for (const std::string& name : req.nodes()) {
      if (req.verify()) {
        if (InService(nodes_.at(name).node)) continue;  // nothing to resume
        TC_ASSIGN_OR_RETURN(const int64_t job, StartVerifyLocked(name, by, deferred));
        (*out.mutable_verify_jobs())[name] = job;
        v1::NodeAdmin admin = nodes_.at(name).node.admin();
        admin.set_verify_job_id(job);
        TC_ASSIGN_OR_RETURN(ticket, SetNodeAdminLocked(name, std::move(admin), deferred));
        continue;
      }
      TC_ASSIGN_OR_RETURN(ticket, SetNodeAdminLocked(name, AdminAfter(req, by, now), deferred));
    }
    RequestScheduleLocked(deferred);
  }
  RunDeferred(deferred);
  TC_RETURN_IF_ERROR(WaitStored(std::max(ticket, LastTicket())));
  for (v1::NodeView& v : ListNodes()) {
    if (absl::c_linear_search(req.nodes(), v.node().name())) *out.add_nodes() = std::move(v);
  }
  return out;
}

absl::Status Coordinator::CanVerifyLocked(const std::string& name) const {
  const NodeEntry& e = nodes_.at(name);
  VerifyFacts facts;
  facts.connected = e.conn != nullptr;
  facts.runs_probes = e.probe_tasks;
  facts.busy = NodeHoldsTasks(jobs_, draining_, name) || !e.stopping_unplaced.empty();
  facts.jobs_running = static_cast<int>(JobsHoldingNode(jobs_, name).size());
  return CanVerify(e.node, facts);
}

absl::StatusOr<int64_t> Coordinator::StartVerifyLocked(const std::string& name,
                                                      const std::string& by,
                                                      Deferred& deferred) {
  const v1::Node& node = nodes_.at(name).node;
  const int64_t id = jobs_.next_id();
  v1::Job job = NewPendingJob(VerifySpec(node, by), id, id, ToUnixMs(clock_->Now()),
                              /*shares_env=*/false, config_.checkpoint_root);
  if (absl::Status stored = EnqueueJobLocked(job); !stored.ok()) {
    return absl::UnavailableError(
        absl::StrCat("verify: the job was not accepted: ", stored.message()));
  }
  jobs_.Add(std::move(job));
  ++counters_.jobs_submitted;
  TC_LOG_INFO("job {} verifies node {} (resume --verify by {})", id, name, by);
  StartAttemptLocked(jobs_.at(id), WholeNode(node), deferred);
  return id;
}

void Coordinator::OnVerifyEndedLocked(const v1::Job& job, Deferred& deferred) {
  auto it = nodes_.find(job.spec().verify_node());
  if (it == nodes_.end() || it->second.node.admin().verify_job_id() != job.id()) return;
  absl::StatusOr<WriteTicket> stored =
      SetNodeAdminLocked(it->first, AdminAfterVerify(it->second.node.admin(), job), deferred);
  if (!stored.ok()) TC_LOG_ERROR("node {}: {}", it->first, stored.status().ToString());
  RequestScheduleLocked(deferred);
}

absl::StatusOr<WriteTicket> Coordinator::SetNodeAdminLocked(const std::string& name,
                                                            v1::NodeAdmin admin,
                                                            Deferred& deferred) {
  v1::Node updated = nodes_.at(name).node;
  const bool was_down = updated.admin().state() == v1::NODE_ADMIN_STATE_DOWN;
  *updated.mutable_admin() = std::move(admin);
  // Stored first: an admin state that cannot be stored changes nothing.
  absl::StatusOr<WriteTicket> t = store_->EnqueuePutNode(updated);
  if (!t.ok()) {
    return absl::UnavailableError(
        absl::StrCat("could not store node ", name, ": ", t.status().message()));
  }
  last_ticket_ = std::max(last_ticket_, *t);
  nodes_.SetAdmin(name, updated.admin());
  TC_LOG_INFO("node {}: {}", name,
              InService(updated) ? "resumed" : DescribeAdmin(updated, clock_->Now()));
  if (updated.admin().state() == v1::NODE_ADMIN_STATE_DOWN && !was_down) {
    RequeueFromNodeLocked(updated, deferred);
  }
  return *t;
}

bool Coordinator::RequeueFromNodeLocked(const v1::Node& node, Deferred& deferred) {
  const std::string why = RequeueReason(node);
  const bool down = node.admin().state() == v1::NODE_ADMIN_STATE_DOWN;
  bool any = false;
  for (int64_t id : JobsHoldingNode(jobs_, node.name())) {
    v1::Job& job = jobs_.at(id);
    // A drain's deadline spares the node's own verify job; a DOWN stops it.
    const bool verify = job.spec().verify_node() == node.name();
    if (verify && !down) continue;
    for (v1::Task& t : *job.mutable_tasks()) {
      if (IsLive(t.state()) && t.state() != v1::TASK_STATE_STOPPING) StopTaskLocked(job, t);
    }
    // Counted as a preemption: it does not use up --max-restarts.
    job.set_preemptions(job.preemptions() + 1);
    ++counters_.preemptions;
    TransitionLocked(job, v1::JOB_STATE_PENDING, why, deferred);
    // A verify job has nowhere else to go: it ends here.
    if (verify) {
      TransitionLocked(job, v1::JOB_STATE_FAILED,
                       absl::StrCat("the verify of node ", node.name(), " was interrupted: ", why),
                       deferred);
    }
    PersistLocked(job);
    any = true;
  }
  return any;
}

void Coordinator::FailStrandedVerifiesLocked(Deferred& deferred) {
  for (const auto& [name, e] : nodes_) {
    const int64_t id = e.node.admin().verify_job_id();
    auto it = id == 0 ? jobs_.end() : jobs_.find(id);
    if (it == jobs_.end() || it->second.state() != v1::JOB_STATE_PENDING) continue;
    v1::Job& job = it->second;
    TransitionLocked(job, v1::JOB_STATE_FAILED,
                     absl::StrCat("the verify of node ", name, " was interrupted: ", job.reason()),
                     deferred);
    PersistLocked(job);
  }
}

bool Coordinator::EnforceDrainDeadlinesLocked(absl::Time now, Deferred& deferred) {
  bool any = false;
  for (const auto& [name, e] : nodes_) {
    if (DrainDeadlinePassed(e.node, now)) any = RequeueFromNodeLocked(e.node, deferred) || any;
  }
  FailStrandedVerifiesLocked(deferred);
  return any;
}

std::vector<v1::NodeView> Coordinator::ListNodes() const {
  absl::MutexLock lock(&mu_);
  return NodeViews(jobs_, nodes_, draining_);
}

// ---------------------------------------------------------------- agents

absl::Status Coordinator::HandleAgentMessage(const std::string& node,
                                             AgentConnection* conn,
                                             const v1::AgentMessage& msg) {
  Deferred deferred;
  {
    EventLock lock(this);
    // A task exit and the placements it makes room for commit together.
    CommitHold hold(store_);
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.conn != conn) {
      return absl::FailedPreconditionError(
          absl::StrCat("node ", node, " is not registered on this stream"));
    }
    NodeEntry& e = it->second;
    switch (msg.msg_case()) {
      case v1::AgentMessage::kHeartbeat:
        NodeRegistry::RecordHeartbeat(e, msg.heartbeat(), clock_->Now());
        if (e.fences) {
          v1::CoordinatorMessage grant;
          grant.mutable_lease_grant()->set_lease_ms(
              absl::ToInt64Milliseconds(config_.node_timeout));
          conn->Send(grant);
        }
        counters_.ignored_task_usage += measured_.RecordTaskUsage(jobs_, node, msg.heartbeat());
        break;
      case v1::AgentMessage::kTaskOom: {
        const v1::TaskOutOfMemory& oom = msg.task_oom();
        auto jt = jobs_.find(oom.job_id());
        if (jt == jobs_.end() || jt->second.attempt() != oom.attempt()) break;
        for (v1::Task& t : *jt->second.mutable_tasks()) {
          if (t.rank() == oom.rank() && t.node() == node) t.set_out_of_memory(true);
        }
        TC_LOG_WARN("job {} rank {} on {} ran out of GPU memory: {}", oom.job_id(),
                    oom.rank(), node, oom.line());
        break;
      }
      case v1::AgentMessage::kTaskStatus:
        HandleTaskStatusLocked(node, msg.task_status(), deferred);
        // A task reported running frees nothing and queues nothing: the pass
        // would decide as the last one did (a pass over a long queue costs
        // milliseconds; bench/README.md, scheduler throughput).
        if (msg.task_status().state() != v1::TASK_STATE_RUNNING) {
          RequestScheduleLocked(deferred);
        }
        break;
      case v1::AgentMessage::kTaskStatusBatch: {
        // Tasks that ended in the same heartbeat period: each handled as its
        // own task_status would be, then one scheduling pass for them all.
        bool frees = false;
        for (const v1::TaskStatus& st : msg.task_status_batch().statuses()) {
          HandleTaskStatusLocked(node, st, deferred);
          frees = frees || st.state() != v1::TASK_STATE_RUNNING;
        }
        if (frees) RequestScheduleLocked(deferred);
        break;
      }
      case v1::AgentMessage::kLogChunk: {
        const v1::LogChunk& chunk = msg.log_chunk();
        // Only the node asked may answer (another could guess the id).
        TC_ASSIGN_OR_RETURN(std::optional<LogRelay::Read> read,
                            logs_.Take(chunk.request_id(), node));
        if (!read.has_value()) break;  // Timed out already.
        // At the end when the task is over and nothing more came back.
        auto jt = jobs_.find(read->job_id);
        bool ended = true;
        if (jt != jobs_.end()) {
          for (const v1::Task& t : jt->second.tasks()) {
            if (t.rank() == read->rank && IsLive(t.state())) ended = false;
          }
        }
        absl::StatusOr<v1::GetLogsResponse> result =
            LogRelay::Answer(chunk, ended, read->max_bytes, read->task);
        deferred.push_back([done = std::move(read->done), r = std::move(result)]() mutable {
          done(std::move(r));
        });
        break;
      }
      default:
        return absl::InvalidArgumentError("agent message: unexpected kind");
    }
  }
  RunDeferred(deferred);
  return absl::OkStatus();
}

void Coordinator::LoseTasksLocked(
    const std::string& node, absl::FunctionRef<bool(const v1::Job&, const v1::Task&)> pred,
    const std::string& message, bool stop, Deferred& deferred) {
  const int64_t now_ms = ToUnixMs(clock_->Now());
  for (int64_t id : jobs_.ActiveIds()) {
    v1::Job& job = jobs_.at(id);
    bool changed = false;
    for (v1::Task& t : *job.mutable_tasks()) {
      if (t.node() != node || !IsLive(t.state()) || !pred(job, t)) continue;
      if (stop) SendLocked(node, StopMessage(RefOf(job, t), config_.stop_grace));
      TaskToLocked(job, t, v1::TASK_STATE_LOST);
      t.set_message(message);
      t.set_end_time_ms(now_ms);
      changed = true;
    }
    if (changed) {
      OnTaskEndedLocked(job, deferred);
      PersistLocked(job);
    }
  }
}

}  // namespace trainctl::coord
