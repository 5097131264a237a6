// The parts of the `trainctl` command line (client/cli.h) that its commands
// share: the Flags every command binds, the Session one Run talks to the
// coordinator through, the formatting and connection helpers (cli_common.cc)
// and each command's definition function. Internal to tc_cli: include it
// only from the client/cli*.cc files.
//
// One file per command or family, as kubectl lays out its commands:
//   cli.cc               Cli: global flags, completion, help, dispatch
//   cli_common.cc        formatting, RPC errors, config file, connection
//   cli_submit.cc        submit (and the job spec flags sweep shares)
//   cli_sweep.cc         sweep, sweep list/describe/cancel/compare
//   cli_metrics.cc       report, metrics
//   cli_list_describe.cc list, describe
//   cli_logs.cc          logs
//   cli_wait_cancel.cc   wait, cancel
//   cli_why.cc           why
//   cli_nodes.cc         nodes
//   cli_top.cc           top
//   cli_tokens.cc        token create/list/revoke, audit
//   cli_accounting.cc    usage, history

#ifndef TRAINCTL_CLIENT_CLI_INTERNAL_H_
#define TRAINCTL_CLIENT_CLI_INTERNAL_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/array_spec.h"
#include "client/sweep.h"
#include "common/clock.h"
#include "common/env_names.h"
#include "common/flag_hints.h"
#include "common/proto_utf8.h"
#include "common/units.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "trainctl/v1/service.grpc.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace trainctl::cli::internal {

namespace v1 = ::trainctl::v1;
using Stub = v1::Coordinator::StubInterface;

// Deadline of every unary call but WaitJob.
inline constexpr absl::Duration kRpcDeadline = absl::Seconds(10);
// How long one WaitJob call long-polls on the server; its deadline adds
// kWaitSlack for the network.
inline constexpr absl::Duration kWaitPoll = absl::Seconds(30);
inline constexpr absl::Duration kWaitSlack = absl::Seconds(5);
// `logs -f` blocks this long on WaitJob when it has caught up with the log.
inline constexpr absl::Duration kFollowPoll = absl::Seconds(1);
// With a progress line (CliOptions::progress), `wait` polls this often so
// that the line's elapsed time and state stay current.
inline constexpr absl::Duration kProgressPoll = absl::Seconds(1);

// ------------------------------------------------------------ formatting
// (cli_common.cc)

// "JOB_STATE_RUNNING" -> "running": the user-facing name of an enum value.
std::string ShortEnumName(const std::string& full, absl::string_view prefix);
// How tables and summaries name `job`'s state: StateName, but "stopped
// early" for a sweep trial the early-stopping rule cancelled
// (Job.stopped_early_at_step), which a user's cancel is not.
std::string JobStateLabel(const v1::Job& job);
std::string StateName(v1::JobState s);
std::string KindName(v1::JobKind k);
std::string TaskStateName(v1::TaskState s);
std::string NodeStateName(v1::NodeState s);
// "45s", "12m5s", "3h4m", "2d3h": coarse, like kubectl's AGE.
std::string FormatAge(absl::Duration d);
absl::Time FromMs(int64_t ms);
// The resource shape of a spec, compactly: "0.25", "10GiB", "1", "8", "2x4".
std::string FormatGpus(const v1::JobSpec& spec);
// The resources in words, for `describe`.
std::string DescribeResources(const v1::JobSpec& spec);
// The node selection in the flags' words, for `describe`: "--gpu-type
// h100,a100 --constraint ib&nvlink -w a,b -x c --allow-mixed-gpu-types";
// "" when it has none.
std::string DescribeNodeSelection(const v1::JobSpec& spec);
// Quotes an argv element for display when a shell would split or expand it.
std::string ShellQuote(const std::string& arg);
// "SIGKILL", or "signal N" for a number without a name.
std::string SignalName(int sig);
// EXIT cell of a task: its code, its signal's name, or "-" while it runs.
std::string FormatExit(const v1::Task& t);
// "%.6g": enough digits for a loss, short in a table.
std::string FormatValue(double v);
// The protobuf JSON of `message` (proto field names, defaults included).
std::string ToJson(const google::protobuf::Message& message);
// `json` (one document, as ToJson prints it) as YAML (yaml-cpp: YAML is a
// superset of JSON, so it parses it as it is). `-o yaml` of every command
// that has `-o json`.
std::string JsonToYaml(const std::string& json);
// The values of `list --state` and `cancel --state`: every job state but
// UNSPECIFIED, as "running" (cli_list_describe.cc).
std::vector<std::string> JobStateNames();
// Whether a job in state `s` has ended (it never changes again).
bool IsFinal(v1::JobState s);
// IsEnvName and IsReservedEnvVar: common/env_names.h (the coordinator's
// rules).
using ::trainctl::IsEnvName;
using ::trainctl::IsReservedEnvVar;
// ClosestName: common/flag_hints.h (shared with the daemons).
using ::trainctl::ClosestName;
// LooksSecret (common/env_names.h): a variable whose value `describe` masks.
using ::trainctl::LooksSecret;
// `env` with the values of LooksSecret names replaced by "****".
std::map<std::string, std::string> MaskSecrets(
    const google::protobuf::Map<std::string, std::string>& env);

