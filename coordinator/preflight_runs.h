#ifndef TRAINCTL_COORDINATOR_PREFLIGHT_RUNS_H_
#define TRAINCTL_COORDINATOR_PREFLIGHT_RUNS_H_

// PreflightRuns: the pre-flight runs of gangs (docs/preflight.md) as records
// on their jobs. Whether a placed gang is probed first, the run's record
// (ranks, token, deadline), the probe's StartTask, each rank's result, when
// the run is judged, and what its verdict means for the job. The verdict
// itself is the pure EvaluatePreflight (preflight.h).
//
// A probe is a task of its own: TaskRef {job, attempt, rank, probe_run = n}
// for run n of the job's attempt, with its own rendezvous group
// (GroupRef{attempt, n}) and token. Job.preflight.probe_run says which run's
// probes are in Job.tasks (0: the job's own ranks).
//
// What it does not do: state changes of jobs and tasks, the rendezvous,
// sending and persisting. It returns what the caller (the Coordinator) must
// apply, so one event changes the job in one place.
//
// Not thread-safe: called under the coordinator's lock (mu_), as are the
// jobs it is handed. Times are the caller's clock; durations in ms on the
// wire, absl::Duration here.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "coordinator/coordinator_config.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

class PreflightRuns {
 public:
  explicit PreflightRuns(PreflightConfig config) : config_(config) {}

  // Whether `job`, a gang just placed on `nodes` nodes, runs a pre-flight
  // first: spec.preflight ON, or AUTO with auto_enabled and nodes > 1, and
  // every node's agent runs probes (`agents_run_probes`: it runs them as
  // tasks of their own, RegisterNode.probe_tasks, and has its probe
  // program, Node.preflight_probe_error empty).
  bool Wanted(const v1::Job& job, int nodes, bool agents_run_probes) const;

  // What the caller opens for a new run: the probe group's token and the
  // node of each rank, in rank order.
  struct Opening {
    int run = 0;
    std::string token;
    std::vector<std::string> rank_hosts;
  };
  // Starts run n+1 over job.tasks() (just placed): its record (ranks
  // RUNNING, nodes, a fresh token), probe_run = n+1, the job's reason, and a
  // deadline of now + config.timeout.
  Opening Begin(v1::Job& job, absl::Time now);

  // Turns `start`, the StartTask of one of the job's ranks, into its probe's:
  // the run's TaskRef.probe_run, token and TRAINCTL_PREFLIGHT, no command or
  // workdir (the agent runs its probe program), the all-reduce's size and a
  // timeout of 3/4 of config.timeout (at least 1 s) so that ranks waiting on
  // a hung peer report before the deadline.
  void MakeProbeStart(const v1::Job& job, v1::StartTask& start) const;

  // Records the result line a probe's agent read (`status` of the probe
  // `task`, already ended): OK, TIMED_OUT, or ERROR with the probe's error or
  // how it exited. No result line: nothing recorded (OnProbeEnded).
  static void RecordResult(v1::Job& job, const v1::Task& task,
                           const v1::TaskStatus& status);

  // After a probe task ended: what the caller does next.
  struct Progress {
    // Judge the run now (Judge()): every probe ended, or one failed.
    bool judge = false;
    // Live probes to stop first: one rank failed, and the others would only
    // wait for it in NCCL. Their records say so; they are not blamed.
    std::vector<int> stop_ranks;
  };
  // Fills the record of each ended probe that printed no result (ERROR, with
  // how it ended) and says whether the run is over.
  static Progress OnProbeEnded(v1::Job& job);

  // A judged run.
  struct Verdict {
    v1::PreflightVerdict verdict = v1::PREFLIGHT_VERDICT_UNSPECIFIED;
    // The run, and its probe group, which the caller closes.
    int run = 0;
    // PASSED: the job's ranks start on the same placement (probe_run is now
    // 0). FAILED: the caller stops the live probes and moves the job to
    // `to` (PENDING without the excluded nodes, or FAILED after
    // config.max_failures failed runs) with `why`.
    v1::JobState to = v1::JOB_STATE_UNSPECIFIED;
    std::string why;
  };
  // Judges the current run (EvaluatePreflight) at `now`: fills its record,
  // adds excluded nodes, counts the failure. Forgets its deadline.
  Verdict Judge(v1::Job& job, absl::Time now);

  // The jobs whose run is past its deadline at `now`, in id order; their
  // deadlines are forgotten (the caller judges them or finds them gone).
  std::vector<int64_t> TakeDue(absl::Time now);
  // Marks every rank still RUNNING MISSING (no result within the timeout).
  void MarkMissing(v1::Job& job) const;

  // The job left SCHEDULED during a pre-flight (requeued, failed,
  // cancelled, preempted) at `now_ms`: a RUNNING run becomes ABORTED with
  // `reason` (`*aborted` says so) and its deadline goes. probe_run stays:
  // the live probes keep their key while they drain (a requeue clears it
  // with the job's tasks). Returns the probe run whose group the caller
  // closes, or nullopt when the job was not in a pre-flight.
  std::optional<int> Leave(v1::Job& job, absl::string_view reason, int64_t now_ms,
                           bool* aborted);

  // Whether a stored job was caught mid-pre-flight, also as written by
  // coordinators before probe_run (legacy_probe_attempt): then its tasks are
  // the last run's probes, and probe_run is set so that their exits match.
  static bool CaughtMidRun(v1::Job& job);

 private:
  const PreflightConfig config_;
  // Deadline of each running pre-flight, by job id (not stored: a restart
  // requeues a job caught mid-pre-flight).
  absl::flat_hash_map<int64_t, absl::Time> deadline_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_PREFLIGHT_RUNS_H_
