#include "client/cli.h"

#include <string.h>  // sigabbrev_np

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/distributions.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/completion.h"
#include "client/sweep.h"
#include "client/table.h"
#include "client/top.h"
#include "common/units.h"
#include "coordinator/diagnosis.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"

namespace trainctl::cli {
namespace {

namespace v1 = ::trainctl::v1;
using Stub = v1::Coordinator::StubInterface;

// Deadline of every unary call but WaitJob.
constexpr absl::Duration kRpcDeadline = absl::Seconds(10);
// How long one WaitJob call long-polls on the server; its deadline adds
// kWaitSlack for the network.
constexpr absl::Duration kWaitPoll = absl::Seconds(30);
constexpr absl::Duration kWaitSlack = absl::Seconds(5);
// `logs -f` blocks this long on WaitJob when it has caught up with the log.
constexpr absl::Duration kFollowPoll = absl::Seconds(1);
// With a progress line (CliOptions::progress), `wait` polls this often so
// that the line's elapsed time and state stay current.
constexpr absl::Duration kProgressPoll = absl::Seconds(1);

// ------------------------------------------------------------ formatting

// "JOB_STATE_RUNNING" -> "running": the user-facing name of an enum value.
std::string ShortEnumName(const std::string& full, absl::string_view prefix) {
  return absl::AsciiStrToLower(absl::StripPrefix(full, prefix));
}
std::string StateName(v1::JobState s) {
  return ShortEnumName(v1::JobState_Name(s), "JOB_STATE_");
}
std::string KindName(v1::JobKind k) {
  return ShortEnumName(v1::JobKind_Name(k), "JOB_KIND_");
}
std::string TaskStateName(v1::TaskState s) {
  return ShortEnumName(v1::TaskState_Name(s), "TASK_STATE_");
}
std::string NodeStateName(v1::NodeState s) {
  return ShortEnumName(v1::NodeState_Name(s), "NODE_STATE_");
}

// "45s", "12m5s", "3h4m", "2d3h": coarse, like kubectl's AGE.
std::string FormatAge(absl::Duration d) {
  int64_t s = std::max<int64_t>(0, absl::ToInt64Seconds(d));
  if (s < 60) return absl::StrFormat("%ds", s);
  if (s < 3600) return absl::StrFormat("%dm%ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%dm", s / 3600, s % 3600 / 60);
  return absl::StrFormat("%dd%dh", s / 86400, s % 86400 / 3600);
}

absl::Time FromMs(int64_t ms) { return absl::FromUnixMillis(ms); }

// The resource shape of a spec, compactly: "0.25", "10GiB", "1", "8", "2x4".
std::string FormatGpus(const v1::JobSpec& spec) {
  if (spec.nodes() > 0) {
    return absl::StrFormat("%dx%d", spec.nodes(), spec.gpus_per_node());
  }
  if (spec.gpu_fraction() > 0)
    return absl::StrFormat("%g", spec.gpu_fraction());
  if (spec.gpu_memory_bytes() > 0) {
    return absl::StrReplaceAll(FormatBytes(spec.gpu_memory_bytes()),
                               {{" ", ""}});
  }
  return absl::StrCat(std::max(1, spec.gpus()));
}

// The resources in words, for `describe`.
std::string DescribeResources(const v1::JobSpec& spec) {
  std::string shape;
  if (spec.nodes() > 0) {
    shape = absl::StrFormat("%d node(s) x %d GPU(s)", spec.nodes(),
                            spec.gpus_per_node());
  } else if (spec.gpu_fraction() > 0) {
    shape = absl::StrFormat("%g of a GPU", spec.gpu_fraction());
  } else if (spec.gpu_memory_bytes() > 0) {
    shape =
        absl::StrCat(FormatBytes(spec.gpu_memory_bytes()), " of GPU memory");
  } else {
    shape = absl::StrFormat("%d GPU(s)", std::max(1, spec.gpus()));
  }
  if (spec.tasks_per_node() > 0) {
    absl::StrAppend(&shape, ", ", spec.tasks_per_node(), " task(s) per node");
  }
  return shape;
}

// Quotes an argv element for display when a shell would split or expand it.
std::string ShellQuote(const std::string& arg) {
  bool plain = !arg.empty() && std::all_of(arg.begin(), arg.end(), [](char c) {
    return absl::ascii_isalnum(c) ||
           absl::string_view("-_./=:,+@%").find(c) != absl::string_view::npos;
  });
  if (plain) return arg;
  return absl::StrCat("'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'");
}

std::string SignalName(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev)
                           : absl::StrCat("signal ", sig);
}

// EXIT cell of a task: its code, its signal's name, or "-" while it runs.
std::string FormatExit(const v1::Task& t) {
  if (t.signal() != 0) return SignalName(t.signal());
  if (t.state() == v1::TASK_STATE_EXITED) return absl::StrCat(t.exit_code());
  return "-";
}

// The protobuf JSON of `message` (proto field names, defaults included).
std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string json;
  auto status =
      google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok())
    return absl::StrCat("{\"error\": \"", status.ToString(), "\"}\n");
  return json;
}

// Valid environment variable name: [A-Za-z_][A-Za-z0-9_]*.
bool IsEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

// "30s", "5m", "1h30m", or a bare number of seconds.
std::optional<absl::Duration> ParseTimeout(const std::string& text) {
  double seconds;
  if (absl::SimpleAtod(text, &seconds) && seconds >= 0) {
    return absl::Seconds(seconds);
  }
  absl::Duration d;
  if (absl::ParseDuration(text, &d) && d >= absl::ZeroDuration()) return d;
  return std::nullopt;
}

// ------------------------------------------------------------ one command run

// What one Run needs once argv is parsed: the stub, where it points, the
// output streams and the clock.
class Session {
 public:
  Session(Stub* stub, std::string address, std::ostream& out, std::ostream& err,
          const Clock& clock, int terminal_width)
      : stub_(stub),
        address_(std::move(address)),
        out_(out),
        err_(err),
        clock_(clock),
        terminal_width_(terminal_width) {}

  template <typename Req, typename Resp>
  using Method = grpc::Status (Stub::*)(grpc::ClientContext*, const Req&,
                                        Resp*);

