// `trainctl sweep`: expanding the sweep flags into trials and submitting
// them (up to 32 in flight), and its subcommands `sweep list`, `sweep
// describe` (with --metric, the best trials too), `sweep cancel` and `sweep
// compare` (the trials ranked by a reported metric).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "client/sweep.h"
#include "client/table.h"

namespace trainctl::cli::internal {

namespace {

// A sweep id like "sw-1f2e3d4c": 32 random bits.
std::string NewSweepId() {
  absl::BitGen gen;
  return absl::StrFormat("sw-%08x", absl::Uniform<uint32_t>(gen));
}

// "" when `id` is a usable sweep id, else why not (the coordinator checks the
// same: at most 64 bytes of [A-Za-z0-9._-]).
std::string CheckSweepId(const std::string& id) {
  if (id.empty() || id.size() > 64 ||
      !std::all_of(id.begin(), id.end(), [](char c) {
        return absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-';
      })) {
    return absl::StrFormat(
        "--sweep-id %s: expected 1 to 64 characters of [A-Za-z0-9._-]", id);
  }
  return "";
}

}  // namespace

bool IsFinal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
}

SweepCommands AddSweepCommands(CLI::App& app, Flags& f) {
  CLI::App* sweep = app.add_subcommand(
      "sweep",
      "Run a hyper-parameter sweep: one job per trial, sharing a sweep id; "
      "prints the sweep id");
  sweep->require_subcommand(0, 1);
  sweep->add_option("--name", *f.submit.mutable_spec()->mutable_name(),
                    "Trials are named NAME-0, NAME-1, ... (default: the "
                    "sweep id)");
  sweep->add_option("--grid", f.grid,
                    "NAME=V1,V2,...: every value is tried (repeatable; the "
                    "trials are the cartesian product)")
      ->allow_extra_args(false);
  sweep->add_option("--random", f.random_count,
                    "Samples of the --param parameters per grid point")
      ->check(CLI::Range(int64_t{1}, kMaxSweepTrials));
  sweep->add_option("--param", f.params,
                    "NAME=DIST, DIST one of uniform:LOW:HIGH, "
                    "loguniform:LOW:HIGH, int:LOW:HIGH (inclusive), "
                    "choice:A|B|... (repeatable)")
      ->allow_extra_args(false);
  sweep->add_option("--seed", f.seed,
                    "Seed of the sampler (default 0): the same seed gives "
                    "the same trials");
  sweep->add_option("--sweep-id", f.sweep_id,
                    "Sweep id (default: sw- and 8 random hex digits); giving "
                    "that of an earlier run resubmits only missing trials");
  AddJobSpecOptions(sweep, f);
  sweep->add_option("command", f.command,
                    "The command to run, after --; {NAME} is replaced by the "
                    "trial's value of NAME ({{ and }} are literal braces)");
  sweep->footer(Example(
      "  trainctl sweep --gpu-fraction 0.25 --grid lr=1e-3,3e-4 --grid "
      "bs=64,128 -- python train.py --lr {lr} --bs {bs}\n"
      "  trainctl sweep --grid bs=64,128 --random 8 --param "
      "lr=loguniform:1e-5:1e-2 --seed 1 -- python train.py --lr {lr} --bs "
      "{bs}\n"
      "  trainctl sweep list | describe SWEEP [-o json] | cancel SWEEP"));
  CLI::App* sweep_list = sweep->add_subcommand(
      "list", "One row per sweep (among the newest 1000 jobs): trials by state");
  CLI::App* sweep_describe = sweep->add_subcommand(
      "describe", "A sweep's trials: job, state, parameters, exit code");
  sweep_describe->add_option("SWEEP", f.sweep_id, "Sweep id")->required();
  sweep_describe
      ->add_option("-o,--output", f.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  CLI::App* sweep_cancel = sweep->add_subcommand(
      "cancel", "Cancel every trial of a sweep that has not ended");
  sweep_cancel->add_option("SWEEP", f.sweep_id, "Sweep id")->required();
  sweep_list
      ->add_option("-o,--output", f.output,
                   "Output format: table, json or yaml (the table's data: a "
                   "SweepList, as GET /v1/sweeps answers)")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  sweep_list->footer(
      Example("  trainctl sweep list\n  trainctl sweep list -o json"));
  sweep_describe->footer(Example(
      "  trainctl sweep describe sw-1f2e3d4c\n"
      "  trainctl sweep describe sw-1f2e3d4c -o json"));
  sweep_cancel->footer(Example("  trainctl sweep cancel sw-1f2e3d4c"));
  CLI::App* sweep_compare = sweep->add_subcommand(
      "compare", "A sweep's trials ranked by a metric, best first, with their "
                 "parameters");
  sweep_compare->add_option("SWEEP", f.sweep_id, "Sweep id")->required();
  sweep_compare->add_option("-o,--output", f.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  for (CLI::App* sub : {sweep_compare, sweep_describe}) {
    CLI::Option* metric = sub->add_option("--metric", f.metric,
                                          "Metric to rank the trials by, e.g. val_loss");
    if (sub == sweep_compare) metric->required();
    sub->add_option("--mode", f.mode, "min or max: which is best")
        ->check(CLI::IsMember({"min", "max"}))->capture_default_str();
    sub->add_option("--scope", f.scope,
                    "last (a trial's last value) or best (its best value so far)")
        ->check(CLI::IsMember({"last", "best"}))->capture_default_str();
  }
  sweep->add_option("--early-stop", f.early_stop,
                    "METRIC[:min|max]: stop the worst trials early by the "
                    "metric they report (ASHA: at steps grace x eta^k, a trial "
                    "not within the best 1/eta so far is cancelled); default mode min");
  sweep->add_option("--grace-steps", f.grace_steps,
                    "ASHA: step of the first rung (default 1)")
      ->check(CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max()));
  sweep->add_option("--reduction-factor", f.reduction_factor,
                    "ASHA: eta, keep the best 1/eta at each rung (default 3)")
      ->check(CLI::Range(2, 1000));
  sweep->add_option("--max-steps", f.max_steps,
                    "ASHA: a trial's full length in steps; no rung at or past it")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  sweep_compare->footer(Example(
      "  trainctl sweep compare sw-1f2e3d4c --metric val_loss\n"
      "  trainctl sweep compare sw-1f2e3d4c --metric acc --mode max --scope best -o json"));
  return {sweep, sweep_list, sweep_describe, sweep_cancel, sweep_compare};
}

int PrepareSweep(Flags* f, std::ostream& err, std::vector<Trial>* trials) {
  SweepSpec spec;
  spec.random_count = f->random_count;
  spec.seed = f->seed;
  for (const std::string& text : f->grid) {
    absl::StatusOr<GridParam> p = ParseGridFlag(text);
    if (!p.ok()) return UsageError(err, p.status().message());
    spec.grid.push_back(*std::move(p));
  }
  for (const std::string& text : f->params) {
    absl::StatusOr<RandomParam> p = ParseParamFlag(text);
    if (!p.ok()) return UsageError(err, p.status().message());
    spec.random.push_back(*std::move(p));
  }
  if (f->sweep_id.empty()) f->sweep_id = NewSweepId();
  if (std::string e = CheckSweepId(f->sweep_id); !e.empty()) {
    return UsageError(err, e);
  }
  if (std::string e = BuildSpec(
          f, "sweep",
          "trainctl sweep --grid lr=1e-3,3e-4 -- python train.py --lr {lr}");
      !e.empty()) {
    return UsageError(err, e);
  }
  if (!f->early_stop.empty()) {
    std::pair<std::string, std::string> metric_mode =
        absl::StrSplit(f->early_stop, absl::MaxSplits(':', 1));
    if (metric_mode.second.empty()) metric_mode.second = "min";
    if (metric_mode.first.empty() ||
        (metric_mode.second != "min" && metric_mode.second != "max")) {
      return UsageError(err, absl::StrFormat(
          "--early-stop %s: expected METRIC, METRIC:min or METRIC:max",
          f->early_stop));
    }
    v1::EarlyStop* es = f->submit.mutable_spec()->mutable_early_stop();
    es->set_metric(metric_mode.first);
    es->set_mode(metric_mode.second);
    es->set_grace_steps(f->grace_steps);
    es->set_reduction_factor(f->reduction_factor);
    es->set_max_steps(f->max_steps);
  }
  absl::StatusOr<std::vector<Trial>> expanded = ExpandSweep(spec, f->command);
  if (!expanded.ok()) return UsageError(err, expanded.status().message());
  *trials = *std::move(expanded);
  std::vector<std::string> unused = UnusedSweepParams(spec, f->command);
  if (!unused.empty()) {
    err << absl::StrFormat(
        "trainctl: warning: no {placeholder} in the command uses %s; the "
        "trials still get it in their params\n",
        absl::StrJoin(unused, ", "));
  }
  return kExitOk;
}

int Session::Sweep(const v1::JobSpec& base, const std::vector<Trial>& trials,
                   const std::string& sweep_id, const std::string& name) {
  auto request_for = [&](size_t i) {
    v1::SubmitJobRequest request;
    v1::JobSpec* spec = request.mutable_spec();
    *spec = base;
    spec->mutable_command()->Assign(trials[i].command.begin(),
                                    trials[i].command.end());
    spec->set_sweep_id(sweep_id);
    spec->mutable_params()->insert(trials[i].params.begin(),
                                   trials[i].params.end());
    spec->set_name(absl::StrCat(name, "-", i));
    request.set_request_id(absl::StrCat(sweep_id, "-", i));
    return request;
  };
  // One SubmitJobs call for every trial (one durable commit on the
  // coordinator; all trials or none), with the sweep id as request id, so
  // running the same command again submits nothing twice.
  {
    std::vector<v1::JobSpec> specs;
    specs.reserve(trials.size());
    for (size_t i = 0; i < trials.size(); ++i) specs.push_back(request_for(i).spec());
    absl::StatusOr<std::vector<int64_t>> ids = SubmitMany(specs, sweep_id);
    if (ids.ok()) {
      out_ << sweep_id << "\n";
      err_ << absl::StrFormat(
          "sweep %s: %d trial(s) submitted (jobs %d..%d); see `trainctl sweep "
          "describe %s`\n",
          sweep_id, trials.size(), ids->front(), ids->back(), sweep_id);
      return kExitOk;
    }
    if (ids.status().code() != absl::StatusCode::kUnimplemented) {
      err_ << absl::StrFormat(
          "trainctl: error: sweep %s: %s\ntrainctl: no trial was submitted\n",
          sweep_id, ids.status().message());
      return kExitRpcError;
    }
    // A coordinator that predates SubmitJobs: one SubmitJob per trial.
  }
  // Up to kSweepInFlight submits at once through the stub's callback API
  // (a coordinator that commits concurrent submits together then acks them
  // in one disk sync); one after another where the stub has none (the
  // mocks of the tests). Each trial has its own request id, so order and
  // retries cannot submit one twice.
  constexpr int kSweepInFlight = 32;
  std::vector<v1::SubmitJobResponse> responses(trials.size());
  std::vector<absl::Status> statuses(trials.size());
  size_t issued = 0;
  if (auto* async = stub_->async(); async != nullptr) {
    struct InFlight {
      grpc::ClientContext context;
      v1::SubmitJobRequest request;
    };
    std::vector<std::unique_ptr<InFlight>> calls(trials.size());
    absl::Mutex mu;
    int in_flight = 0;
    bool failed = false;
    while (issued < trials.size()) {
      mu.LockWhen(absl::Condition(
          +[](int* n) { return *n < kSweepInFlight; }, &in_flight));
      const bool stop = failed;
      if (!stop) ++in_flight;
      mu.Unlock();
      if (stop) break;  // Submit no more after a failure.
      const size_t i = issued++;
      calls[i] = std::make_unique<InFlight>();
      calls[i]->context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
      calls[i]->request = request_for(i);
      async->SubmitJob(&calls[i]->context, &calls[i]->request, &responses[i],
                       [&, i](grpc::Status status) {
                         absl::MutexLock lock(&mu);
                         if (!status.ok()) {
                           statuses[i] = ToUserStatus(status, kRpcDeadline);
                           failed = true;
                         }
                         --in_flight;
                       });
    }
    mu.LockWhen(absl::Condition(+[](int* n) { return *n == 0; }, &in_flight));
    mu.Unlock();
  } else {
    for (; issued < trials.size(); ++issued) {
      statuses[issued] = Call(&Stub::SubmitJob, request_for(issued), &responses[issued]);
      if (!statuses[issued].ok()) {
        ++issued;
        break;
      }
    }
  }
  int submitted = 0;
  int64_t first_id = 0, last_id = 0;
  for (size_t i = 0; i < issued; ++i) {
    if (!statuses[i].ok()) continue;
    const int64_t id = responses[i].job_id();
    first_id = submitted == 0 ? id : std::min(first_id, id);
    last_id = submitted == 0 ? id : std::max(last_id, id);
    ++submitted;
  }
  for (size_t i = 0; i < issued; ++i) {
    if (statuses[i].ok()) continue;
    err_ << absl::StrFormat("trainctl: error: trial %d of sweep %s: %s\n", i,
                            sweep_id, statuses[i].message());
    if (submitted > 0) {
      err_ << absl::StrFormat(
          "trainctl: %d of %d trials were submitted; run the same command "
          "with --sweep-id %s to submit the rest (trials already submitted "
          "are not submitted twice)\n",
          submitted, trials.size(), sweep_id);
    }
    return kExitRpcError;
  }
  out_ << sweep_id << "\n";
  err_ << absl::StrFormat(
      "sweep %s: %d trial(s) submitted (jobs %d..%d); see `trainctl sweep "
      "describe %s`\n",
      sweep_id, trials.size(), first_id, last_id, sweep_id);
  return kExitOk;
}

absl::StatusOr<v1::ListJobsResponse> Session::SweepJobs(
    const std::string& sweep_id) {
  v1::ListJobsRequest request;
  request.set_sweep_id(sweep_id);
  request.set_limit(static_cast<int>(kMaxSweepTrials));
  v1::ListJobsResponse response;
  if (absl::Status s = Call(&Stub::ListJobs, request, &response); !s.ok()) {
    return s;
  }
  if (response.jobs().empty()) {
    return absl::NotFoundError(absl::StrFormat(
        "sweep %s has no trials (see `trainctl sweep list`)", sweep_id));
  }
  for (v1::Job& job : *response.mutable_jobs()) job.clear_attempt_token();
  std::sort(response.mutable_jobs()->begin(), response.mutable_jobs()->end(),
            [](const v1::Job& a, const v1::Job& b) { return a.id() < b.id(); });
  return response;
}

int Session::SweepList(bool json) {
  v1::ListJobsResponse response;
  if (absl::Status s = Call(&Stub::ListJobs, v1::ListJobsRequest(), &response);
      !s.ok()) {
    return Fail(s);
  }
  // One entry per sweep, newest first (jobs come newest first): the table's
  // rows, and -o json|yaml's data, as the gateway's GET /v1/sweeps.
  v1::SweepList list;
  list.set_jobs_scanned(response.jobs_size());
  // ListJobs's default limit (service.proto): older sweeps may be missing.
  list.set_truncated(response.jobs_size() >= 1000);
  absl::flat_hash_map<std::string, v1::SweepSummary*> by_id;
  for (const v1::Job& job : response.jobs()) {
    const std::string& id = job.spec().sweep_id();
    if (id.empty()) continue;
    v1::SweepSummary*& sweep = by_id[id];
    if (sweep == nullptr) {
      sweep = list.add_sweeps();
      sweep->set_sweep_id(id);
      for (int st = v1::JobState_MIN; st <= v1::JobState_MAX; ++st) {
        if (v1::JobState_IsValid(st) && st != v1::JOB_STATE_UNSPECIFIED) {
          (*sweep->mutable_by_state())[v1::JobState_Name(static_cast<v1::JobState>(st))] = 0;
        }
      }
    }
    sweep->set_trials(sweep->trials() + 1);
    ++(*sweep->mutable_by_state())[v1::JobState_Name(job.state())];
    if (sweep->first_submit_time_ms() == 0 ||
        job.submit_time_ms() < sweep->first_submit_time_ms()) {
      sweep->set_first_submit_time_ms(job.submit_time_ms());
    }
    sweep->set_last_submit_time_ms(
        std::max(sweep->last_submit_time_ms(), job.submit_time_ms()));
  }
  if (json) {
    out_ << ToJson(list);
    return kExitOk;
  }
  Table table({"SWEEP", "TRIALS", "PENDING", "RUNNING", "SUCCEEDED", "FAILED",
               "CANCELLED", "AGE"});
  for (const v1::SweepSummary& sweep : list.sweeps()) {
    auto count = [&sweep](v1::JobState st) {
      return sweep.by_state().at(v1::JobState_Name(st));
    };
    table.AddRow({sweep.sweep_id(), absl::StrCat(sweep.trials()),
                  absl::StrCat(count(v1::JOB_STATE_PENDING) + count(v1::JOB_STATE_SCHEDULED)),
                  absl::StrCat(count(v1::JOB_STATE_RUNNING)),
                  absl::StrCat(count(v1::JOB_STATE_SUCCEEDED)),
                  absl::StrCat(count(v1::JOB_STATE_FAILED)),
                  absl::StrCat(count(v1::JOB_STATE_CANCELLED)),
                  Ago(sweep.first_submit_time_ms())});
  }
  // The counts are never cut; on a narrow terminal AGE and CANCELLED go.
  for (int column = 1; column < 8; ++column) table.KeepWhole(column);
  table.Optional(7);
  table.Optional(6);
  table.Print(out_, terminal_width_);
  return kExitOk;
}

int Session::SweepDescribe(const std::string& sweep_id, bool json) {
  absl::StatusOr<v1::ListJobsResponse> response = SweepJobs(sweep_id);
  if (!response.ok()) return Fail(response.status());
  if (json) {
    out_ << ToJson(*response);
    return kExitOk;
  }
  std::set<std::string> names;
  for (const v1::Job& job : response->jobs()) {
    for (const auto& [name, value] : job.spec().params()) names.insert(name);
  }
  std::vector<std::string> header = {"JOB", "STATE"};
  header.insert(header.end(), names.begin(), names.end());
  header.push_back("EXIT");
  Table table(std::move(header));
  for (const v1::Job& job : response->jobs()) {
    std::vector<std::string> row = {absl::StrCat(job.id()),
                                    JobStateLabel(job)};
    for (const std::string& name : names) {
      auto it = job.spec().params().find(name);
      row.push_back(it == job.spec().params().end() ? "-" : it->second);
    }
    // The first rank that failed, else rank 0.
    const v1::Task* shown = nullptr;
    for (const v1::Task& t : job.tasks()) {
      if (shown == nullptr || (FormatExit(*shown) == "0" &&
                               FormatExit(t) != "0" && FormatExit(t) != "-")) {
        shown = &t;
      }
    }
    row.push_back(shown == nullptr ? "-" : FormatExit(*shown));
    table.AddRow(std::move(row));
  }
  table.Print(out_, terminal_width_);
  return kExitOk;
}

absl::StatusOr<v1::SweepComparison> Session::CompareSweep(
    const std::string& sweep_id, const std::string& metric,
    const std::string& mode, const std::string& scope) {
  absl::StatusOr<v1::ListJobsResponse> jobs = SweepJobs(sweep_id);
  if (!jobs.ok()) return jobs.status();
  v1::SweepComparison cmp;
  cmp.set_sweep_id(sweep_id);
  cmp.set_metric(metric);
  cmp.set_mode(mode);
  cmp.set_scope(scope);
  const bool minimize = mode == "min";
  for (const v1::Job& job : jobs->jobs()) {
    v1::SweepTrial* t = cmp.add_trials();
    t->set_job_id(job.id());
    t->set_state(v1::JobState_Name(job.state()));
    t->mutable_params()->insert(job.spec().params().begin(),
                                job.spec().params().end());
    t->set_gpu_hours(job.gpu_hours());
    if (job.metric_points() == 0) continue;
    v1::GetMetricsRequest request;
    request.set_job_id(job.id());
    request.set_key(metric);
    request.set_summary_only(true);
    v1::GetMetricsResponse metrics;
    if (absl::Status s = Call(&Stub::GetMetrics, request, &metrics); !s.ok()) {
      return s;
    }
    if (metrics.series().empty()) continue;
    const v1::MetricSeries& m = metrics.series(0);
    t->set_has_metric(true);
    t->set_value(scope == "best" ? (minimize ? m.min() : m.max()) : m.last());
    t->set_step(m.last_step());
    *t->mutable_summary() = m;
  }
  // Best first; trials without the metric last, by job id.
  std::stable_sort(cmp.mutable_trials()->begin(), cmp.mutable_trials()->end(),
                   [minimize](const v1::SweepTrial& a, const v1::SweepTrial& b) {
                     if (a.has_metric() != b.has_metric()) return a.has_metric();
                     if (!a.has_metric()) return false;
                     return minimize ? a.value() < b.value() : a.value() > b.value();
                   });
  return cmp;
}

int Session::SweepCompare(const std::string& sweep_id, const std::string& metric,
                          const std::string& mode, const std::string& scope,
                          bool json, size_t max_rows) {
  absl::StatusOr<v1::SweepComparison> cmp =
      CompareSweep(sweep_id, metric, mode, scope);
  if (!cmp.ok()) return Fail(cmp.status());
  if (std::none_of(cmp->trials().begin(), cmp->trials().end(),
                   [](const v1::SweepTrial& t) { return t.has_metric(); })) {
    // A mistyped metric: say which ones the trials did report.
    std::set<std::string> keys;
    int asked = 0;
    for (const v1::SweepTrial& t : cmp->trials()) {
      if (asked++ == 8) break;
      v1::GetMetricsRequest request;
      request.set_job_id(t.job_id());
      request.set_summary_only(true);
      v1::GetMetricsResponse metrics;
      if (!Call(&Stub::GetMetrics, request, &metrics).ok()) continue;
      for (const v1::MetricSeries& m : metrics.series()) keys.insert(m.key());
    }
    if (!keys.empty()) {
      err_ << absl::StrFormat(
          "trainctl: error: no trial of sweep %s reported %s; its trials reported: %s\n",
          sweep_id, metric, absl::StrJoin(keys, ", "));
      return kExitUsage;
    }
  }
  if (json) {
    out_ << ToJson(*cmp);
    return kExitOk;
  }
  std::set<std::string> names;
  for (const v1::SweepTrial& t : cmp->trials()) {
    for (const auto& [name, value] : t.params()) names.insert(name);
  }
  std::vector<std::string> header = {"#", "JOB", "STATE"};
  header.insert(header.end(), names.begin(), names.end());
  const std::string column = absl::AsciiStrToUpper(
      scope == "best" ? absl::StrCat(metric, " (", mode, ")") : metric);
  for (const std::string& h : {column, std::string("STEP"), std::string("GPU-H")}) {
    header.push_back(h);
  }
  Table table(std::move(header));
  size_t rows = 0, without = 0;
  for (const v1::SweepTrial& t : cmp->trials()) {
    if (!t.has_metric()) ++without;
    if (max_rows > 0 && rows == max_rows) continue;
    ++rows;
    std::vector<std::string> row = {t.has_metric() ? absl::StrCat(rows) : "-",
                                    absl::StrCat(t.job_id()),
                                    ShortEnumName(t.state(), "JOB_STATE_")};
    for (const std::string& name : names) {
      auto it = t.params().find(name);
      row.push_back(it == t.params().end() ? "-" : it->second);
    }
    row.push_back(t.has_metric() ? FormatValue(t.value()) : "-");
    row.push_back(t.has_metric() ? absl::StrCat(t.step()) : "-");
    row.push_back(absl::StrFormat("%.2f", t.gpu_hours()));
    table.AddRow(std::move(row));
  }
  table.Print(out_, terminal_width_);
  if (without > 0) {
    err_ << absl::StrFormat("%d trial(s) have not reported %s yet\n", without,
                            metric);
  }
  return kExitOk;
}

int Session::SweepCancel(const std::string& sweep_id) {
  absl::StatusOr<v1::ListJobsResponse> response = SweepJobs(sweep_id);
  if (!response.ok()) return Fail(response.status());
  int cancelled = 0, ended = 0, failed = 0;
  for (const v1::Job& job : response->jobs()) {
    if (IsFinal(job.state())) {
      ++ended;
      continue;
    }
    v1::CancelJobRequest request;
    request.set_job_id(job.id());
    v1::CancelJobResponse cancel;
    if (absl::Status s = Call(&Stub::CancelJob, request, &cancel); !s.ok()) {
      err_ << absl::StrFormat("trainctl: error: job %d: %s\n", job.id(),
                              s.message());
      ++failed;
      continue;
    }
    ++cancelled;
  }
  out_ << absl::StrFormat(
      "sweep %s: cancelled %d trial(s); %d had already ended\n", sweep_id,
      cancelled, ended);
  if (failed > 0) {
    err_ << absl::StrFormat(
        "trainctl: error: %d trial(s) of sweep %s could not be cancelled; "
        "run `trainctl sweep cancel %s` again\n",
        failed, sweep_id, sweep_id);
    return kExitRpcError;
  }
  return kExitOk;
}

}  // namespace trainctl::cli::internal
