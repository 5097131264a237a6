#ifndef TRAINCTL_COORDINATOR_JOB_SPEC_H_
#define TRAINCTL_COORDINATOR_JOB_SPEC_H_

// Validation of submitted job specs, and their translation into what the
// scheduler takes.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/env_names.h"
#include "coordinator/sched/scheduler.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// Limits on a JobSpec; a request past any of them is INVALID_ARGUMENT.
inline constexpr int kMaxNameBytes = 128;
inline constexpr int kMaxArgs = 1024;
inline constexpr int kMaxArgBytes = 4096;
inline constexpr int kMaxCommandBytes = 128 * 1024;
inline constexpr int kMaxEnvVars = 256;
inline constexpr int kMaxEnvValueBytes = 8192;
inline constexpr int kMaxPathBytes = 4096;
// JobSpec.exported_env: the submitter's environment (--export ALL).
inline constexpr int kMaxExportedVars = 4096;
inline constexpr int kMaxExportedBytes = 1 << 20;
inline constexpr int kMaxImageBytes = 1024;
// JobSpec.cpus: at most this many CPUs per task.
inline constexpr double kMaxTaskCpus = 4096;
inline constexpr int kMaxGpus = 4096;
inline constexpr int kMaxNodes = 1024;
inline constexpr int kMaxPriority = 1000;
inline constexpr int kMaxRestarts = 100;
// The smallest GPU share a job may ask for (a thousandth of a GPU).
inline constexpr double kMinGpuFraction = 0.001;
inline constexpr int kMaxSweepIdBytes = 64;
inline constexpr int kMaxParams = 64;
inline constexpr int kMaxParamNameBytes = 64;
inline constexpr int kMaxParamValueBytes = 1024;
inline constexpr int kMaxQueueNameBytes = 64;
// Jobs in one SubmitJobs call, and so tasks in one job array.
inline constexpr int kMaxArrayTasks = 10000;
inline constexpr int kMaxUserBytes = 128;
// The longest --time-limit: 366 days, ms.
inline constexpr int64_t kMaxTimeLimitMs = int64_t{366} * 24 * 3600 * 1000;

// The node selection (JobSpec.gpu_types, nodelist, exclude_nodes): at most
// this many names each; node names at most this many bytes.
inline constexpr int kMaxSelectionNames = 16;
inline constexpr int kMaxSelectionNodes = 1024;
inline constexpr size_t kMaxSelectionNodeNameBytes = 253;

// Checks the node selection of `spec` (part of ValidateJobSpec).
// Errors: INVALID_ARGUMENT naming the field: spec.gpu_types (a type outside
// [a-z0-9_-], 1-64 characters; given twice; more than kMaxSelectionNames),
// spec.constraint (unparsable: sched::ParseFeatureConstraint's rules, i.e.
// Slurm's --constraint with one operator), spec.nodelist / exclude_nodes
// (an empty name or one with spaces or commas, a name given twice, more
// than kMaxSelectionNodes, a node in both), spec.nodelist for a gang whose
// node count differs from the list's length (--nodes), or whose --gpus do
// not split evenly over the listed nodes (a gang uses every listed node
// and only those). Whether registered nodes could ever satisfy it is
// SubmitChecks' question, not this one.
absl::Status ValidateNodeSelection(const v1::JobSpec& spec);

