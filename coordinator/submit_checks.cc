#include "coordinator/submit_checks.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/job_spec.h"

namespace trainctl::coord {

absl::Status AtIndex(const absl::Status& s, bool batch, size_t index) {
  if (!batch || s.ok()) return s;
  absl::string_view message = s.message();
  absl::ConsumePrefix(&message, "spec.");
  return absl::Status(s.code(), absl::StrCat("specs[", index, "].", message));
}

absl::Status ValidateArray(const std::vector<v1::JobSpec>& specs) {
  if (specs.empty() || !specs.front().has_array()) {
    for (size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].has_array()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "specs[", i, "].array: set, but specs[0].array is not: either "
            "every spec of a job array carries it or none does"));
      }
    }
    return absl::OkStatus();
  }
  const v1::JobArray& first = specs.front().array();
  absl::flat_hash_set<int32_t> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!specs[i].has_array()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "specs[", i, "].array: missing; every spec of a job array carries it"));
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const v1::JobArray& a = specs[i].array();
    if (a.task_count() != static_cast<int>(specs.size())) {
      return absl::InvalidArgumentError(absl::StrCat("specs[", i, "].array.task_count: ",
                                                     a.task_count(), ", but the request holds ",
                                                     specs.size(), " specs"));
    }
    if (a.max_running() != first.max_running()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "specs[", i, "].array.max_running: ", a.max_running(), ", but specs[0] has ",
          first.max_running(), "; one limit per array"));
    }
    if (!seen.insert(a.task_id()).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "specs[", i, "].array.task_id: ", a.task_id(), " appears twice in the array"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSubmit(const std::vector<v1::JobSpec>& specs, bool batch,
                         const std::string& request_id, const sched::PolicyConfig& policy,
                         bool refuse_root) {
  if (specs.empty()) {
    return absl::InvalidArgumentError("specs: empty; give at least one job");
  }
  if (specs.size() > static_cast<size_t>(kMaxArrayTasks)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "specs: at most ", kMaxArrayTasks, " jobs per call, got ", specs.size()));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    if (absl::Status s = ValidateJobSpec(specs[i], policy); !s.ok()) {
      return AtIndex(s, batch, i);
    }
    if (refuse_root && specs[i].user() == "root") {
      return AtIndex(absl::PermissionDeniedError(
                         "user: jobs of root are refused (tasks run as their user, and "
                         "this coordinator does not allow uid 0: trainctl-coordinator "
                         "--allow-root-jobs)"),
                     batch, i);
    }
  }
  // A single SubmitJob with spec.array is an array of its own: only
  // SubmitJobs has several specs to check against each other.
  if (batch) {
    if (absl::Status s = ValidateArray(specs); !s.ok()) return s;
  }
  if (request_id.size() > kMaxRequestIdBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id: at most ", kMaxRequestIdBytes, " bytes"));
  }
  return absl::OkStatus();
}

std::vector<bool> ShareExportedEnv(std::vector<v1::JobSpec>& specs, bool from_first) {
  std::vector<bool> shares(specs.size(), false);
  if (specs.empty() || specs[0].exported_env().empty()) return shares;
  if (from_first) {
    std::fill(shares.begin() + 1, shares.end(), true);
    return shares;
  }
  const google::protobuf::Map<std::string, std::string>& first = specs[0].exported_env();
  for (size_t i = 1; i < specs.size(); ++i) {
    const google::protobuf::Map<std::string, std::string>& env = specs[i].exported_env();
    if (env.size() != first.size()) continue;
    const bool same = std::all_of(env.begin(), env.end(), [&first](const auto& kv) {
      auto it = first.find(kv.first);
      return it != first.end() && it->second == kv.second;
    });
    if (!same) continue;
    shares[i] = true;
    specs[i].clear_exported_env();
  }
  return shares;
}

