#ifndef TRAINCTL_COORDINATOR_SUBMIT_CHECKS_H_
#define TRAINCTL_COORDINATOR_SUBMIT_CHECKS_H_

// The checks a submit passes before anything is stored, and the shaping of
// its specs: one SubmitJob, a SubmitJobs batch (`trainctl sweep`, a job
// array's tasks) or a SubmitJobArray (one spec, many task ids). Pure
// functions of the specs; errors name the field ("specs[3].gpus: ...").

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/sched/scheduler.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// Longest SubmitJob request id, bytes.
inline constexpr size_t kMaxRequestIdBytes = 128;

// `s` with its field path moved under specs[index] ("spec.gpus: ..." ->
// "specs[3].gpus: ..."; "user: ..." -> "specs[3].user: ...") when `batch`;
// `s` itself otherwise.
absl::Status AtIndex(const absl::Status& s, bool batch, size_t index);

// The cross-spec rules of one SubmitJobs call's job array: either no spec
// has JobSpec.array or every one does, with task_count = the number of
// specs, one max_running and distinct task ids. Errors: INVALID_ARGUMENT
// naming specs[i] and the rule.
absl::Status ValidateArray(const std::vector<v1::JobSpec>& specs);

// Every check of a submit of `specs` (`batch`: a SubmitJobs call, errors
// say "specs[i].field"): 1 to kMaxArrayTasks specs, each valid under
// `policy` (ValidateJobSpec), none of user root when `refuse_root` (tasks
// run as their user and uid 0 is not allowed), the array rules when
// `batch`, a request id of at most kMaxRequestIdBytes. Errors:
// INVALID_ARGUMENT naming the field; PERMISSION_DENIED for root.
absl::Status CheckSubmit(const std::vector<v1::JobSpec>& specs, bool batch,
                         const std::string& request_id, const sched::PolicyConfig& policy,
                         bool refuse_root);

// Specs exporting the same environment as the first (an array's tasks and a
// sweep's trials each carry a copy of the submitter's) keep it once: returns
// for each spec whether it shares the first's (its own copy is cleared), so
// the first job's record holds it and the others refer to it
// (Job.exported_env_job_id). `from_first`: specs after the first carry none
// and all share the first's (ExpandArray's output). The first never shares.
std::vector<bool> ShareExportedEnv(std::vector<v1::JobSpec>& specs, bool from_first);

// The specs of a job array made of one `spec`: one copy per task id, with
// JobSpec.array set (task_id, task_count = task_ids.size(), `max_running`),
// in task_ids order; only the first copy keeps the exported environment.
// Errors: INVALID_ARGUMENT naming "spec.array" (set), "task_ids" (empty,
// more than kMaxArrayTasks), "task_ids[i]" (negative, repeated),
// "max_running" (negative, or with auto-pack), or any field ValidateJobSpec
// refuses.
absl::StatusOr<std::vector<v1::JobSpec>> ExpandArray(v1::JobSpec spec,
                                                     const std::vector<int>& task_ids,
                                                     int max_running,
                                                     const sched::PolicyConfig& policy);

// OK when every spec of `specs` that is not held could run on `snapshot`
// (a cluster with registered nodes) some day; specs that ask the scheduler
// the same (SameSchedulingRequest) are checked once. Errors:
// FAILED_PRECONDITION naming the index (when `batch`) and why the job never
// fits, and --hold as the way to keep it waiting for nodes that will join.
absl::Status CheckEverFits(const sched::Scheduler& scheduler,
                           const sched::ClusterSnapshot& snapshot,
                           std::vector<v1::JobSpec>& specs, bool batch);

// The PENDING record of a job of `spec` with id `id`, submitted at `now_ms`
// (Unix ms): its kind, reason, array id (`first_id`, the call's first job,
// for a job array), checkpoint directory under `checkpoint_root` (empty:
// none) and, when `shares_env`, the first job's exported environment.
v1::Job NewPendingJob(v1::JobSpec spec, int64_t id, int64_t first_id, int64_t now_ms,
                      bool shares_env, const std::string& checkpoint_root);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_SUBMIT_CHECKS_H_