// Fills spec->exported_env and export_policy from `policy` (Slurm's
// --export): "ALL" (every variable of `environ` but the ones never exported:
// TRAINCTL_* (the CLI's own credentials, and a job's token when submitting
// from inside a task), PWD, OLDPWD, SHLVL, _ and names that are not
// [A-Za-z_][A-Za-z0-9_]*), "NONE", or a comma list of NAME (taken from
// `environ`; a missing one is an error) and NAME=VALUE (set as given),
// optionally after "ALL,". Returns a usage error naming --export, or "".
std::string ApplyExport(absl::string_view policy, const char* const* environ,
                        v1::JobSpec* spec);

// ------------------------------------------------------------ one command run

// What one Run needs once argv is parsed: the stub, where it points, the
// output streams and the clock. Each command's methods are defined in that
// command's file. Single-threaded, as Cli.
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
  // message is what the user should read. A request holding a string that
  // is not UTF-8 (proto3 cannot carry it) is not sent: INVALID_ARGUMENT
  // naming the field ("spec.name: is not valid UTF-8").
  template <typename Req, typename Resp>
  absl::Status Call(Method<Req, Resp> method, const Req& request,
                    Resp* response, absl::Duration deadline = kRpcDeadline) {
    if (std::string field = FirstInvalidUtf8Field(request, "", /*include_maps=*/true);
        !field.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": is not valid UTF-8 (a name, argument or value must be text)"));
    }
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
  // `submit --array`: one job of `request.spec()` per index of `array`
  // (JobSpec.array set: task id, count, %P limit), all in one
  // SubmitJobArray call (the spec and its exported environment sent once),
  // or where the coordinator lacks it (UNIMPLEMENTED) one SubmitJobs call
  // with a spec per task. Prints the array id (its first job's id), and the
  // job ids on stderr. Errors as Submit's; nothing is submitted when the
  // call fails.
  int SubmitArray(const v1::SubmitJobRequest& request, const ArraySpec& array);
  // The SubmitJobArray call of SubmitArray: the jobs' ids, or the call's
  // error (UNIMPLEMENTED from a coordinator without it; INTERNAL when the
  // reply's ids do not match the tasks).
  absl::StatusOr<std::vector<int64_t>> SubmitArrayOnce(const v1::SubmitJobRequest& request,
                                                       const ArraySpec& array);
  // Submits `specs` in SubmitJobs calls of at most kMaxArrayTaskCount jobs
  // and 12 MiB each (a job array must fit one call: INVALID_ARGUMENT
  // otherwise, before any call), with request ids "<request_id>", then
  // "<request_id>-<k>" for the k-th call after the first, and returns the
  // ids in spec order. Errors: the calls' (UNIMPLEMENTED from a coordinator
  // that predates SubmitJobs); calls before a failed one stay submitted.
  absl::StatusOr<std::vector<int64_t>> SubmitMany(const std::vector<v1::JobSpec>& specs,
                                                  const std::string& request_id);
  // `list`'s filters and columns: only `user`'s / `name`'s jobs (client
  // side), at most `limit` (0: all), `wide` adds USER and NODES.
  struct ListFilter {
    std::string user;
    std::string name;
    int limit = 0;
    bool wide = false;
    // Every user's jobs (ListJobsRequest.all_users; admins only).
    bool all_users = false;
    // Only this job array's tasks (ListJobsRequest.array_job_id); 0: all.
    int64_t array_job_id = 0;
  };
  int List(const std::vector<std::string>& states, bool json, const ListFilter& filter);
  int Describe(int64_t job_id, bool json);
  // `trainctl describe JOB...`: each job's description (a blank line
  // between), or with `json` one ListJobsResponse of them (one id: its
  // GetJobResponse, as Describe). A job that cannot be read is reported and
  // the rest still shown; the exit status is then that error's.
  int DescribeJobs(const std::vector<int64_t>& job_ids, bool json);
  // The job as describe shows it: no attempt token, secret-looking
  // variables masked. Errors: those of GetJob.
  absl::StatusOr<v1::Job> DescribedJob(int64_t job_id);
  // Describe's table for `job`.
  void PrintDescription(const v1::Job& job);
  // `trainctl __complete-ids`: the caller's job ids and sweep ids for shell
  // completion (client/completion.h), one ListJobs call, "job 42" and
  // "sweep sw-1" lines, newest first.
  int CompletionIds();
  // The pre-flights of a gang (docs/preflight.md): one block per run.
  void DescribePreflight(const v1::Job& job);
  int Logs(int64_t job_id, int rank, bool follow);
  // `logs --all-ranks -f`: every rank of the job's attempt followed together
  // (LogFollow each), complete lines prefixed "[rank R] ", until every
  // rank's log is complete; waits for the job to be placed first.
  int LogsFollowAllRanks(int64_t job_id);
  // One long poll of a followed job (WaitJob, kFollowPoll). Errors: the
  // call's.
  absl::StatusOr<v1::WaitJobResponse> WaitForFollow(int64_t job_id);
  // The log of `rank` (or of every rank, each line prefixed "[rank R] ")
  // as it is now; with tail_lines > 0 only its last lines (per rank).
  int LogsSnapshot(int64_t job_id, int rank, bool all_ranks, int tail_lines);
  int Cancel(int64_t job_id);
  // Cancels `ids` and every unfinished job the filters select (ListJobs by
  // sweep and states, then by name); one line per job; kExitRpcError when
  // any could not be cancelled (each named on err).
  int CancelJobs(const std::vector<int64_t>& ids, const std::string& sweep_id,
                 const std::string& name, const std::vector<std::string>& states,
                 int64_t array_job_id = 0);
  int Wait(int64_t job_id, std::optional<absl::Duration> timeout);
  // `trainctl wait JOB...`: waits for every job (one `timeout` for all),
  // printing each one's summary as it ends; returns the worst status:
  // kExitWaitTimeout when the timeout came first, else the status of the
  // first job (in the order given) that failed, else kExitCancelled when one
  // was cancelled, else 0.
  int WaitJobs(const std::vector<int64_t>& job_ids, std::optional<absl::Duration> timeout);
  int Nodes(bool json);
  // `trainctl node drain|resume|down NODE...`: UpdateNodes, then one line
  // per node with its new state (json: the UpdateNodesResponse).
  int UpdateNodes(v1::NodeAction action, const std::vector<std::string>& nodes,
                  const std::string& reason, std::optional<absl::Duration> deadline,
                  bool verify, bool json);
  // `trainctl node describe NODE...`: each node's state, admin state with
  // reason, agent, features, labels and GPUs with their jobs (json: the
  // NodeViews as a ListNodesResponse).
  int DescribeNodes(const std::vector<std::string>& nodes, bool json);
  // `trainctl token create`: the secret alone on stdout, the token's id,
  // user, role and expiry on stderr; with `json` the CreateTokenResponse.
  int TokenCreate(const v1::CreateTokenRequest& request, bool json);
  // `trainctl token list [--all]`: ID NAME USER ROLE CREATED EXPIRES STATE,
  // never a secret.
  int TokenList(bool all, bool json);
  // `trainctl token revoke ID`: one line naming when and by whom.
  int TokenRevoke(const std::string& id, bool json);
  // `trainctl audit`: TIME WHO ACTION TARGET DETAIL, oldest first; events
  // at or after `since_ms` (0: all), at most `limit` (0: the coordinator's
  // 1000), the newest.
  int Audit(int64_t since_ms, int limit, bool json);
  // `trainctl usage`: one row per group (the --by value), ALLOC_GPU_H
  // USED_GPU_H EFFICIENCY JOBS ATTEMPTS FAILED PREEMPTED, largest first,
  // then the total; `output` "json"/"yaml" prints the GetUsageResponse,
  // "csv" the rows (RFC 4180 quoting) without the total.
  int Usage(const v1::GetUsageRequest& request, const std::string& output);
  // `trainctl history`: the streamed ListHistory rows, columns `fields`
  // (HistoryFields names); "json" prints one UsageRecord per line (JSON
  // Lines), "csv" RFC 4180 rows; a table otherwise.
  int History(const v1::ListHistoryRequest& request, const std::vector<std::string>& fields,
              const std::string& output);
  // `trainctl why`: the WhyJob answer as lines for people, or JSON.
  int Why(int64_t job_id, bool json);
  // `trainctl top`: one frame (once) or a frame every `interval` redrawn in
  // place with ANSI escapes until interrupted; json prints TopFrame(s).
  // `trainctl top`: a frame every `interval`; one with `once`; stops after
  // `frames` frames when > 0 (0: until interrupted). On a terminal
  // (EnableTerminal) each frame is redrawn in place; elsewhere frames follow
  // one another, a blank line apart, with no escape codes.
  int Top(absl::Duration interval, bool once, bool json, int frames);
  // The "Utilization" section of `describe`: history summary and diagnosis.
  // Prints nothing when the coordinator has no history (or predates it).
  void DescribeUsage(const v1::Job& job);
  // `wait` and `submit --wait` draw a progress line on stderr (see
  // CliOptions::progress).
  void EnableProgress() { progress_ = true; }
  // Standard output is a terminal (CliOptions::stdout_terminal): `top`
  // redraws in place.
  void EnableTerminal() { terminal_ = true; }
  // Submits every trial of a sweep as a job of `base` with the trial's
  // command and params, spec.sweep_id and name "<name>-<i>", in one
  // SubmitJobs call (SubmitMany) with the sweep id as request id: all
  // trials or none, ids in trial order, and running it again submits
  // nothing twice. A coordinator that predates SubmitJobs gets one SubmitJob
  // per trial with request id "<sweep_id>-<i>", up to 32 in flight at once
  // (then job ids need not follow trial order).
  int Sweep(const v1::JobSpec& base, const std::vector<Trial>& trials,
            const std::string& sweep_id, const std::string& name);
  int SweepList(bool json);
  int SweepDescribe(const std::string& sweep_id, bool json);
  int SweepCancel(const std::string& sweep_id);

  // Experiment records: metric reports and queries, sweep comparison by a
  // metric (cli_metrics.cc, cli_sweep.cc).
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

  // The coordinator's stub (not owned), for the streaming calls.
  Stub* stub() const { return stub_; }

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
                            absl::Duration deadline) const;

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
  bool terminal_ = false;
  bool progress_drawn_ = false;
};