absl::StatusOr<std::vector<v1::JobSpec>> ExpandArray(v1::JobSpec spec,
                                                     const std::vector<int>& task_ids,
                                                     int max_running,
                                                     const sched::PolicyConfig& policy) {
  if (spec.has_array()) {
    return absl::InvalidArgumentError(
        "spec.array: must be unset; the array is given by task_ids and max_running");
  }
  if (task_ids.empty()) {
    return absl::InvalidArgumentError("task_ids: empty; give at least one task id");
  }
  if (task_ids.size() > static_cast<size_t>(kMaxArrayTasks)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "task_ids: at most ", kMaxArrayTasks, " tasks per array, got ", task_ids.size()));
  }
  if (max_running < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_running: ", max_running, " is negative; 0 means no limit"));
  }
  if (max_running > 0 && spec.auto_pack()) {
    return absl::InvalidArgumentError(
        "max_running: a limit (%P) cannot apply to auto-packed jobs");
  }
  absl::flat_hash_set<int> seen;
  for (size_t i = 0; i < task_ids.size(); ++i) {
    if (task_ids[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("task_ids[", i, "]: ", task_ids[i], " is negative"));
    }
    if (!seen.insert(task_ids[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("task_ids[", i, "]: ", task_ids[i], " appears twice"));
    }
  }
  if (absl::Status s = ValidateJobSpec(spec, policy); !s.ok()) return s;
  // One copy of the spec per task, without the exported environment: the
  // first job keeps it and the others share it.
  google::protobuf::Map<std::string, std::string> exported;
  exported.swap(*spec.mutable_exported_env());
  std::vector<v1::JobSpec> specs(task_ids.size(), spec);
  specs.front().mutable_exported_env()->swap(exported);
  const int count = static_cast<int>(task_ids.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    v1::JobArray* array = specs[i].mutable_array();
    array->set_task_id(task_ids[i]);
    array->set_task_count(count);
    array->set_max_running(max_running);
  }
  return specs;
}

absl::Status CheckEverFits(const sched::Scheduler& scheduler,
                           const sched::ClusterSnapshot& snapshot,
                           std::vector<v1::JobSpec>& specs, bool batch) {
  // A job array's tasks are mostly one request: it is checked once.
  const v1::JobSpec* checked = nullptr;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].hold()) continue;
    if (checked != nullptr && SameSchedulingRequest(*checked, specs[i])) continue;
    checked = &specs[i];
    v1::Job candidate;
    // The spec without its environment (ToJobRequest reads none of it): the
    // maps are swapped out and back, not copied.
    google::protobuf::Map<std::string, std::string> env, exported;
    env.swap(*specs[i].mutable_env());
    exported.swap(*specs[i].mutable_exported_env());
    *candidate.mutable_spec() = specs[i];
    specs[i].mutable_env()->swap(env);
    specs[i].mutable_exported_env()->swap(exported);
    candidate.set_kind(KindOf(specs[i]));
    if (std::optional<std::string> never =
            scheduler.WhyNeverFits(snapshot, ToJobRequest(candidate))) {
      return absl::FailedPreconditionError(absl::StrCat(
          batch ? absl::StrCat("specs[", i, "]: ") : "", "cannot run on this cluster: ",
          *never, "; submit with --hold (spec.hold) to keep it waiting for nodes "
          "that will join"));
    }
  }
  return absl::OkStatus();
}

v1::Job NewPendingJob(v1::JobSpec spec, int64_t id, int64_t first_id, int64_t now_ms,
                      bool shares_env, const std::string& checkpoint_root) {
  v1::Job job;
  job.set_id(id);
  *job.mutable_spec() = std::move(spec);
  if (job.spec().has_array()) job.mutable_spec()->mutable_array()->set_array_job_id(first_id);
  if (shares_env) job.set_exported_env_job_id(first_id);
  job.set_kind(KindOf(job.spec()));
  job.set_state(v1::JOB_STATE_PENDING);
  job.set_reason("waiting to be scheduled");
  job.set_submit_time_ms(now_ms);
  if (!checkpoint_root.empty()) {
    job.set_checkpoint_dir(absl::StrCat(absl::StripSuffix(checkpoint_root, "/"), "/", id));
  }
  return job;
}

}  // namespace trainctl::coord
