// Coordinator: the user API over jobs: submit (one, many, an array), get,
// list, cancel, wait, why, logs. Declared in coordinator.h.

#include "coordinator/coordinator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/submit_checks.h"

namespace trainctl::coord {
namespace {

constexpr int kDefaultListLimit = 1000;

}  // namespace

// ---------------------------------------------------------------- user API

absl::StatusOr<int64_t> Coordinator::SubmitJob(const v1::JobSpec& spec,
                                               const std::string& request_id) {
  absl::Notification notified;
  absl::StatusOr<int64_t> result;
  SubmitJobAsync(spec, request_id, [&](absl::StatusOr<int64_t> id) {
    result = std::move(id);
    notified.Notify();
  });
  notified.WaitForNotification();
  return result;
}

void Coordinator::SubmitJobAsync(const v1::JobSpec& spec, const std::string& request_id,
                                 SubmitDone done, const SubmitCaller& caller) {
  SubmitBatchAsync(
      {spec}, request_id, /*batch=*/false,
      [done = std::move(done)](absl::StatusOr<std::vector<int64_t>> ids) mutable {
        if (!ids.ok()) {
          std::move(done)(ids.status());
          return;
        }
        std::move(done)(ids->front());
      },
      caller);
}

void Coordinator::SubmitJobsAsync(std::vector<v1::JobSpec> specs,
                                  const std::string& request_id, SubmitJobsDone done,
                                  const SubmitCaller& caller) {
  SubmitBatchAsync(std::move(specs), request_id, /*batch=*/true, std::move(done), caller);
}

void Coordinator::SubmitJobArrayAsync(v1::JobSpec spec, const std::vector<int>& task_ids,
                                      int max_running, const std::string& request_id,
                                      SubmitJobsDone done, const SubmitCaller& caller) {
  absl::StatusOr<std::vector<v1::JobSpec>> specs =
      ExpandArray(std::move(spec), task_ids, max_running, config_.scheduler.policy);
  if (!specs.ok()) {
    std::move(done)(specs.status());
    return;
  }
  SubmitBatchAsync(*std::move(specs), request_id, /*batch=*/true, std::move(done), caller,
                   /*exported_from_first=*/true);
}

void Coordinator::SubmitBatchAsync(std::vector<v1::JobSpec> specs,
                                   const std::string& request_id, bool batch,
                                   SubmitJobsDone done, const SubmitCaller& caller,
                                   bool exported_from_first) {
  const std::vector<bool> shares_env = ShareExportedEnv(specs, exported_from_first);
  // All or nothing: every spec is checked before anything is stored.
  if (absl::Status s = CheckSubmit(specs, batch, request_id, config_.scheduler.policy,
                                   config_.run_jobs_as_user && !config_.allow_root_jobs);
      !s.ok()) {
    std::move(done)(std::move(s));
    return;
  }
  absl::Status refused;
  Deferred deferred;
  std::vector<int64_t> ids;
  WriteTicket durable_at = 0;
  bool retried = false;
  {
    EventLock lock(this);
    if (!request_id.empty()) {
      if (std::optional<int64_t> first = jobs_.JobOfRequest(request_id)) {
        // A retry: the first call may not have seen its write durable yet.
        // Only the first job carries the request id; the call's jobs have
        // consecutive ids. Only its submitter's retry gets them: a request
        // id another user chose must not hand this caller their jobs.
        refused = CheckRequestOwnerLocked(*first, caller);
        for (size_t i = 0; i < specs.size() && refused.ok(); ++i) ids.push_back(*first + i);
        durable_at = last_ticket_;
        retried = true;
      }
    }
    if (!retried) {
      refused = jobs_.CheckPendingLimit(specs, config_.limits.max_pending_jobs,
                                        config_.limits.max_pending_jobs_per_user);
    }
    if (!retried && refused.ok() && !nodes_.empty()) {
      // A job no registered node could ever hold is refused, not accepted
      // to fail at once (with no node yet, the cluster is still starting).
      refused = CheckEverFits(scheduler_, SnapshotLocked(), specs, batch);
    }
    if (!retried && refused.ok()) {
      // The jobs' PENDING records and the placements they get below commit
      // together: one transaction (one fsync) per call, however many jobs.
      CommitHold hold(store_);
      const int64_t first_id = jobs_.next_id();
      const int64_t now_ms = ToUnixMs(clock_->Now());
      std::vector<v1::Job> jobs(specs.size());
      for (size_t i = 0; i < specs.size(); ++i) {
        jobs[i] = NewPendingJob(std::move(specs[i]), first_id + static_cast<int64_t>(i),
                                first_id, now_ms, shares_env[i], config_.checkpoint_root);
        if (i == 0) jobs[i].set_request_id(request_id);
      }
      refused = CheckDependenciesLocked(jobs, batch, caller);
      for (size_t i = 0; i < jobs.size() && refused.ok(); ++i) {
        v1::Job& job = jobs[i];
        // Queued first (a store that refuses at once refuses the call), then
        // placed; a job placed in this pass has its SCHEDULED record replace
        // the PENDING one still queued, so both go in one commit.
        absl::Status stored = EnqueueJobLocked(job);
        if (!stored.ok()) {
          // Nothing of the call is taken into memory, and the ids are given
          // out again, so a later submit overwrites any record a synchronous
          // store kept of the jobs before this one.
          refused = absl::UnavailableError(absl::StrCat(
              batch ? "the jobs were" : "the job was", " not accepted: ",
              stored.message()));
          break;
        }
      }
      if (refused.ok()) {
        if (std::find(shares_env.begin(), shares_env.end(), true) != shares_env.end()) {
          jobs_.ShareEnv(first_id, jobs.front().spec().exported_env());
        }
        for (v1::Job& job : jobs) {
          ids.push_back(job.id());
          if (!job.spec().dependency().empty()) jobs_.deps().MarkDirty({job.id()});
          jobs_.Add(std::move(job));
          ++counters_.jobs_submitted;
        }
        // Their reasons ("waiting for dependency ...") before the pass.
        EvaluateDependenciesLocked(deferred);
        if (ids.size() == 1) {
          TC_LOG_INFO("job {} submitted", ids.front());
        } else {
          TC_LOG_INFO("jobs {}-{} submitted", ids.front(), ids.back());
        }
        RequestScheduleLocked(deferred);
        durable_at = last_ticket_;
      }
    }
  }
  RunDeferred(deferred);
  if (!refused.ok()) {
    std::move(done)(std::move(refused));
    return;
  }
  // The ack waits for the jobs' writes (a retry: for whatever was queued
  // when it came, which covers the first call's writes), outside mu_.
  store_->WhenDurable(durable_at, [ids = std::move(ids), done = std::move(done)](
                                      absl::Status stored) mutable {
    if (!stored.ok()) {
      std::move(done)(absl::UnavailableError(absl::StrCat(
          ids.size() == 1 ? absl::StrCat("job ", ids.front())
                          : absl::StrCat("jobs ", ids.front(), "-", ids.back()),
          " may not have been stored: ", stored.message(),
          "; retry with the same request id")));
      return;
    }
    std::move(done)(std::move(ids));
  });
}

// ---------------------------------------------------------------- dependencies

namespace {

DepJobFacts FactsOf(const v1::Job& job) {
  DepJobFacts f;
  f.state = job.state();
  f.started = job.state() != v1::JOB_STATE_PENDING || job.attempt() > 0;
  f.user = job.spec().user();
  f.array_job_id = job.spec().array().array_job_id();
  f.task_id = job.spec().array().task_id();
  f.task_count = job.spec().array().task_count();
  return f;
}

}  // namespace

std::optional<DepJobFacts> Coordinator::DepFactsLocked(int64_t id) const {
  v1::Job scratch;
  absl::StatusOr<const v1::Job*> job = LookupLocked(id, &scratch);
  if (job.ok()) return FactsOf(**job);
  if (absl::IsNotFound(job.status())) return std::nullopt;
  TC_LOG_ERROR("dependency: cannot read job {}: {}", id, job.status().ToString());
  return DepJobFacts{};
}

absl::Status Coordinator::CheckDependenciesLocked(const std::vector<v1::Job>& jobs,
                                                  bool batch,
                                                  const SubmitCaller& caller) const {
  if (jobs.empty()) return absl::OkStatus();
  const int64_t first = jobs.front().id();
  auto facts = [&](int64_t id) -> std::optional<DepJobFacts> {
    if (id >= first && id < first + static_cast<int64_t>(jobs.size())) {
      return FactsOf(jobs[id - first]);
    }
    return DepFactsLocked(id);
  };
  for (size_t i = 0; i < jobs.size(); ++i) {
    const v1::Job& job = jobs[i];
    if (job.spec().dependency().empty()) continue;
    absl::StatusOr<Dependency> dep = ParseDependency(job.spec().dependency());
    if (!dep.ok()) {
      return AtIndex(absl::InvalidArgumentError(
                         absl::StrCat("spec.dependency: ", dep.status().message())),
                     batch, i);
    }
    const DepSelf self{job.id(), job.spec().has_array(), job.spec().array().task_id()};
    TC_RETURN_IF_ERROR(AtIndex(
        CheckDependencyAtSubmit(*dep, self, facts, caller.user, caller.admin), batch, i));
  }
  return absl::OkStatus();
}

void Coordinator::EvaluateDependenciesLocked(Deferred& deferred) {
  DependencyIndex& deps = jobs_.deps();
  if (deps.draining()) return;  // an outer call drains what this edge marked
  deps.set_draining(true);
  auto state = [this](int64_t id) -> std::optional<v1::JobState> {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return std::nullopt;
    return it->second.state();
  };
  auto facts = [this](int64_t id) { return DepFactsLocked(id); };
  bool unblocked = false;
  while (std::optional<DependencyIndex::Judgement> j = deps.JudgeNext(state, facts)) {
    v1::Job& job = jobs_.at(j->id);
    switch (j->verdict.outcome) {
      case DepOutcome::kSatisfied:
        if (j->unblocked && absl::StartsWith(job.reason(), "waiting for dependency")) {
          job.clear_reason();
        }
        unblocked = unblocked || j->unblocked;
        break;
      case DepOutcome::kWaiting:
        job.set_reason(j->verdict.reason);
        break;
      case DepOutcome::kNever:
        // Like Slurm's --kill-on-invalid-dep=yes; its own dependents follow
        // (the edge marks them).
        if (TransitionLocked(job, v1::JOB_STATE_CANCELLED, j->verdict.reason, deferred)) {
          PersistLocked(job);
        }
        break;
    }
  }
  deps.set_draining(false);
  // The pass runs as the event ends (never nested in a running pass).
  if (unblocked) passes_.Request(clock_->Now());
}

absl::Status Coordinator::CheckRequestOwnerLocked(int64_t first,
                                                  const SubmitCaller& caller) const {
  if (caller.admin) return absl::OkStatus();
  v1::Job scratch;
  absl::StatusOr<const v1::Job*> job = LookupLocked(first, &scratch);
  if (!job.ok()) return job.status();
  const std::string& owner = (*job)->spec().user();
  if (owner == caller.user) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "request_id: user ", caller.user, " may not reuse the request_id of job ", first,
      ": it belongs to ",
      owner.empty() ? "nobody (submitted without authentication)"
                    : absl::StrCat("user ", owner),
      "; choose another request id"));
}