// ------------------------------------------------------------ command line

// Every flag and argument of every command; CLI11 binds them, the commands
// read them back after parsing.
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
  // --export (Slurm's meaning); ALL by default, as sbatch.
  std::string export_policy = "ALL";
  // Where --export reads variables from (CliOptions::environ).
  const char* const* environ = nullptr;
  std::string image;
  double cpus = 0;
  std::string mem;
  std::string workdir;
  std::string queue;
  std::string time_limit;
  bool preemptible = false;
  bool hold = false;
  // --no-logs: JobSpec.discard_output.
  bool no_logs = false;
  // --slurm-env: JobSpec.slurm_env (Slurm's srun variables for every task).
  bool slurm_env = false;
  bool pack = false;
  bool spread = false;
  bool preflight = false;
  bool no_preflight = false;
  std::string user;
  std::string project;
  // Node selection (JobSpec.gpu_types, constraint, nodelist, exclude_nodes,
  // allow_mixed_gpu_types): --gpu-type, --constraint, -w/--nodelist,
  // -x/--exclude, --allow-mixed-gpu-types.
  std::vector<std::string> gpu_types;
  std::string constraint;
  // --dependency (Slurm's sbatch -d syntax; coordinator/dependency.h).
  std::string dependency;
  std::vector<std::string> nodelist;
  std::vector<std::string> exclude;
  bool allow_mixed_gpu_types = false;
  bool wait = false;
  // node drain|resume|down|describe
  std::vector<std::string> node_names;
  std::string node_reason;
  std::string node_deadline;
  bool node_verify = false;
  // submit --array (Slurm's syntax, client/array_spec.h); empty: one job.
  std::string array;
  std::vector<std::string> command;
  // list
  std::vector<std::string> states;
  std::string list_user;
  bool list_all_users = false;
  std::string list_name;
  int list_limit = 0;
  int64_t list_array = 0;
  // cancel
  std::vector<int64_t> job_ids;
  std::string cancel_sweep;
  int64_t cancel_array = 0;
  std::string cancel_name;
  std::vector<std::string> cancel_states;
  // describe, logs, wait
  int64_t job_id = 0;
  int rank = 0;
  bool follow = false;
  int tail_lines = 0;
  bool all_ranks = false;
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
  int frames = 0;
  // token create/list/revoke, audit; tok_request is filled by
  // PrepareTokenCommand, audit_since_ms too (0: no --since).
  std::string tok_user;
  std::string tok_role = "user";
  std::string tok_expires;
  std::string tok_name;
  bool tok_all = false;
  std::string tok_id;
  v1::CreateTokenRequest tok_request;
  std::string audit_since;
  int audit_limit = 0;
  int64_t audit_since_ms = 0;
  // usage, history; the *_ms and acct_fields are filled by
  // PrepareAccountingCommand.
  std::string acct_by = "user";
  std::string acct_since;
  std::string acct_until;
  std::string acct_user;
  std::string acct_state;
  std::string acct_format;
  int64_t acct_since_ms = 0;
  int64_t acct_until_ms = 0;
  std::vector<std::string> acct_fields;
  // exec, shell, attach, port-forward (cli_session.cc)
  int sess_rank = 0;
  bool sess_stdin = false;
  bool sess_tty = false;
  bool sess_keep = false;
  std::string sess_idle_timeout;
  std::vector<std::string> sess_command;
  std::string sess_ports;
};