  // Calls `method` with a deadline; on failure returns a status whose
  // message is what the user should read.
  template <typename Req, typename Resp>
  absl::Status Call(Method<Req, Resp> method, const Req& request,
                    Resp* response, absl::Duration deadline = kRpcDeadline) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + deadline));
    grpc::Status status = (stub_->*method)(&context, request, response);
    if (status.ok()) return absl::OkStatus();
    return ToUserStatus(status, deadline);
  }

  // Prints "trainctl: error: ..." and returns kExitRpcError.
  int Fail(const absl::Status& status) {
    err_ << "trainctl: error: " << status.message() << "\n";
    return kExitRpcError;
  }
  int UsageError(absl::string_view message) {
    err_ << "trainctl: error: " << message << "\n";
    return kExitUsage;
  }

  int Submit(v1::SubmitJobRequest request, bool wait);
  int List(const std::vector<std::string>& states, bool json);
  int Describe(int64_t job_id, bool json);
  // The pre-flights of a gang (docs/preflight.md): one block per run.
  void DescribePreflight(const v1::Job& job);
  int Logs(int64_t job_id, int rank, bool follow);
  int Cancel(int64_t job_id);
  int Wait(int64_t job_id, std::optional<absl::Duration> timeout);
  int Nodes(bool json);
  // `trainctl why`: the WhyJob answer as lines for people, or JSON.
  int Why(int64_t job_id, bool json);
  // `trainctl top`: one frame (once) or a frame every `interval` redrawn in
  // place with ANSI escapes until interrupted; json prints TopFrame(s).
  int Top(absl::Duration interval, bool once, bool json);
  // The "Utilization" section of `describe`: history summary and diagnosis.
  // Prints nothing when the coordinator has no history (or predates it).
  void DescribeUsage(const v1::Job& job);
  // `wait` and `submit --wait` draw a progress line on stderr (see
  // CliOptions::progress).
  void EnableProgress() { progress_ = true; }
  // Submits every trial of a sweep as a job of `base` with the trial's
  // command and params, spec.sweep_id, name "<name>-<i>" and request id
  // "<sweep_id>-<i>" (so running it again submits nothing twice). Up to 32
  // trials are in flight at once, so job ids need not follow trial order.
  int Sweep(const v1::JobSpec& base, const std::vector<Trial>& trials,
            const std::string& sweep_id, const std::string& name);
  int SweepList(bool json);
  int SweepDescribe(const std::string& sweep_id, bool json);
  int SweepCancel(const std::string& sweep_id);

  // Experiment records: metric reports and queries, sweep
  // comparison by a metric. Defined together below Session's other methods.
  //
  // `trainctl report KEY=VALUE...` from inside a task: the job, attempt, rank
  // and token come from the launch environment read through `getenv`.
  int Report(const std::vector<std::string>& pairs, int64_t step,
             const std::function<const char*(const char*)>& getenv);
  int Metrics(int64_t job_id, const std::string& key, bool json);
  int SweepCompare(const std::string& sweep_id, const std::string& metric,
                   const std::string& mode, const std::string& scope, bool json,
                   size_t max_rows = 0);
  // The experiment-record part of `describe`: checkpoint dir, GPU-hours,
  // attempts, metric summary.
  void DescribeRecords(const v1::Job& job);

 private:
  // The trials of `sweep_id` ranked by `metric` (one summary-only GetMetrics
  // per trial). Errors: those of SweepJobs and GetMetrics.
  absl::StatusOr<v1::SweepComparison> CompareSweep(const std::string& sweep_id,
                                                   const std::string& metric,
                                                   const std::string& mode,
                                                   const std::string& scope);
  void PrintMetricTable(const v1::GetMetricsResponse& metrics);

  // The trials of `sweep_id`, oldest first. Errors: those of ListJobs;
  // NOT_FOUND when the sweep has no trial.
  absl::StatusOr<v1::ListJobsResponse> SweepJobs(const std::string& sweep_id);

  // UNAVAILABLE always means the coordinator could not be reached: the
  // coordinator itself never answers UNAVAILABLE to the user API (a
  // disconnected node is FAILED_PRECONDITION).
  absl::Status ToUserStatus(const grpc::Status& status,
                            absl::Duration deadline) const {
    const auto code = static_cast<absl::StatusCode>(status.error_code());
    const std::string& msg = status.error_message();
    if (code == absl::StatusCode::kUnavailable) {
      return absl::Status(
          code, absl::StrFormat("cannot reach the coordinator at %s: %s (is "
                                "trainctl-coordinator running? set "
                                "--coordinator or TRAINCTL_COORDINATOR)",
                                address_, msg));
    }
    // gRPC's own message when our deadline passed; the coordinator's
    // DEADLINE_EXCEEDED errors say more.
    if (code == absl::StatusCode::kDeadlineExceeded &&
        msg == "Deadline Exceeded") {
      return absl::Status(
          code,
          absl::StrFormat("the coordinator at %s did not answer within %s",
                          address_, absl::FormatDuration(deadline)));
    }
    return absl::Status(code,
                        msg.empty() ? absl::StatusCodeToString(code) : msg);
  }

  // Prints the one-line outcome of a final job to stderr.
  void PrintSummary(const v1::Job& job);
  // Redraws the progress line: "/ job 42 running 1m5s (attempt 1): reason",
  // cut to the terminal's width so that it never wraps.
  void DrawProgress(const v1::Job& job, absl::Duration elapsed, int frame);
  // Erases the progress line, if one is drawn.
  void ClearProgress();
  std::string Ago(int64_t ms) const {
    return FormatAge(clock_.Now() - FromMs(ms));
  }

  Stub* stub_;
  std::string address_;
  std::ostream& out_;
  std::ostream& err_;
  const Clock& clock_;
  int terminal_width_;
  bool progress_ = false;
  bool progress_drawn_ = false;
};

int Session::Why(int64_t job_id, bool json) {
  v1::WhyJobRequest request;
  request.set_job_id(job_id);
  v1::WhyJobResponse why;
  if (absl::Status s = Call(&Stub::WhyJob, request, &why); !s.ok()) {
    return Fail(s);
  }
  if (json) {
    out_ << ToJson(why) << "\n";
    return kExitOk;
  }
  if (why.state() != v1::JOB_STATE_PENDING) {
    out_ << why.summary() << "\n";
    return kExitOk;
  }
  out_ << absl::StrFormat("Job %d is pending in queue %s (number %d in the "
                          "scheduling order).\n",
                          why.job_id(), why.queue(), why.position());
  out_ << "Why:          " << why.summary() << "\n";
  if (!why.quota().empty()) out_ << "Quota:        " << why.quota() << "\n";
  for (const std::string& e : why.excluded_nodes()) {
    out_ << "Excluded:     " << e << "\n";
  }
  if (why.preempted_for_job_id() != 0) {
    out_ << absl::StrFormat(
        "Preempted:    for job %d (%d time%s); restarts once job %d starts\n",
        why.preempted_for_job_id(), why.preemptions(),
        why.preemptions() == 1 ? "" : "s", why.preempted_for_job_id());
  }
  if (why.reservation_job_id() != 0 && why.reservation().empty()) {
    // First in line, but no set of nodes it may use can ever take it (e.g.
    // pre-flight excluded the others): there is nothing to reserve.
    out_ << absl::StrFormat(
        "Reservation:  none: %s is first in line, but no nodes it may use can "
        "take it even when they drain\n",
        why.reservation_job_id() == why.job_id()
            ? std::string("this job")
            : absl::StrCat("job ", why.reservation_job_id()));
  } else if (why.reservation_job_id() != 0) {
    std::string eta = "unknown (a job there has no --time-limit)";
    if (why.reservation_eta_ms() > 0) {
      const absl::Duration in = FromMs(why.reservation_eta_ms()) - clock_.Now();
      eta = absl::StrCat(
          "in ", FormatAge(std::max(in, absl::ZeroDuration())), " (",
          absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", FromMs(why.reservation_eta_ms()),
                           absl::UTCTimeZone()),
          ")");
    }
    out_ << absl::StrFormat(
        "Reservation:  %s %s, estimated start %s\n",
        why.reservation_job_id() == why.job_id()
            ? std::string("this job holds")
            : absl::StrCat("job ", why.reservation_job_id(), " holds"),
        why.reservation(), eta);
  }
  if (why.nodes_size() > 0) {
    out_ << "Nodes:\n";
    for (const std::string& line : why.nodes()) out_ << "  " << line << "\n";
  }
  return kExitOk;
}

int Session::Submit(v1::SubmitJobRequest request, bool wait) {
  v1::SubmitJobResponse response;
  if (absl::Status s = Call(&Stub::SubmitJob, request, &response); !s.ok()) {
    return Fail(s);
  }
  out_ << response.job_id() << "\n";
  out_.flush();
  if (!wait) return kExitOk;
  return Wait(response.job_id(), std::nullopt);
}

