#include "coordinator/coordinator.h"

#include <cassert>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/recovery.h"

namespace trainctl::coord {
namespace {


}  // namespace

Coordinator::Coordinator(CoordinatorConfig config, StateStore* store,
                         const Clock* clock)
    : config_(std::move(config)),
      store_(store),
      clock_(clock),
      scheduler_(config_.scheduler),
      rendezvous_(config_.rendezvous_fanout_threads),
      nodes_(config_.heartbeat_interval, config_.node_timeout),
      experiments_(config_.limits.max_metric_points_per_job),
      view_(config_.scheduler.max_tasks_per_gpu),
      starts_({config_.advertise_address, config_.run_jobs_as_user, config_.allow_root_jobs,
               config_.packer.initial_reservation_fraction, config_.slurm_env}),
      measured_({config_.usage.sample_period, config_.usage.history_samples,
                 config_.usage.finished_jobs, config_.diagnosis},
                config_.packer),
      preflight_(config_.preflight) {
  absl::MutexLock lock(&mu_);
  nodes_.set_auto_drain(
      AutoDrain(config_.preflight.auto_drain_exclusions, config_.preflight.auto_drain_window));
  AddJobEdgeListenersLocked();
}

Coordinator::~Coordinator() {
  if (absl::Status s = WaitForWrites(); !s.ok()) {
    TC_LOG_ERROR("shutdown: the last state writes were not stored: {}", s.ToString());
  }
}

absl::Status Coordinator::WaitForWrites() {
  // Callbacks run in ticket order, so held-back StartTasks up to the last
  // ticket go out before this returns.
  return store_->WaitDurable(LastTicket());
}

WriteTicket Coordinator::LastTicket() const {
  absl::MutexLock lock(&mu_);
  return last_ticket_;
}

void Coordinator::SetAdvertiseAddress(std::string address) {
  absl::MutexLock lock(&mu_);
  starts_.set_coordinator_address(std::move(address));
}

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorConfig config, StateStore* store, const Clock* clock) {
  std::unique_ptr<Coordinator> c(new Coordinator(std::move(config), store, clock));
  absl::MutexLock lock(&c->mu_);
  TC_RETURN_IF_ERROR(c->LoadLocked());
  return c;
}

