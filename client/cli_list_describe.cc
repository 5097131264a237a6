// `trainctl list` (jobs, newest first) and `trainctl describe JOB` (a job's
// spec, state, pre-flights, experiment records, ranks and utilization), as
// tables for people or JSON.

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "client/table.h"
#include "client/top.h"
#include "common/units.h"
#include "coordinator/diagnosis.h"

namespace trainctl::cli::internal {

std::vector<std::string> JobStateNames() {
  std::vector<std::string> names;
  const auto* descriptor = v1::JobState_descriptor();
  for (int i = 0; i < descriptor->value_count(); ++i) {
    if (descriptor->value(i)->number() == v1::JOB_STATE_UNSPECIFIED) continue;
    names.push_back(ShortEnumName(descriptor->value(i)->name(), "JOB_STATE_"));
  }
  return names;
}

namespace {

// OUTCOME cell of an attempt: "RUNNING" until it ends, then e.g. "failed".
std::string OutcomeName(v1::AttemptOutcome o) {
  if (o == v1::ATTEMPT_OUTCOME_UNSPECIFIED) return "RUNNING";
  return ShortEnumName(v1::AttemptOutcome_Name(o), "ATTEMPT_OUTCOME_");
}

}  // namespace

namespace {

// The NAME column: the job's name ("-" for none); a job array's task adds
// Slurm's ARRAYID_TASKID ("eval[57_3]").
std::string ShownName(const v1::Job& job) {
  const std::string& name = job.spec().name();
  if (!job.spec().has_array()) return name.empty() ? "-" : name;
  const std::string id = absl::StrCat(job.spec().array().array_job_id(), "_",
                                      job.spec().array().task_id());
  return name.empty() ? id : absl::StrCat(name, "[", id, "]");
}

}  // namespace

ListDescribeCommands AddListDescribeCommands(CLI::App& app, Flags& f) {
  // list
  CLI::App* list = app.add_subcommand("list", "List jobs, newest first");
  list->add_option("--state", f.states, "Only jobs in this state (repeatable)")
      ->check(CLI::IsMember(JobStateNames(), CLI::ignore_case))
      ->allow_extra_args(false);
  // describe
  CLI::App* describe =
      app.add_subcommand("describe", "Show jobs' spec, state and ranks");
  describe->add_option("JOB", f.job_ids, "Job ids")->required();
  list->add_option("-o,--output", f.output,
                   "Output format: table, wide (with USER and NODES), json or yaml")
      ->check(CLI::IsMember({"table", "wide", "json", "yaml"}));
  describe->add_option("-o,--output", f.output, "Output format: table, json or yaml")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  list->add_option("--user", f.list_user,
                   "Only this user's jobs (another user's: admins only)");
  list->add_flag("--all-users", f.list_all_users,
                 "Every user's jobs, not only yours (admins only, with "
                 "authentication on)");
  list->add_option("--name", f.list_name, "Only jobs of this name");
  list->add_option("--array", f.list_array,
                   "Only the tasks of this job array (its id, as `submit "
                   "--array` printed)");
  list->add_option("--limit", f.list_limit, "At most this many jobs, newest first")
      ->check(CLI::Range(1, 1'000'000));
  list->footer(
      Example("  trainctl list --state running --state pending\n"
              "  trainctl list --user alice --name lr-sweep -o wide\n"
              "  trainctl list --all-users --state pending\n"
              "  trainctl list --limit 20 -o json"));
  describe->footer(
      Example("  trainctl describe 42\n"
              "  trainctl describe 42 -o json"));
  return {list, describe};
}

int Session::CompletionIds() {
  v1::ListJobsResponse response;
  if (absl::Status s = Call(&Stub::ListJobs, v1::ListJobsRequest(), &response); !s.ok()) {
    return Fail(s);
  }
  std::vector<const v1::Job*> jobs;
  for (const v1::Job& job : response.jobs()) jobs.push_back(&job);
  std::sort(jobs.begin(), jobs.end(),
            [](const v1::Job* a, const v1::Job* b) { return a->id() > b->id(); });
  absl::flat_hash_set<std::string> sweeps;
  for (const v1::Job* job : jobs) out_ << "job " << job->id() << "\n";
  for (const v1::Job* job : jobs) {
    const std::string& sweep = job->spec().sweep_id();
    if (!sweep.empty() && sweeps.insert(sweep).second) out_ << "sweep " << sweep << "\n";
  }
  return kExitOk;
}

int Session::List(const std::vector<std::string>& states, bool json,
                  const ListFilter& filter) {
  v1::ListJobsRequest request;
  request.set_user(filter.user);
  request.set_all_users(filter.all_users);
  // With a client-side filter the limit applies after it. The user is
  // filtered here too, for a coordinator older than ListJobsRequest.user.
  const bool client_filter = !filter.user.empty() || !filter.name.empty();
  if (filter.limit > 0 && !client_filter) request.set_limit(filter.limit);
  if (filter.array_job_id > 0) {
    request.set_array_job_id(filter.array_job_id);
    if (filter.limit == 0) request.set_limit(kMaxArrayTaskCount);
  }
  for (const std::string& name : states) {
    v1::JobState state;
    // Validated by CLI11 against the same names.
    if (v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(name),
                           &state)) {
      request.add_states(state);
    }
  }
  v1::ListJobsResponse response;
  if (absl::Status s = Call(&Stub::ListJobs, request, &response); !s.ok()) {
    return Fail(s);
  }
  for (v1::Job& job : *response.mutable_jobs()) job.clear_attempt_token();
  if (client_filter) {
    v1::ListJobsResponse kept;
    for (v1::Job& job : *response.mutable_jobs()) {
      if (!filter.user.empty() && job.spec().user() != filter.user) continue;
      if (!filter.name.empty() && job.spec().name() != filter.name) continue;
      *kept.add_jobs() = std::move(job);
    }
    response = std::move(kept);
  }
  std::vector<const v1::Job*> jobs;
  for (const v1::Job& job : response.jobs()) jobs.push_back(&job);
  std::stable_sort(jobs.begin(), jobs.end(), [](const auto* a, const auto* b) {
    return std::make_pair(a->submit_time_ms(), a->id()) >
           std::make_pair(b->submit_time_ms(), b->id());
  });
  if (filter.limit > 0 && jobs.size() > static_cast<size_t>(filter.limit)) {
    jobs.resize(filter.limit);
  }
  if (json) {
    v1::ListJobsResponse shown;
    for (const v1::Job* job : jobs) *shown.add_jobs() = *job;
    out_ << ToJson(shown);
    return kExitOk;
  }
  // -o wide is the table with USER and NODES added, nothing taken away.
  const bool wide = filter.wide;
  std::vector<std::string> header = {"ID", "NAME"};
  if (wide) header.push_back("USER");
  for (const char* c : {"KIND", "STATE", "GPUS"}) header.push_back(c);
  if (wide) header.push_back("NODES");
  for (const char* c : {"ATTEMPT", "AGE", "RUNTIME", "REASON"}) header.push_back(c);
  Table table(header);
  for (const v1::Job* job : jobs) {
    std::string runtime = "-";
    if (job->start_time_ms() > 0) {
      absl::Time end =
          job->end_time_ms() > 0 ? FromMs(job->end_time_ms()) : clock_.Now();
      runtime = FormatAge(end - FromMs(job->start_time_ms()));
    }
    std::vector<std::string> row = {absl::StrCat(job->id()), ShownName(*job)};
    if (wide) row.push_back(job->spec().user().empty() ? "-" : job->spec().user());
    for (std::string cell : {KindName(job->kind()), JobStateLabel(*job),
                             FormatGpus(job->spec())}) {
      row.push_back(std::move(cell));
    }
    if (wide) {
      std::vector<std::string> nodes;
      for (const v1::Task& t : job->tasks()) {
        if (std::find(nodes.begin(), nodes.end(), t.node()) == nodes.end()) {
          nodes.push_back(t.node());
        }
      }
      row.push_back(nodes.empty() ? "-" : absl::StrJoin(nodes, ","));
    }
    for (std::string cell : {absl::StrCat(job->attempt()), Ago(job->submit_time_ms()), runtime,
                             job->reason()}) {
      row.push_back(std::move(cell));
    }
    table.AddRow(row);
  }
  if (wide) {  // the full width: nothing is optional
    table.Print(out_, terminal_width_);
    return kExitOk;
  }
  // On a narrow terminal NAME and REASON are cut, ATTEMPT and RUNTIME go.
  for (int column : {0, 2, 3, 4, 6}) table.KeepWhole(column);
  table.Optional(5);
  table.Optional(7);
  table.Print(out_, terminal_width_);
  return kExitOk;
}

