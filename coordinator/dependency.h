#ifndef TRAINCTL_COORDINATOR_DEPENDENCY_H_
#define TRAINCTL_COORDINATOR_DEPENDENCY_H_

// Job dependencies (JobSpec.dependency, `trainctl submit --dependency`),
// with the syntax and meaning of Slurm's sbatch(1) --dependency:
//
//   afterok:12[:13...][,afterany:14...]   every condition must hold (`,`)
//   afterok:12?afternotok:13               any one of them (`?`)
//
// A job id list `type:a:b` means one condition per id (Slurm expands it so),
// joined by the string's separator. Types:
//   after:ID       job ID was placed (began) or has ended, in any state;
//   afterany:ID    job ID ended, in any state;
//   afterok:ID     job ID SUCCEEDED;
//   afternotok:ID  job ID FAILED or was CANCELLED;
//   aftercorr:ID   (this job is a task of an array, ID an array) the task of
//                  array ID with this task's index SUCCEEDED;
//   singleton      no other job of this name and user is SCHEDULED or
//                  RUNNING, nor PENDING with `singleton` and submitted
//                  earlier (Slurm: one job of that name and user runs at a
//                  time; the earlier submitted goes first).
// An ID that is the id of a job array (JobArray.array_job_id, the id of its
// first task) means every task of the array (Slurm's meaning of an array
// job id): the condition holds when it holds for every task.
//
// A condition that can never hold any more (afterok on a job that failed or
// was cancelled, afternotok on one that succeeded) makes the dependency
// NEVER: with `,` at once, with `?` when no alternative can still hold.
// Slurm's jobs then stay pending unless --kill-on-invalid-dep=yes; trainctl
// always ends them (the coordinator cancels them with the reason).
//
// Pure: no lock, no clock; the caller supplies the facts of the jobs named.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// Longest JobSpec.dependency accepted, bytes.
inline constexpr int kMaxDependencyBytes = 16 * 1024;
// Most job ids one dependency may name.
inline constexpr int kMaxDependencyJobs = 1000;

// The kinds of condition (Slurm sbatch(1) --dependency types).
enum class DepType { kAfter, kAfterAny, kAfterOk, kAfterNotOk, kAfterCorr, kSingleton };

// The Slurm spelling of `type` ("afterok", "singleton"...).
absl::string_view DepTypeName(DepType type);

// One condition: a type and one job id (none for singleton).
struct DepCondition {
  DepType type = DepType::kAfterAny;
  int64_t job_id = 0;
  bool operator==(const DepCondition& o) const {
    return type == o.type && job_id == o.job_id;
  }
};

// A parsed dependency: its conditions in the order written, joined by "all
// of" (`,`, or a single condition) or "any of" (`?`).
struct Dependency {
  std::vector<DepCondition> conditions;
  bool any_of = false;
  // Whether it has a singleton condition.
  bool HasSingleton() const;
  // The job ids it names, in the order written (repeats kept once).
  std::vector<int64_t> JobIds() const;
};

// Parses a JobSpec.dependency string. Empty (or only white space) gives a
// dependency with no condition. Errors: INVALID_ARGUMENT with the reason
// (no field name: the caller adds "spec.dependency" or "--dependency"): an
// unknown type, a type without ids or singleton with ids, an id that is not
// a positive integer (Slurm's "+time" and "_task" suffixes are not
// supported), an empty condition, both `,` and `?` (Slurm refuses the
// mix), more than kMaxDependencyJobs ids, over kMaxDependencyBytes bytes.
absl::StatusOr<Dependency> ParseDependency(absl::string_view text);

// The string that parses to `dep` (types lower case, ids joined by the
// separator one condition each): for messages and tests.
std::string FormatDependency(const Dependency& dep);

// What the evaluation needs to know of a job a dependency names.
struct DepJobFacts {
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  // Placed at least once (SCHEDULED, RUNNING, or an earlier attempt was),
  // or ended: Slurm's "began execution" for `after`.
  bool started = false;
  // JobSpec.user: who owns it (refusals at submit).
  std::string user;
  // JobArray of the job: array_job_id 0 for a plain job.
  int64_t array_job_id = 0;
  int32_t task_id = 0;
  int32_t task_count = 0;
};
// The facts of job `id`, or nullopt for an unknown job. Ids of one array
// are consecutive (an array is one SubmitJobs call): task k of array A is
// job A + k.
using DepFactsFn = absl::FunctionRef<std::optional<DepJobFacts>(int64_t id)>;

// The waiting job itself.
struct DepSelf {
  int64_t id = 0;
  // Its JobArray.task_id and whether it is an array task (aftercorr).
  bool is_array_task = false;
  int32_t task_id = 0;
};

// Another job of the waiting job's name and user that has not ended (the
// singleton group), as singleton judges it.
struct SingletonPeer {
  int64_t id = 0;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  // Its own dependency has a singleton condition.
  bool singleton = false;
};

// Outcome of an evaluation.
enum class DepOutcome { kSatisfied, kWaiting, kNever };
struct DepVerdict {
  DepOutcome outcome = DepOutcome::kSatisfied;
  // kWaiting: "waiting for dependency afterok:12 (job 12 running)";
  // kNever: "dependency can never be met: afterok:12 (job 12 failed)";
  // empty when satisfied.
  std::string reason;
};

// Evaluates `dep` for job `self` now: each condition over the facts of the
// jobs it names (an array id: over every task of the array) and, for
// singleton, over `peers` (self may be among them; it is skipped). An
// unknown job makes its condition NEVER. No errors (a verdict always).
DepVerdict EvaluateDependency(const Dependency& dep, const DepSelf& self, DepFactsFn facts,
                              absl::Span<const SingletonPeer> peers);

// The submit-time checks of `dep` for a new job `self` submitted by
// `caller_user` (`admin`: may name anyone's jobs), with `facts` answering
// for the jobs that exist and the earlier jobs of the same call. Errors,
// each naming spec.dependency and the job: INVALID_ARGUMENT for a job that
// does not exist, the job itself, a later job of the same SubmitJobs call
// (ids >= self.id), aftercorr from a job that is not an array task or on a
// job that is not an array or has no task of this index, and a dependency
// that already can never be met (Slurm refuses those at submit too);
// PERMISSION_DENIED for another user's job when `admin` is false.
absl::Status CheckDependencyAtSubmit(const Dependency& dep, const DepSelf& self,
                                     DepFactsFn facts, const std::string& caller_user,
                                     bool admin);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_DEPENDENCY_H_
