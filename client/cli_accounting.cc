// `trainctl usage` (GPU-hours allocated and used per user, project, queue,
// GPU type or node, like Slurm's sreport(1) with the used figure next to the
// allocation) and `trainctl history` (ended attempts, like sacct(1)).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "client/table.h"
#include "coordinator/usage_record.h"
#include "google/protobuf/util/json_util.h"

namespace trainctl::cli {
namespace internal {
namespace {

constexpr char kWhenForms[] =
    "expected a duration ago (7d, 12h, 1d12h) or a UTC date YYYY-MM-DD[THH:MM:SS]";

// The columns `history --format` knows, in the default order.
const std::vector<std::string>& HistoryFields() {
  static const auto* fields = new std::vector<std::string>{
      "jobid", "attempt", "user",  "project", "queue", "name",   "state", "start",
      "end",   "elapsed", "gpus",  "gputype", "nodes", "alloc_gpu_h", "used_gpu_h", "reason"};
  return *fields;
}

std::string Utc(int64_t ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%S", absl::FromUnixMillis(ms), absl::UTCTimeZone());
}

std::string Hours(double h) { return absl::StrFormat("%.3f", h); }

std::string Field(const v1::UsageRecord& r, const std::string& field) {
  if (field == "jobid") return absl::StrCat(r.job_id());
  if (field == "attempt") return absl::StrCat(r.attempt());
  if (field == "user") return r.user();
  if (field == "project") return r.project();
  if (field == "queue") return r.queue();
  if (field == "name") return r.name();
  if (field == "state") {
    const std::string state = coord::HistoryState(r);
    return state == "running" ? "-" : state;
  }
  if (field == "start") return Utc(r.start_time_ms());
  if (field == "end") return Utc(r.end_time_ms());
  if (field == "elapsed") {
    return absl::FormatDuration(absl::Seconds((r.end_time_ms() - r.start_time_ms()) / 1000));
  }
  if (field == "gpus") return absl::StrFormat("%.4g", r.gpus());
  if (field == "gputype" || field == "nodes") {
    std::vector<std::string> values;
    for (const v1::UsageSlice& s : r.slices()) {
      const std::string& v = field == "nodes" ? s.node() : s.gpu_type();
      if (std::find(values.begin(), values.end(), v) == values.end()) values.push_back(v);
    }
    return absl::StrJoin(values, ",");
  }
  if (field == "alloc_gpu_h") return Hours(r.gpu_seconds_allocated() / 3600.0);
  if (field == "used_gpu_h") return Hours(r.gpu_seconds_used() / 3600.0);
  if (field == "reason") return r.reason();
  return "";
}

}  // namespace

std::string CsvRow(const std::vector<std::string>& fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i > 0) line += ',';
    const std::string& f = fields[i];
    if (f.find_first_of(",\"\r\n") == std::string::npos) {
      line += f;
      continue;
    }
    line += '"';
    for (char c : f) {
      if (c == '"') line += '"';
      line += c;
    }
    line += '"';
  }
  line += "\r\n";
  return line;
}

absl::StatusOr<int64_t> ParseWhen(absl::string_view text, absl::Time now) {
  const std::string t(absl::StripAsciiWhitespace(text));
  absl::Time at;
  std::string error;
  for (const char* format : {"%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S"}) {
    if (absl::ParseTime(format, t, absl::UTCTimeZone(), &at, &error)) {
      return absl::ToUnixMillis(at);
    }
  }
  if (absl::ParseTime(absl::RFC3339_full, t, &at, &error)) return absl::ToUnixMillis(at);
  absl::StatusOr<absl::Duration> ago = ParseLongDuration(t);
  if (!ago.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("\"", text, "\": ", kWhenForms));
  }
  return absl::ToUnixMillis(now - *ago);
}