int Session::DescribeJobs(const std::vector<int64_t>& job_ids, bool json) {
  if (job_ids.size() == 1) return Describe(job_ids.front(), json);
  // Several: a table each, a blank line between; as data, one list. A job
  // that cannot be read is reported and the others still shown.
  v1::ListJobsResponse all;
  int status = kExitOk;
  for (size_t i = 0; i < job_ids.size(); ++i) {
    absl::StatusOr<v1::Job> job = DescribedJob(job_ids[i]);
    if (!job.ok()) {
      status = Fail(job.status());
      continue;
    }
    if (json) {
      *all.add_jobs() = *std::move(job);
      continue;
    }
    if (i > 0) out_ << "\n";
    PrintDescription(*job);
  }
  if (json) out_ << ToJson(all);
  return status;
}

absl::StatusOr<v1::Job> Session::DescribedJob(int64_t job_id) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  if (absl::Status s = Call(&Stub::GetJob, request, &response); !s.ok()) return s;
  v1::Job job = std::move(*response.mutable_job());
  job.clear_attempt_token();
  // Secret-looking variables are masked, in JSON too: describe output is
  // pasted into chats and tickets.
  if (job.has_spec()) {
    v1::JobSpec* spec = job.mutable_spec();
    for (auto* env : {spec->mutable_env(), spec->mutable_exported_env()}) {
      for (const auto& [name, value] : MaskSecrets(*env)) (*env)[name] = value;
    }
  }
  return job;
}