int Session::List(const std::vector<std::string>& states, bool json) {
  v1::ListJobsRequest request;
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
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  std::vector<const v1::Job*> jobs;
  for (const v1::Job& job : response.jobs()) jobs.push_back(&job);
  std::stable_sort(jobs.begin(), jobs.end(), [](const auto* a, const auto* b) {
    return std::make_pair(a->submit_time_ms(), a->id()) >
           std::make_pair(b->submit_time_ms(), b->id());
  });
  Table table({"ID", "NAME", "KIND", "STATE", "GPUS", "ATTEMPT", "AGE",
               "RUNTIME", "REASON"});
  for (const v1::Job* job : jobs) {
    std::string runtime = "-";
    if (job->start_time_ms() > 0) {
      absl::Time end =
          job->end_time_ms() > 0 ? FromMs(job->end_time_ms()) : clock_.Now();
      runtime = FormatAge(end - FromMs(job->start_time_ms()));
    }
    table.AddRow({absl::StrCat(job->id()),
                  job->spec().name().empty() ? "-" : job->spec().name(),
                  KindName(job->kind()), StateName(job->state()),
                  FormatGpus(job->spec()), absl::StrCat(job->attempt()),
                  Ago(job->submit_time_ms()), runtime, job->reason()});
  }
  // On a narrow terminal NAME and REASON are cut, ATTEMPT and RUNTIME go.
  for (int column : {0, 2, 3, 4, 6}) table.KeepWhole(column);
  table.Optional(5);
  table.Optional(7);
  table.Print(out_, terminal_width_);
  return kExitOk;
}

int Session::Describe(int64_t job_id, bool json) {
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  if (absl::Status s = Call(&Stub::GetJob, request, &response); !s.ok()) {
    return Fail(s);
  }
  response.mutable_job()->clear_attempt_token();
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  const v1::Job& job = response.job();
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
  field("State:", StateName(job.state()));
  field("Reason:", job.reason());
  field("Kind:", KindName(job.kind()));
  field("Attempt:", absl::StrFormat("%d (restarts allowed: %d)", job.attempt(),
                                    spec.max_restarts()));
  field("Command:", absl::StrJoin(command, " "));
  field("Workdir:", spec.workdir());
  field("Env:", absl::StrJoin(env, " ", absl::PairFormatter("=")));
  field("Resources:", DescribeResources(spec));
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
  if (job.tasks_size() == 0) return kExitOk;

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
  return kExitOk;
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
  out_ << absl::StrFormat("  GPU memory   %s min, %s avg, %s max of %s\n",
                          FormatBytes(s.memory_min), FormatBytes(s.memory_mean),
                          FormatBytes(s.memory_max), FormatBytes(s.memory_total));
  out_ << absl::StrFormat("  CPU          %.0f%% of a core on average\n", s.cpu_mean);
  if (u.findings_size() == 0) {
    out_ << "Diagnosis:   nothing stands out\n";
    return;
  }
  out_ << "Diagnosis:\n";
  for (const v1::UsageFinding& f : u.findings()) out_ << "  - " << f.message() << "\n";
}

int Session::Top(absl::Duration interval, bool once, bool json) {
  for (bool first = true;; first = false) {
    v1::TopFrame frame;
    v1::ListNodesResponse nodes;
    if (absl::Status st = Call(&Stub::ListNodes, v1::ListNodesRequest(), &nodes);
        !st.ok()) {
      return Fail(st);
    }
    v1::GetJobUsageRequest request;
    request.set_max_samples(kTopHistorySamples);
    v1::GetJobUsageResponse usage;
    if (absl::Status st = Call(&Stub::GetJobUsage, request, &usage); !st.ok()) {
      return Fail(st);
    }
    frame.set_time_ms(absl::ToUnixMillis(clock_.Now()));
    frame.mutable_nodes()->Swap(nodes.mutable_nodes());
    frame.mutable_jobs()->Swap(usage.mutable_jobs());
    if (json) {
      out_ << ToJson(frame);
    } else {
      // Home, clear to the end: redraw in place without flicker.
      if (!once) out_ << (first ? "\x1b[2J\x1b[H" : "\x1b[H\x1b[J");
      out_ << RenderTop(frame, terminal_width_);
    }
    out_.flush();
    if (once) return kExitOk;
    absl::SleepFor(interval);
  }
}

int Session::Logs(int64_t job_id, int rank, bool follow) {
  int64_t offset = 0;
  // What the last WaitJob said (only when following).
  bool job_final = false;
  bool job_placed = false;
  int attempt = -1;
  while (true) {
    v1::GetLogsRequest request;
    request.set_job_id(job_id);
    request.set_rank(rank);
    request.set_offset(offset);
    v1::GetLogsResponse response;
    absl::Status s = Call(&Stub::GetLogs, request, &response);
    if (s.ok()) {
      out_.write(response.data().data(), response.data().size());
      out_.flush();
      offset = response.next_offset();
      if (response.eof()) return kExitOk;
      if (!response.data().empty()) continue;
      // Caught up with the log.
      if (!follow || job_final) return kExitOk;
    } else if (!(follow && !job_final && !job_placed &&
                 s.code() == absl::StatusCode::kNotFound)) {
      // NOT_FOUND while following a job not placed yet: it has no log yet;
      // wait for it like for new data. (An unknown job fails in WaitJob.)
      return Fail(s);
    }
    v1::WaitJobRequest wait;
    wait.set_job_id(job_id);
    wait.set_timeout_ms(absl::ToInt64Milliseconds(kFollowPoll));
    v1::WaitJobResponse waited;
    if (absl::Status w =
            Call(&Stub::WaitJob, wait, &waited, kFollowPoll + kWaitSlack);
        !w.ok()) {
      return Fail(w);
    }
    // One more read after the job is final collects the rest of the log.
    job_final = waited.done();
    job_placed = waited.job().tasks_size() > 0;
    if (attempt >= 0 && waited.job().attempt() != attempt) {
      // A restart: offsets are per attempt.
      err_ << absl::StrFormat(
          "trainctl: job %d restarted (attempt %d); following its new log\n",
          job_id, waited.job().attempt());
      offset = 0;
    }
    attempt = waited.job().attempt();
  }
}

int Session::Cancel(int64_t job_id) {
  v1::CancelJobRequest request;
  request.set_job_id(job_id);
  v1::CancelJobResponse response;
  if (absl::Status s = Call(&Stub::CancelJob, request, &response); !s.ok()) {
    return Fail(s);
  }
  out_ << "cancelled job " << job_id << "\n";
  return kExitOk;
}

int Session::Wait(int64_t job_id, std::optional<absl::Duration> timeout) {
  const absl::Time start = clock_.Now();
  const absl::Time deadline =
      timeout ? start + *timeout : absl::InfiniteFuture();
  v1::WaitJobResponse response;
  for (int frame = 0;; ++frame) {
    absl::Duration poll = std::min(progress_ ? kProgressPoll : kWaitPoll,
                                   deadline - clock_.Now());
    v1::WaitJobRequest request;
    request.set_job_id(job_id);
    // 0 would mean the server's default of 30 s.
    request.set_timeout_ms(
        std::max<int64_t>(1, absl::ToInt64Milliseconds(poll)));
    if (absl::Status s =
            Call(&Stub::WaitJob, request, &response,
                 std::max(poll, absl::ZeroDuration()) + kWaitSlack);
        !s.ok()) {
      ClearProgress();
      return Fail(s);
    }
    if (response.done()) break;
    if (clock_.Now() >= deadline) {
      ClearProgress();
      err_ << absl::StrFormat(
          "trainctl: error: job %d is still %s after %s; wait again with "
          "`trainctl wait %d`\n",
          job_id, StateName(response.job().state()),
          absl::FormatDuration(*timeout), job_id);
      return kExitWaitTimeout;
    }
    if (progress_) DrawProgress(response.job(), clock_.Now() - start, frame);
  }
  ClearProgress();
  PrintSummary(response.job());
  return Cli::WaitExitStatus(response.job());
}