// Prints "trainctl: error: MESSAGE" to `err` and returns kExitUsage.
int UsageError(std::ostream& err, absl::string_view message);
// "Example:\n" and `text`: the footer of a command's --help.
std::string Example(absl::string_view text);

// Resolves the Connection (see cli.h) from the flags (which already hold
// the environment variables) and the config file. Warns on `err` about a
// token kept in a file others can read, or sent without TLS off-host.
// Errors: INVALID_ARGUMENT for an unreadable --config or CA file, a bad
// config file, or a token gRPC cannot send.
absl::StatusOr<Connection> ResolveConnection(const Flags& f,
                                             const CliOptions& options,
                                             std::ostream& err);

// The commands' definitions. Each adds its subcommand(s) to `app`, binding
// their flags to `f`; Cli::Run calls them in the order `trainctl --help`
// lists the commands.

// `submit` (cli_submit.cc).
CLI::App* AddSubmitCommand(CLI::App& app, Flags& f);
// Adds the flags a job spec is made of, shared by `submit` and `sweep`
// (resource shape, priority, restarts, env, workdir...) to `sub`, bound to
// `f` (cli_submit.cc).
void AddJobSpecOptions(CLI::App* sub, Flags& f);
// Fills flags->submit from the job spec flags and the command; returns a
// usage error message naming the flag, or "" when they are fine. `example`
// is the command line shown when the command is missing (cli_submit.cc).
std::string BuildSpec(Flags* flags, absl::string_view verb,
                      absl::string_view example);

