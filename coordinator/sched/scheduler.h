#ifndef TRAINCTL_COORDINATOR_SCHED_SCHEDULER_H_
#define TRAINCTL_COORDINATOR_SCHED_SCHEDULER_H_

// The scheduler: a pure function from (cluster snapshot, queue) to placement
// decisions. No proto, no gRPC, no clock, no threads; it
// links only Abseil. The coordinator and the simulator (bench/) drive the same
// code.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/sched/interleave.h"
#include "coordinator/sched/node_selection.h"

namespace trainctl::sched {

// One GPU as the scheduler sees it.
struct GpuState {
  // NVML index on its node.
  int index = 0;
  // For callers' bookkeeping; the scheduler never reads it (the coordinator
  // leaves it empty).
  std::string uuid;
  // Total GPU memory, bytes.
  int64_t memory_total_bytes = 0;
  // Sum of the reservations of the tasks placed on it, bytes. A GPU with
  // reserved_bytes == 0 is whole and free.
  int64_t reserved_bytes = 0;
  // Tasks placed on it now.
  int task_count = 0;
  // Indices of GPUs on the same node joined to this one by NVLink.
  std::vector<int> nvlink_peers;
  // Its type ("h100", Gpu.gpu_type; "" when unknown), matched by
  // JobRequest::NodeConstraints.gpu_types. A gang's GPUs share one type
  // unless it allows mixing (see Scheduler).
  std::string gpu_type;
};

// One node (host) as the scheduler sees it.
struct NodeState {
  std::string name;
  // False for a node that is known but lost or disconnected, or that still
  // stops processes that hold no reservation: it counts when judging whether
  // a job can ever fit this cluster, but gets no placements.
  bool schedulable = true;
  // Non-empty when an admin took the node out of service (drain or down),
  // in words ("DRAIN by alice 5m ago: disk swap"): Explain() names it. Such
  // a node is not schedulable.
  std::string out_of_service;
  std::vector<GpuState> gpus;
  // The node has a container runtime (podman or Apptainer): only such nodes
  // take jobs with needs_container_runtime.
  bool container_runtime = false;
  // The node gives tasks cgroups with limits (Node.cgroups): only such nodes
  // take jobs with needs_cgroup_limits.
  bool cgroups = false;
  // Features it offers (Node.features: "ib", "nvlink"), matched by
  // JobRequest::NodeConstraints.features.
  std::vector<std::string> features;
};

enum class JobKind { kExperiment, kGang };

// How a gang spreads over nodes (Ray placement-group strategies).
enum class GangPlacement {
  // PACK (the default): the fewest nodes, best fit (the fullest nodes that
  // still fit), so whole nodes stay free.
  kPack,
  // SPREAD: as many nodes as the layout allows (for `total_gpus` gangs, one
  // GPU per node when enough nodes have one free), the emptiest nodes first.
  kSpread,
};

// The GPUs a job gets on one node, in local-rank order.
struct NodeAssignment {
  std::string node;
  std::vector<int> gpu_indices;
};

struct Placement {
  // Node rank order: nodes[0] holds rank 0.
  std::vector<NodeAssignment> nodes;
  // Bytes reserved on each assigned GPU, when !whole_gpus (a share of one
  // GPU: an experiment's ReservationBytes on that GPU).
  int64_t reserved_bytes_per_gpu = 0;
  // Every assigned GPU is held whole (gangs, whole-GPU experiments): the
  // reservation on each is that GPU's own memory_total_bytes. GPUs of
  // different sizes (80 and 40 GiB) are each held whole: no one GPU's size
  // stands for another's.
  bool whole_gpus = false;
};

// Bytes `placement` reserves on `gpu` (one of its GPUs): the GPU's whole
// memory_total_bytes for whole_gpus, else reserved_bytes_per_gpu.
int64_t PlacementBytesOn(const Placement& placement, const GpuState& gpu);

// A job that holds GPUs now (placed by an earlier call). Its reservation is
// already counted in the nodes' GpuState; this says whose it is, for quotas,
// fair share, preemption and the reservation's estimated start.
struct RunningJob {
  int64_t job_id = 0;
  int priority = 0;
  int64_t submit_seq = 0;
  // Queue ("" = the default queue), user and project it is charged to.
  std::string queue;
  std::string user;
  std::string project;
  // May be stopped (SIGTERM, grace, requeued as a new attempt) for a job
  // that outranks it (see Scheduler).
  bool preemptible = false;
  // GPU-seconds received so far, this attempt included (LAS level).
  double attained_gpu_s = 0;
  // Seconds until its time limit stops it; < 0 when it has no time limit
  // (its end is unknown).
  double remaining_s = -1;
  Placement placement;
  // The job group it belongs to (JobRequest.group_limit.group), "" for none: it counts
  // toward that group's running jobs.
  std::string group;
  // Its per-resource profile (JobRequest.interleave); empty when unknown.
  // Running jobs with identical placements share those GPUs (a packed
  // group, see Scheduler); a job without a usable profile on some GPUs
  // keeps every other job from being packed there.
  InterleaveProfile interleave;
};

struct ClusterSnapshot {
  std::vector<NodeState> nodes;
  // Jobs holding GPUs of `nodes`; may be empty (then quotas, fair share,
  // preemption and the reservation ETA see no running work).
  std::vector<RunningJob> running;
};

// A pending job as the scheduler sees it. Validated by the caller.
struct JobRequest {
  int64_t job_id = 0;
  JobKind kind = JobKind::kExperiment;
  // Higher first; ties by submit_seq, lower first.
  int priority = 0;
  int64_t submit_seq = 0;