void Session::DrawProgress(const v1::Job& job, absl::Duration elapsed,
                           int frame) {
  static constexpr char kFrames[] = "|/-\\";
  std::string line =
      absl::StrFormat("%c job %d %s %s", kFrames[frame % 4], job.id(),
                      StateName(job.state()), FormatAge(elapsed));
  if (job.attempt() > 0) absl::StrAppend(&line, " (attempt ", job.attempt(), ")");
  if (!job.reason().empty()) absl::StrAppend(&line, ": ", job.reason());
  // One column short of the width: a full line would wrap on some terminals.
  if (terminal_width_ > 1) line = Truncate(line, terminal_width_ - 1);
  // \r and "erase to end of line" (ECMA-48 EL) redraw it in place.
  err_ << "\r\033[K" << line;
  err_.flush();
  progress_drawn_ = true;
}

void Session::ClearProgress() {
  if (!progress_drawn_) return;
  err_ << "\r\033[K";
  err_.flush();
  progress_drawn_ = false;
}

void Session::PrintSummary(const v1::Job& job) {
  std::string line =
      absl::StrFormat("job %d %s", job.id(), StateName(job.state()));
  if (job.start_time_ms() > 0 && job.end_time_ms() > 0) {
    absl::StrAppend(
        &line, " after ",
        FormatAge(FromMs(job.end_time_ms()) - FromMs(job.start_time_ms())));
  }
  if (job.attempt() > 0)
    absl::StrAppend(&line, " (attempt ", job.attempt(), ")");
  if (!job.reason().empty()) absl::StrAppend(&line, ": ", job.reason());
  if (job.state() == v1::JOB_STATE_FAILED && job.tasks_size() > 0) {
    absl::StrAppendFormat(&line, "; see `trainctl describe %d`", job.id());
  }
  err_ << line << "\n";
}

int Session::Nodes(bool json) {
  v1::ListNodesResponse response;
  if (absl::Status s =
          Call(&Stub::ListNodes, v1::ListNodesRequest(), &response);
      !s.ok()) {
    return Fail(s);
  }
  if (json) {
    out_ << ToJson(response);
    return kExitOk;
  }
  // A job seen on more than one GPU is a gang: show its ranks.
  absl::flat_hash_map<int64_t, int> gpus_per_job;
  for (const v1::NodeView& view : response.nodes()) {
    for (const v1::GpuTasks& gpu : view.gpu_tasks()) {
      for (const v1::GpuTaskRef& ref : gpu.tasks())
        ++gpus_per_job[ref.job_id()];
    }
  }
  Table table({"NODE", "STATE", "GPU", "MODEL", "MEMORY", "UTIL", "TEMP",
               "POWER", "JOBS"});
  bool any_fake = false;
  for (const v1::NodeView& view : response.nodes()) {
    const v1::Node& node = view.node();
    std::string name = node.name() + (node.fake_gpus() ? "*" : "");
    any_fake |= node.fake_gpus();
    if (node.gpus_size() == 0) {
      table.AddRow({name, NodeStateName(node.state()), "-", "(no GPUs)", "-",
                    "-", "-", "-", "-"});
    }
    for (int i = 0; i < node.gpus_size(); ++i) {
      const v1::Gpu& gpu = node.gpus(i);
      std::vector<std::string> jobs;
      if (i < view.gpu_tasks_size()) {
        for (const v1::GpuTaskRef& ref : view.gpu_tasks(i).tasks()) {
          bool gang = ref.rank() > 0 || gpus_per_job[ref.job_id()] > 1;
          jobs.push_back(gang ? absl::StrCat(ref.job_id(), "/", ref.rank())
                              : absl::StrCat(ref.job_id()));
        }
      }
      table.AddRow({name, NodeStateName(node.state()),
                    absl::StrCat(gpu.index()),
                    gpu.name() + (gpu.mig_enabled() ? " (MIG)" : ""),
                    absl::StrCat(FormatBytes(gpu.memory_used_bytes()), " / ",
                                 FormatBytes(gpu.memory_total_bytes())),
                    absl::StrCat(gpu.utilization_pct(), "%"),
                    absl::StrCat(gpu.temperature_c(), "C"),
                    absl::StrFormat("%.0fW", gpu.power_w()),
                    jobs.empty() ? "-" : absl::StrJoin(jobs, ",")});
    }
  }
  // On a narrow terminal names, models and jobs are cut; POWER and TEMP go.
  for (int column : {1, 2, 5, 6, 7}) table.KeepWhole(column);
  table.Optional(7);
  table.Optional(6);
  table.Print(out_, terminal_width_);
  if (any_fake) out_ << "* fake GPUs (trainctl-agent --fake-gpus)\n";
  return kExitOk;
}

bool IsFinal(v1::JobState s) {
  return s == v1::JOB_STATE_SUCCEEDED || s == v1::JOB_STATE_FAILED ||
         s == v1::JOB_STATE_CANCELLED;
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
  if (json) {
    // The trials themselves, newest first, as `list -o json` prints jobs:
    // the per-sweep counts are a view of them.
    v1::ListJobsResponse trials;
    for (v1::Job& job : *response.mutable_jobs()) {
      if (job.spec().sweep_id().empty()) continue;
      job.clear_attempt_token();
      *trials.add_jobs() = std::move(job);
    }
    out_ << ToJson(trials);
    return kExitOk;
  }
  struct Row {
    int trials = 0;
    int64_t first_submit_ms = 0;
    absl::flat_hash_map<int, int> by_state;
  };
  // Newest sweep first: jobs come newest first.
  std::vector<std::string> order;
  absl::flat_hash_map<std::string, Row> rows;
  for (const v1::Job& job : response.jobs()) {
    const std::string& id = job.spec().sweep_id();
    if (id.empty()) continue;
    auto [it, inserted] = rows.try_emplace(id);
    if (inserted) order.push_back(id);
    Row& row = it->second;
    ++row.trials;
    ++row.by_state[job.state()];
    if (row.first_submit_ms == 0 || job.submit_time_ms() < row.first_submit_ms) {
      row.first_submit_ms = job.submit_time_ms();
    }
  }
  Table table({"SWEEP", "TRIALS", "PENDING", "RUNNING", "SUCCEEDED", "FAILED",
               "CANCELLED", "AGE"});
  for (const std::string& id : order) {
    Row& row = rows[id];
    table.AddRow({id, absl::StrCat(row.trials),
                  absl::StrCat(row.by_state[v1::JOB_STATE_PENDING] +
                               row.by_state[v1::JOB_STATE_SCHEDULED]),
                  absl::StrCat(row.by_state[v1::JOB_STATE_RUNNING]),
                  absl::StrCat(row.by_state[v1::JOB_STATE_SUCCEEDED]),
                  absl::StrCat(row.by_state[v1::JOB_STATE_FAILED]),
                  absl::StrCat(row.by_state[v1::JOB_STATE_CANCELLED]),
                  Ago(row.first_submit_ms)});
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
                                    StateName(job.state())};
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

// ------------------------------------------------------- experiment records

namespace {

// "%.6g": enough digits for a loss, short in a table.
std::string FormatValue(double v) { return absl::StrFormat("%.6g", v); }

std::string OutcomeName(v1::AttemptOutcome o) {
  if (o == v1::ATTEMPT_OUTCOME_UNSPECIFIED) return "RUNNING";
  return ShortEnumName(v1::AttemptOutcome_Name(o), "ATTEMPT_OUTCOME_");
}

}  // namespace

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
  v1::ReportMetricsResponse response;
  if (absl::Status s = Call(&Stub::ReportMetrics, request, &response); !s.ok()) {
    return Fail(s);
  }
  return kExitOk;
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
    t->set_state(StateName(job.state()));
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
                                    absl::StrCat(t.job_id()), t.state()};
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

// ------------------------------------------------------------ command line

constexpr char kWaitExitHelp[] =
    "Exit status:\n"
    "  0        the job succeeded\n"
    "  1..125   the job failed: the exit code of the rank that failed first\n"
    "           (capped to 125)\n"
    "  1        the job failed otherwise (signal, lost node, infeasible), or\n"
    "           the coordinator could not be reached\n"
    "  2        the job was cancelled (also: bad command line)\n"
    "  124      --timeout reached before the job ended\n";

