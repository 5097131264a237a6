// Coordinator: the pre-flight of gangs (docs/preflight.md): probes on the
// reserved GPUs, their verdict, and what follows. Declared in coordinator.h.

#include "coordinator/coordinator.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/secrets.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "coordinator/coordinator_internal.h"
#include "coordinator/job_spec.h"
#include "coordinator/launch_env.h"

namespace trainctl::coord {

bool Coordinator::PreflightWantedLocked(const v1::Job& job, int nodes) const {
  if (job.kind() != v1::JOB_KIND_GANG && KindOf(job.spec()) != v1::JOB_KIND_GANG) {
    return false;
  }
  // An agent that cannot run its probe (Node.preflight_probe_error) has a
  // configuration error, which says nothing of its GPUs: the gang starts
  // unprobed instead of excluding the node (`trainctl why` shows it).
  for (const v1::Task& t : job.tasks()) {
    auto n = nodes_.find(t.node());
    if (n != nodes_.end() && !n->second.node.preflight_probe_error().empty()) {
      TC_LOG_WARN("job {}: no pre-flight: node {}: {}", job.id(), t.node(),
                  n->second.node.preflight_probe_error());
      return false;
    }
  }
  switch (job.spec().preflight()) {
    case v1::PREFLIGHT_MODE_ON:
      return true;
    case v1::PREFLIGHT_MODE_OFF:
      return false;
    default:
      return config_.preflight_auto && nodes > 1;
  }
}

void Coordinator::BeginPreflightLocked(v1::Job& job) {
  const absl::Time now = clock_->Now();
  v1::JobPreflight* pf = job.mutable_preflight();
  v1::PreflightRun* run = pf->add_runs();
  run->set_index(pf->runs_size());
  run->set_attempt(job.attempt());
  const int key = kPreflightAttemptBase + run->index();
  run->set_probe_attempt(key);
  run->set_verdict(v1::PREFLIGHT_VERDICT_RUNNING);
  run->set_start_time_ms(ToUnixMs(now));
  run->set_token(NewSecretToken());
  std::vector<std::string> hosts;
  for (const v1::Task& t : job.tasks()) {
    hosts.push_back(t.node());
    if (std::find(run->nodes().begin(), run->nodes().end(), t.node()) ==
        run->nodes().end()) {
      run->add_nodes(t.node());
    }
    v1::PreflightRank* r = run->add_ranks();
    r->set_rank(t.rank());
    r->set_node(t.node());
    r->set_status(v1::PREFLIGHT_RANK_STATUS_RUNNING);
  }
  pf->set_probe_attempt(key);
  rendezvous_.Open(job.id(), key, run->token(), std::move(hosts));
  preflight_deadline_[job.id()] = now + config_.preflight_timeout;
  job.set_reason(absl::StrCat("pre-flight ", run->index(), ": probing the NCCL links of ",
                              run->nodes_size(), " nodes"));
  PersistLocked(job);
  TC_LOG_INFO("job {} attempt {}: pre-flight {} on {}", job.id(), job.attempt(),
              run->index(), absl::StrJoin(run->nodes(), ", "));

  for (const v1::Task& t : job.tasks()) {
    // The job's launch environment, but the probe's own rendezvous key and
    // token: it can never be confused with the job's. The agent runs its
    // probe program instead of the job's command, in a scratch directory.
    v1::CoordinatorMessage msg = BuildStartTaskLocked(job, t, /*agent_store=*/false);
    v1::StartTask* start = msg.mutable_start_task();
    start->clear_argv();
    start->clear_workdir();
    start->clear_discard_output();  // the probe's result is read from its log
    (*start->mutable_env())["TRAINCTL_ATTEMPT"] = absl::StrCat(key);
    (*start->mutable_env())["TRAINCTL_TOKEN"] = run->token();
    (*start->mutable_env())["TRAINCTL_PREFLIGHT"] = absl::StrCat(run->index());
    v1::PreflightProbe* probe = start->mutable_preflight();
    probe->set_bytes(config_.preflight_bytes);
    probe->set_iters(config_.preflight_iters);
    probe->set_warmup(config_.preflight_warmup);
    probe->set_timeout_ms(std::max<int64_t>(
        1000, absl::ToInt64Milliseconds(config_.preflight_timeout) * 3 / 4));
    probe->set_run(run->index());
    SendLocked(t.node(), std::move(msg));
  }
}

void Coordinator::OnProbeEndedLocked(v1::Job& job, Deferred& deferred) {
  v1::PreflightRun* run =
      job.mutable_preflight()->mutable_runs(job.preflight().runs_size() - 1);
  bool all_ended = true;
  int failed_rank = -1;
  for (const v1::Task& t : job.tasks()) {
    if (IsLive(t.state())) {
      all_ended = false;
      continue;
    }
    for (v1::PreflightRank& r : *run->mutable_ranks()) {
      if (r.rank() != t.rank()) continue;
      if (r.status() == v1::PREFLIGHT_RANK_STATUS_RUNNING) {
        // Ended without a result line: could not start, lost with its node,
        // or exited without printing one.
        r.set_status(v1::PREFLIGHT_RANK_STATUS_ERROR);
        r.set_exit_code(t.exit_code());
        r.set_detail(t.state() == v1::TASK_STATE_EXITED && !TaskFailed(t)
                         ? "exited without printing a result line"
                         : absl::StrCat(ExitText(t), " without a result"));
      }
      if (r.status() == v1::PREFLIGHT_RANK_STATUS_ERROR && failed_rank < 0) {
        failed_rank = r.rank();
      }
    }
  }
  if (!all_ended && failed_rank < 0) {
    PersistLocked(job);
    return;
  }
  if (!all_ended) {
    // One rank failed: the others would only wait for it in NCCL until their
    // own timeout. Stop them now; they are not blamed.
    for (v1::Task& t : *job.mutable_tasks()) {
      if (!IsLive(t.state())) continue;
      if (t.state() != v1::TASK_STATE_STOPPING) StopTaskLocked(job, t);
      for (v1::PreflightRank& r : *run->mutable_ranks()) {
        if (r.rank() == t.rank() && r.status() == v1::PREFLIGHT_RANK_STATUS_RUNNING) {
          r.set_status(v1::PREFLIGHT_RANK_STATUS_STOPPED);
          r.set_detail(absl::StrCat("stopped after rank ", failed_rank, " failed"));
        }
      }
    }
  }
  FinishPreflightLocked(job, deferred);
}

void Coordinator::FinishPreflightLocked(v1::Job& job, Deferred& deferred) {
  const int64_t now_ms = ToUnixMs(clock_->Now());
  v1::JobPreflight* pf = job.mutable_preflight();
  v1::PreflightRun* run = pf->mutable_runs(pf->runs_size() - 1);
  const PreflightDecision d = EvaluatePreflight(
      {run->ranks().begin(), run->ranks().end()}, run->nodes_size() <= 1,
      config_.preflight_policy);
  run->clear_ranks();
  for (const v1::PreflightRank& r : d.ranks) *run->add_ranks() = r;
  run->clear_links();
  for (const v1::PreflightLinkSummary& l : d.links) *run->add_links() = l;
  run->set_comm_ready_max_ms(d.comm_ready_max_ms);
  run->set_reason(d.reason);
  run->set_end_time_ms(now_ms);
  preflight_deadline_.erase(job.id());
  TC_LOG_INFO("job {} pre-flight {} {}", job.id(), run->index(), d.reason);

  if (d.passed) {
    run->set_verdict(v1::PREFLIGHT_VERDICT_PASSED);
    ++counters_.preflight_runs[v1::PREFLIGHT_VERDICT_PASSED];
    rendezvous_.Close(job.id(), pf->probe_attempt(), "pre-flight passed");
    pf->set_probe_attempt(0);
    // The job's own tasks, on the same placement: the probe tasks have all
    // exited, so their GPUs pass straight to the job.
    std::vector<std::string> hosts;
    for (v1::Task& t : *job.mutable_tasks()) {
      // Each probe's record becomes the rank's: a new task on the same
      // placement (UNSPECIFIED -> STARTING), nothing of the probe's run kept.
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
    return;
  }

  run->set_verdict(v1::PREFLIGHT_VERDICT_FAILED);
  ++counters_.preflight_runs[v1::PREFLIGHT_VERDICT_FAILED];
  std::vector<std::string> names;
  for (const auto& [node, why] : d.excluded) {
    names.push_back(node);
    bool known = false;
    for (const v1::ExcludedNode& e : pf->excluded()) known = known || e.node() == node;
    if (known) continue;
    v1::ExcludedNode* e = pf->add_excluded();
    e->set_node(node);
    e->set_reason(why);
    e->set_run(run->index());
    e->set_time_ms(now_ms);
  }
  pf->set_failed_runs(pf->failed_runs() + 1);
  // Probe tasks still live (stopped after a failure, or hung at the
  // deadline) drain under the probe's key, holding their GPUs until they
  // exit.
  for (v1::Task& t : *job.mutable_tasks()) {
    if (IsLive(t.state()) && t.state() != v1::TASK_STATE_STOPPING) {
      StopTaskLocked(job, t);
    }
  }
  if (pf->failed_runs() >= config_.preflight_max_failures) {
    TransitionLocked(
        job, v1::JOB_STATE_FAILED,
        absl::StrCat("pre-flight failed ", pf->failed_runs(),
                     " times (--preflight-max-failures ",
                     config_.preflight_max_failures, "); last: ", d.reason),
        deferred);
  } else {
    pf->set_requeues(pf->requeues() + 1);
    TransitionLocked(job, v1::JOB_STATE_PENDING,
                     absl::StrCat("pre-flight ", run->index(), " ", d.reason,
                                  "; placing the gang again without ",
                                  absl::StrJoin(names, ", ")),
                     deferred);
  }
  PersistLocked(job);
}

bool Coordinator::ExpirePreflightsLocked(absl::Time now, Deferred& deferred) {
  std::vector<int64_t> due;
  for (const auto& [id, deadline] : preflight_deadline_) {
    if (deadline <= now) due.push_back(id);
  }
  std::sort(due.begin(), due.end());
  for (int64_t id : due) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || !InPreflight(it->second)) {
      preflight_deadline_.erase(id);
      continue;
    }
    v1::Job& job = it->second;
    v1::PreflightRun* run =
        job.mutable_preflight()->mutable_runs(job.preflight().runs_size() - 1);
    for (v1::PreflightRank& r : *run->mutable_ranks()) {
      if (r.status() != v1::PREFLIGHT_RANK_STATUS_RUNNING) continue;
      r.set_status(v1::PREFLIGHT_RANK_STATUS_MISSING);
      r.set_detail(absl::StrCat("no result within --preflight-timeout ",
                                absl::FormatDuration(config_.preflight_timeout)));
    }
    FinishPreflightLocked(job, deferred);
  }
  return !due.empty();
}

}  // namespace trainctl::coord