absl::Status Coordinator::WaitStored(WriteTicket ticket) const {
  absl::Status s = store_->WaitDurable(ticket);
  if (!s.ok()) {
    return absl::UnavailableError(absl::StrCat("not stored: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> Coordinator::JobNow(int64_t job_id, WriteTicket* durable_at) const {
  absl::MutexLock lock(&mu_);
  v1::Job scratch;
  TC_ASSIGN_OR_RETURN(const v1::Job* job, LookupLocked(job_id, &scratch));
  v1::Job out = ForUserLocked(*job);
  if (IsFinal(job->state())) *durable_at = last_ticket_;
  if (job->exported_env_job_id() != 0) {
    // The environment it shares: in memory while a job refers to it, else
    // in the holder's record.
    if (const auto* env = jobs_.ExportedEnv(*job); env != nullptr) {
      *out.mutable_spec()->mutable_exported_env() = *env;
    } else {
      TC_ASSIGN_OR_RETURN(*out.mutable_spec()->mutable_exported_env(),
                          jobs_.HolderEnv(job->exported_env_job_id(), *store_));
    }
  }
  return out;
}

absl::StatusOr<v1::Job> Coordinator::GetJob(int64_t job_id) const {
  WriteTicket durable_at = 0;
  TC_ASSIGN_OR_RETURN(v1::Job out, JobNow(job_id, &durable_at));
  // A final state is shown once stored: a crash never takes it back.
  if (durable_at != 0) TC_RETURN_IF_ERROR(WaitStored(durable_at));
  return out;
}

absl::StatusOr<v1::Job> Coordinator::PeekJob(int64_t job_id) const {
  WriteTicket unused = 0;
  return JobNow(job_id, &unused);
}

std::vector<v1::Job> Coordinator::ListJobs(const std::vector<v1::JobState>& states,
                                           int limit,
                                           const std::string& sweep_id,
                                           const std::string& user,
                                           int64_t array_job_id) const {
  JobTable::ListFilter filter;
  filter.states.insert(states.begin(), states.end());
  filter.user = user;
  filter.sweep_id = sweep_id;
  filter.array_job_id = array_job_id;
  filter.limit = limit <= 0 ? kDefaultListLimit : limit;
  std::vector<v1::Job> out;
  // Retired jobs are placeholders here, read from the store below.
  std::vector<JobTable::RetiredSlot> retired;
  WriteTicket durable_at = 0;
  {
    absl::MutexLock lock(&mu_);
    for (const JobTable::Listed& l : jobs_.Select(filter, *store_)) {
      if (l.record != nullptr) {
        out.push_back(ForUserLocked(*l.record));
        continue;
      }
      retired.push_back({l.id, out.size(), experiments_.Points(l.id)});
      out.emplace_back().set_id(l.id);
    }
    if (std::any_of(out.begin(), out.end(),
                    [](const v1::Job& job) { return IsFinal(job.state()); })) {
      durable_at = last_ticket_;
    }
  }
  // Final states are shown once stored (as GetJob); reading retired records
  // from the store below waits for its queue as well.
  if (durable_at != 0) {
    if (absl::Status s = WaitStored(durable_at); !s.ok()) {
      TC_LOG_ERROR("list: final states shown before they were stored: {}", s.ToString());
    }
  }
  JobTable::FillRetired(retired, *store_, out);
  return out;
}

absl::StatusOr<v1::Job> Coordinator::CancelJob(int64_t job_id, const std::string& reason) {
  Deferred deferred;
  v1::Job result;
  WriteTicket durable_at = 0;
  absl::Status refused;
  {
    EventLock lock(this);
    v1::Job scratch;
    TC_ASSIGN_OR_RETURN(const v1::Job* found, LookupLocked(job_id, &scratch));
    if (IsFinal(found->state())) {
      // Nothing changes; the passes other events left to this one still run.
      ServeScheduleLocked(deferred);
      refused = absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " has already ended: ",
          absl::AsciiStrToLower(absl::StripPrefix(v1::JobState_Name(found->state()),
                                                  "JOB_STATE_")),
          found->reason().empty() ? "" : absl::StrCat(" (", found->reason(), ")"),
          "; nothing to cancel"));
    } else {
      v1::Job& job = jobs_.at(job_id);  // not final: never retired
      for (v1::Task& t : *job.mutable_tasks()) {
        if (IsLive(t.state())) StopTaskLocked(job, t);
      }
      TransitionLocked(job, v1::JOB_STATE_CANCELLED, reason, deferred);
      PersistLocked(job);
      RequestScheduleLocked(deferred);
      result = RedactedJob(job);
      durable_at = last_ticket_;
    }
  }
  RunDeferred(deferred);
  if (!refused.ok()) return refused;
  absl::Status stored = store_->WaitDurable(durable_at);
  if (!stored.ok()) {
    TC_LOG_ERROR("could not store the cancel of job {}: {}", job_id,
                 stored.ToString());
  }
  return result;
}

void Coordinator::WaitJobAsync(int64_t job_id, absl::Duration timeout,
                               JobDone done) {
  absl::StatusOr<v1::Job> now_result;
  WriteTicket durable_at = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) {
      // Unknown, or retired (final).
      v1::Job scratch;
      absl::StatusOr<const v1::Job*> job = LookupLocked(job_id, &scratch);
      if (job.ok()) {
        now_result = RedactedJob(**job);
      } else {
        now_result = job.status();
      }
    } else if (IsFinal(it->second.state()) || timeout <= absl::ZeroDuration()) {
      now_result = RedactedJob(it->second);
    } else {
      waiters_.Add(job_id, clock_->Now() + timeout, std::move(done));
      return;
    }
    if (now_result.ok() && IsFinal(now_result->state())) durable_at = last_ticket_;
  }
  AnswerWhenStored(durable_at, std::move(now_result), std::move(done));
}

