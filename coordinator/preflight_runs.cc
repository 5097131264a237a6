// PreflightRuns (preflight_runs.h): pre-flight records on jobs, the probe's
// StartTask, the verdict's consequences.

#include "coordinator/preflight_runs.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/secrets.h"
#include "coordinator/job_facts.h"
#include "coordinator/job_spec.h"
#include "coordinator/preflight.h"

namespace trainctl::coord {
namespace {

v1::PreflightRun& CurrentRun(v1::Job& job) {
  v1::JobPreflight* pf = job.mutable_preflight();
  return *pf->mutable_runs(pf->runs_size() - 1);
}

}  // namespace

bool PreflightRuns::Wanted(const v1::Job& job, int nodes, bool agents_run_probes) const {
  if (job.kind() != v1::JOB_KIND_GANG && KindOf(job.spec()) != v1::JOB_KIND_GANG) {
    return false;
  }
  bool wanted = false;
  switch (job.spec().preflight()) {
    case v1::PREFLIGHT_MODE_ON:
      wanted = true;
      break;
    case v1::PREFLIGHT_MODE_OFF:
      break;
    default:
      wanted = config_.auto_enabled && nodes > 1;
  }
  return wanted && agents_run_probes;
}

PreflightRuns::Opening PreflightRuns::Begin(v1::Job& job, absl::Time now) {
  v1::JobPreflight* pf = job.mutable_preflight();
  v1::PreflightRun* run = pf->add_runs();
  run->set_index(pf->runs_size());
  run->set_attempt(job.attempt());
  run->set_verdict(v1::PREFLIGHT_VERDICT_RUNNING);
  run->set_start_time_ms(ToUnixMs(now));
  run->set_token(NewSecretToken());
  Opening opening;
  opening.run = run->index();
  opening.token = run->token();
  for (const v1::Task& t : job.tasks()) {
    opening.rank_hosts.push_back(t.node());
    if (std::find(run->nodes().begin(), run->nodes().end(), t.node()) ==
        run->nodes().end()) {
      run->add_nodes(t.node());
    }
    v1::PreflightRank* r = run->add_ranks();
    r->set_rank(t.rank());
    r->set_node(t.node());
    r->set_status(v1::PREFLIGHT_RANK_STATUS_RUNNING);
  }
  pf->set_probe_run(run->index());
  deadline_[job.id()] = now + config_.timeout;
  job.set_reason(absl::StrCat("pre-flight ", run->index(), ": probing the NCCL links of ",
                              run->nodes_size(), " nodes"));
  return opening;
}

void PreflightRuns::MakeProbeStart(const v1::Job& job, v1::StartTask& start) const {
  const v1::PreflightRun& run = job.preflight().runs(job.preflight().runs_size() - 1);
  // The job's launch environment, but the probe's own task, rendezvous group
  // and token: it can never be confused with the job's rank. The agent runs
  // its probe program instead of the job's command, in a scratch directory.
  start.mutable_task()->set_probe_run(run.index());
  start.clear_argv();
  start.clear_workdir();
  start.clear_discard_output();  // the probe's result is read from its log
  (*start.mutable_env())["TRAINCTL_TOKEN"] = run.token();
  (*start.mutable_env())["TRAINCTL_PREFLIGHT"] = absl::StrCat(run.index());
  v1::PreflightProbe* probe = start.mutable_preflight();
  probe->set_bytes(config_.bytes);
  probe->set_iters(config_.iters);
  probe->set_warmup(config_.warmup);
  probe->set_timeout_ms(
      std::max<int64_t>(1000, absl::ToInt64Milliseconds(config_.timeout) * 3 / 4));
  probe->set_run(run.index());
}

void PreflightRuns::RecordResult(v1::Job& job, const v1::Task& task,
                                 const v1::TaskStatus& st) {
  if (!InPreflight(job) || !st.has_preflight_result()) return;
  const v1::PreflightProbeResult& res = st.preflight_result();
  for (v1::PreflightRank& r : *CurrentRun(job).mutable_ranks()) {
    if (r.rank() != task.rank()) continue;
    r.set_comm_ready_ms(res.comm_ready_ms());
    r.set_busbw_gbps(res.busbw_gbps());
    r.set_intra_node_busbw_gbps(res.intra_node_busbw_gbps());
    r.set_exit_code(st.exit_code());
    if (res.timed_out()) {
      r.set_status(v1::PREFLIGHT_RANK_STATUS_TIMED_OUT);
      r.set_detail(res.error());
    } else if (!res.error().empty()) {
      r.set_status(v1::PREFLIGHT_RANK_STATUS_ERROR);
      r.set_detail(res.error());
    } else if (st.exit_code() != 0 || st.signal() != 0) {
      r.set_status(v1::PREFLIGHT_RANK_STATUS_ERROR);
      r.set_detail(ExitText(task));
    } else {
      r.set_status(v1::PREFLIGHT_RANK_STATUS_OK);
    }
  }
}

PreflightRuns::Progress PreflightRuns::OnProbeEnded(v1::Job& job) {
  v1::PreflightRun& run = CurrentRun(job);
  bool all_ended = true;
  int failed_rank = -1;
  for (const v1::Task& t : job.tasks()) {
    if (IsLive(t.state())) {
      all_ended = false;
      continue;
    }
    for (v1::PreflightRank& r : *run.mutable_ranks()) {
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
  Progress p;
  p.judge = all_ended || failed_rank >= 0;
  if (all_ended || failed_rank < 0) return p;
  for (const v1::Task& t : job.tasks()) {
    if (!IsLive(t.state())) continue;
    p.stop_ranks.push_back(t.rank());
    for (v1::PreflightRank& r : *run.mutable_ranks()) {
      if (r.rank() == t.rank() && r.status() == v1::PREFLIGHT_RANK_STATUS_RUNNING) {
        r.set_status(v1::PREFLIGHT_RANK_STATUS_STOPPED);
        r.set_detail(absl::StrCat("stopped after rank ", failed_rank, " failed"));
      }
    }
  }
  return p;
}

PreflightRuns::Verdict PreflightRuns::Judge(v1::Job& job, absl::Time now) {
  const int64_t now_ms = ToUnixMs(now);
  v1::JobPreflight* pf = job.mutable_preflight();
  v1::PreflightRun& run = CurrentRun(job);
  const PreflightDecision d =
      EvaluatePreflight({run.ranks().begin(), run.ranks().end()},
                        run.nodes_size() <= 1, config_.policy);
  run.clear_ranks();
  for (const v1::PreflightRank& r : d.ranks) *run.add_ranks() = r;
  run.clear_links();
  for (const v1::PreflightLinkSummary& l : d.links) *run.add_links() = l;
  run.set_comm_ready_max_ms(d.comm_ready_max_ms);
  run.set_reason(d.reason);
  run.set_end_time_ms(now_ms);
  deadline_.erase(job.id());

  Verdict v;
  v.run = run.index();
  if (d.passed) {
    v.verdict = v1::PREFLIGHT_VERDICT_PASSED;
    run.set_verdict(v.verdict);
    pf->set_probe_run(0);
    return v;
  }
  v.verdict = v1::PREFLIGHT_VERDICT_FAILED;
  run.set_verdict(v.verdict);
  std::vector<std::string> names;
  for (const auto& [node, why] : d.excluded) {
    names.push_back(node);
    bool known = false;
    for (const v1::ExcludedNode& e : pf->excluded()) known = known || e.node() == node;
    if (known) continue;
    v1::ExcludedNode* e = pf->add_excluded();
    e->set_node(node);
    e->set_reason(why);
    e->set_run(run.index());
    e->set_time_ms(now_ms);
  }
  pf->set_failed_runs(pf->failed_runs() + 1);
  if (pf->failed_runs() >= config_.max_failures) {
    v.to = v1::JOB_STATE_FAILED;
    v.why = absl::StrCat("pre-flight failed ", pf->failed_runs(),
                         " times (--preflight-max-failures ", config_.max_failures,
                         "); last: ", d.reason);
  } else {
    pf->set_requeues(pf->requeues() + 1);
    v.to = v1::JOB_STATE_PENDING;
    v.why = absl::StrCat("pre-flight ", run.index(), " ", d.reason,
                         "; placing the gang again without ", absl::StrJoin(names, ", "));
  }
  return v;
}

std::vector<int64_t> PreflightRuns::TakeDue(absl::Time now) {
  std::vector<int64_t> due;
  for (const auto& [id, deadline] : deadline_) {
    if (deadline <= now) due.push_back(id);
  }
  std::sort(due.begin(), due.end());
  for (int64_t id : due) deadline_.erase(id);
  return due;
}

void PreflightRuns::MarkMissing(v1::Job& job) const {
  for (v1::PreflightRank& r : *CurrentRun(job).mutable_ranks()) {
    if (r.status() != v1::PREFLIGHT_RANK_STATUS_RUNNING) continue;
    r.set_status(v1::PREFLIGHT_RANK_STATUS_MISSING);
    r.set_detail(absl::StrCat("no result within --preflight-timeout ",
                              absl::FormatDuration(config_.timeout)));
  }
}

std::optional<int> PreflightRuns::Leave(v1::Job& job, absl::string_view reason,
                                        int64_t now_ms, bool* aborted) {
  *aborted = false;
  v1::JobPreflight* pf = job.mutable_preflight();
  const int probe_run = pf->probe_run();
  if (probe_run == 0) return std::nullopt;
  if (pf->runs_size() > 0) {
    v1::PreflightRun& run = CurrentRun(job);
    if (run.verdict() == v1::PREFLIGHT_VERDICT_RUNNING) {
      run.set_verdict(v1::PREFLIGHT_VERDICT_ABORTED);
      run.set_reason(std::string(reason));
      run.set_end_time_ms(now_ms);
      *aborted = true;
    }
  }
  deadline_.erase(job.id());
  return probe_run;
}

bool PreflightRuns::CaughtMidRun(v1::Job& job) {
  if (job.state() != v1::JOB_STATE_SCHEDULED || !job.has_preflight()) return false;
  v1::JobPreflight* pf = job.mutable_preflight();
  if (pf->legacy_probe_attempt() != 0 && pf->probe_run() == 0 && pf->runs_size() > 0) {
    pf->set_probe_run(pf->runs(pf->runs_size() - 1).index());
  }
  pf->set_legacy_probe_attempt(0);
  return pf->probe_run() != 0;
}

}  // namespace trainctl::coord