  // Experiment: a share of one GPU. gpu_fraction in (0, 1] (1 = the whole
  // GPU, exclusive); gpu_memory_bytes > 0 asks for that many bytes instead.
  // On a GPU of total T the reservation is gpu_memory_bytes if > 0, else
  // ceil(gpu_fraction * T) and at least 1 byte; whole-GPU experiments
  // reserve T.
  double gpu_fraction = 1.0;
  int64_t gpu_memory_bytes = 0;

  // Gang: whole GPUs only. Either `nodes` x `gpus_per_node` (nodes >= 1), or
  // nodes == 0 and `total_gpus` >= 1: the scheduler picks the fewest nodes K
  // (K divides total_gpus) with total_gpus / K free GPUs each.
  int total_gpus = 0;
  int nodes = 0;
  int gpus_per_node = 0;
  GangPlacement placement = GangPlacement::kPack;

  // Named queue ("" = "default"), user and project, for fair share and
  // quotas.
  std::string queue;
  std::string user;
  std::string project;
  // Wall-clock limit of one attempt, seconds; 0 = none. A job with a limit
  // may backfill onto GPUs reserved for an earlier job when it ends before
  // that job's estimated start.
  int64_t time_limit_s = 0;
  // May be preempted, and so may backfill onto reserved GPUs (the job holding
  // the reservation preempts it when its turn comes).
  bool preemptible = false;
  // GPU-seconds received in earlier attempts (LAS level).
  double attained_gpu_s = 0;
  // Where the job stands in the queue, from the caller's bookkeeping (the
  // coordinator's job table, the simulator's): how long it has waited and
  // whether a preemption it took part in is still under way.
  struct Standing {
    // Seconds since it last entered the queue (its submit, or the end of its
    // last attempt when it was requeued), from the caller's clock (the
    // coordinator's injected clock, the simulator's simulated time). Decides
    // whether it may hold the head-of-queue reservation
    // (PolicyConfig.reservation_min_wait_s).
    double waited_s = 0;
    // Non-zero when this job was preempted for that job: it is not placed
    // while that job is still in the queue (no ping-pong).
    int64_t preempted_for = 0;
    // Set while jobs this one preempted are still stopping: it waits for
    // their GPUs and preempts nothing more.
    bool victims_stopping = false;
  };
  Standing standing;
  // Which nodes the job may run on, beyond free capacity. A node that fails
  // any of these counts as unschedulable for this job only: it waits when
  // the other nodes cannot hold it, and Explain() names the node.
  struct NodeConstraints {
    // Nodes this job must not be placed on (a pre-flight found them faulty
    // for it; coordinator/preflight.h). They never make it infeasible.
    std::vector<std::string> excluded_nodes;
    // The job runs in a container image: nodes without a container runtime
    // (NodeState.container_runtime) are ruled out.
    bool needs_container_runtime = false;
    // The job limits its tasks' CPUs or memory (--cpus, --mem): nodes
    // without task cgroups (NodeState.cgroups) are ruled out.
    bool needs_cgroup_limits = false;
    // The job's own node selection (JobSpec fields 70-74, Slurm's --gres
    // type, --constraint, -w, -x); node_selection.h has the rules.
    // GPU types it accepts, in order of preference (GpuState.gpu_type);
    // empty: any. It is placed on its first type that fits now; when none
    // does it waits (and preempts, and reserves) for the first type that
    // could ever hold it.
    std::vector<std::string> gpu_types;
    // Features every node it uses must satisfy (NodeState.features).
    FeatureConstraint features;
    // Only these nodes; a gang uses every one of them (its layouts are
    // those with exactly nodelist.size() nodes).
    std::vector<std::string> nodelist;
    // Never these nodes (the user's --exclude; not a pre-flight's).
    std::vector<std::string> exclude;
    // A gang may take GPUs of different types (of gpu_types, or any).
    bool allow_mixed_gpu_types = false;
  };
  NodeConstraints constraints;
  // Time per iteration on each resource (any unit, the same for every job),
  // measured or declared; empty (the default) when unknown. Only gangs with
  // a usable profile may be packed onto the GPUs of running jobs
  // (PolicyConfig.interleave); a job without one is never packed.
  InterleaveProfile interleave;
  // A group of jobs with a limit on how many run at once (a job array's
  // `%P` throttle, Slurm's --array=0-99%4). While max_running (> 0) jobs of
  // `group` hold GPUs (RunningJob.group, this call's placements and
  // preemptions included), the job waits (kRetryLater naming the group and
  // the limit), takes no head-of-queue reservation and preempts nothing.
  // Every job of a group carries the same limit.
  struct GroupLimit {
    // "" for none.
    std::string group;
    // 0: no limit.
    int max_running = 0;
  };
  GroupLimit group_limit;
};

enum class Outcome {
  // Placed now; `placement` is set.
  kPlaced,
  // Fits this cluster but not its free capacity now; `reason` says what it
  // waits for.
  kRetryLater,
  // Can never fit this cluster (more GPUs than it has, more memory than any
  // GPU...); `reason` says why. The job should fail at once.
  kInfeasible,
  // Fits once the running jobs in `preempt` are stopped: `placement` is
  // where it goes then. The caller stops them (grace period, requeue) and
  // schedules again once their GPUs are free; a caller that stops jobs at
  // once (the simulator) may start it on `placement` right away.
  kPreempting,
};

struct Decision {
  int64_t job_id = 0;
  Outcome outcome = Outcome::kRetryLater;
  Placement placement;
  // A user-facing sentence for kRetryLater, kInfeasible and kPreempting.
  std::string reason;
  // kPreempting: the running jobs to stop, by job id.
  std::vector<int64_t> preempt;
  // kRetryLater of the job holding the head-of-queue reservation: seconds
  // from now until its reserved GPUs are estimated to be free (from running
  // jobs' time limits); < 0 when unknown (some job there has no limit).
  double eta_s = -1;
  // kPlaced on GPUs that running jobs keep using (interleave packing): the
  // ids of those jobs, ascending; `placement` is theirs. Empty for a
  // placement on free GPUs.
  std::vector<int64_t> packed_with;
};

// Order of jobs of equal priority inside a queue.
enum class QueueOrder {
  // Submit order.
  kFifo,
  // Least attained service (Tiresias 2D-LAS on GPU-time): jobs in a lower
  // LAS level (fewer attained GPU-seconds, see las_thresholds_gpu_s) first,
  // then submit order. Needs no job durations.
  kLas,
};

// A named queue; its share of the cluster is weighted fair (see Scheduler).
struct QueueConfig {
  std::string name;
  // > 0; a queue of weight 2 is entitled to twice the share of weight 1.
  double weight = 1.0;
  // Not the scheduler's: how long an interactive job of this queue without
  // its own idle timeout may stay idle before it ends, ms; 0: the
  // coordinator's default (IdleTimeoutOf in coordinator/job_spec.h).
  int64_t interactive_idle_timeout_ms = 0;
};

// Scheduling policy: queues, quotas, order, backfill, preemption. The
// coordinator reads it from --scheduler-config (coordinator/sched_config.h);
// the simulator sets it from --policy.
struct PolicyConfig {
  QueueOrder order = QueueOrder::kLas;
  // LAS levels: a job with attained GPU-seconds >= thresholds[i] is in level
  // i + 1 or deeper. Default: Tiresias's first threshold (3250 GPU-s, NSDI'19
  // and the Muri artifact), then x4 per level up to 3328000 GPU-s (about 39
  // GPU-days): 3250, 13000, 52000, 208000, 832000, 3328000. Job GPU-time in
  // Philly-like clusters is heavy-tailed (the Muri traces: median about
  // 20000, p90 1-2 million GPU-s), and with only Tiresias's two thresholds
  // (3250, 7200) nearly every job ends up in the last level, served FIFO; a
  // geometric ladder keeps ranking jobs by attained service across the whole
  // tail, which approximates shortest-remaining-first without knowing
  // durations. Measured in bench/README.md without interleave packing
  // (sim policy las-nopack: avg JCT 0.51-0.87x the published Tiresias on 7
  // of 8 Muri traces, 1.48x on trace3; the default of before, 3250/7200
  // with the old overtake rule, was 1.02-1.61x); with packing (las)
  // 0.41-0.69x on all eight.
  std::vector<double> las_thresholds_gpu_s = {3250,   13000,  52000,
                                              208000, 832000, 3328000};
  // False: strict FIFO, nothing starts while an earlier job waits for GPUs.
  // True: later jobs start around the head-of-queue reservation.
  bool backfill = true;
  // Whether blocked jobs may preempt preemptible running jobs.
  bool preemption = true;
  // At most this many blocked jobs per call search for preemption victims
  // (bounds the cost of a call with a long queue).
  int max_preemption_searches = 16;
  // True: a blocked job may also preempt preemptible jobs of its priority and
  // LAS level that overtook it (submitted later, started first), and such
  // jobs may backfill onto the head-of-queue reservation. False (default):
  // preemption only across priorities and LAS levels, so jobs of one level
  // do not take turns and a job preempted once waits for its level's turn.
  // Measured on the Muri traces (bench/README.md, sim policy las-overtake):
  // true preempts 1.4-1.7x as often for an avg JCT 0.85-1.06x of false
  // (better on 6 of 8 traces, most on trace3). Before this field existed,
  // the rule also let a job preempt later-submitted jobs of a *shallower*
  // level, and jobs took turns at every event (121 k preemptions on trace2
  // vs 15 k now).
  bool overtake_preemption = false;
  // A blocked job takes the head-of-queue reservation only once it has
  // waited (JobRequest.standing.waited_s) at least this many seconds; before that,
  // later jobs may take the GPUs it would need, and the first blocked job
  // old enough holds the reservation instead. 0: every blocked job may hold
  // it at once. Slurm's sched/backfill bf_min_age_reserve (slurm.conf:
  // "will not reserve resources for pending jobs until they have been
  // pending and runnable for at least the specified number of seconds").
  // A gang still cannot starve: once it has waited this long it reserves
  // like before, so its wait grows by at most this bound. Off (0) by
  // default: swept from 600 s to 4 days on the Muri traces
  // (bench/README.md, "Reservation age"), no value improved avg JCT on
  // every trace, and none brought trace3/trace4/trace4_pr under 0.8x the
  // published Tiresias (no reservation at all: 1.30/0.83/0.88).
  double reservation_min_wait_s = 0;
  // Named queues. Empty: one queue "default" of weight 1. A job's queue ""
  // is "default".
  std::vector<QueueConfig> queues;
  // Hard GPU limits (GPUs, fractions count as such) on what one user's or
  // project's running jobs hold; absent = unlimited. The key "*" applies to
  // every user (project) without an entry of its own.
  std::map<std::string, double> user_gpu_quota;
  std::map<std::string, double> project_gpu_quota;
  // Multi-resource interleave packing (Muri): a gang that can neither be
  // placed nor preempt its way in may share the GPUs of running gangs of
  // its GPU count when the group interleaves well (see Scheduler). On by
  // default: it only ever concerns jobs that carry a usable
  // JobRequest.interleave profile, and running jobs that do. Measured in
  // bench/README.md (trainctl-sim, policy las vs las-nopack).
  InterleaveConfig interleave;
};

struct SchedulerConfig {
  // At most this many tasks share one GPU (experiments only).
  int max_tasks_per_gpu = 8;
  PolicyConfig policy;
  // False: kRetryLater decisions carry an empty reason (the simulator shows
  // none, and a long queue's sentences cost more than the decisions).
  bool wait_reasons = true;
  // True: find GPUs by scanning every GPU of the cluster for every job
  // (O(GPUs) per lookup) instead of the free-capacity indexes (O(log GPUs)).
  // The decisions are the same; this is the reference the differential test
  // (scheduler_index_test.cc) compares the indexes against. Not for
  // production use.
  bool linear_search = false;
};

// Why a pending job waits, in parts a user can act on (Scheduler::Explain).
struct Explanation {
  // Its decision in a pass over the cluster as it is now.
  Decision decision;
  // 1-based place in this pass's scheduling order.
  int position = 0;
  // The queue it is in ("default" for "").
  std::string queue;
  // Non-empty when a user or project quota blocks it: which, and the
  // arithmetic ("user alice: quota 8 GPUs, 6 in use, needs 4").
  std::string quota;
  // One line per node that cannot take it now and what it lacks
  // ("node-a: 2 of 8 GPUs free, needs 4"); at most 20 lines, then "... and N
  // more nodes".
  std::vector<std::string> nodes;
  // One line per part of the job's node selection that rules nodes out,
  // with those nodes ("--gpu-type h100: rules out node-a (a100), node-b
  // (a100)"); empty when it has none or it rules nothing out.
  std::vector<std::string> constraints;
  // The job holding the head-of-queue reservation this one waits behind (its
  // own id when it holds it), 0 when none; what is reserved ("nodes a and
  // b") and the estimated seconds until it starts (< 0: unknown).
  int64_t reservation_job = 0;
  std::string reservation;
  double reservation_eta_s = -1;
  // Non-zero when it waits for the job it was preempted for to start.
  int64_t preempted_for = 0;
  // Set while jobs this one preempted are still stopping: it waits for their
  // GPUs and preempts nothing more.
  bool victims_stopping = false;
};

// Bytes an experiment reserves on a GPU with `gpu_total_bytes` of memory (see
// JobRequest). Gangs reserve whole GPUs.
int64_t ReservationBytes(const JobRequest& job, int64_t gpu_total_bytes);

// Decides placements. Stateless and thread-compatible.
//
// Rules:
// - Queue order: jobs are taken one at a time from the named queues. Inside
//   a queue: priority (higher first), then the LAS level (QueueOrder::kLas),
//   then submit_seq. Across queues: the next job is the queue head with the
//   highest priority, then the lowest LAS level, then the queue with the
//   lowest weighted dominant share (DRF: max(GPUs held / cluster GPUs, GPU
//   bytes held / cluster GPU bytes) / weight, counting running jobs and this
//   call's placements), then submit_seq.
// - Quotas: a job whose user or project would exceed its hard GPU quota
//   waits (kRetryLater naming the quota) and takes no reservation.
// - Group limits: a job whose group (JobRequest.group_limit) already has
//   max_running jobs holding GPUs waits the same way.
// - Preemption (PolicyConfig.preemption): a job that cannot be placed may
//   preempt running preemptible jobs that rank below it: lower priority, or
//   equal priority and a deeper LAS level (with overtake_preemption also
//   those of its priority and level that overtook it: submitted later,
//   started first). Victims: lowest rank first, latest submitted first,
//   until it fits; then victims it does not need are spared. A job
//   preempted for X (standing.preempted_for) is not placed while X is in the queue.
// - Strict FIFO (backfill false): after the first job that waits for GPUs,
//   later jobs wait too.
// - Experiments: best fit, the GPU that has the least room left after the
//   reservation among those where it fits (partly used GPUs first, so whole
//   GPUs and whole nodes stay free for gangs); ties go to the node with the
//   fewest whole free GPUs, then node name, then GPU index.
// - Gangs: all-or-nothing on whole free GPUs, the fewest nodes; among nodes
//   that fit, best fit (fewest whole free GPUs left); within a node GPUs of one
//   NVLink island when one island has enough.
// - Gangs with GangPlacement::kSpread: the most nodes, emptiest first.
// - Head-of-queue reservation: the first job in queue order that cannot be
//   placed now and has waited at least reservation_min_wait_s reserves the nodes it would use when they drain, with an
//   estimated start from the running jobs' time limits (eta_s); jobs after
//   it are placed on reserved GPUs only when they cannot delay it: their
//   time limit ends before that estimate, or the holder may preempt them
//   (the preemption rule above). A gang is not starved by a stream of small
//   jobs (those of its level and priority never take its GPUs), and
//   no partial gang holds GPUs (placements are all-or-nothing).
// - Interleave packing (PolicyConfig.interleave.enabled): a gang with a
//   usable profile that is still waiting after placement and preemption
//   were tried (and before it could take the head-of-queue reservation) is
//   packed onto the GPUs of a group of running jobs (jobs with identical
//   placements, this call's placements included) when: every member has a
//   usable profile of the same length, the group holds exactly the GPUs the
//   job asks for (same total; for nodes x gpus_per_node gangs the same
//   layout), it has fewer than interleave.max_jobs members, none of its GPUs
//   is held for the reservation or on an unschedulable node, and
//   InterleaveWorthwhile(members + job) (members this call preempts do not
//   count). Among such
//   groups: the highest InterleaveUtilization, then fewer members, then the
//   first found. Greedy in queue order, best group first (Muri matches
//   pairs with a maximum-weight blossom matching; bench/sim/README.md says
//   why greedy). Jobs of one shape and profile search once per change to
//   the cluster (a failed search is remembered until then). The
//   packed job is kPlaced with `packed_with` naming the members; its GPUs
//   count again toward its user's, project's and queue's usage (quotas and
//   fair share count packed GPUs once per job). GPU memory is not checked
//   for a packed job (Muri assumes the group fits; whoever supplies the
//   profiles vouches for it): its whole-GPU reservation is added on top.
// - Node selection (JobRequest::NodeConstraints: GPU types, features,
//   nodelist, exclude): nodes it rules out count as unschedulable for that
//   job, GPUs of other types as absent. A gang takes GPUs of one type
//   (GpuTypeSets: its types in order of preference, else each type of the
//   cluster) unless allow_mixed_gpu_types; it is placed with the first type
//   that fits now, else it preempts, packs and reserves for the first type
//   that could ever hold it. A pass with such a job (or with a gang on a
//   cluster of several GPU types) uses the linear scans.
// - Infeasible is judged against the whole cluster (lost nodes included),
//   ignoring what is in use, restricted to what the job's node selection
//   allows (then the reason names the selection); an empty cluster makes
//   every job kRetryLater.
class Scheduler {
 public:
  explicit Scheduler(SchedulerConfig config = {});