int Session::Describe(int64_t job_id, bool json) {
  absl::StatusOr<v1::Job> job = DescribedJob(job_id);
  if (!job.ok()) return Fail(job.status());
  if (json) {
    v1::GetJobResponse response;
    *response.mutable_job() = *std::move(job);
    out_ << ToJson(response);
    return kExitOk;
  }
  PrintDescription(*job);
  return kExitOk;
}

void Session::PrintDescription(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  auto field = [this](absl::string_view key, absl::string_view value) {
    if (!value.empty()) out_ << absl::StrFormat("%-12s %s\n", key, value);
  };
  auto when = [this](int64_t ms) -> std::string {
    if (ms <= 0) return "";
    return absl::StrFormat("%s (%s ago)",
                           absl::FormatTime("%Y-%m-%d %H:%M:%S %Z", FromMs(ms),
                                            absl::LocalTimeZone()),
                           Ago(ms));
  };
  std::vector<std::string> command;
  for (const std::string& arg : spec.command())
    command.push_back(ShellQuote(arg));
  // Sorted, so that the output does not depend on map order.
  std::map<std::string, std::string> env(spec.env().begin(), spec.env().end());

  field("Job:",
        absl::StrCat(job.id(),
                     spec.name().empty() ? "" : " (" + spec.name() + ")"));
  field("State:", JobStateLabel(job));
  field("Reason:", job.reason());
  field("Dependency:", spec.dependency());
  field("Kind:", KindName(job.kind()));
  if (spec.interactive()) {
    field("Interactive:",
          spec.idle_timeout_ms() < 0 ? "yes (trainctl shell); never ends for idleness"
          : spec.idle_timeout_ms() == 0
              ? "yes (trainctl shell); ends when idle for the queue's idle timeout"
              : absl::StrCat("yes (trainctl shell); ends when idle for ",
                             absl::FormatDuration(absl::Milliseconds(spec.idle_timeout_ms()))));
  }
  field("Attempt:", absl::StrFormat("%d (restarts allowed: %d)", job.attempt(),
                                    spec.max_restarts()));
  field("Command:", absl::StrJoin(command, " "));
  field("Workdir:", spec.workdir());
  if (spec.discard_output()) field("Logs:", "discarded (--no-logs)");
  if (spec.slurm_env()) field("Slurm env:", "SLURM_* variables (--slurm-env)");
  field("Env:", absl::StrJoin(env, " ", absl::PairFormatter("=")));
  if (!spec.export_policy().empty() || spec.exported_env_size() > 0) {
    std::vector<std::string> names;
    for (const auto& [name, value] : spec.exported_env()) names.push_back(name);
    std::sort(names.begin(), names.end());
    // The first dozen names; `describe -o json` has them all.
    constexpr size_t kShownNames = 12;
    if (names.size() > kShownNames) {
      const size_t more = names.size() - kShownNames;
      names.resize(kShownNames);
      names.push_back(absl::StrCat("... and ", more, " more"));
    }
    field("Export:",
          absl::StrFormat("%s (%d variables%s%s)",
                          spec.export_policy().empty() ? "given" : spec.export_policy(),
                          spec.exported_env_size(), names.empty() ? "" : ": ",
                          absl::StrJoin(names, " ")));
  } else {
    field("Export:", "none (a REST or web submit: the task gets the node's "
                     "PATH and the account's HOME, not a shell's environment)");
  }
  if (!spec.image().empty()) field("Image:", spec.image());
  if (spec.cpus() > 0) field("CPU limit:", absl::StrCat(spec.cpus(), " CPUs per task"));
  if (spec.memory_bytes() > 0) {
    field("Mem limit:", absl::StrCat(FormatBytes(spec.memory_bytes()), " per task"));
  }
  for (const v1::Task& t : job.tasks()) {
    if (t.run_as().empty()) continue;
    field("Runs as:",
          t.run_as() == spec.user()
              ? absl::StrFormat("%s (uid %d)", t.run_as(), t.uid())
              : absl::StrFormat(
                    "%s (uid %d), the agent's account: tasks run as their "
                    "job's user only with authentication on and a root agent",
                    t.run_as(), t.uid()));
    break;
  }
  field("Resources:", DescribeResources(spec));
  field("Placed on:", DescribeNodeSelection(spec));
  field("Priority:", absl::StrCat(spec.priority()));
  // Scheduling (shown only when set).
  field("Queue:", spec.queue());
  field("User:", spec.user());
  field("Project:", spec.project());
  if (spec.time_limit_ms() > 0) {
    field("Time limit:",
          absl::FormatDuration(absl::Milliseconds(spec.time_limit_ms())));
  }
  if (spec.preemptible()) field("Preemptible:", "yes");
  if (job.preemptions() > 0) {
    field("Preempted:",
          absl::StrCat(job.preemptions(), job.preemptions() == 1 ? " time" : " times",
                       job.preempted_for_job_id() != 0
                           ? absl::StrCat(" (waits for job ",
                                          job.preempted_for_job_id(), " to start)")
                           : ""));
  }
  if (spec.has_array()) {
    const v1::JobArray& a = spec.array();
    field("Array:", absl::StrFormat("%d_%d (task %d of array %d, %d task(s)%s)",
                                    a.array_job_id(), a.task_id(), a.task_id(),
                                    a.array_job_id(), a.task_count(),
                                    a.max_running() > 0
                                        ? absl::StrCat(", at most ", a.max_running(),
                                                       " running")
                                        : ""));
  }
  field("Request id:", job.request_id());
  field("Submitted:", when(job.submit_time_ms()));
  field("Started:", when(job.start_time_ms()));
  field("Ended:", when(job.end_time_ms()));
  if (!job.master_addr().empty()) {
    field("Master:", absl::StrCat(job.master_addr(), ":", job.master_port()));
  }
  if (job.world_size() > 0)
    field("World size:", absl::StrCat(job.world_size()));
  DescribePreflight(job);
  DescribeRecords(job);
  if (spec.auto_pack()) {
    field("Auto-pack:",
          job.oom_count() > 0
              ? absl::StrFormat("on; %d out-of-memory requeue(s), now asks %s",
                                job.oom_count(),
                                FormatBytes(job.auto_pack_memory_bytes()))
              : "on");
  }
  if (job.tasks_size() == 0) return;

  out_ << "\n";
  Table table({"RANK", "NODE", "GPUS", "STATE", "PID", "EXIT", "LOG PATH"});
  std::vector<std::string> messages;
  for (const v1::Task& t : job.tasks()) {
    table.AddRow({absl::StrCat(t.rank()), t.node(),
                  absl::StrJoin(t.gpu_indices(), ","), TaskStateName(t.state()),
                  t.pid() > 0 ? absl::StrCat(t.pid()) : "-", FormatExit(t),
                  t.log_path()});
    if (!t.message().empty()) {
      messages.push_back(absl::StrFormat("rank %d: %s", t.rank(), t.message()));
    }
  }
  // The log path is what users copy: never truncate it.
  table.Print(out_, /*terminal_width=*/1 << 20);
  for (const std::string& m : messages) out_ << m << "\n";
  DescribeUsage(job);
}