AccountingCommands AddAccountingCommands(CLI::App& app, Flags& f) {
  AccountingCommands c;
  c.usage = app.add_subcommand(
      "usage", "GPU-hours allocated and used per user, project, queue, GPU type or node");
  c.usage->add_option("--by", f.acct_by, "Group by: user, project, queue, gpu-type or node")
      ->check(CLI::IsMember({"user", "project", "queue", "gpu-type", "node"}))
      ->capture_default_str();
  c.usage->add_option("--since", f.acct_since,
                      "Window start: a duration ago (7d, 12h) or a UTC date "
                      "YYYY-MM-DD[THH:MM:SS] (default: 30d)");
  c.usage->add_option("--until", f.acct_until, "Window end, as --since (default: now)");
  c.usage->add_option("-o,--output", f.output, "Output format: table, json, yaml or csv")
      ->check(CLI::IsMember({"table", "json", "yaml", "csv"}));
  c.usage->footer(Example(
      "  trainctl usage                       # by user, the last 30 days\n"
      "  trainctl usage --by project --since 2026-11-01 --until 2026-12-01\n"
      "  trainctl usage --by gpu-type --since 7d -o csv"));

  c.history = app.add_subcommand("history", "Ended job attempts in a window, like sacct");
  c.history->add_option("--user", f.acct_user, "Only this user's (admins; a user sees their own)");
  c.history->add_option("--since", f.acct_since,
                        "Window start: a duration ago (7d, 12h) or a UTC date "
                        "YYYY-MM-DD[THH:MM:SS] (default: 1d)");
  c.history->add_option("--until", f.acct_until, "Window end, as --since (default: now)");
  c.history->add_option("--state", f.acct_state,
                        "Only attempts that ended so: succeeded, failed, restarted, "
                        "cancelled, stopped_early or preempted")
      ->check(CLI::IsMember(
          {"succeeded", "failed", "restarted", "cancelled", "stopped_early", "preempted"}));
  c.history->add_option("--format", f.acct_format,
                        absl::StrCat("Comma-separated columns, of: ",
                                     absl::StrJoin(HistoryFields(), ",")));
  c.history->add_option("-o,--output", f.output,
                        "Output format: table, json (one record per line), yaml (one "
                        "document, not streamed) or csv")
      ->check(CLI::IsMember({"table", "json", "yaml", "csv"}));
  c.history->footer(Example(
      "  trainctl history --since 7d\n"
      "  trainctl history --user alice --state failed --since 2026-11-01\n"
      "  trainctl history --format jobid,user,state,alloc_gpu_h,used_gpu_h -o csv"));
  return c;
}

std::string PrepareAccountingCommand(Flags* f, const AccountingCommands& c, absl::Time now) {
  if (!c.usage->parsed() && !c.history->parsed()) return "";
  f->acct_until_ms = 0;
  f->acct_since_ms = 0;
  if (!f->acct_until.empty()) {
    absl::StatusOr<int64_t> until = ParseWhen(f->acct_until, now);
    if (!until.ok()) return absl::StrCat("--until ", until.status().message());
    f->acct_until_ms = *until;
  }
  const int64_t until_ms = f->acct_until_ms != 0 ? f->acct_until_ms : absl::ToUnixMillis(now);
  if (!f->acct_since.empty()) {
    absl::StatusOr<int64_t> since = ParseWhen(f->acct_since, now);
    if (!since.ok()) return absl::StrCat("--since ", since.status().message());
    f->acct_since_ms = *since;
  } else {
    f->acct_since_ms = until_ms - (c.usage->parsed() ? int64_t{30} : 1) * 86400 * 1000;
  }
  if (f->acct_since_ms < 0) return absl::StrCat("--since ", f->acct_since, ": before 1970");
  if (f->acct_since_ms >= until_ms) {
    return absl::StrCat("--since ", f->acct_since.empty() ? "(default)" : f->acct_since,
                        ": must be before --until (", Utc(until_ms), ")");
  }
  if (c.history->parsed()) {
    f->acct_fields.clear();
    if (f->acct_format.empty()) {
      f->acct_fields = HistoryFields();
    } else {
      for (absl::string_view part : absl::StrSplit(f->acct_format, ',', absl::SkipEmpty())) {
        const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(part));
        if (std::find(HistoryFields().begin(), HistoryFields().end(), name) ==
            HistoryFields().end()) {
          return absl::StrCat("--format: unknown column \"", name, "\"; columns: ",
                              absl::StrJoin(HistoryFields(), ","));
        }
        f->acct_fields.push_back(name);
      }
      if (f->acct_fields.empty()) return "--format: names no column";
    }
  }
  return "";
}

