// `trainctl submit`: the job spec flags (shared with `trainctl sweep`), how
// they become a JobSpec, and the submit itself (with --wait, then waits as
// `trainctl wait` does).

#include <cstdint>
#include <map>
#include <vector>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli.h"
#include "client/cli_internal.h"
#include "common/units.h"
#include "coordinator/dependency.h"

namespace trainctl::cli::internal {

// The flags a job spec is made of, shared by `submit` and `sweep`: resource
// shape, priority, restarts, env, workdir. They fill `f`; BuildSpec reads
// them back.
namespace {

// A number in (0, max]: 0, a negative number and NaN are refused (CLI11's
// Range takes 0 and lets NaN through), with the flag's range in the message.
CLI::Validator AboveZeroUpTo(double max) {
  return CLI::Validator(
      [max](std::string& in) -> std::string {
        double v = 0;
        if (!absl::SimpleAtod(in, &v) || !(v > 0 && v <= max)) {
          return absl::StrFormat("%s is not in (0, %g]", in, max);
        }
        return "";
      },
      absl::StrFormat("(0, %g]", max));
}

}  // namespace

void AddJobSpecOptions(CLI::App* sub, Flags& f) {
  // CLI11's PositiveNumber prints DBL_MAX in its message.
  const CLI::Range kPositive(1, 1'000'000);
  const CLI::Range kNonNegative(0, 1'000'000);
  auto* gpus = sub->add_option("--gpus", f.gpus,
                               "Whole GPUs; more than 1 makes a gang job")
                   ->check(kPositive);
  auto* fraction = sub->add_option("--gpu-fraction", f.gpu_fraction,
                                   "Share of one GPU, in (0, 1]")
                       ->check(AboveZeroUpTo(1.0));
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
  sub->add_option("--export", f.export_policy,
                  "Environment the task gets from this shell, as Slurm's "
                  "--export: ALL (default: every variable but the launch contract's: "
                  "TRAINCTL_*, RANK, CUDA_VISIBLE_DEVICES, ...), "
                  "NONE, or NAME1,NAME2,NAME=VALUE (only those), optionally "
                  "after ALL,. --env and the launch contract win over it")
      ->capture_default_str();
  sub->add_option("--workdir", f.workdir,
                  "Working directory of the task (default: this one)");
  sub->add_option("--image", f.image,
                  "Run each task in this container image, through the node's "
                  "podman or Apptainer; placed only on nodes that have one");
  sub->add_option("--cpus", f.cpus,
                  "CPU limit of each task, in CPUs (cgroup v2 cpu.max; "
                  "default: none)")
      ->check(AboveZeroUpTo(4096.0));
  sub->add_option("--mem", f.mem,
                  "Memory limit of each task, e.g. 32GiB (cgroup v2 "
                  "memory.max; default: none)");
  sub->add_option("--queue", f.queue,
                  "Named queue (see the coordinator's --scheduler-config; "
                  "default: default)");
  sub->add_option("--time-limit", f.time_limit,
                  "Stop and fail the job (TIMEOUT) after this long running, "
                  "e.g. 30m, 2h, 1h30m; lets it backfill ahead of a reservation");
  sub->add_flag("--hold", f.hold,
                "Accept the job although no node of the cluster could hold it "
                "now (more GPUs or nodes than it has): it waits for nodes that "
                "will join instead of being refused");
  sub->add_flag("--no-logs", f.no_logs,
                "Discard the tasks' stdout and stderr, as Slurm's "
                "--output=/dev/null: no log file is written and `trainctl "
                "logs` has nothing to show (for many small tasks that write "
                "their results elsewhere)");
  sub->add_flag("--slurm-env", f.slurm_env,
                "Also give every task the variables Slurm's srun sets "
                "(SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_ID, "
                "SLURM_STEP_NODELIST...), with Slurm's meanings, so programs "
                "that detect Slurm (Lightning, submitit, JAX) run unmodified");
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
  sub->add_option("--gpu-type", f.gpu_types,
                  "GPU types the job accepts, in order of preference, as "
                  "`trainctl nodes` shows them (e.g. h100 or h100,a100); a "
                  "gang takes GPUs of one type")
      ->delimiter(',');
  sub->add_option("--constraint", f.constraint,
                  "Node features every node of the job must offer (agent "
                  "--features), Slurm's syntax: ib&nvlink (all) or a|b (any)");
  sub->add_option("-d,--dependency", f.dependency,
                  "Start only after other jobs, Slurm's sbatch syntax: "
                  "afterok:ID[:ID...] (succeeded), afternotok (failed or "
                  "cancelled), afterany (ended), after (started), aftercorr "
                  "(array task by task), singleton (one job of this name at a "
                  "time); join with , (all) or ? (any). An array's id means "
                  "every task. A dependency that can never be met cancels "
                  "the job");
  sub->add_option("-w,--nodelist", f.nodelist,
                  "Only these nodes (comma-separated); a gang uses every one")
      ->delimiter(',');
  sub->add_option("-x,--exclude", f.exclude,
                  "Never these nodes (comma-separated)")
      ->delimiter(',');
  sub->add_flag("--allow-mixed-gpu-types", f.allow_mixed_gpu_types,
                "Let a gang mix GPU types (its ranks then run at the slowest "
                "GPU's speed)");
  sub->add_flag("--auto-pack", f.auto_pack,
                "Experiments: let the coordinator pack trials onto GPUs from "
                "measured memory and utilization (default off); --gpu-mem is "
                "then each trial's declared size: a sweep's trials are "
                "started together while their declared sizes fit, and "
                "measured after")
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
  spec->set_hold(flags->hold);
  spec->set_discard_output(flags->no_logs);
  spec->set_slurm_env(flags->slurm_env);
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
  spec->mutable_gpu_types()->Assign(flags->gpu_types.begin(), flags->gpu_types.end());
  spec->set_constraint(flags->constraint);
  if (absl::StatusOr<coord::Dependency> dep = coord::ParseDependency(flags->dependency);
      !dep.ok()) {
    return absl::StrCat("--dependency ", flags->dependency, ": ", dep.status().message());
  }
  spec->set_dependency(flags->dependency);
  spec->mutable_nodelist()->Assign(flags->nodelist.begin(), flags->nodelist.end());
  spec->mutable_exclude_nodes()->Assign(flags->exclude.begin(), flags->exclude.end());
  spec->set_allow_mixed_gpu_types(flags->allow_mixed_gpu_types);
  if (!flags->gpu_mem.empty()) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(flags->gpu_mem);
    if (!bytes.ok())
      return absl::StrCat("--gpu-mem: ", bytes.status().message());
    if (*bytes <= 0) {
      return absl::StrCat("--gpu-mem ", flags->gpu_mem,
                          ": must be more than 0 bytes (for a whole GPU, leave "
                          "--gpu-mem out)");
    }
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
  if (std::string error = ApplyExport(flags->export_policy, flags->environ, spec);
      !error.empty()) {
    return error;
  }
  spec->set_image(flags->image);
  spec->set_cpus(flags->cpus);
  if (!flags->mem.empty()) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(flags->mem);
    if (!bytes.ok()) return absl::StrCat("--mem: ", bytes.status().message());
    if (*bytes <= 0) {
      return absl::StrCat("--mem ", flags->mem,
                          ": must be more than 0 bytes (for no limit, leave --mem out)");
    }
    spec->set_memory_bytes(*bytes);
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

std::string ApplyExport(absl::string_view policy, const char* const* environ,
                        v1::JobSpec* spec) {
  spec->clear_exported_env();
  spec->set_export_policy(std::string(policy));
  std::map<std::string, std::string> all;
  for (const char* const* e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq == absl::string_view::npos) continue;
    all.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  // ALL leaves out the launch contract's names (a shell inside a task has
  // RANK, CUDA_VISIBLE_DEVICES, TRAINCTL_*: trainctl sets them anew) and
  // the shell's own bookkeeping.
  auto exportable = [](absl::string_view name) {
    return IsEnvName(name) && !IsReservedEnvVar(name) && name != "PWD" &&
           name != "OLDPWD" && name != "SHLVL" && name != "_";
  };
  auto* out = spec->mutable_exported_env();
  if (policy == "NONE") return "";
  std::vector<std::string> items = absl::StrSplit(policy, ',');
  if (!items.empty() && items[0] == "ALL") {
    for (const auto& [name, value] : all) {
      if (exportable(name)) (*out)[name] = value;
    }
    items.erase(items.begin());
  } else if (items.empty() || policy.empty()) {
    return "--export: empty; give ALL, NONE or NAME1,NAME2";
  }
  for (const std::string& item : items) {
    const std::string name = item.substr(0, item.find('='));
    if (!IsEnvName(name) || item == "ALL" || item == "NONE") {
      return absl::StrFormat(
          "--export %s: \"%s\" is not a variable name or NAME=VALUE (ALL may "
          "come first only; NONE only alone)",
          policy, item);
    }
  }
  for (const std::string& item : items) {
    const std::string name = item.substr(0, item.find('='));
    if (IsReservedEnvVar(name)) {
      return absl::StrFormat(
          "--export %s: %s is set by trainctl (launch contract) and cannot be "
          "exported",
          policy, name);
    }
  }
  for (const std::string& item : items) {
    std::pair<std::string, std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (item.find('=') != std::string::npos) {
      (*out)[kv.first] = kv.second;
      continue;
    }
    auto it = all.find(kv.first);
    if (it == all.end()) {
      return absl::StrFormat("--export %s: %s is not set in this environment", policy,
                             kv.first);
    }
    (*out)[kv.first] = it->second;
  }
  return "";
}

CLI::App* AddSubmitCommand(CLI::App& app, Flags& f) {
  CLI::App* submit =
      app.add_subcommand("submit", "Submit a job; prints its id");
  submit->add_option("--name", *f.submit.mutable_spec()->mutable_name(),
                     "Job name shown in listings");
  AddJobSpecOptions(submit, f);
  submit->add_option("--request-id", *f.submit.mutable_request_id(),
                     "Makes retried submits idempotent");
  submit->add_flag("--wait", f.wait,
                   "Then wait for the job like `trainctl wait`");
  submit->add_option("--array", f.array,
                     "A job array, Slurm's syntax: one job per index of 0-9, "
                     "1,3,5-7 or 0-15:4; %P runs at most P at once (0-999%8). "
                     "Each task gets TRAINCTL_ARRAY_TASK_ID (and "
                     "SLURM_ARRAY_TASK_ID); prints the array id");
  submit->add_option("command", f.command, "The command to run, after --");
  submit->footer(absl::StrCat(
      Example("  trainctl submit --name sweep-lr3 --gpu-fraction 0.25 "
              "--env LR=3e-4 -- python train.py\n"
              "  trainctl submit --nodes 2 --gpus-per-node 8 --wait -- "
              "python ddp.py\n"
              "  trainctl submit --array 0-99%8 --gpu-fraction 0.5 -- "
              "sh -c 'python eval.py --shard $TRAINCTL_ARRAY_TASK_ID'\n"
              "  trainctl submit -d afterok:12 --name eval -- python eval.py"),
      "\n\nWith --wait, the exit status is that of `trainctl wait` (see "
      "trainctl wait --help)."));
  return submit;
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

absl::StatusOr<std::vector<int64_t>> Session::SubmitMany(
    const std::vector<v1::JobSpec>& specs, const std::string& request_id) {
  // The coordinator takes messages of up to 16 MiB: calls stay below 12.
  constexpr size_t kMaxCallBytes = size_t{12} << 20;
  std::vector<int64_t> ids;
  ids.reserve(specs.size());
  for (size_t from = 0, call = 0; from < specs.size(); ++call) {
    size_t to = from;
    size_t bytes = 0;
    while (to < specs.size() && to - from < static_cast<size_t>(kMaxArrayTaskCount)) {
      const size_t b = specs[to].ByteSizeLong() + 8;
      if (to > from && bytes + b > kMaxCallBytes) break;
      bytes += b;
      ++to;
    }
    if (to < specs.size() && specs[from].has_array()) {
      // A job array is one call (its tasks must share one array id).
      return absl::InvalidArgumentError(absl::StrFormat(
          "--array: %d tasks of %d bytes each make a request above %d MiB; "
          "submit fewer tasks, or a smaller environment (--export NONE or "
          "NAME1,NAME2)",
          specs.size(), specs[from].ByteSizeLong(), kMaxCallBytes >> 20));
    }
    v1::SubmitJobsRequest request;
    for (size_t i = from; i < to; ++i) *request.add_specs() = specs[i];
    if (!request_id.empty()) {
      request.set_request_id(call == 0 ? request_id : absl::StrCat(request_id, "-", call));
    }
    v1::SubmitJobsResponse response;
    if (absl::Status s = Call(&Stub::SubmitJobs, request, &response); !s.ok()) return s;
    if (response.job_ids_size() != static_cast<int>(to - from)) {
      return absl::InternalError(absl::StrFormat(
          "the coordinator answered %d job ids for %d jobs", response.job_ids_size(),
          to - from));
    }
    ids.insert(ids.end(), response.job_ids().begin(), response.job_ids().end());
    from = to;
  }
  return ids;
}

absl::StatusOr<std::vector<int64_t>> Session::SubmitArrayOnce(
    const v1::SubmitJobRequest& request, const ArraySpec& array) {
  v1::SubmitJobArrayRequest call;
  *call.mutable_spec() = request.spec();
  call.mutable_task_ids()->Assign(array.task_ids.begin(), array.task_ids.end());
  call.set_max_running(array.max_running);
  call.set_request_id(request.request_id());
  v1::SubmitJobsResponse response;
  if (absl::Status s = Call(&Stub::SubmitJobArray, call, &response); !s.ok()) return s;
  if (response.job_ids_size() != call.task_ids_size()) {
    return absl::InternalError(absl::StrFormat("the coordinator answered %d job ids for %d tasks",
                                               response.job_ids_size(), call.task_ids_size()));
  }
  return std::vector<int64_t>(response.job_ids().begin(), response.job_ids().end());
}

int Session::SubmitArray(const v1::SubmitJobRequest& request, const ArraySpec& array) {
  absl::StatusOr<std::vector<int64_t>> ids = SubmitArrayOnce(request, array);
  if (!ids.ok() && ids.status().code() == absl::StatusCode::kUnimplemented) {
    // A coordinator without SubmitJobArray: one spec per task, each with the
    // exported environment.
    std::vector<v1::JobSpec> specs;
    specs.reserve(array.task_ids.size());
    for (int task_id : array.task_ids) {
      v1::JobSpec& spec = specs.emplace_back(request.spec());
      spec.mutable_array()->set_task_id(task_id);
      spec.mutable_array()->set_task_count(static_cast<int>(array.task_ids.size()));
      spec.mutable_array()->set_max_running(array.max_running);
    }
    ids = SubmitMany(specs, request.request_id());
  }
  if (!ids.ok()) {
    if (ids.status().code() == absl::StatusCode::kUnimplemented) {
      return Fail(absl::UnimplementedError(absl::StrCat(
          "--array: this coordinator predates job arrays (no SubmitJobs): ",
          ids.status().message())));
    }
    return Fail(ids.status());
  }
  out_ << ids->front() << "\n";
  err_ << absl::StrFormat(
      "array %d: %d job(s) submitted (jobs %d..%d%s); see `trainctl list --array "
      "%d`\n",
      ids->front(), ids->size(), ids->front(), ids->back(),
      array.max_running > 0 ? absl::StrCat(", at most ", array.max_running, " running")
                            : "",
      ids->front());
  return kExitOk;
}

}  // namespace trainctl::cli::internal