void Session::DescribePreflight(const v1::Job& job) {
  const v1::JobPreflight& pf = job.preflight();
  const v1::PreflightMode mode = job.spec().preflight();
  if (job.kind() == v1::JOB_KIND_GANG || mode != v1::PREFLIGHT_MODE_UNSPECIFIED) {
    out_ << absl::StrFormat(
        "%-12s %s\n", "Pre-flight:",
        mode == v1::PREFLIGHT_MODE_ON    ? "on (--preflight)"
        : mode == v1::PREFLIGHT_MODE_OFF ? "off (--no-preflight)"
                                         : "auto (when placed on more than one node)");
  }
  for (const v1::ExcludedNode& e : pf.excluded()) {
    out_ << absl::StrFormat("%-12s %s: %s (pre-flight %d)\n", "Excluded:", e.node(),
                            e.reason(), e.run());
  }
  if (pf.runs_size() == 0) return;
  auto verdict = [](v1::PreflightVerdict v) {
    switch (v) {
      case v1::PREFLIGHT_VERDICT_RUNNING: return "RUNNING";
      case v1::PREFLIGHT_VERDICT_PASSED: return "PASSED";
      case v1::PREFLIGHT_VERDICT_FAILED: return "FAILED";
      case v1::PREFLIGHT_VERDICT_ABORTED: return "ABORTED";
      default: return "?";
    }
  };
  auto status = [](v1::PreflightRankStatus s) {
    const std::string& name = v1::PreflightRankStatus_Name(s);
    return std::string(absl::StripPrefix(name, "PREFLIGHT_RANK_STATUS_"));
  };
  out_ << "\nPre-flights:\n";
  for (const v1::PreflightRun& run : pf.runs()) {
    std::string took;
    if (run.end_time_ms() > run.start_time_ms() && run.start_time_ms() > 0) {
      took = absl::StrFormat(", took %d ms", run.end_time_ms() - run.start_time_ms());
    }
    out_ << absl::StrFormat("  #%d (attempt %d) %s on %s%s\n", run.index(),
                            run.attempt(), verdict(run.verdict()),
                            absl::StrJoin(run.nodes(), ", "), took);
    if (!run.reason().empty()) out_ << "    " << run.reason() << "\n";
    if (run.comm_ready_max_ms() > 0) {
      out_ << absl::StrFormat("    communicator ready: %.0f ms (slowest rank)\n",
                              run.comm_ready_max_ms());
    }
    for (const v1::PreflightLinkSummary& l : run.links()) {
      out_ << absl::StrFormat(
          "    %s busbw: median %.2f GB/s, min %.2f, max %.2f (%d ranks)\n",
          l.link_class() == v1::LINK_CLASS_INTRA_NODE ? "intra-node (NVLink)"
                                                      : "network",
          l.median_busbw_gbps(), l.min_busbw_gbps(), l.max_busbw_gbps(), l.ranks());
    }
    Table table({"RANK", "NODE", "STATUS", "READY MS", "BUSBW GB/S", "NVLINK GB/S",
                 "DETAIL"});
    for (const v1::PreflightRank& r : run.ranks()) {
      table.AddRow({absl::StrCat(r.rank()), r.node(),
                    absl::StrCat(status(r.status()), r.blamed() ? " (excluded)" : ""),
                    r.comm_ready_ms() > 0 ? absl::StrFormat("%.0f", r.comm_ready_ms()) : "-",
                    r.busbw_gbps() > 0 ? absl::StrFormat("%.2f", r.busbw_gbps()) : "-",
                    r.intra_node_busbw_gbps() > 0
                        ? absl::StrFormat("%.2f", r.intra_node_busbw_gbps())
                        : "-",
                    r.detail()});
    }
    std::ostringstream rows;
    table.Print(rows, /*terminal_width=*/1 << 20);
    for (absl::string_view line : absl::StrSplit(rows.str(), '\n', absl::SkipEmpty())) {
      out_ << "    " << line << "\n";
    }
  }
}