int Session::Usage(const v1::GetUsageRequest& request, const std::string& output) {
  v1::GetUsageResponse response;
  if (absl::Status s = Call(&Stub::GetUsage, request, &response); !s.ok()) return Fail(s);
  if (output == "json" || output == "yaml") {
    out_ << ToJson(response);
    return kExitOk;
  }
  const std::string key = absl::AsciiStrToUpper(response.by().empty() ? "user" : response.by());
  const std::vector<std::string> header = {key,      "ALLOC_GPU_H", "USED_GPU_H", "EFFICIENCY",
                                           "JOBS",   "ATTEMPTS",    "FAILED",     "PREEMPTED"};
  auto cells = [](const v1::UsageRow& r) {
    return std::vector<std::string>{
        r.key().empty() ? "-" : r.key(), Hours(r.allocated_gpu_hours()),
        Hours(r.used_gpu_hours()),       absl::StrFormat("%.1f%%", 100 * r.efficiency()),
        absl::StrCat(r.jobs()),          absl::StrCat(r.attempts()),
        absl::StrCat(r.failed()),        absl::StrCat(r.preempted())};
  };
  if (output == "csv") {
    out_ << CsvRow(header);
    for (const v1::UsageRow& r : response.rows()) out_ << CsvRow(cells(r));
    return kExitOk;
  }
  Table table(header);
  for (const v1::UsageRow& r : response.rows()) table.AddRow(cells(r));
  if (response.rows_size() > 1) table.AddRow(cells(response.total()));
  table.KeepWhole(0);
  table.Print(out_, terminal_width_);
  err_ << "window " << Utc(response.since_ms()) << " to " << Utc(response.until_ms()) << " UTC"
       << (response.only_user().empty() ? ""
                                        : absl::StrCat("; only user ", response.only_user()))
       << "\n";
  if (response.rows().empty()) err_ << "no GPU time in this window\n";
  return kExitOk;
}

int Session::History(const v1::ListHistoryRequest& request,
                     const std::vector<std::string>& fields, const std::string& output) {
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderInterface<v1::ListHistoryResponse>> reader =
      stub_->ListHistory(&context, request);
  std::vector<std::string> header;
  for (const std::string& f : fields) header.push_back(absl::AsciiStrToUpper(f));
  std::unique_ptr<Table> table;
  if (output == "csv") {
    out_ << CsvRow(fields);
  } else if (output != "json" && output != "yaml") {
    table = std::make_unique<Table>(header);
  }
  int64_t rows = 0;
  // -o yaml: one ListHistoryResponse of every record (the YAML is converted
  // from one JSON document), held in memory; json (JSON Lines) and csv
  // stream.
  v1::ListHistoryResponse all;
  v1::ListHistoryResponse page;
  while (reader->Read(&page)) {
    for (const v1::UsageRecord& r : page.records()) {
      ++rows;
      if (output == "yaml") {
        *all.add_records() = r;
        continue;
      }
      if (output == "json") {
        // JSON Lines: one record per line, so a million rows stream.
        std::string line;
        google::protobuf::util::JsonPrintOptions options;
        options.always_print_primitive_fields = true;
        options.preserve_proto_field_names = true;
        if (!google::protobuf::util::MessageToJsonString(r, &line, options).ok()) {
          return Fail(absl::InternalError("a history record could not be printed as JSON"));
        }
        out_ << line << "\n";
        continue;
      }
      std::vector<std::string> cells;
      for (const std::string& f : fields) cells.push_back(Field(r, f));
      if (table != nullptr) {
        table->AddRow(std::move(cells));
      } else {
        out_ << CsvRow(cells);
      }
    }
  }
  grpc::Status status = reader->Finish();
  if (table != nullptr) table->Print(out_, terminal_width_);
  if (output == "yaml" && status.ok()) out_ << ToJson(all);
  if (!status.ok()) return Fail(ToUserStatus(status, kRpcDeadline));
  if (rows == 0 && output != "json" && output != "yaml") err_ << "no attempts in this window\n";
  return kExitOk;
}

}  // namespace internal
}  // namespace trainctl::cli