struct Flags {
  std::string coordinator;
  std::string token;
  std::string tls_ca;
  std::string config;
  std::string output;
  // submit
  v1::SubmitJobRequest submit;
  int gpus = 0;
  double gpu_fraction = 0;
  std::string gpu_mem;
  int nodes = 0;
  int gpus_per_node = 0;
  int tasks_per_node = 0;
  int priority = 0;
  int max_restarts = 0;
  std::vector<std::string> env;
  std::string workdir;
  std::string queue;
  std::string time_limit;
  bool preemptible = false;
  bool pack = false;
  bool spread = false;
  bool preflight = false;
  bool no_preflight = false;
  std::string user;
  std::string project;
  bool wait = false;
  std::vector<std::string> command;
  // list
  std::vector<std::string> states;
  // describe, logs, cancel, wait
  int64_t job_id = 0;
  int rank = 0;
  bool follow = false;
  std::string timeout;
  // sweep (the job flags above are shared with submit)
  std::vector<std::string> grid;
  std::vector<std::string> params;
  int64_t random_count = 0;
  uint64_t seed = 0;
  // Also the SWEEP argument of sweep describe/cancel.
  std::string sweep_id;
  // report, metrics, sweep compare / describe --metric
  std::vector<std::string> report_pairs;
  int64_t step = 0;
  std::string metric_key;
  std::string metric;
  std::string mode = "min";
  std::string scope = "last";
  // sweep --early-stop METRIC[:min|max] (ASHA)
  std::string early_stop;
  int64_t grace_steps = 1;
  int reduction_factor = 3;
  int64_t max_steps = 0;
  // submit/sweep --auto-pack
  bool auto_pack = false;
  // top
  double interval_s = 2;
  bool once = false;
};

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

// The flags a job spec is made of, shared by `submit` and `sweep`: resource
// shape, priority, restarts, env, workdir. They fill `f`; BuildSpec reads
// them back.
void AddJobSpecOptions(CLI::App* sub, Flags& f) {
  // CLI11's PositiveNumber prints DBL_MAX in its message.
  const CLI::Range kPositive(1, 1'000'000);
  const CLI::Range kNonNegative(0, 1'000'000);
  auto* gpus = sub->add_option("--gpus", f.gpus,
                               "Whole GPUs; more than 1 makes a gang job")
                   ->check(kPositive);
  auto* fraction = sub->add_option("--gpu-fraction", f.gpu_fraction,
                                   "Share of one GPU, in (0, 1]")
                       ->check(CLI::Range(0.0, 1.0));
  auto* mem = sub->add_option("--gpu-mem", f.gpu_mem,
                              "GPU memory to reserve on one shared GPU, "
                              "e.g. 10GiB");
  gpus->excludes(fraction)->excludes(mem);
  fraction->excludes(mem);
  auto* nodes_opt =
      sub->add_option("--nodes", f.nodes, "Nodes of a gang job")
          ->check(kPositive);
  auto* gpn_opt = sub->add_option("--gpus-per-node", f.gpus_per_node,
                                  "GPUs on each node of a gang job")
                      ->check(kPositive);
  nodes_opt->needs(gpn_opt)->excludes(gpus)->excludes(fraction)->excludes(mem);
  gpn_opt->needs(nodes_opt);
  sub->add_option("--tasks-per-node", f.tasks_per_node,
                  "Processes per node (default: one per GPU)")
      ->check(kPositive);
  sub->add_option("--priority", f.priority, "Higher runs first (default 0)");
  sub->add_option("--max-restarts", f.max_restarts,
                  "Retries of a failed attempt (default 0)")
      ->check(kNonNegative);
  sub->add_option("--env", f.env, "KEY=VALUE for the task (repeatable)")
      ->allow_extra_args(false);
  sub->add_option("--workdir", f.workdir,
                  "Working directory of the task (default: this one)");
  sub->add_option("--queue", f.queue,
                  "Named queue (see the coordinator's --scheduler-config; "
                  "default: default)");
  sub->add_option("--time-limit", f.time_limit,
                  "Stop and fail the job (TIMEOUT) after this long running, "
                  "e.g. 30m, 2h, 1h30m; lets it backfill ahead of a reservation");
  sub->add_flag("--preemptible", f.preemptible,
                "May be stopped (SIGTERM, grace) and requeued for "
                "higher-ranked work; may backfill onto reserved GPUs");
  auto* pack = sub->add_flag("--pack", f.pack,
                             "Gang: fewest nodes, fullest first (default)");
  auto* spread = sub->add_flag("--spread", f.spread,
                               "Gang: as many nodes as possible, emptiest first");
  pack->excludes(spread);
  auto* preflight = sub->add_flag(
      "--preflight", f.preflight,
      "Gang: before the processes start, run a short NCCL all-reduce on the "
      "placed GPUs and place the gang again without any node that fails it "
      "(default: on for gangs placed on more than one node)");
  sub->add_flag("--no-preflight", f.no_preflight,
                "Gang: no pre-flight, whatever the placement")
      ->excludes(preflight);
  sub->add_option("--user", f.user,
                  "User the job is charged to for quotas (default: $USER)");
  sub->add_option("--project", f.project,
                  "Project the job is charged to for quotas");
  sub->add_flag("--auto-pack", f.auto_pack,
                "Experiments: let the coordinator pack trials onto GPUs from "
                "measured memory and utilization (default off); --gpu-mem is "
                "then the first memory request")
      ->excludes(gpus)
      ->excludes(nodes_opt)
      ->excludes(fraction);
}

// Fills flags->submit from the job spec flags (AddJobSpecOptions) and the
// command; returns a usage error message naming the flag, or "" when they
// are fine. `example` is the command line shown when the command is missing.
std::string BuildSpec(Flags* flags, absl::string_view verb,
                      absl::string_view example) {
  v1::JobSpec* spec = flags->submit.mutable_spec();
  if (flags->command.empty()) {
    return absl::StrCat(verb, ": no command to run; give it after --, e.g. `",
                        example, "`");
  }
  spec->mutable_command()->Assign(flags->command.begin(), flags->command.end());
  spec->set_gpus(flags->gpus);
  spec->set_nodes(flags->nodes);
  spec->set_gpus_per_node(flags->gpus_per_node);
  spec->set_tasks_per_node(flags->tasks_per_node);
  spec->set_priority(flags->priority);
  spec->set_max_restarts(flags->max_restarts);
  spec->set_gpu_fraction(flags->gpu_fraction);
  spec->set_queue(flags->queue);
  spec->set_preemptible(flags->preemptible);
  spec->set_user(flags->user);
  spec->set_project(flags->project);
  if (flags->pack) spec->set_placement(v1::GANG_PLACEMENT_PACK);
  if (flags->spread) spec->set_placement(v1::GANG_PLACEMENT_SPREAD);
  if (flags->preflight) spec->set_preflight(v1::PREFLIGHT_MODE_ON);
  if (flags->no_preflight) spec->set_preflight(v1::PREFLIGHT_MODE_OFF);
  if (!flags->time_limit.empty()) {
    absl::Duration limit;
    if (!absl::ParseDuration(flags->time_limit, &limit) ||
        limit <= absl::ZeroDuration()) {
      return absl::StrFormat(
          "--time-limit %s: expected a positive duration with a unit, such as "
          "30m, 2h or 1h30m",
          flags->time_limit);
    }
    spec->set_time_limit_ms(absl::ToInt64Milliseconds(limit));
  }
  spec->set_auto_pack(flags->auto_pack);
  if (!flags->gpu_mem.empty()) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(flags->gpu_mem);
    if (!bytes.ok())
      return absl::StrCat("--gpu-mem: ", bytes.status().message());
    spec->set_gpu_memory_bytes(*bytes);
  }
  for (const std::string& kv : flags->env) {
    std::pair<std::string, std::string> p =
        absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (kv.find('=') == std::string::npos || !IsEnvName(p.first)) {
      return absl::StrFormat(
          "--env %s: expected KEY=VALUE with KEY a variable name "
          "([A-Za-z_][A-Za-z0-9_]*)",
          kv);
    }
    if (!spec->mutable_env()->insert({p.first, p.second}).second) {
      return absl::StrFormat("--env %s: %s is given twice", kv, p.first);
    }
  }
  std::error_code ec;
  std::filesystem::path workdir =
      flags->workdir.empty() ? std::filesystem::current_path(ec)
                             : std::filesystem::absolute(flags->workdir, ec);
  if (ec)
    return absl::StrFormat("--workdir %s: %s", flags->workdir, ec.message());
  spec->set_workdir(workdir.lexically_normal().string());
  return "";
}

