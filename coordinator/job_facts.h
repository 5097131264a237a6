#ifndef TRAINCTL_COORDINATOR_JOB_FACTS_H_
#define TRAINCTL_COORDINATOR_JOB_FACTS_H_

// Facts about a job or task read off its record: pure functions of the
// protos, shared by the coordinator and its parts. No state, no errors.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "coordinator/task_key.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// True for SUCCEEDED, FAILED and CANCELLED.
inline bool IsFinal(v1::JobState state) {
  return state == v1::JOB_STATE_SUCCEEDED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_CANCELLED;
}

// True for STARTING, RUNNING and STOPPING: the process may be alive and holds
// its GPUs.
inline bool IsLive(v1::TaskState state) {
  return state == v1::TASK_STATE_STARTING || state == v1::TASK_STATE_RUNNING ||
         state == v1::TASK_STATE_STOPPING;
}

// The GPUs (node-local indices) whose reservation `task` holds.
inline std::vector<int> OwnedGpus(const v1::Task& task) {
  if (task.local_world_size() == task.gpu_indices_size() &&
      task.local_rank() < task.gpu_indices_size()) {
    return {task.gpu_indices(task.local_rank())};
  }
  return {task.gpu_indices().begin(), task.gpu_indices().end()};
}

inline std::string ExitText(const v1::Task& t) {
  if (t.state() == v1::TASK_STATE_START_FAILED) {
    return absl::StrCat("could not start: ", t.message());
  }
  if (t.state() == v1::TASK_STATE_LOST) return t.message();
  if (t.signal() != 0) return absl::StrCat("was killed by signal ", t.signal());
  // The agent's word on the exit (a container runtime that could not start
  // the image), when it has one.
  if (!t.message().empty()) {
    return absl::StrCat("exited with code ", t.exit_code(), " (", t.message(), ")");
  }
  return absl::StrCat("exited with code ", t.exit_code());
}

inline bool TaskFailed(const v1::Task& t) {
  return t.state() == v1::TASK_STATE_START_FAILED ||
         t.state() == v1::TASK_STATE_LOST ||
         (t.state() == v1::TASK_STATE_EXITED &&
          (t.exit_code() != 0 || t.signal() != 0));
}

// The slot of `state` in a per-state count (UNSPECIFIED for a value this
// build does not know).
inline size_t StateSlot(int state) {
  return v1::JobState_IsValid(state) ? static_cast<size_t>(state) : 0;
}

// Distinct GPUs the tasks of `job`'s current attempt are placed on.
inline int JobGpuCount(const v1::Job& job) {
  absl::flat_hash_set<std::pair<std::string, int>> gpus;
  for (const v1::Task& t : job.tasks()) {
    for (int g : t.gpu_indices()) gpus.insert({t.node(), g});
  }
  return static_cast<int>(gpus.size());
}

// TaskRef.probe_run of the tasks now in job.tasks(): the pre-flight run
// whose probes they are, else 0 (the job's own ranks).
inline int ProbeRunOf(const v1::Job& job) { return job.preflight().probe_run(); }

// The TaskKey of `task`, one of job.tasks() now.
inline TaskKey KeyOf(const v1::Job& job, const v1::Task& task) {
  return {job.id(), job.attempt(), ProbeRunOf(job), task.rank()};
}

// Whether `ref` names one of job.tasks() now: its attempt, and its probe run
// (a probe is never taken for the rank of the same attempt).
inline bool IsCurrent(const v1::Job& job, const v1::TaskRef& ref) {
  return ref.job_id() == job.id() && ref.attempt() == job.attempt() &&
         ref.probe_run() == ProbeRunOf(job);
}

// Whether a job's edge `from` -> `to` ends its current attempt's run:
// leaving SCHEDULED or RUNNING for anything but RUNNING.
inline bool LeavesAttempt(v1::JobState from, v1::JobState to) {
  return (from == v1::JOB_STATE_SCHEDULED || from == v1::JOB_STATE_RUNNING) &&
         to != v1::JOB_STATE_RUNNING;
}

inline bool InPreflight(const v1::Job& job) {
  return ProbeRunOf(job) != 0 &&
         job.state() == v1::JOB_STATE_SCHEDULED;
}

// Whether `task` of `job` holds its GPUs (reservation and task slot): while
// its process may be alive (IsLive), and for the whole of a pre-flight even
// after its probe process exited, because a passing pre-flight starts the
// job's own ranks on exactly those GPUs. Counting only live probes let a
// second gang be placed on GPUs whose probes had finished first.
inline bool HoldsGpus(const v1::Job& job, const v1::Task& task) {
  return IsLive(task.state()) || InPreflight(job);
}

inline v1::TaskRef RefOf(const v1::Job& job, const v1::Task& task) {
  v1::TaskRef ref;
  ref.set_job_id(job.id());
  ref.set_attempt(job.attempt());
  ref.set_probe_run(ProbeRunOf(job));
  ref.set_rank(task.rank());
  ref.set_pid(task.pid());
  return ref;
}

// The StopTask of the task `ref` names: SIGTERM, then SIGKILL after
// `grace` (rounded down to ms).
inline v1::CoordinatorMessage StopMessage(const v1::TaskRef& ref, absl::Duration grace) {
  v1::CoordinatorMessage msg;
  *msg.mutable_stop_task()->mutable_task() = ref;
  msg.mutable_stop_task()->set_grace_ms(absl::ToInt64Milliseconds(grace));
  return msg;
}

// `job` as users see it: without its attempt token and pre-flight tokens
// (secrets of the rendezvous).
inline v1::Job RedactedJob(const v1::Job& job) {
  v1::Job copy = job;
  copy.clear_attempt_token();
  if (copy.has_preflight()) {
    // (mutable_preflight() on a job without one would add an empty one.)
    for (v1::PreflightRun& run : *copy.mutable_preflight()->mutable_runs()) run.clear_token();
  }
  return copy;
}

// Why a PENDING `job` waits, as the scheduler said (`scheduler_reason`),
// with the nodes a pre-flight excluded it from.
inline std::string WaitReason(const v1::Job& job, const std::string& scheduler_reason) {
  if (job.preflight().excluded_size() == 0) return scheduler_reason;
  std::string why = absl::StrCat(scheduler_reason, "; excluded by pre-flight: ");
  for (int i = 0; i < job.preflight().excluded_size(); ++i) {
    absl::StrAppend(&why, i > 0 ? ", " : "", job.preflight().excluded(i).node());
  }
  absl::StrAppend(&why, " (`trainctl describe` says why)");
  return why;
}

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_JOB_FACTS_H_