absl::Status Coordinator::LoadLocked() {
  TC_ASSIGN_OR_RETURN(std::string cluster_id, store_->ClusterId());
  nodes_.set_cluster_id(std::move(cluster_id));
  TC_ASSIGN_OR_RETURN(StoredState state, store_->LoadSummarized());
  const absl::Time now = clock_->Now();
  // Retired jobs outside sweeps come as summaries only: their records stay
  // in the store.
  for (const JobSummary& r : state.retired) jobs_.AddRetired(r);
  state.retired = {};
  for (v1::Job& job : state.jobs) {
    if (job.state() == v1::JOB_STATE_SCHEDULED ||
        job.state() == v1::JOB_STATE_RUNNING) {
      std::vector<std::string> hosts;
      for (const v1::Task& t : job.tasks()) hosts.push_back(t.node());
      rendezvous_.Open(job.id(), job.attempt(), job.attempt_token(),
                       std::move(hosts));
    }
    // Records stored before Task.whole_gpus existed: a gang's tasks held
    // their GPUs whole (their bytes were the gang's smallest GPU's size).
    if (job.kind() == v1::JOB_KIND_GANG) {
      for (v1::Task& t : *job.mutable_tasks()) t.set_whole_gpus(true);
    }
    if (job.preempted_for_job_id() != 0) {
      draining_.AddVictim(job.preempted_for_job_id(), job.id());
    }
    experiments_.LoadRungs(job);
    jobs_.Add(std::move(job));
  }
  TC_RETURN_IF_ERROR(jobs_.LoadSharedEnvs(*store_));
  for (const auto& [id, n] : state.metric_points) experiments_.SetPoints(id, n);
  for (v1::Node& node : state.nodes) {
    NodeEntry& e = nodes_[node.name()];
    e.node = std::move(node);
    // A grace period to re-register before the node's tasks count as lost.
    e.last_heartbeat = now;
  }
  // No waiter, log read or rendezvous fetch exists yet: nothing deferred
  // needs to run.
  Deferred unused;
  const int stale = ResolveStaleReservationsLocked(unused);
  // A gang caught mid-pre-flight is placed and probed again: the probes'
  // rendezvous (in memory) is gone with the old process, so their results
  // could not be trusted. Its probe tasks drain (agents are told to stop
  // them when they re-register); the requeue uses up no restart.
  for (int64_t id : jobs_.ActiveIds()) {
    v1::Job& job = jobs_.at(id);
    if (!PreflightRuns::CaughtMidRun(job)) continue;
    v1::JobPreflight* pf = job.mutable_preflight();
    pf->set_requeues(pf->requeues() + 1);
    TransitionLocked(job, v1::JOB_STATE_PENDING,
                     absl::StrCat("the coordinator restarted during pre-flight ",
                                  pf->runs_size(),
                                  "; the gang is placed and probed again"),
                     unused);
    PersistLocked(job);
  }
  // Sweep trials came as full records (for the ASHA rungs above); retired
  // ones go now.
  // Dependencies are judged again from the stored records: the same
  // verdicts as before the restart (one that can never hold ends now).
  jobs_.deps().MarkDirty(jobs_.deps().WithDependency());
  EvaluateDependenciesLocked(unused);
  jobs_.FinishLoad();
  EvictRetiredLocked();
  const int64_t known = jobs_.next_id() - 1;
  TC_LOG_INFO("loaded {} jobs ({} retired, kept as summaries) and {} nodes from the store{}",
              known, known - static_cast<int64_t>(jobs_.size()), nodes_.size(),
              stale == 0 ? ""
                         : absl::StrCat("; ", stale,
                                        " tasks whose end was not stored are "
                                        "taken as ended"));
  return absl::OkStatus();
}

int Coordinator::ResolveStaleReservationsLocked(Deferred& deferred) {
  int resolved = 0;
  // Each round ends one task, so this ends; stale records are rare and few.
  while (std::optional<StaleClaim> stale = FindStaleClaim(jobs_, draining_, nodes_)) {
    ++resolved;
    const StaleClaim& c = *stale;
    const std::string& where = c.where;
    TC_LOG_WARN("job {} rank {}: its stored record and a later placement both "
                "claim {}; taking it as ended (its end was not stored)",
                c.job_id, c.rank, where);
    if (c.draining) {
      bool taken = false;
      draining_.RemoveIf([&](const DrainingTask& d) {
        if (taken || d.job_id != c.job_id || d.task.rank() != c.rank ||
            d.placement_seq != c.seq) {
          return false;
        }
        taken = true;
        return true;
      });
      continue;
    }
    v1::Job& job = jobs_.at(c.job_id);
    for (v1::Task& t : *job.mutable_tasks()) {
      if (t.rank() != c.rank || !IsLive(t.state())) continue;
      TaskToLocked(job, t, v1::TASK_STATE_LOST);
      t.set_message(absl::StrCat(
          "its end was not stored before a coordinator restart; a later "
          "placement took its GPU (", where, ")"));
      t.set_end_time_ms(ToUnixMs(clock_->Now()));
    }
    OnTaskEndedLocked(job, deferred);
    PersistLocked(job);
  }
  return resolved;
}

v1::Job Coordinator::ForUserLocked(const v1::Job& job) const {
  v1::Job copy = RedactedJob(job);
  if (const int64_t points = experiments_.Points(job.id()); points > 0) {
    copy.set_metric_points(points);
  }
  CountRunningGpuHours(copy, ToUnixMs(clock_->Now()));
  return copy;
}

void Coordinator::RunDeferred(Deferred& deferred) {
  for (auto& fn : deferred) std::move(fn)();
  deferred.clear();
}

void Coordinator::EvictRetiredLocked() {
  // Kept while a task of an earlier attempt still drains (ListNodes and the
  // preemption wait look the job up).
  jobs_.Evict([this](int64_t id) {
    return draining_.HoldsJob(id);
  });
}