std::vector<std::string> JobStateNames() {
  std::vector<std::string> names;
  const auto* descriptor = v1::JobState_descriptor();
  for (int i = 0; i < descriptor->value_count(); ++i) {
    if (descriptor->value(i)->number() == v1::JOB_STATE_UNSPECIFIED) continue;
    names.push_back(ShortEnumName(descriptor->value(i)->name(), "JOB_STATE_"));
  }
  return names;
}

int UsageError(std::ostream& err, absl::string_view message) {
  err << "trainctl: error: " << message << "\n";
  return kExitUsage;
}

std::string Example(absl::string_view text) {
  return absl::StrCat("Example:\n", text);
}

// The config file to read: --config, else options.config_file, else
// $XDG_CONFIG_HOME/trainctl/config, else ~/.config/trainctl/config ("" when
// neither variable is set). `explicit_file` tells whether it must exist.
std::string ConfigPath(const Flags& f, const CliOptions& options,
                       bool* explicit_file) {
  *explicit_file = !f.config.empty();
  if (!f.config.empty()) return f.config;
  if (!options.config_file.empty()) return options.config_file;
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg != nullptr && *xdg) {
    return absl::StrCat(xdg, "/trainctl/config");
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home) {
    return absl::StrCat(home, "/.config/trainctl/config");
  }
  return "";
}

// Reads `key = "value"` lines of the config file with CLI11's config parser.
// Errors: INVALID_ARGUMENT naming the file and the key (unknown key, a
// section, a list value), or when it cannot be parsed.
absl::StatusOr<std::map<std::string, std::string>> ReadConfigFile(
    const std::string& path) {
  static const std::set<std::string> kKeys = {"coordinator", "token", "ca_cert"};
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_file(path);
  } catch (const CLI::Error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
  std::map<std::string, std::string> out;
  for (const CLI::ConfigItem& item : items) {
    // CLI11 marks section starts and ends with "++" / "--" items.
    if (item.name == "++" || item.name == "--") continue;
    if (!item.parents.empty() || kKeys.count(item.name) == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: unknown key \"%s\"; the keys are coordinator, token and "
          "ca_cert (no sections)",
          path, item.fullname()));
    }
    if (item.inputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: %s: expected one value, e.g. %s = \"...\"", path, item.name,
          item.name));
    }
    out[item.name] = item.inputs.front();
  }
  return out;
}

// Resolves the Connection (see cli.h) from the flags (which already hold
// the environment variables) and the config file. Warns on `err` about a
// token kept in a file others can read, or sent without TLS off-host.
// Errors: INVALID_ARGUMENT for an unreadable --config or CA file, a bad
// config file, or a token gRPC cannot send.
absl::StatusOr<Connection> ResolveConnection(const Flags& f,
                                             const CliOptions& options,
                                             std::ostream& err) {
  bool explicit_file = false;
  const std::string path = ConfigPath(f, options, &explicit_file);
  std::map<std::string, std::string> config;
  std::error_code ec;
  if (!path.empty() && std::filesystem::is_regular_file(path, ec)) {
    absl::StatusOr<std::map<std::string, std::string>> read = ReadConfigFile(path);
    if (!read.ok()) return read.status();
    config = *std::move(read);
    const auto perms = std::filesystem::status(path, ec).permissions();
    if (config.count("token") > 0 && !ec &&
        (perms & (std::filesystem::perms::group_read |
                  std::filesystem::perms::others_read)) !=
            std::filesystem::perms::none) {
      err << "trainctl: warning: " << path
          << " holds a token and others can read it; run chmod 600 " << path
          << "\n";
    }
  } else if (explicit_file) {
    return absl::InvalidArgumentError(
        absl::StrCat("--config ", path, ": no such file"));
  }
  auto pick = [&config](const std::string& flag, const std::string& key) {
    if (!flag.empty()) return flag;
    auto it = config.find(key);
    return it == config.end() ? std::string() : it->second;
  };
  Connection c;
  c.address = pick(f.coordinator, "coordinator");
  if (c.address.empty()) c.address = kDefaultCoordinator;
  c.token = pick(f.token, "token");
  for (char ch : c.token) {
    if (!absl::ascii_isgraph(static_cast<unsigned char>(ch))) {
      return absl::InvalidArgumentError(
          "token: must be printable ASCII without spaces (check --token, "
          "$TRAINCTL_AUTH_TOKEN and the config file)");
    }
  }
  const std::string ca_file = pick(f.tls_ca, "ca_cert");
  if (!ca_file.empty()) {
    std::ifstream in(ca_file);
    std::stringstream pem;
    if (in) pem << in.rdbuf();
    if (!in || pem.str().find("-----BEGIN ") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls-ca ", ca_file, ": cannot read a PEM certificate there"));
    }
    c.ca_pem = pem.str();
  }
  const bool loopback = absl::StartsWith(c.address, "127.") ||
                        absl::StartsWith(c.address, "localhost:") ||
                        absl::StartsWith(c.address, "[::1]");
  if (!c.token.empty() && c.ca_pem.empty() && !loopback) {
    err << "trainctl: warning: sending the token to " << c.address
        << " without TLS; pass --tls-ca (or ca_cert in the config file)\n";
  }
  return c;
}

}  // namespace

Cli::Cli(StubFactory make_stub, std::ostream& out, std::ostream& err,
         CliOptions options)
    : Cli(ConnectionStubFactory(
              [make_stub = std::move(make_stub)](const Connection& c) {
                return make_stub(c.address);
              }),
          out, err, std::move(options)) {}

Cli::Cli(ConnectionStubFactory make_stub, std::ostream& out, std::ostream& err,
         CliOptions options)
    : make_stub_(std::move(make_stub)),
      out_(out),
      err_(err),
      options_(options) {}

Cli::Cli(v1::Coordinator::StubInterface* stub, std::ostream& out,
         std::ostream& err, CliOptions options)
    : Cli([stub](const std::string&) { return stub; }, out, err, options) {}

int Cli::WaitExitStatus(const v1::Job& job) {
  switch (job.state()) {
    case v1::JOB_STATE_SUCCEEDED:
      return kExitOk;
    case v1::JOB_STATE_CANCELLED:
      return kExitCancelled;
    case v1::JOB_STATE_FAILED: {
      const v1::Task* first = nullptr;
      for (const v1::Task& t : job.tasks()) {
        if (t.exit_code() == 0) continue;
        if (first == nullptr ||
            std::make_pair(t.end_time_ms(), t.rank()) <
                std::make_pair(first->end_time_ms(), first->rank())) {
          first = &t;
        }
      }
      if (first == nullptr) return 1;
      return std::clamp(first->exit_code(), 1, 125);
    }
    default:
      return 1;
  }
}