// `sweep` and its subcommands (cli_sweep.cc).
struct SweepCommands {
  CLI::App* sweep;
  CLI::App* list;
  CLI::App* describe;
  CLI::App* cancel;
  CLI::App* compare;
};
SweepCommands AddSweepCommands(CLI::App& app, Flags& f);
// For a sweep to submit: expands the sweep flags into `trials` and fills
// f->sweep_id and f->submit before any RPC, warning on `err` about
// parameters no placeholder uses. Returns kExitOk, or kExitUsage after
// printing the error on `err`.
int PrepareSweep(Flags* f, std::ostream& err, std::vector<Trial>* trials);

// `report` and `metrics` (cli_metrics.cc).
CLI::App* AddReportCommand(CLI::App& app, Flags& f);
CLI::App* AddMetricsCommand(CLI::App& app, Flags& f);

// `list` and `describe` (cli_list_describe.cc).
struct ListDescribeCommands {
  CLI::App* list;
  CLI::App* describe;
};
ListDescribeCommands AddListDescribeCommands(CLI::App& app, Flags& f);

// `logs` (cli_logs.cc).
CLI::App* AddLogsCommand(CLI::App& app, Flags& f);

// `cancel` and `wait` (cli_wait_cancel.cc).
CLI::App* AddCancelCommand(CLI::App& app, Flags& f);
CLI::App* AddWaitCommand(CLI::App& app, Flags& f);
// `wait --timeout`: "30s", "5m", "1h30m", or a bare number of seconds;
// nullopt when it is none of these.
std::optional<absl::Duration> ParseTimeout(const std::string& text);

