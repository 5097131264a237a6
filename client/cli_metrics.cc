// Experiment records: `trainctl report KEY=VALUE...` (from inside a task,
// identified by its launch environment) and `trainctl metrics JOB` (a job's
// reported metrics: last/min/max per key, or every point as JSON).

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "client/table.h"

namespace trainctl::cli::internal {
namespace {

// `trainctl report` retries while the coordinator is UNAVAILABLE: waits of
// 0.2 s doubling to 2 s, at most this many calls (about 53 s in all).
constexpr int kReportAttempts = 30;
constexpr absl::Duration kReportFirstBackoff = absl::Milliseconds(200);
constexpr absl::Duration kReportMaxBackoff = absl::Seconds(2);

}  // namespace

CLI::App* AddReportCommand(CLI::App& app, Flags& f) {
  CLI::App* report = app.add_subcommand(
      "report", "From inside a task: report metrics (durable on return)");
  report->add_option("METRICS", f.report_pairs,
                     "KEY=VALUE scalars, e.g. loss=0.25 val_loss=0.31 samples_per_s=1.2e4")
      ->required();
  report->add_option("--step", f.step, "Training step of the values (default 0)")
      ->check(CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max()));
  report->footer(absl::StrCat(
      Example("  trainctl report loss=0.25 lr=3e-4 --step 1200"),
      "\n\nReads TRAINCTL_COORDINATOR, TRAINCTL_JOB_ID, TRAINCTL_ATTEMPT, "
      "TRAINCTL_TOKEN and RANK from the task's launch environment. Each call is "
      "one RPC and one durable write: from a training loop, prefer the C ABI "
      "trainctl_report_metric() (libtrainctl_nccl.so), which batches. While the "
      "coordinator is unreachable (a restart, a failover) the report is retried "
      "for up to a minute; a report whose answer was lost may be stored twice."));
  return report;
}

CLI::App* AddMetricsCommand(CLI::App& app, Flags& f) {
  CLI::App* metrics_cmd = app.add_subcommand(
      "metrics", "A job's reported metrics: last/min/max per key, or the "
                 "history as JSON");
  metrics_cmd->add_option("JOB", f.job_id, "Job id")->required();
  metrics_cmd->add_option("--key", f.metric_key, "Only this metric");
  metrics_cmd->add_option("-o,--output", f.output,
                          "table (summary) or json (every point, plot-ready)")
      ->check(CLI::IsMember({"table", "json", "yaml"}));
  metrics_cmd->footer(Example("  trainctl metrics 42\n"
                              "  trainctl metrics 42 --key loss -o json"));
  return metrics_cmd;
}

int Session::Report(const std::vector<std::string>& pairs, int64_t step,
                    const std::function<const char*(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string {
    const char* v = getenv(name);
    return v == nullptr ? "" : v;
  };
  v1::ReportMetricsRequest request;
  struct IntVar {
    const char* name;
    bool required;
    int64_t* out;
  };
  int64_t job_id = 0, attempt = 0, rank = 0;
  for (const IntVar& var : {IntVar{"TRAINCTL_JOB_ID", true, &job_id},
                            IntVar{"TRAINCTL_ATTEMPT", true, &attempt},
                            IntVar{"RANK", false, &rank}}) {
    const std::string text = env(var.name);
    if (text.empty() && !var.required) continue;
    if (!absl::SimpleAtoi(text, var.out)) {
      return UsageError(absl::StrFormat(
          "%s is %s: `trainctl report` runs inside a trainctl task, whose "
          "launch environment sets TRAINCTL_JOB_ID, TRAINCTL_ATTEMPT and "
          "TRAINCTL_TOKEN",
          var.name, text.empty() ? "not set" : "not a number (\"" + text + "\")"));
    }
  }
  request.set_job_id(job_id);
  request.set_attempt(static_cast<int32_t>(attempt));
  request.set_rank(static_cast<int32_t>(rank));
  request.set_token(env("TRAINCTL_TOKEN"));
  for (const std::string& pair : pairs) {
    std::pair<std::string, std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    double value;
    if (kv.first.empty() || !absl::SimpleAtod(kv.second, &value)) {
      return UsageError(absl::StrFormat(
          "%s: expected KEY=NUMBER, e.g. loss=0.25 or samples_per_s=1.2e4", pair));
    }
    v1::MetricPoint* p = request.add_points();
    p->set_key(kv.first);
    p->set_value(value);
    p->set_step(step);
  }
  // A coordinator that restarts (or fails over to a standby) is unreachable
  // for seconds: the report is retried, so no point is lost to it.
  absl::Duration backoff = kReportFirstBackoff;
  for (int attempt = 1;; ++attempt) {
    v1::ReportMetricsResponse response;
    absl::Status s = Call(&Stub::ReportMetrics, request, &response);
    if (s.ok()) return kExitOk;
    if (s.code() != absl::StatusCode::kUnavailable || attempt >= kReportAttempts) {
      return Fail(s);
    }
    if (attempt == 1) {
      err_ << "trainctl: " << s.message() << "; retrying the report for up to a minute\n";
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, kReportMaxBackoff);
  }
}

void Session::PrintMetricTable(const v1::GetMetricsResponse& metrics) {
  Table table({"KEY", "POINTS", "LAST", "STEP", "MIN", "MAX"});
  for (const v1::MetricSeries& m : metrics.series()) {
    table.AddRow({m.key(), absl::StrCat(m.count()), FormatValue(m.last()),
                  absl::StrCat(m.last_step()), FormatValue(m.min()),
                  FormatValue(m.max())});
  }
  table.Print(out_, terminal_width_);
}

int Session::Metrics(int64_t job_id, const std::string& key, bool json) {
  v1::GetMetricsRequest request;
  request.set_job_id(job_id);
  request.set_key(key);
  request.set_summary_only(!json);
  v1::GetMetricsResponse response;
  if (absl::Status s = Call(&Stub::GetMetrics, request, &response); !s.ok()) {
    return Fail(s);
  }
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  if (response.series().empty()) {
    err_ << absl::StrFormat(
        "job %d has reported no metrics%s (a task reports with `trainctl "
        "report loss=0.25 --step 100` or trainctl_report_metric())\n",
        job_id, key.empty() ? "" : " under " + key);
    return kExitOk;
  }
  PrintMetricTable(response);
  return kExitOk;
}

}  // namespace trainctl::cli::internal