int Cli::Run(int argc, char** argv) {
  const CLI::Range kNonNegative(0, 1'000'000);
  Flags f;
  CLI::App app("trainctl: submit and watch jobs on a trainctl GPU cluster.",
               "trainctl");
  app.require_subcommand(1);
  app.fallthrough();
  app.add_option("--coordinator", f.coordinator,
                 "Coordinator address, host:port")
      ->envname("TRAINCTL_COORDINATOR")
      ->default_str(kDefaultCoordinator);
  app.add_option("--token", f.token,
                 "Bearer token for a coordinator run with --tokens-file "
                 "(default: $TRAINCTL_AUTH_TOKEN, else `token` in the config "
                 "file)")
      ->envname("TRAINCTL_AUTH_TOKEN");
  app.add_option("--tls-ca", f.tls_ca,
                 "PEM CA certificate to verify a TLS coordinator with (default: "
                 "$TRAINCTL_TLS_CA, else `ca_cert` in the config file; none: "
                 "plaintext)")
      ->envname("TRAINCTL_TLS_CA");
  app.add_option("--config", f.config,
                 "Config file with `coordinator`, `token` and `ca_cert` keys "
                 "(default: $XDG_CONFIG_HOME/trainctl/config or "
                 "~/.config/trainctl/config)");
  app.footer(
      Example("  trainctl --coordinator head-node:50051 list\n"
              "  trainctl submit --gpus 1 -- python train.py"));

  // submit
  CLI::App* submit =
      app.add_subcommand("submit", "Submit a job; prints its id");
  submit->add_option("--name", *f.submit.mutable_spec()->mutable_name(),
                     "Job name shown in listings");
  AddJobSpecOptions(submit, f);
  submit->add_option("--request-id", *f.submit.mutable_request_id(),
                     "Makes retried submits idempotent");
  submit->add_flag("--wait", f.wait,
                   "Then wait for the job like `trainctl wait`");
  submit->add_option("command", f.command, "The command to run, after --");
  submit->footer(absl::StrCat(
      Example("  trainctl submit --name sweep-lr3 --gpu-fraction 0.25 "
              "--env LR=3e-4 -- python train.py\n"
              "  trainctl submit --nodes 2 --gpus-per-node 8 --wait -- "
              "python ddp.py"),
      "\n\nWith --wait, the exit status is that of `trainctl wait` (see "
      "trainctl wait --help)."));

  // sweep, and its list/describe/cancel
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
      ->add_option("-o,--output", f.output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}));
  CLI::App* sweep_cancel = sweep->add_subcommand(
      "cancel", "Cancel every trial of a sweep that has not ended");
  sweep_cancel->add_option("SWEEP", f.sweep_id, "Sweep id")->required();
  sweep_list
      ->add_option("-o,--output", f.output,
                   "Output format: table, or json (the sweeps' trials, as "
                   "`list -o json` prints jobs)")
      ->check(CLI::IsMember({"table", "json"}));
  sweep_list->footer(
      Example("  trainctl sweep list\n  trainctl sweep list -o json"));
  sweep_describe->footer(Example(
      "  trainctl sweep describe sw-1f2e3d4c\n"
      "  trainctl sweep describe sw-1f2e3d4c -o json"));
  sweep_cancel->footer(Example("  trainctl sweep cancel sw-1f2e3d4c"));

  // Experiment records: report, metrics, sweep compare, and
  // sweep describe's --metric.
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
      "trainctl_report_metric() (libtrainctl_nccl.so), which batches."));
  CLI::App* metrics_cmd = app.add_subcommand(
      "metrics", "A job's reported metrics: last/min/max per key, or the "
                 "history as JSON");
  metrics_cmd->add_option("JOB", f.job_id, "Job id")->required();
  metrics_cmd->add_option("--key", f.metric_key, "Only this metric");
  metrics_cmd->add_option("-o,--output", f.output,
                          "table (summary) or json (every point, plot-ready)")
      ->check(CLI::IsMember({"table", "json"}));
  metrics_cmd->footer(Example("  trainctl metrics 42\n"
                              "  trainctl metrics 42 --key loss -o json"));
  CLI::App* sweep_compare = sweep->add_subcommand(
      "compare", "A sweep's trials ranked by a metric, best first, with their "
                 "parameters");
  sweep_compare->add_option("SWEEP", f.sweep_id, "Sweep id")->required();
  sweep_compare->add_option("-o,--output", f.output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}));
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

  // list
  CLI::App* list = app.add_subcommand("list", "List jobs, newest first");
  list->add_option("--state", f.states, "Only jobs in this state (repeatable)")
      ->check(CLI::IsMember(JobStateNames(), CLI::ignore_case))
      ->allow_extra_args(false);
  // describe
  CLI::App* describe =
      app.add_subcommand("describe", "Show a job's spec, state and ranks");
  describe->add_option("JOB", f.job_id, "Job id")->required();
  for (CLI::App* sub : {list, describe}) {
    sub->add_option("-o,--output", f.output, "Output format: table or json")
        ->check(CLI::IsMember({"table", "json"}));
  }
  list->footer(
      Example("  trainctl list --state running --state pending\n"
              "  trainctl list -o json"));
  describe->footer(
      Example("  trainctl describe 42\n"
              "  trainctl describe 42 -o json"));

  // logs
  CLI::App* logs = app.add_subcommand("logs", "Print a rank's log");
  logs->add_option("JOB", f.job_id, "Job id")->required();
  logs->add_option("--rank", f.rank, "Rank (default 0)")->check(kNonNegative);
  logs->add_flag("-f,--follow", f.follow,
                 "Keep printing new output until the job ends");
  logs->footer(Example("  trainctl logs 42 --rank 3 -f"));

  // cancel
  CLI::App* cancel = app.add_subcommand("cancel", "Cancel a job");
  cancel->add_option("JOB", f.job_id, "Job id")->required();
  cancel->footer(Example("  trainctl cancel 42"));

  // wait
  CLI::App* wait = app.add_subcommand(
      "wait", "Wait for a job to end; its exit status tells how it ended");
  wait->add_option("JOB", f.job_id, "Job id")->required();
  wait->add_option("--timeout", f.timeout,
                   "Give up after this long, e.g. 90s, 2h (default: never)");
  wait->footer(absl::StrCat(kWaitExitHelp, "\n",
                            Example("  trainctl wait 42 --timeout 2h && "
                                    "echo done")));

  // why
  CLI::App* why = app.add_subcommand(
      "why", "Explain why a job waits: quota, nodes, reservation and ETA");
  why->add_option("JOB", f.job_id, "Job id")->required();
  why->add_option("-o,--output", f.output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}));
  why->footer(Example("  trainctl why 42\n  trainctl why 42 -o json"));

  // nodes
  CLI::App* nodes_cmd =
      app.add_subcommand("nodes", "Show every GPU of the cluster");
  nodes_cmd->add_option("-o,--output", f.output, "Output format: table or json")
      ->check(CLI::IsMember({"table", "json"}));
  nodes_cmd->footer(Example("  trainctl nodes\n  trainctl nodes -o json"));

  // top
  CLI::App* top = app.add_subcommand(
      "top", "Live view of every GPU and job: utilization, memory, power, "
             "temperature, per-job history and diagnosis");
  top->add_option("-n,--interval", f.interval_s,
                  "Seconds between refreshes (default 2)")
      ->check(CLI::Range(0.1, 3600.0));
  top->add_flag("--once", f.once, "Print one frame and exit (scripts, tests)");
  top->add_option("-o,--output", f.output,
                  "Output format: table or json (a TopFrame per refresh)")
      ->check(CLI::IsMember({"table", "json"}));
  top->footer(Example("  trainctl top\n  trainctl top --once\n"
                      "  trainctl top --once -o json"));

  // completion, help
  std::string shell;
  CLI::App* completion = app.add_subcommand(
      "completion", "Print a shell completion script (bash or zsh)");
  completion->add_option("SHELL", shell, "bash or zsh")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}));
  completion->footer(
      Example("  source <(trainctl completion bash)     # in ~/.bashrc\n"
              "  source <(trainctl completion zsh)      # in ~/.zshrc, after "
              "compinit\n"
              "  trainctl completion bash > /etc/bash_completion.d/trainctl"));
  std::vector<std::string> help_topic;
  CLI::App* help = app.add_subcommand(
      "help", "Show the help of a command, with examples");
  help->add_option("COMMAND", help_topic,
                   "The command, e.g. submit or sweep describe");
  help->footer(Example("  trainctl help submit\n  trainctl help sweep describe"));

  if (options_.inspect_app) options_.inspect_app(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) {
      return app.exit(e, out_, err_);  // --help
    }
    std::string command = "trainctl";
    for (const CLI::App* sub : app.get_subcommands()) {
      absl::StrAppend(&command, " ", sub->get_name());
    }
    std::string hint;
    if (submit->parsed() && dynamic_cast<const CLI::ExtrasError*>(&e)) {
      hint = "; put the command to run after --";
    }
    err_ << "trainctl: error: " << e.what() << hint << " (see " << command
         << " --help)\n";
    return kExitUsage;
  }

  if (completion->parsed()) {
    out_ << (shell == "zsh" ? ZshCompletion(app) : BashCompletion(app));
    return kExitOk;
  }
  if (help->parsed()) {
    const CLI::App* topic = &app;
    // CLI11 prints "Usage: PARENTS NAME": the path above the topic.
    std::string parents;
    for (const std::string& word : help_topic) {
      const CLI::App* next = nullptr;
      for (const CLI::App* sub : topic->get_subcommands(
               [&word](const CLI::App* s) { return s->get_name() == word; })) {
        next = sub;
      }
      if (next == nullptr) {
        std::string name = topic == &app ? "trainctl" : topic->get_name();
        return UsageError(
            err_, absl::StrFormat("help: %s has no command %s (see `trainctl "
                                  "--help`)",
                                  name, word));
      }
      parents = parents.empty() ? topic->get_name()
                                : absl::StrCat(parents, " ", topic->get_name());
      topic = next;
    }
    out_ << topic->help(parents);
    return kExitOk;
  }

  std::optional<absl::Duration> timeout;
  if (wait->parsed() && !f.timeout.empty()) {
    timeout = ParseTimeout(f.timeout);
    if (!timeout) {
      err_ << "trainctl: error: --timeout " << f.timeout
           << ": expected a duration such as 90s, 30m or 2h\n";
      return kExitUsage;
    }
  }
  if (f.user.empty()) f.user = options_.default_user;
  if (submit->parsed()) {
    if (std::string error = BuildSpec(&f, "submit",
                                      "trainctl submit --gpus 1 -- python train.py");
        !error.empty()) {
      err_ << "trainctl: error: " << error << "\n";
      return kExitUsage;
    }
  }
  // A sweep to submit: expanded (and every usage error found) before any RPC.
  const bool sweep_run = sweep->parsed() && !sweep_list->parsed() &&
                         !sweep_describe->parsed() && !sweep_cancel->parsed() &&
                         !sweep_compare->parsed();
  std::vector<Trial> trials;
  if (sweep_run) {
    SweepSpec spec;
    spec.random_count = f.random_count;
    spec.seed = f.seed;
    for (const std::string& text : f.grid) {
      absl::StatusOr<GridParam> p = ParseGridFlag(text);
      if (!p.ok()) return UsageError(err_, p.status().message());
      spec.grid.push_back(*std::move(p));
    }
    for (const std::string& text : f.params) {
      absl::StatusOr<RandomParam> p = ParseParamFlag(text);
      if (!p.ok()) return UsageError(err_, p.status().message());
      spec.random.push_back(*std::move(p));
    }
    if (f.sweep_id.empty()) f.sweep_id = NewSweepId();
    if (std::string e = CheckSweepId(f.sweep_id); !e.empty()) {
      return UsageError(err_, e);
    }
    if (std::string e = BuildSpec(
            &f, "sweep",
            "trainctl sweep --grid lr=1e-3,3e-4 -- python train.py --lr {lr}");
        !e.empty()) {
      return UsageError(err_, e);
    }
    if (!f.early_stop.empty()) {
      std::pair<std::string, std::string> metric_mode =
          absl::StrSplit(f.early_stop, absl::MaxSplits(':', 1));
      if (metric_mode.second.empty()) metric_mode.second = "min";
      if (metric_mode.first.empty() ||
          (metric_mode.second != "min" && metric_mode.second != "max")) {
        return UsageError(err_, absl::StrFormat(
            "--early-stop %s: expected METRIC, METRIC:min or METRIC:max",
            f.early_stop));
      }
      v1::EarlyStop* es = f.submit.mutable_spec()->mutable_early_stop();
      es->set_metric(metric_mode.first);
      es->set_mode(metric_mode.second);
      es->set_grace_steps(f.grace_steps);
      es->set_reduction_factor(f.reduction_factor);
      es->set_max_steps(f.max_steps);
    }
    absl::StatusOr<std::vector<Trial>> expanded = ExpandSweep(spec, f.command);
    if (!expanded.ok()) return UsageError(err_, expanded.status().message());
    trials = *std::move(expanded);
    std::vector<std::string> unused = UnusedSweepParams(spec, f.command);
    if (!unused.empty()) {
      err_ << absl::StrFormat(
          "trainctl: warning: no {placeholder} in the command uses %s; the "
          "trials still get it in their params\n",
          absl::StrJoin(unused, ", "));
    }
  }

  absl::StatusOr<Connection> connection = ResolveConnection(f, options_, err_);
  if (!connection.ok()) return UsageError(err_, connection.status().message());
  const std::string address = connection->address;
  RealClock real_clock;
  Session session(make_stub_(*connection), address, out_, err_,
                  options_.clock != nullptr ? *options_.clock : real_clock,
                  options_.terminal_width);
  if (options_.progress) session.EnableProgress();
  const bool json = f.output == "json";
  if (submit->parsed()) return session.Submit(f.submit, f.wait);
  if (sweep_list->parsed()) return session.SweepList(json);
  if (sweep_describe->parsed()) {
    const int status = session.SweepDescribe(f.sweep_id, json);
    if (status != kExitOk || f.metric.empty() || json) return status;
    out_ << absl::StrFormat("\nBest trials by %s (%s, %s value):\n", f.metric,
                            f.mode, f.scope);
    return session.SweepCompare(f.sweep_id, f.metric, f.mode, f.scope, false,
                                /*max_rows=*/3);
  }
  if (sweep_compare->parsed()) {
    return session.SweepCompare(f.sweep_id, f.metric, f.mode, f.scope, json);
  }
  if (report->parsed()) {
    return session.Report(f.report_pairs, f.step,
                          options_.getenv ? options_.getenv
                                          : [](const char* name) -> const char* {
                                              return ::getenv(name);
                                            });
  }
  if (metrics_cmd->parsed()) return session.Metrics(f.job_id, f.metric_key, json);
  if (sweep_cancel->parsed()) return session.SweepCancel(f.sweep_id);
  if (sweep_run) {
    const std::string& name = f.submit.spec().name();
    return session.Sweep(f.submit.spec(), trials, f.sweep_id,
                         name.empty() ? f.sweep_id : name);
  }
  if (list->parsed()) return session.List(f.states, json);
  if (describe->parsed()) return session.Describe(f.job_id, json);
  if (logs->parsed()) return session.Logs(f.job_id, f.rank, f.follow);
  if (cancel->parsed()) return session.Cancel(f.job_id);
  if (wait->parsed()) return session.Wait(f.job_id, timeout);
  if (nodes_cmd->parsed()) return session.Nodes(json);
  if (why->parsed()) return session.Why(f.job_id, json);
  if (top->parsed()) {
    return session.Top(absl::Seconds(f.interval_s), f.once, json);
  }
  return kExitUsage;  // unreachable: require_subcommand(1)
}

}  // namespace trainctl::cli