  // The configuration it decides with.
  const SchedulerConfig& config() const { return config_; }

  // One decision per job of `queue`, in queue order (sorted as above). The
  // placements of one call never overlap, and each fits `cluster` minus what
  // the earlier placements of the same call took. Cost: O(G log G + R) to
  // index G GPUs and R running jobs, O(Q) to order Q jobs given in submit
  // order (O(Q log Q) otherwise), then O(log G) per experiment and
  // O(layouts x GPUs per node) per gang tried; a waiting job whose shape
  // already failed to fit (once the head-of-queue reservation is taken) is
  // O(1). At 10,000 GPUs and 100,000 pending jobs about 20 ms on one core
  // plus 15-20 us per placement (bench/scheduler_throughput_bench.cc; was
  // 46-60 ms).
  std::vector<Decision> Schedule(const ClusterSnapshot& cluster,
                                 const std::vector<JobRequest>& queue) const;

  // Runs the same pass as Schedule() and explains the decision for job
  // `job_id` of `queue`. Returns nullopt when `queue` has no such job. Costs
  // one Schedule() call plus O(nodes) for the explained job.
  std::optional<Explanation> Explain(const ClusterSnapshot& cluster,
                                     const std::vector<JobRequest>& queue,
                                     int64_t job_id) const;

  // Why `job` could never run on `cluster` (every node it knows, lost ones
  // included, at its full capacity), as Schedule() would find it
  // kInfeasible; nullopt when it could. A job's node selection (and a
  // gang's one GPU type on a cluster of several) restricts the nodes and
  // GPUs judged; the reason then names it ("no node satisfies --gpu-type
  // b200 (the cluster has a100 x4, h100 x2)"). O(GPUs) per GPU type set
  // tried.
  std::optional<std::string> WhyNeverFits(const ClusterSnapshot& cluster,
                                          const JobRequest& job) const;

 private:
  SchedulerConfig config_;
};

}  // namespace trainctl::sched

#endif  // TRAINCTL_COORDINATOR_SCHED_SCHEDULER_H_
