#ifndef TRAINCTL_COORDINATOR_CLUSTER_VIEWS_H_
#define TRAINCTL_COORDINATOR_CLUSTER_VIEWS_H_

// Read-only views of the cluster built from the coordinator's parts: the
// statistics behind /metrics (CollectStats) and the node view behind
// `trainctl nodes` (NodeViews). Pure functions of the parts they are given;
// the caller holds the coordinator's lock while they read.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "coordinator/draining_tasks.h"
#include "coordinator/job_table.h"
#include "coordinator/node_registry.h"
#include "coordinator/sched/scheduler.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// One GPU as last reported by its node's heartbeat (CollectStats; the coordinator's Stats()).
struct GpuStats {
  std::string node;
  // True when the node is READY; a lost node's samples are stale.
  bool node_ready = false;
  int index = 0;
  std::string uuid;
  // Product name, e.g. "NVIDIA H200".
  std::string model;
  int64_t memory_used_bytes = 0;
  int64_t memory_total_bytes = 0;
  // 0-100.
  int utilization_pct = 0;
  double power_w = 0;
  int temperature_c = 0;
  // A live task (STARTING, RUNNING, STOPPING) holds a reservation on it:
  // the job's own, a pre-flight probe, or an earlier attempt's still
  // draining. A GPU shared by packed trials counts once.
  bool allocated = false;
};

// GPU use of one job that has live tasks in its current attempt.
struct JobGpuStats {
  int64_t job_id = 0;
  std::string job_name;
  // Mean utilization_pct (0-100) of the distinct GPUs its live tasks own.
  double utilization_pct = 0;
  // How many GPUs that mean is over.
  int gpus = 0;
};

// Events since this coordinator started (not loaded from the store: a new
// process, or a standby taking over, starts at 0), for Prometheus counters.
// Each only grows.
struct CoordinatorCounters {
  // Jobs accepted by SubmitJob (a retry with the same request id adds none).
  int64_t jobs_submitted = 0;
  // Illegal transitions tried (CoordinatorStats.illegal_transitions) and
  // heartbeat TaskUsage samples ignored (CoordinatorStats.ignored_task_usage).
  int64_t illegal_transitions = 0;
  int64_t ignored_task_usage = 0;
  // Jobs that reached a final state, indexed by v1::JobState (SUCCEEDED,
  // FAILED, CANCELLED; the others stay 0).
  std::array<int64_t, v1::JobState_ARRAYSIZE> jobs_finished{};
  // Job attempts placed (PENDING -> SCHEDULED), later attempts included.
  int64_t placements = 0;
  // Attempts requeued after a rank failed, a start failed or a node was
  // lost, with restarts left (JobSpec.max_restarts).
  int64_t restarts = 0;
  // Auto-packed trials requeued after a CUDA out-of-memory error (asking
  // for more memory; RequeueAfterOomLocked).
  int64_t oom_requeues = 0;
  // Running or scheduled jobs preempted for another job.
  int64_t preemptions = 0;
  // Pre-flight runs that ended, by v1::PreflightVerdict (PASSED, FAILED,
  // ABORTED; the others stay 0).
  std::array<int64_t, v1::PreflightVerdict_ARRAYSIZE> preflight_runs{};
  // Agent registrations accepted (first ones and re-registrations).
  int64_t agent_registrations = 0;
  // FetchUniqueId long-polls from ranks directly, and from node relays
  // (agents fetching once for their node's ranks: relayed_ranks set), and
  // the ranks those relays named.
  int64_t rendezvous_fetches_direct = 0;
  int64_t rendezvous_fetches_relayed = 0;
  int64_t rendezvous_ranks_relayed = 0;
};

// A read-only snapshot of the coordinator for metrics (CollectStats; the coordinator's Stats()).
struct CoordinatorStats {
  // Jobs per state, indexed by v1::JobState (UNSPECIFIED stays 0); counts
  // every job the coordinator knows, finished history included.
  std::array<int64_t, v1::JobState_ARRAYSIZE> jobs_by_state{};
  // Jobs whose full record is held in memory; the others (retired: final,
  // no live task, stored) are held as a summary of a few bytes and read from
  // the store on demand. Eviction happens in Tick().
  int64_t jobs_in_memory = 0;
  // Jobs waiting to be scheduled (PENDING).
  int64_t pending_jobs = 0;
  // The same by named queue (JobSpec.queue; "" counts as "default"). Queues
  // of the scheduler config with nothing pending are listed with 0.
  std::map<std::string, int64_t> pending_by_queue;
  int nodes_ready = 0;
  int nodes_lost = 0;
  // Every known node's service state (in service, draining, drained, down),
  // by name.
  std::map<std::string, v1::NodeServiceState> node_service_states;
  // Every GPU of every known node, ordered by node name then as registered.
  std::vector<GpuStats> gpus;
  // Jobs whose current attempt has live tasks, by job id.
  std::vector<JobGpuStats> jobs;
  // State transitions of jobs, tasks or nodes the coordinator tried that
  // its state machines (state_machine.h) forbid, since start: a bug when
  // not 0 (each is logged as an error).
  int64_t illegal_transitions = 0;
  // TaskUsage samples in heartbeats ignored since start because the
  // reporting node does not run that task of the job's current attempt
  // (another node's task, an ended task, an earlier attempt, an unknown job).
  int64_t ignored_task_usage = 0;
  CoordinatorCounters counters;
};

// The statistics of the cluster now: jobs per state (retired included),
// pending jobs in all and per queue (every queue of `policy` listed, with 0
// when nothing waits), nodes READY and LOST, every GPU as last reported and
// whether a live or draining task holds it, and the mean utilization of each
// job with live tasks. Leaves the counters (illegal_transitions,
// ignored_task_usage, counters) for the caller. Cost: O(states + nodes +
// GPUs + active jobs' and draining tasks); the finished history is not
// scanned.
CoordinatorStats CollectStats(const JobTable& jobs, const NodeRegistry& nodes,
                              const DrainingTasks& draining,
                              const sched::PolicyConfig& policy);

// Every node with its GPUs and, per GPU, the tasks holding it (live tasks
// of active jobs, pre-flight probes, draining tasks of earlier attempts)
// with the bytes each reserves there; the node's last heartbeat in
// Node.last_heartbeat_ms; its service state (DRAINING while a drained node
// still holds any such task).
std::vector<v1::NodeView> NodeViews(const JobTable& jobs, const NodeRegistry& nodes,
                                    const DrainingTasks& draining);

// True when a task holds GPUs of `node`: a live task or pre-flight of an
// active job (a final job's ranks still stopping included), or a task of an
// earlier attempt still draining (what NodeViews shows on its GPUs).
bool NodeHoldsTasks(const JobTable& jobs, const DrainingTasks& draining,
                    const std::string& node);

// The active jobs (SCHEDULED or RUNNING) with a live task on `node` that is
// not already stopping, by id: what a DOWN, or a drain whose deadline
// passed, stops and requeues.
std::vector<int64_t> JobsHoldingNode(const JobTable& jobs, const std::string& node);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_CLUSTER_VIEWS_H_