void Session::DescribeRecords(const v1::Job& job) {
  auto field = [this](absl::string_view key, absl::string_view value) {
    if (!value.empty()) out_ << absl::StrFormat("%-12s %s\n", key, value);
  };
  field("Checkpoint:", job.checkpoint_dir());
  if (job.attempts_size() > 0) {
    field("GPU-hours:", absl::StrFormat("%.2f", job.gpu_hours()));
  }
  if (job.metric_points() > 0) {
    field("Metrics:", absl::StrFormat("%d points (`trainctl metrics %d`)",
                                      job.metric_points(), job.id()));
  }
  if (job.attempts_size() > 0) {
    out_ << "\nAttempts:\n";
    Table table({"ATTEMPT", "OUTCOME", "STARTED", "RAN", "GPUS", "GPU-H", "EXIT",
                 "LOG (RANK 0)", "REASON"});
    table.KeepWhole(7);  // the log path is what users copy
    for (const v1::AttemptRecord& a : job.attempts()) {
      const int64_t end_ms =
          a.end_time_ms() > 0 ? a.end_time_ms() : absl::ToUnixMillis(clock_.Now());
      // Exit codes of the first ranks, "rank:code".
      std::vector<std::string> exits;
      for (const v1::RankRecord& r : a.ranks()) {
        if (exits.size() == 3) {
          exits.push_back("...");
          break;
        }
        exits.push_back(absl::StrCat(
            r.rank(), ":",
            r.signal() != 0 ? SignalName(r.signal())
            : r.state() == "EXITED" ? absl::StrCat(r.exit_code())
                                    : absl::AsciiStrToLower(r.state())));
      }
      std::string log = "-";
      if (!a.ranks().empty() && !a.ranks(0).log_path().empty()) {
        log = absl::StrCat(a.ranks(0).node(), ":", a.ranks(0).log_path());
      }
      table.AddRow({absl::StrCat(a.attempt()), OutcomeName(a.outcome()),
                    absl::FormatTime("%Y-%m-%d %H:%M:%S", FromMs(a.start_time_ms()),
                                     absl::LocalTimeZone()),
                    FormatAge(absl::Milliseconds(end_ms - a.start_time_ms())),
                    absl::StrFormat("%.4g", a.gpus()),
                    absl::StrFormat("%.2f", a.gpu_hours()),
                    exits.empty() ? "-" : absl::StrJoin(exits, " "), log,
                    a.reason().empty() ? "-" : a.reason()});
    }
    table.Print(out_, terminal_width_);
  }
  if (job.metric_points() > 0) {
    v1::GetMetricsRequest request;
    request.set_job_id(job.id());
    request.set_summary_only(true);
    v1::GetMetricsResponse metrics;
    if (absl::Status s = Call(&Stub::GetMetrics, request, &metrics); !s.ok()) {
      err_ << "trainctl: warning: metrics: " << s.message() << "\n";
      return;
    }
    out_ << "\nMetrics:\n";
    PrintMetricTable(metrics);
  }
  if (job.tasks_size() > 0) out_ << "\nRanks (attempt " << job.attempt() << "):";
}

