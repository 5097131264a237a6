#include "coordinator/job_spec.h"

#include "common/env_names.h"
#include "common/proto_utf8.h"

#include "coordinator/asha.h"
#include "coordinator/dependency.h"

#include <cmath>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "coordinator/sched/node_selection.h"
#include "google/protobuf/stubs/common.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace trainctl::coord {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("spec.", field, ": ", why));
}

bool ValidUtf8(const std::string& v) { return IsValidUtf8(v); }

// The first entry of map field `field` whose key or value is not valid
// UTF-8, as "FIELD[KEY]" (the key C-escaped); empty when all are valid.
std::string FirstInvalidUtf8Entry(const google::protobuf::Map<std::string, std::string>& map,
                                  absl::string_view field) {
  for (const auto& [key, value] : map) {
    if (!ValidUtf8(key) || !ValidUtf8(value)) {
      return absl::StrCat(field, "[", absl::CHexEscape(key.substr(0, 64)), "]");
    }
  }
  return "";
}

bool IsSweepId(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

bool HasControlChars(absl::string_view s) {
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// The configured queue named `queue` ("" is "default"); null when `policy`
// lists none of that name.
const sched::QueueConfig* FindQueue(const sched::PolicyConfig& policy, const std::string& queue) {
  for (const sched::QueueConfig& q : policy.queues) {
    if (q.name == queue || (queue.empty() && q.name == "default")) return &q;
  }
  return nullptr;
}

// Whether a coordinator with `policy` has `queue` ("" is "default").
bool KnownQueue(const sched::PolicyConfig& policy, const std::string& queue) {
  if (policy.queues.empty()) return queue.empty() || queue == "default";
  return FindQueue(policy, queue) != nullptr;
}

std::string QueueNames(const sched::PolicyConfig& policy) {
  if (policy.queues.empty()) return "default";
  std::vector<std::string> names;
  for (const sched::QueueConfig& q : policy.queues) names.push_back(q.name);
  return absl::StrJoin(names, ", ");
}

}  // namespace

absl::Status ValidateJobSpec(const v1::JobSpec& spec,
                             const sched::PolicyConfig& policy) {
  for (std::string field :
       {FirstInvalidUtf8Field(spec, "", /*include_maps=*/false), FirstInvalidUtf8Entry(spec.env(), "env"),
        FirstInvalidUtf8Entry(spec.params(), "params"),
        FirstInvalidUtf8Entry(spec.exported_env(), "exported_env")}) {
    if (!field.empty()) return Invalid(field, "is not valid UTF-8");
  }
  if (spec.name().size() > kMaxNameBytes) {
    return Invalid("name", absl::StrCat("at most ", kMaxNameBytes, " bytes"));
  }
  if (HasControlChars(spec.name())) {
    return Invalid("name", "must not contain control characters");
  }
  if (spec.command().empty()) {
    return Invalid("command", "is empty: give the program to run after `--`");
  }
  if (!spec.verify_node().empty()) {
    return Invalid("verify_node", "is set by the coordinator (trainctl node resume --verify), "
                                  "not by a submit");
  }
  if (spec.command_size() > kMaxArgs) {
    return Invalid("command", absl::StrCat("at most ", kMaxArgs, " arguments, got ",
                                           spec.command_size()));
  }
  if (spec.command(0).empty()) return Invalid("command[0]", "is empty");
  size_t total = 0;
  for (int i = 0; i < spec.command_size(); ++i) {
    if (spec.command(i).size() > kMaxArgBytes) {
      return Invalid(absl::StrCat("command[", i, "]"),
                     absl::StrCat("at most ", kMaxArgBytes, " bytes"));
    }
    if (spec.command(i).find('\0') != std::string::npos) {
      return Invalid(absl::StrCat("command[", i, "]"), "contains a NUL byte");
    }
    total += spec.command(i).size();
  }
  if (total > kMaxCommandBytes) {
    return Invalid("command", absl::StrCat("at most ", kMaxCommandBytes,
                                           " bytes in all, got ", total));
  }
  if (spec.env_size() > kMaxEnvVars) {
    return Invalid("env", absl::StrCat("at most ", kMaxEnvVars, " variables"));
  }
  for (const auto& [key, value] : spec.env()) {
    if (!IsEnvName(key)) {
      return Invalid(absl::StrCat("env[", key.substr(0, 64), "]"),
                     "not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)");
    }
    if (IsReservedEnvVar(key)) {
      return Invalid(absl::StrCat("env[", key, "]"),
                     "is set by trainctl (launch contract); remove it");
    }
    if (value.size() > kMaxEnvValueBytes || value.find('\0') != std::string::npos) {
      return Invalid(absl::StrCat("env[", key, "]"),
                     absl::StrCat("value must be at most ", kMaxEnvValueBytes,
                                  " bytes without NUL"));
    }
  }
  if (spec.exported_env_size() > kMaxExportedVars) {
    return Invalid("exported_env", absl::StrCat("at most ", kMaxExportedVars,
                                                " variables, got ",
                                                spec.exported_env_size()));
  }
  size_t exported_bytes = 0;
  for (const auto& [key, value] : spec.exported_env()) {
    if (!IsEnvName(key)) {
      return Invalid(absl::StrCat("exported_env[", absl::CHexEscape(key.substr(0, 64)), "]"),
                     "not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)");
    }
    if (IsReservedEnvVar(key)) {
      // The launch contract's names: the agent acts on some of them as root
      // (TRAINCTL_CHECKPOINT_DIR was created and handed to the user), so
      // none may come from the submitter's shell.
      return Invalid(absl::StrCat("exported_env[", key, "]"),
                     "is set by trainctl (launch contract) and cannot be exported; "
                     "unset it or leave it out of --export");
    }
    if (value.find('\0') != std::string::npos) {
      return Invalid(absl::StrCat("exported_env[", key, "]"), "value contains a NUL byte");
    }
    exported_bytes += key.size() + value.size() + 2;
  }
  if (exported_bytes > static_cast<size_t>(kMaxExportedBytes)) {
    return Invalid("exported_env",
                   absl::StrCat("at most ", kMaxExportedBytes, " bytes in all, got ",
                                exported_bytes,
                                " (export fewer variables: --export VAR1,VAR2)"));
  }
  if (spec.export_policy().size() > kMaxPathBytes || HasControlChars(spec.export_policy())) {
    return Invalid("export_policy", absl::StrCat("at most ", kMaxPathBytes,
                                                 " bytes without control characters"));
  }
  if (spec.image().size() > kMaxImageBytes ||
      spec.image().find_first_of(" \t\r\n") != std::string::npos ||
      HasControlChars(spec.image()) || absl::StartsWith(spec.image(), "-")) {
    return Invalid("image", absl::StrCat("an image reference of at most ", kMaxImageBytes,
                                         " bytes, without spaces, not starting "
                                         "with '-', got \"",
                                         absl::CHexEscape(spec.image().substr(0, 80)),
                                         "\""));
  }
  if (!(spec.cpus() >= 0 && spec.cpus() <= kMaxTaskCpus)) {
    return Invalid("cpus", absl::StrCat("must be in [0, ", kMaxTaskCpus,
                                        "] CPUs (0: no limit), got ", spec.cpus()));
  }
  if (spec.memory_bytes() < 0) {
    return Invalid("memory_bytes", absl::StrCat("must be >= 0 (0: no limit), got ",
                                                spec.memory_bytes()));
  }
  if (spec.workdir().size() > kMaxPathBytes) {
    return Invalid("workdir", absl::StrCat("at most ", kMaxPathBytes, " bytes"));
  }
  if (!spec.workdir().empty() && spec.workdir()[0] != '/') {
    return Invalid("workdir", absl::StrCat("must be an absolute path, got \"",
                                           spec.workdir().substr(0, 64), "\""));
  }
  if (spec.priority() < -kMaxPriority || spec.priority() > kMaxPriority) {
    return Invalid("priority", absl::StrCat("must be in [-", kMaxPriority, ", ",
                                            kMaxPriority, "], got ", spec.priority()));
  }
  if (spec.max_restarts() < 0 || spec.max_restarts() > kMaxRestarts) {
    return Invalid("max_restarts", absl::StrCat("must be in [0, ", kMaxRestarts,
                                                "], got ", spec.max_restarts()));
  }
  if (spec.sweep_id().size() > kMaxSweepIdBytes) {
    return Invalid("sweep_id", absl::StrCat("at most ", kMaxSweepIdBytes,
                                            " bytes, got ", spec.sweep_id().size()));
  }
  if (!IsSweepId(spec.sweep_id())) {
    return Invalid("sweep_id", absl::StrCat("only [A-Za-z0-9._-] allowed, got \"",
                                            absl::CHexEscape(spec.sweep_id()), "\""));
  }
  if (spec.has_array()) {
    const v1::JobArray& a = spec.array();
    if (a.task_id() < 0) {
      return Invalid("array.task_id", absl::StrCat("must be >= 0, got ", a.task_id()));
    }
    if (a.task_count() < 1 || a.task_count() > kMaxArrayTasks) {
      return Invalid("array.task_count",
                     absl::StrCat("must be in [1, ", kMaxArrayTasks, "], got ",
                                  a.task_count()));
    }
    if (a.max_running() < 0) {
      return Invalid("array.max_running",
                     absl::StrCat("must be >= 0 (0: no limit), got ", a.max_running()));
    }
    if (a.max_running() > 0 && spec.auto_pack()) {
      // Auto-packed jobs are placed by the packer, which knows no limits.
      return Invalid("array.max_running",
                     "a limit (%P) cannot apply to auto-packed jobs (auto_pack): "
                     "drop one of them");
    }
  }
  if (spec.params_size() > kMaxParams) {
    return Invalid("params", absl::StrCat("at most ", kMaxParams,
                                          " parameters, got ", spec.params_size()));
  }
  for (const auto& [key, value] : spec.params()) {
    if (key.size() > kMaxParamNameBytes || !IsEnvName(key)) {
      return Invalid(absl::StrCat("params[", absl::CHexEscape(key.substr(0, 64)), "]"),
                     absl::StrCat("not a valid parameter name ([A-Za-z_][A-Za-z0-9_]*, "
                                  "at most ", kMaxParamNameBytes, " bytes)"));
    }
    if (value.size() > kMaxParamValueBytes) {
      return Invalid(absl::StrCat("params[", key, "]"),
                     absl::StrCat("value must be at most ", kMaxParamValueBytes,
                                  " bytes, got ", value.size()));
    }
    if (value.find('\0') != std::string::npos) {
      return Invalid(absl::StrCat("params[", key, "]"), "value contains a NUL byte");
    }
  }

  // Scheduling.
  if (spec.queue().size() > kMaxQueueNameBytes || !IsSweepId(spec.queue())) {
    return Invalid("queue", absl::StrCat("at most ", kMaxQueueNameBytes,
                                         " bytes of [A-Za-z0-9._-], got \"",
                                         absl::CHexEscape(spec.queue().substr(0, 80)),
                                         "\""));
  }
  if (!KnownQueue(policy, spec.queue())) {
    return Invalid("queue", absl::StrCat("no queue \"", spec.queue(),
                                         "\" on this coordinator (it has: ",
                                         QueueNames(policy), ")"));
  }
  if (spec.idle_timeout_ms() != 0 && !spec.interactive()) {
    return Invalid("idle_timeout_ms",
                   absl::StrCat("only interactive jobs (trainctl shell) have an idle timeout; got ",
                                spec.idle_timeout_ms(), " on a job that is not interactive"));
  }
  if (spec.idle_timeout_ms() < -1) {
    return Invalid("idle_timeout_ms",
                   absl::StrCat("must be > 0, 0 (the queue's default) or -1 (never), got ",
                                spec.idle_timeout_ms()));
  }
  if (spec.user().size() > kMaxUserBytes || HasControlChars(spec.user())) {
    return Invalid("user", absl::StrCat("at most ", kMaxUserBytes,
                                        " bytes without control characters"));
  }
  if (spec.project().size() > kMaxUserBytes || HasControlChars(spec.project())) {
    return Invalid("project", absl::StrCat("at most ", kMaxUserBytes,
                                           " bytes without control characters"));
  }
  if (spec.time_limit_ms() < 0 || spec.time_limit_ms() > kMaxTimeLimitMs) {
    return Invalid("time_limit_ms",
                   absl::StrCat("must be in [0, ", kMaxTimeLimitMs,
                                "] (0: none; at most 366 days), got ",
                                spec.time_limit_ms()));
  }
  if (!v1::GangPlacement_IsValid(spec.placement())) {
    return Invalid("placement", absl::StrCat("unknown value ", spec.placement()));
  }
  if (!v1::PreflightMode_IsValid(spec.preflight())) {
    return Invalid("preflight", absl::StrCat("unknown value ", spec.preflight()));
  }

  // Resource shape.
  if (spec.gpus() < 0 || spec.gpus() > kMaxGpus) {
    return Invalid("gpus", absl::StrCat("must be in [0, ", kMaxGpus, "], got ",
                                        spec.gpus()));
  }
  const double f = spec.gpu_fraction();
  if (std::isnan(f) || f < 0 || f > 1 || (f > 0 && f < kMinGpuFraction)) {
    return Invalid("gpu_fraction", absl::StrFormat("must be in [%g, 1], got %g",
                                                   kMinGpuFraction, f));
  }
  if (spec.gpu_memory_bytes() < 0) {
    return Invalid("gpu_memory_bytes", "must not be negative");
  }
  if (spec.nodes() < 0 || spec.nodes() > kMaxNodes) {
    return Invalid("nodes", absl::StrCat("must be in [0, ", kMaxNodes, "], got ",
                                         spec.nodes()));
  }
  if (spec.gpus_per_node() < 0 || spec.gpus_per_node() > kMaxGpus) {
    return Invalid("gpus_per_node", absl::StrCat("must be in [0, ", kMaxGpus,
                                                 "], got ", spec.gpus_per_node()));
  }
  const bool share = f > 0 || spec.gpu_memory_bytes() > 0;
  if (f > 0 && spec.gpu_memory_bytes() > 0) {
    return Invalid("gpu_fraction", "give either a GPU fraction or GPU memory, not both");
  }
  if (share && spec.gpus() > 1) {
    return Invalid("gpus", "a GPU share (--gpu-fraction/--gpu-mem) is for one process on one GPU; drop --gpus");
  }
  if ((spec.nodes() > 0) != (spec.gpus_per_node() > 0)) {
    return Invalid(spec.nodes() > 0 ? "gpus_per_node" : "nodes",
                   "--nodes and --gpus-per-node go together");
  }
  if (spec.nodes() > 0) {
    if (share) {
      return Invalid("nodes", "a multi-node gang takes whole GPUs; drop --gpu-fraction/--gpu-mem");
    }
    if (spec.gpus() > 0 &&
        spec.gpus() != static_cast<int64_t>(spec.nodes()) * spec.gpus_per_node()) {
      return Invalid("gpus", absl::StrCat("must equal nodes x gpus_per_node (",
                                          spec.nodes() * spec.gpus_per_node(),
                                          "), got ", spec.gpus()));
    }
    if (static_cast<int64_t>(spec.nodes()) * spec.gpus_per_node() > kMaxGpus) {
      return Invalid("nodes", absl::StrCat("at most ", kMaxGpus, " GPUs in all"));
    }
  }
  if (spec.auto_pack() && (spec.gpus() > 1 || spec.nodes() > 0)) {
    return Invalid("auto_pack",
                   "only experiments (one process on one GPU) can be "
                   "auto-packed; drop --gpus/--nodes or --auto-pack");
  }
  const int t = spec.tasks_per_node();
  if (t < 0) return Invalid("tasks_per_node", "must not be negative");
  if (t > 1 && !(spec.nodes() > 0 && t == spec.gpus_per_node())) {
    return Invalid("tasks_per_node",
                   "must be 1 (one process with all of its node's GPUs) or the "
                   "number of GPUs per node (one process per GPU, the default)");
  }
  if (spec.placement() != v1::GANG_PLACEMENT_UNSPECIFIED &&
      KindOf(spec) != v1::JOB_KIND_GANG) {
    return Invalid("placement",
                   "--pack/--spread place the ranks of a gang (--gpus > 1 or "
                   "--nodes); this job is one process");
  }
  if (spec.preflight() == v1::PREFLIGHT_MODE_ON &&
      KindOf(spec) != v1::JOB_KIND_GANG) {
    return Invalid("preflight",
                   "--preflight checks the NCCL links between the ranks of a "
                   "gang (--gpus > 1 or --nodes); this job is one process");
  }
  if (absl::Status s = ValidateNodeSelection(spec); !s.ok()) return s;
  return ValidateEarlyStop(spec);
}

absl::Status ValidateNodeSelection(const v1::JobSpec& spec) {
  if (spec.gpu_types_size() > kMaxSelectionNames) {
    return Invalid("gpu_types", absl::StrCat("at most ", kMaxSelectionNames, " types"));
  }
  for (int i = 0; i < spec.gpu_types_size(); ++i) {
    const std::string& t = spec.gpu_types(i);
    if (!sched::IsValidSelectionName(t)) {
      return Invalid("gpu_types",
                     absl::StrCat("\"", absl::CHexEscape(t),
                                  "\" is not a GPU type: 1-64 characters of a-z, 0-9, _ "
                                  "and - (as `trainctl nodes` shows them, e.g. h100)"));
    }
    for (int j = 0; j < i; ++j) {
      if (spec.gpu_types(j) == t) {
        return Invalid("gpu_types", absl::StrCat("\"", t, "\" is given twice"));
      }
    }
  }
  if (absl::StatusOr<sched::FeatureConstraint> c =
          sched::ParseFeatureConstraint(spec.constraint());
      !c.ok()) {
    return Invalid("constraint", c.status().message());
  }
  // Only the syntax here (Slurm's --dependency, dependency.h); the jobs it
  // names are checked at submit, under the coordinator's lock.
  if (absl::StatusOr<Dependency> d = ParseDependency(spec.dependency()); !d.ok()) {
    return Invalid("dependency", d.status().message());
  }
  auto check_names = [](absl::string_view field,
                        const google::protobuf::RepeatedPtrField<std::string>& names) {
    if (names.size() > kMaxSelectionNodes) {
      return Invalid(field, absl::StrCat("at most ", kMaxSelectionNodes, " nodes"));
    }
    for (int i = 0; i < names.size(); ++i) {
      const std::string& n = names[i];
      if (n.empty() || n.size() > kMaxSelectionNodeNameBytes ||
          absl::c_any_of(n, [](char ch) {
            return absl::ascii_iscntrl(ch) || absl::ascii_isspace(ch) || ch == ',';
          })) {
        return Invalid(field, absl::StrCat("\"", absl::CHexEscape(n),
                                           "\" is not a node name (1-",
                                           kMaxSelectionNodeNameBytes,
                                           " bytes, no spaces or commas)"));
      }
      for (int j = 0; j < i; ++j) {
        if (names[j] == n) {
          return Invalid(field, absl::StrCat("node ", n, " is given twice"));
        }
      }
    }
    return absl::OkStatus();
  };
  if (absl::Status s = check_names("nodelist", spec.nodelist()); !s.ok()) return s;
  if (absl::Status s = check_names("exclude_nodes", spec.exclude_nodes()); !s.ok()) return s;
  for (const std::string& n : spec.exclude_nodes()) {
    if (absl::c_linear_search(spec.nodelist(), n)) {
      return Invalid("exclude_nodes",
                     absl::StrCat("node ", n, " is both in --nodelist and --exclude"));
    }
  }
  const int listed = spec.nodelist_size();
  if (listed > 0 && KindOf(spec) == v1::JOB_KIND_GANG) {
    if (spec.nodes() > 0 && spec.nodes() != listed) {
      return Invalid("nodelist",
                     absl::StrCat("names ", listed, " nodes but the gang runs on ",
                                  spec.nodes(),
                                  " (--nodes); a gang uses every listed node and "
                                  "only those, so name exactly --nodes nodes"));
    }
    if (spec.nodes() == 0 && (spec.gpus() < listed || spec.gpus() % listed != 0)) {
      return Invalid("nodelist",
                     absl::StrCat("names ", listed, " nodes but ", spec.gpus(),
                                  " GPUs (--gpus) do not split evenly over them; a "
                                  "gang uses every listed node, the same number of "
                                  "GPUs on each"));
    }
  }
  return absl::OkStatus();
}

int64_t TaskBytesOnGpu(const v1::Task& task, int64_t gpu_total_bytes) {
  return task.whole_gpus() ? gpu_total_bytes : task.reserved_bytes_per_gpu();
}

double TaskShareOfGpu(const v1::Task& task, int64_t gpu_total_bytes) {
  if (task.whole_gpus() || gpu_total_bytes <= 0) return 1.0;
  return std::min(1.0, static_cast<double>(task.reserved_bytes_per_gpu()) /
                           static_cast<double>(gpu_total_bytes));
}

absl::Duration IdleTimeoutOf(const v1::JobSpec& spec, const sched::PolicyConfig& policy) {
  if (!spec.interactive() || spec.idle_timeout_ms() < 0) return absl::InfiniteDuration();
  if (spec.idle_timeout_ms() > 0) return absl::Milliseconds(spec.idle_timeout_ms());
  const sched::QueueConfig* queue = FindQueue(policy, spec.queue());
  return absl::Milliseconds(queue != nullptr && queue->interactive_idle_timeout_ms > 0
                                ? queue->interactive_idle_timeout_ms
                                : kDefaultIdleTimeoutMs);
}

v1::JobKind KindOf(const v1::JobSpec& spec) {
  return (spec.nodes() > 0 || spec.gpus() > 1) ? v1::JOB_KIND_GANG
                                                : v1::JOB_KIND_EXPERIMENT;
}

sched::JobRequest ToJobRequest(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  sched::JobRequest r;
  r.job_id = job.id();
  r.priority = spec.priority();
  r.submit_seq = job.id();
  r.queue = spec.queue();
  r.user = spec.user();
  r.project = spec.project();
  r.time_limit_s = (spec.time_limit_ms() + 999) / 1000;
  r.preemptible = spec.preemptible();
  r.placement = spec.placement() == v1::GANG_PLACEMENT_SPREAD
                    ? sched::GangPlacement::kSpread
                    : sched::GangPlacement::kPack;
  r.attained_gpu_s = static_cast<double>(job.attained_gpu_ms()) / 1000.0;
  r.standing.preempted_for = job.preempted_for_job_id();
  for (const v1::ExcludedNode& e : job.preflight().excluded()) {
    r.constraints.excluded_nodes.push_back(e.node());
  }
  r.constraints.needs_container_runtime = !spec.image().empty();
  r.constraints.needs_cgroup_limits = spec.cpus() > 0 || spec.memory_bytes() > 0;
  // The node selection (checked at submit by ValidateNodeSelection).
  r.constraints.gpu_types.assign(spec.gpu_types().begin(), spec.gpu_types().end());
  if (!spec.constraint().empty()) {
    r.constraints.features =
        sched::ParseFeatureConstraint(spec.constraint()).value_or(sched::FeatureConstraint{});
  }
  r.constraints.nodelist.assign(spec.nodelist().begin(), spec.nodelist().end());
  r.constraints.exclude.assign(spec.exclude_nodes().begin(), spec.exclude_nodes().end());
  r.constraints.allow_mixed_gpu_types = spec.allow_mixed_gpu_types();
  if (spec.has_array()) {
    r.group_limit.group = ArrayGroup(spec.array().array_job_id());
    r.group_limit.max_running = spec.array().max_running();
  }
  if (KindOf(spec) == v1::JOB_KIND_EXPERIMENT) {
    r.kind = sched::JobKind::kExperiment;
    r.gpu_fraction = spec.gpu_fraction() > 0 ? spec.gpu_fraction() : 1.0;
    r.gpu_memory_bytes = spec.gpu_memory_bytes();
  } else {
    r.kind = sched::JobKind::kGang;
    r.nodes = spec.nodes();
    r.gpus_per_node = spec.gpus_per_node();
    r.total_gpus = spec.nodes() > 0 ? spec.nodes() * spec.gpus_per_node()
                                    : spec.gpus();
  }
  return r;
}

bool SameSchedulingRequest(const v1::JobSpec& a, const v1::JobSpec& b) {
  return a.priority() == b.priority() && a.gpus() == b.gpus() && a.nodes() == b.nodes() &&
         a.gpus_per_node() == b.gpus_per_node() && a.gpu_fraction() == b.gpu_fraction() &&
         a.gpu_memory_bytes() == b.gpu_memory_bytes() &&
         a.time_limit_ms() == b.time_limit_ms() && a.preemptible() == b.preemptible() &&
         a.placement() == b.placement() && a.image().empty() == b.image().empty() &&
         (a.cpus() > 0 || a.memory_bytes() > 0) == (b.cpus() > 0 || b.memory_bytes() > 0) &&
         a.array().max_running() == b.array().max_running() && a.queue() == b.queue() &&
         a.user() == b.user() && a.project() == b.project();
}

std::string ArrayGroup(int64_t array_job_id) {
  return absl::StrCat("array ", array_job_id);
}

int TasksPerNode(const v1::JobSpec& spec, int gpus_on_node) {
  if (KindOf(spec) == v1::JOB_KIND_EXPERIMENT) return 1;
  return spec.tasks_per_node() == 1 ? 1 : gpus_on_node;
}

}  // namespace trainctl::coord