// Checks every field of `spec`.
// Errors: INVALID_ARGUMENT whose message starts with the field path
// ("spec.gpu_fraction: must be in (0, 1], got 1.5"; "spec.params[lr]: ...").
// A sweep trial's sweep_id is at most kMaxSweepIdBytes of [A-Za-z0-9._-];
// its params at most kMaxParams entries, names identifiers of at most
// kMaxParamNameBytes, values at most kMaxParamValueBytes without NUL.
// Scheduling fields: queue at most kMaxQueueNameBytes of [A-Za-z0-9._-];
// user and project at most kMaxUserBytes without control characters;
// time_limit_ms in [0, kMaxTimeLimitMs]; placement a known value, and PACK or
// SPREAD only for gangs; the queue one of `policy.queues` ("" and "default"
// when it lists none: the coordinator's default). A job array's task
// (spec.array): task_id >= 0, task_count in [1, kMaxArrayTasks],
// max_running >= 0 and 0 with auto_pack (the coordinator checks the array
// as a whole). The node selection: ValidateNodeSelection.
absl::Status ValidateJobSpec(const v1::JobSpec& spec,
                             const sched::PolicyConfig& policy = {});

// How long an interactive job may stay idle (no terminal input, its GPUs
// idle) before it ends, when neither it nor its queue sets one: 1 h, long
// enough for a meeting or a lunch break; a cluster sets its own per queue
// (QueueSpec.interactive_idle_timeout_s).
inline constexpr int64_t kDefaultIdleTimeoutMs = 3600 * 1000;

// The idle timeout of the job of a valid `spec` under `policy`: its
// idle_timeout_ms when > 0, else its queue's interactive_idle_timeout_ms
// when > 0, else kDefaultIdleTimeoutMs; absl::InfiniteDuration() when it is
// not interactive or sets -1 (never).
absl::Duration IdleTimeoutOf(const v1::JobSpec& spec, const sched::PolicyConfig& policy);

// Experiment (one process, whole or part of one GPU) or gang, from a valid
// spec: a gang is gpus > 1 or nodes >= 1.
v1::JobKind KindOf(const v1::JobSpec& spec);

// The scheduler's view of a valid pending job. `submit_seq` orders jobs of
// equal priority (the job id serves). time_limit_s is time_limit_ms rounded
// up to whole seconds; attained_gpu_s is attained_gpu_ms / 1000.
// A job array's task (spec.array) has group_limit.group =
// ArrayGroup(array_job_id) and group_limit.max_running = array.max_running.
// A spec field read here must also be compared by SameSchedulingRequest.
sched::JobRequest ToJobRequest(const v1::Job& job);

// Whether ToJobRequest makes the same request of a and b's jobs, but for
// their ids, when both are first attempts of the same kind of submit (both
// tasks of one array, or neither): same shape, priority, queue, owner, time
// limit, preemptibility, placement and need of a container runtime.
bool SameSchedulingRequest(const v1::JobSpec& a, const v1::JobSpec& b);

// The scheduler group of job array `array_job_id` ("array 12"), shown in
// wait reasons.
std::string ArrayGroup(int64_t array_job_id);

// Processes per node of a placed gang with `gpus_on_node` GPUs on a node:
// one per GPU unless tasks_per_node == 1. Experiments: 1.
int TasksPerNode(const v1::JobSpec& spec, int gpus_on_node);

// Bytes `task` reserves on one of its GPUs, a GPU of `gpu_total_bytes` of
// memory: all of it for a task that holds its GPUs whole (Task.whole_gpus:
// gangs, whole-GPU experiments), else its share, reserved_bytes_per_gpu.
// No GPU's size ever stands for another's: a gang over 80 and 40 GiB GPUs
// holds 80 GiB on the first and 40 GiB on the second.
int64_t TaskBytesOnGpu(const v1::Task& task, int64_t gpu_total_bytes);

// The part of that GPU the task holds, in [0, 1]: 1 for whole GPUs (and when
// the GPU's size is unknown, <= 0), else reserved_bytes_per_gpu /
// gpu_total_bytes, at most 1. GPU-hours count this per GPU.
double TaskShareOfGpu(const v1::Task& task, int64_t gpu_total_bytes);

// IsReservedEnvVar and IsEnvName live in common/env_names.h (the CLI and the
// agent apply the same rules).
using ::trainctl::IsEnvName;
using ::trainctl::IsReservedEnvVar;

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_JOB_SPEC_H_