absl::StatusOr<const v1::Job*> Coordinator::LookupLocked(int64_t id,
                                                         v1::Job* scratch) const {
  return jobs_.Lookup(id, scratch, *store_);
}

absl::Status Coordinator::EnqueueJobLocked(const v1::Job& job, bool lazily) {
  absl::StatusOr<WriteTicket> ticket =
      lazily ? store_->EnqueuePutJobLazily(job) : store_->EnqueuePutJob(job);
  if (!ticket.ok()) return ticket.status();
  last_ticket_ = std::max(last_ticket_, *ticket);
  return absl::OkStatus();
}

void Coordinator::PersistLocked(const v1::Job& job, bool lazily) {
  jobs_.Track(job);
  // Queued, not waited for: whoever replies on the strength of this write
  // (SubmitJob, CancelJob, a StartTask) waits for its ticket outside mu_.
  // `s` says whether the store took it (a synchronous store: stored); a
  // queued write that later fails to commit is logged by its waiter.
  absl::Status s = EnqueueJobLocked(job, lazily);
  jobs_.NoteStored(job.id(), s);
  if (!s.ok()) {
    TC_LOG_ERROR("could not store job {}: {}", job.id(), s.ToString());
  }
}

void Coordinator::ReportIllegalTransitionLocked(const absl::Status& error) {
  ++counters_.illegal_transitions;
  TC_LOG_ERROR("BUG: {} (the state is left as it was)", std::string(error.message()));
  // Fatal where it costs nothing to users: debug builds and tests built so.
  assert(false && "illegal state transition");
}

bool Coordinator::TaskToLocked(const v1::Job& job, v1::Task& task, v1::TaskState to) {
  absl::Status s = TransitionTask(task, to);
  if (s.ok()) return true;
  ReportIllegalTransitionLocked(
      absl::InternalError(absl::StrCat("job ", job.id(), " ", s.message())));
  return false;
}

bool Coordinator::NodeToLocked(NodeEntry& node, v1::NodeState to) {
  absl::Status s = TransitionNode(node.node, to);
  if (s.ok()) return true;
  ReportIllegalTransitionLocked(s);
  return false;
}

bool Coordinator::TransitionLocked(v1::Job& job, v1::JobState to,
                                   absl::string_view reason, Deferred& deferred) {
  if (!IsValidJobEdge(job.state(), to)) {
    ReportIllegalTransitionLocked(absl::InternalError(absl::StrCat(
        "job ", job.id(), ": illegal job transition ", v1::JobState_Name(job.state()),
        " -> ", v1::JobState_Name(to), reason.empty() ? "" : " (", reason,
        reason.empty() ? "" : ")")));
    return false;
  }
  const v1::JobState from = job.state();
  const int64_t now_ms = ToUnixMs(clock_->Now());
  if (LeavesAttempt(from, to) && job.start_time_ms() > 0) {
    // The attempt's GPU-time counts towards its LAS level.
    job.set_attained_gpu_ms(job.attained_gpu_ms() +
                            std::max<int64_t>(0, now_ms - job.start_time_ms()) *
                                JobGpuCount(job));
  }
  jobs_.CountEdge(job, from, to);
  job.set_state(to);
  job.set_reason(std::string(reason));
  if (to == v1::JOB_STATE_RUNNING) job.set_start_time_ms(now_ms);
  if (IsFinal(to)) job.set_end_time_ms(now_ms);
  const JobEdge edge{job, from, to, reason, now_ms, deferred};
  for (const JobEdgeListener& listener : job_edge_listeners_) listener(edge);
  TC_LOG_INFO("job {} {} -> {}{}{}", job.id(), v1::JobState_Name(from),
              v1::JobState_Name(to), reason.empty() ? "" : ": ", std::string(reason));
  return true;
}