// `why` (cli_why.cc).
CLI::App* AddWhyCommand(CLI::App& app, Flags& f);

// `nodes` (cli_nodes.cc).
CLI::App* AddNodesCommand(CLI::App& app, Flags& f);

// `node drain|resume|down|describe` (cli_nodes.cc).
struct NodeCommands {
  CLI::App* drain = nullptr;
  CLI::App* resume = nullptr;
  CLI::App* down = nullptr;
  CLI::App* describe = nullptr;
};
NodeCommands AddNodeCommands(CLI::App& app, Flags& f);

// A node's state for people: its service state when an admin took it out
// ("draining", "drained", "down"), else its liveness ("ready", "lost").
std::string NodeShownState(const v1::NodeView& view);

// `top` (cli_top.cc).
CLI::App* AddTopCommand(CLI::App& app, Flags& f);

// `token create|list|revoke` and `audit` (cli_tokens.cc).
struct TokenCommands {
  CLI::App* token;
  CLI::App* create;
  CLI::App* list;
  CLI::App* revoke;
  CLI::App* audit;
};
TokenCommands AddTokenCommands(CLI::App& app, Flags& f);
// `exec`, `shell`, `attach` and `port-forward`: interactive sessions beside
// a running rank (cli_session.cc).
struct SessionCommands {
  CLI::App* exec = nullptr;
  CLI::App* shell = nullptr;
  CLI::App* attach = nullptr;
  CLI::App* port_forward = nullptr;
};
SessionCommands AddSessionCommands(CLI::App& app, Flags& f);
// Before any RPC, for `shell`: fills f->submit with the interactive job
// (the job spec flags, a holder process as its command, JobSpec.interactive
// and idle_timeout_ms from --idle-timeout, default 1 h). Returns a usage
// error naming the flag, or "".
std::string PrepareShell(Flags* f);
// Runs whichever of `c` was parsed over `session`'s stub; returns the exit
// status (exec, shell, attach: the remote command's exit code, 128 + its
// signal when a signal ended it, the kubectl exec rule; kExitRpcError when
// the session could not run; kExitUsage for bad flags).
int RunSessionCommand(const SessionCommands& c, Flags& f, Session& session,
                      std::ostream& err);

// Before any RPC: fills f->tok_request from `token create`'s flags and
// f->audit_since_ms from `audit --since` (a duration before `now`, or an
// RFC 3339 time). Returns a usage error naming the flag, or "".
std::string PrepareTokenCommand(Flags* f, const TokenCommands& c, absl::Time now);

// `usage` and `history` (cli_accounting.cc).
struct AccountingCommands {
  CLI::App* usage;
  CLI::App* history;
};
AccountingCommands AddAccountingCommands(CLI::App& app, Flags& f);
// Before any RPC: fills f->acct_since_ms / acct_until_ms (ParseWhen; since
// defaults to 30 days before until for usage, 1 day for history; until to
// `now`) and f->acct_fields from history's --format. Returns a usage error
// naming the flag (--since, --until, --format), or "".
std::string PrepareAccountingCommand(Flags* f, const AccountingCommands& c, absl::Time now);
// A time as --since/--until take it, Unix ms: a duration before `now`
// (ParseLongDuration: 7d, 12h, 1d12h), a UTC date YYYY-MM-DD, a UTC time
// YYYY-MM-DDTHH:MM:SS, or an RFC 3339 time. Errors: INVALID_ARGUMENT
// quoting `text` and the accepted forms.
absl::StatusOr<int64_t> ParseWhen(absl::string_view text, absl::Time now);
// One CSV line (RFC 4180): fields with a comma, quote, CR or LF quoted,
// quotes doubled; CRLF-terminated.
std::string CsvRow(const std::vector<std::string>& fields);

}  // namespace trainctl::cli::internal

#endif  // TRAINCTL_CLIENT_CLI_INTERNAL_H_