void Session::DescribeUsage(const v1::Job& job) {
  v1::GetJobUsageRequest request;
  request.add_job_ids(job.id());
  v1::GetJobUsageResponse response;
  if (!Call(&Stub::GetJobUsage, request, &response).ok() ||
      response.jobs_size() == 0 || response.jobs(0).samples_size() == 0) {
    return;
  }
  const v1::JobUsage& u = response.jobs(0);
  const std::vector<v1::JobUsageSample> samples(u.samples().begin(),
                                                u.samples().end());
  const coord::UsageSummary s = coord::Summarize(samples);
  out_ << absl::StrFormat(
      "\nUtilization over the last %s (%d samples):\n",
      absl::FormatDuration(absl::Seconds(s.span_ms / 1000)), s.samples);
  out_ << absl::StrFormat("  GPU util     %.0f%% min, %.0f%% avg, %.0f%% max  %s\n",
                          s.util_min, s.util_mean, s.util_max,
                          Sparkline([&] {
                            std::vector<double> v;
                            for (const auto& x : samples) v.push_back(x.gpu_util_pct());
                            return v;
                          }(), 100, 40));
  if (s.gpm) {
    out_ << absl::StrFormat(
        "  SM activity  %.0f%% min, %.0f%% avg, %.0f%% max  %s\n", s.sm_active_min,
        s.sm_active_mean, s.sm_active_max,
        Sparkline([&] {
          std::vector<double> v;
          for (const auto& x : samples) v.push_back(x.sm_active_pct());
          return v;
        }(), 100, 40));
    out_ << absl::StrFormat(
        "  SM occupancy %.0f%% avg, DRAM bandwidth %.0f%% avg (NVML GPM, whole GPU)\n",
        s.sm_occupancy_mean, s.dram_bw_mean);
  } else {
    out_ << "  GPU activity from NVML utilization (its GPUs report no GPM counters)\n";
  }
  out_ << absl::StrFormat("  GPU memory   %s min, %s avg, %s max of %s\n",
                          FormatBytes(s.memory_min), FormatBytes(s.memory_mean),
                          FormatBytes(s.memory_max), FormatBytes(s.memory_total));
  out_ << absl::StrFormat("  CPU          %.0f%% of a core on average\n", s.cpu_mean);
  if (u.findings_size() == 0) {
    out_ << "Diagnosis:   nothing stands out\n";
    return;
  }
  if (u.findings_size() == 1 && u.findings(0).code() == "not_enough_samples") {
    out_ << "Diagnosis:   " << u.findings(0).message() << "\n";
    return;
  }
  out_ << "Diagnosis:\n";
  for (const v1::UsageFinding& f : u.findings()) out_ << "  - " << f.message() << "\n";
}

}  // namespace trainctl::cli::internal