void Coordinator::AddJobEdgeListenersLocked() {
  // In this order: metrics read the previous attempt's record before a
  // placement opens the next one; the attempt record and the pre-flight
  // read the attempt's tasks and groups before a new attempt clears them.
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    // Metrics: counters for Stats(), and the queue wait for on_job_placed
    // (observed after the lock).
    if (IsFinal(e.to)) ++counters_.jobs_finished[StateSlot(e.to)];
    if (e.from != v1::JOB_STATE_PENDING || e.to != v1::JOB_STATE_SCHEDULED) return;
    ++counters_.placements;
    if (!config_.hooks.on_job_placed) return;
    const absl::Duration waited = absl::Milliseconds(QueueWaitMs(e.job, e.now_ms));
    e.deferred.push_back([this, waited]() { config_.hooks.on_job_placed(waited); });
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    const auto open = [&e]() {
      return e.job.attempts_size() > 0 &&
             e.job.attempts(e.job.attempts_size() - 1).end_time_ms() == 0;
    };
    const bool was_open = open();
    RecordAttemptEdge(e.job, e.from, e.to, e.now_ms,
                      e.to == v1::JOB_STATE_SCHEDULED ? ExperimentStore::AttemptGpus(e.job, nodes_) : 0);
    // Accounting: the attempt that just ended, with the GPU-seconds its
    // samples measured as used; recorded after the lock (the hook's part
    // has its own lock and store writes).
    if (!was_open || open() || !config_.hooks.on_attempt_ended) return;
    const int ended = e.job.attempts(e.job.attempts_size() - 1).attempt();
    v1::UsageRecord record =
        UsageRecordOf(e.job, nodes_, measured_.usage().TakeUsedGpuSeconds(e.job.id(), ended));
    e.deferred.push_back([this, record = std::move(record)]() {
      config_.hooks.on_attempt_ended(record);
    });
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    // A verify job's end resumes its node, or keeps it out with the verdict.
    if (IsFinal(e.to) && !e.job.spec().verify_node().empty()) {
      OnVerifyEndedLocked(e.job, e.deferred);
    }
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    // The attempt's rendezvous group closes with it.
    if (!LeavesAttempt(e.from, e.to)) return;
    rendezvous_.Close(e.job.id(), e.job.attempt(), e.reason);
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    if (e.from != v1::JOB_STATE_SCHEDULED || e.to == v1::JOB_STATE_SCHEDULED) return;
    // Leaving a pre-flight (requeued, failed, cancelled, preempted): its
    // rendezvous group goes, and a run without a verdict is ABORTED.
    bool aborted = false;
    if (std::optional<int> run = preflight_.Leave(e.job, e.reason, e.now_ms, &aborted)) {
      rendezvous_.Close(e.job.id(), GroupRef(e.job.attempt(), *run), e.reason);
      if (aborted) ++counters_.preflight_runs[v1::PREFLIGHT_VERDICT_ABORTED];
    }
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    if (e.to != v1::JOB_STATE_PENDING) return;
    // A new attempt: tasks of the old one that still run keep their GPUs
    // until their exit is reported.
    v1::Job& job = e.job;
    for (const v1::Task& t : job.tasks()) {
      if (IsLive(t.state())) {
        draining_.Add({job.id(), job.attempt(), ProbeRunOf(job), t, job.placement_seq()});
      }
    }
    job.clear_tasks();
    // Live probes drain under their own key (above); the tasks of the new
    // attempt are the job's.
    if (job.has_preflight()) job.mutable_preflight()->set_probe_run(0);
    job.clear_attempt_token();
    job.set_attempt(job.attempt() + 1);
    job.set_start_time_ms(0);
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    if (IsFinal(e.to)) NotifyFinalLocked(e.job, e.deferred);
  });
  job_edge_listeners_.push_back([this](const JobEdge& e) {
    // Last, once the edge's other effects are done: the jobs that wait on
    // this one (or on its singleton group) are judged again; a requeued
    // job with a dependency is judged again too.
    DependencyIndex& deps = jobs_.deps();
    deps.MarkDirty(deps.Affected(e.job));
    if (e.to == v1::JOB_STATE_PENDING && !e.job.spec().dependency().empty()) {
      deps.MarkDirty({e.job.id()});
    }
    EvaluateDependenciesLocked(e.deferred);
  });
}