void Coordinator::AnswerWhenStored(WriteTicket ticket, absl::StatusOr<v1::Job> job,
                                   JobDone done) const {
  store_->WhenDurable(ticket, [job = std::move(job), done = std::move(done)](
                                  absl::Status stored) mutable {
    if (!stored.ok()) {
      done(absl::UnavailableError(absl::StrCat(
          "job ", job.ok() ? job->id() : 0, " ended, but its end may not have been stored: ",
          stored.message(), "; wait again")));
      return;
    }
    done(std::move(job));
  });
}

absl::StatusOr<v1::WhyJobResponse> Coordinator::WhyJob(int64_t job_id) const {
  absl::MutexLock lock(&mu_);
  v1::Job scratch;
  TC_ASSIGN_OR_RETURN(const v1::Job* found, LookupLocked(job_id, &scratch));
  return view_.Why(*found, scheduler_, jobs_, nodes_, draining_, clock_->Now());
}

void Coordinator::GetLogsAsync(int64_t job_id, int rank, int64_t offset,
                               int max_bytes, LogsDone done) {
  absl::Status error;
  {
    absl::MutexLock lock(&mu_);
    v1::Job scratch;
    absl::StatusOr<const v1::Job*> found = LookupLocked(job_id, &scratch);
    absl::StatusOr<const v1::Task*> task =
        found.ok() ? LogRelay::Route(**found, rank, offset, max_bytes,
                                     [&](const std::string& name) {
                                       auto node = nodes_.find(name);
                                       return node != nodes_.end() &&
                                              node->second.conn != nullptr &&
                                              node->second.node.state() ==
                                                  v1::NODE_STATE_READY;
                                     })
                   : absl::StatusOr<const v1::Task*>(found.status());
    if (!task.ok()) {
      error = task.status();
    } else {
      const int want = max_bytes == 0 ? LogRelay::kDefaultBytes : max_bytes;
      v1::TaskRef ref = RefOf(**found, **task);
      v1::CoordinatorMessage msg;
      v1::ReadLog* read = msg.mutable_read_log();
      *read->mutable_task() = ref;
      const int64_t request_id =
          logs_.Add({clock_->Now() + config_.log_read_timeout, job_id, rank, (*task)->node(),
                     std::move(done), want, std::move(ref)});
      read->set_request_id(request_id);
      read->set_offset(offset);
      read->set_max_bytes(want);
      nodes_.find((*task)->node())->second.conn->Send(msg);
      return;
    }
  }
  done(error);
}

}  // namespace trainctl::coord