void Coordinator::NotifyFinalLocked(const v1::Job& job, Deferred& deferred) {
  for (JobWaiters::Done& done : waiters_.TakeAll(job.id())) {
    // Run after the caller's PersistLocked of this state: answered once the
    // end is stored, so a crash never takes back an end a waiter saw.
    deferred.push_back([this, done = std::move(done), j = RedactedJob(job)]() mutable {
      AnswerWhenStored(LastTicket(), std::move(j), std::move(done));
    });
  }
}

// ---------------------------------------------------------------- rendezvous

absl::Status Coordinator::PublishUniqueId(const v1::PublishUniqueIdRequest& req) {
  return rendezvous_.PublishRequest(req, clock_->Now(), config_.hooks.on_rendezvous_published);
}

void Coordinator::FetchUniqueIdAsync(const v1::FetchUniqueIdRequest& req,
                                     RendezvousTable::FetchDone done) {
  v1::FetchUniqueIdRequest one = req;
  one.clear_relayed_ranks();
  one.clear_id_count();
  one.clear_arrivals_only();
  FetchUniqueIdsAsync(one, [done = std::move(done)](
                               absl::StatusOr<std::vector<std::string>> ids) mutable {
    if (!ids.ok()) return done(ids.status());
    done(ids->empty() ? std::string() : std::move(ids->front()));
  });
}

void Coordinator::FetchUniqueIdsAsync(const v1::FetchUniqueIdRequest& req,
                                      RendezvousTable::FetchIdsDone done) {
  rendezvous_.FetchRequest(req, clock_->Now(), std::move(done));
}

// ---------------------------------------------------------------- metrics

CoordinatorStats Coordinator::Stats() const {
  absl::MutexLock lock(&mu_);
  CoordinatorStats stats = CollectStats(jobs_, nodes_, draining_, config_.scheduler.policy);
  stats.illegal_transitions = counters_.illegal_transitions;
  stats.ignored_task_usage = counters_.ignored_task_usage;
  stats.counters = counters_;
  const RendezvousTable::FetchCounts fetches = rendezvous_.fetch_counts();
  stats.counters.rendezvous_fetches_direct = fetches.direct;
  stats.counters.rendezvous_fetches_relayed = fetches.relayed;
  stats.counters.rendezvous_ranks_relayed = fetches.ranks_relayed;
  return stats;
}

// ---------------------------------------------------------------- time

void Coordinator::Tick() {
  const absl::Time now = clock_->Now();
  rendezvous_.Expire(now);
  Deferred deferred;
  {
    EventLock lock(this);
    const bool lost = ExpireStaleNodesLocked(now, deferred);
    for (JobWaiters::Expired& w : waiters_.Expire(now)) {
      deferred.push_back([done = std::move(w.done), j = RedactedJob(jobs_.at(w.job_id))]() mutable {
        done(std::move(j));
      });
    }
    for (LogRelay::Done& done : logs_.Expire(now)) {
      deferred.push_back([done = std::move(done)]() mutable {
        done(absl::DeadlineExceededError("the agent did not answer the log read in time"));
      });
    }
    const bool timed_out = EnforceTimeLimitsLocked(now, deferred) |
                           EnforceDrainDeadlinesLocked(now, deferred);
    const bool preflights_judged = ExpirePreflightsLocked(now, deferred);
    bool sampled = false;
    if (measured_.SampleDue(now)) {
      measured_.Sample(now, jobs_, nodes_, draining_, SnapshotLocked());
      sampled = true;
    }
    // Only a lost node or a stopped job changes what can be placed here; new
    // measurements change where auto-packed trials fit. Every other change
    // schedules where it happens.
    if (lost || timed_out || preflights_judged) {
      RequestScheduleLocked(deferred);
    } else {
      // A pass left to this event by another (or overdue) runs here.
      const bool served = ServeScheduleLocked(deferred);
      if (served && sampled) PackPendingLocked(deferred);
    }
    // Jobs that retired since the last tick leave memory (their records are
    // stored; reads go to the store).
    EvictRetiredLocked();
  }
  RunDeferred(deferred);
}

}  // namespace trainctl::coord
