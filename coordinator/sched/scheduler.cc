// Scheduler: the public entry points (Schedule, Explain, ReservationBytes)
// and deciding one job: SchedulePass's setup and the rules in the order they
// apply (Decide). The rest of SchedulePass lives in the scheduler_*.cc files
// beside this one, one responsibility each; scheduler_internal.h says which.

#include "coordinator/sched/scheduler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/sched/scheduler_internal.h"

// How one Schedule() call works (the header lists the policy; this is the
// exact rule set):
//
// 1. The queue is stably sorted by priority (higher first), then submit_seq
//    (lower first). Each job is decided in that order against a working copy
//    of the snapshot; a placement is applied to the copy at once, so later
//    jobs see it and placements never overlap.
// 2. Odd input (fraction outside (0, 1], negative bytes, gangs of 0 GPUs, an
//    unknown kind, max_tasks_per_gpu < 1) is kInfeasible before anything else.
//    Then a cluster with no nodes makes the job kRetryLater ("no nodes have
//    registered yet"), and so does one whose nodes report no GPU at all (a CPU
//    node registering first must not fail every job). Then infeasibility is
//    judged against the whole cluster, lost nodes included, ignoring use.
//    A GPU with memory_total_bytes <= 0 is ignored everywhere.
// 3. Head-of-queue reservation ("hold"): the first job of the call that ends
//    kRetryLater with waited_s >= reservation_min_wait_s takes the one hold
//    of the call, even if it finds nothing to hold. It holds, among schedulable nodes and ignoring current use:
//    - a gang: for the first of its layouts (fewest nodes first) that enough
//      schedulable nodes could hold when empty, the `nodes` nodes with the
//      most GPUs (ties: more whole free GPUs now, then name) having at least
//      `per node` GPUs each. Every GPU of those nodes is held.
//    - an experiment: the one GPU with the largest memory whose reservation
//      fits it (ties: more free bytes now, then node name, GPU index).
//    Jobs later in the queue are never placed on a held GPU. Jobs earlier in
//    the queue were decided before the hold existed.
// 4. Lookups (data structures only; the rules above decide): experiments find
//    their best-fit GPU in one ordered set per GPU memory size, keyed by
//    (free bytes, whole free GPUs on the node, node name, GPU index), with a
//    lower_bound on the reservation; gangs find nodes in per-count buckets of
//    whole free GPUs (with and without the held GPUs). Every change to a node
//    (placement, preemption trial, hold) re-indexes that node. Wait reasons
//    are shared by jobs of one shape while the cluster is unchanged. Cost:
//    O(Q log Q) to order Q pending jobs, then O(log GPUs) per lookup instead
//    of O(GPUs); SchedulerConfig.linear_search keeps the scans as the
//    reference (scheduler_index_test.cc). The queue is read once, in order,
//    into compact entries; after the hold, a waiting job of a shape that
//    already failed to fit since capacity was last added is decided from its
//    entry alone (DecideTail), with the same outcome and reason.

namespace trainctl::sched {
namespace internal {
namespace {

// Marks the nodes `job` may not use unschedulable for its lifetime and
// restores them after: those named in JobRequest.excluded_nodes, and those
// without a container runtime (task cgroups) for a job that needs one. Costs nothing for a
// job without exclusions.
class ExcludedNodesScope {
 public:
  ExcludedNodesScope(std::vector<NodeState>& nodes, const JobRequest& job)
      : nodes_(nodes) {
    const std::vector<std::string>& excluded = job.excluded_nodes;
    if (excluded.empty() && !job.needs_container_runtime && !job.needs_cgroup_limits) return;
    for (size_t n = 0; n < nodes_.size(); ++n) {
      if (!nodes_[n].schedulable) continue;
      if ((job.needs_container_runtime && !nodes_[n].container_runtime) ||
          (job.needs_cgroup_limits && !nodes_[n].cgroups) ||
          std::find(excluded.begin(), excluded.end(), nodes_[n].name) !=
              excluded.end()) {
        nodes_[n].schedulable = false;
        flipped_.push_back(n);
      }
    }
  }
  ~ExcludedNodesScope() {
    for (size_t n : flipped_) nodes_[n].schedulable = true;
  }
  ExcludedNodesScope(const ExcludedNodesScope&) = delete;
  ExcludedNodesScope& operator=(const ExcludedNodesScope&) = delete;

 private:
  std::vector<NodeState>& nodes_;
  std::vector<size_t> flipped_;
};

}  // namespace

SchedulePass::SchedulePass(const ClusterSnapshot& cluster,
                           const SchedulerConfig& config,
                           const std::vector<JobRequest>& queue)
    : config_(config),
      policy_(config.policy),
      // Pre-flight exclusions (JobRequest.excluded_nodes) are applied by
      // marking nodes unschedulable per job, which the linear scans
      // honour; the indexes are built once per pass.
      indexed_(!config.linear_search &&
               std::none_of(queue.begin(), queue.end(),
                            [](const JobRequest& j) {
                              return !j.excluded_nodes.empty() ||
                                     j.needs_container_runtime ||
                                     j.needs_cgroup_limits;
                            })),
      shape_(cluster),
      cluster_nodes_(cluster.nodes),
      nodes_(MutableCopy(cluster.nodes)),
      running_(cluster.running),
      queue_(queue),
      tail_ok_(indexed_ && config.policy.backfill &&
               config.policy.user_gpu_quota.empty() &&
               config.policy.project_gpu_quota.empty() &&
               shape_.node_count > 0 && shape_.gpu_count > 0) {
  held_.reserve(nodes_.size());
  node_index_.reserve(nodes_.size());
  for (int n = 0; n < static_cast<int>(nodes_.size()); ++n) {
    const NodeState& node = nodes_[n];
    held_.emplace_back(node.gpus.size(), false);
    node_index_[node.name] = n;
    if (!node.schedulable) continue;
    for (const GpuState& gpu : node.gpus) {
      if (!IsUsable(gpu)) continue;
      total_gpus_ += 1;
      total_bytes_ += static_cast<double>(gpu.memory_total_bytes);
    }
  }
  evicted_.assign(running_.size(), false);
  for (const RunningJob& r : running_) {
    const Usage u = UsageOf(r.placement);
    AddUsage(QueueName(r.queue), r.user, r.project, u, +1);
    if (!r.group.empty()) ++group_running_[r.group];
  }
  if (indexed_) BuildIndexes();
  InitInterleave(queue);
}

// Decides `job` into `decision` (a default Decision, built in place in
// the result: no copy per job).
void SchedulePass::Decide(const JobRequest& job, int position,
                          Decision& decision) {
  {
    // Nodes excluded for this job count as unschedulable while it is
    // decided (placement, preemption, its hold), and only then. (A pass
    // with such a job uses the linear scans: the indexes do not see it.)
    ExcludedNodesScope excluded(nodes_, job);
    DecideInner(job, decision);
  }
  if (job.job_id == explain_id_ && explanation_ != nullptr) {
    Explain(job, decision, position);
  }
}

void SchedulePass::DecideInner(const JobRequest& job, Decision& decision) {
  decision.job_id = job.job_id;
  if (std::optional<std::string> reason = MalformedReason(job, config_)) {
    decision.outcome = Outcome::kInfeasible;
    decision.reason = *std::move(reason);
    return;
  }
  if (shape_.node_count == 0) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason = "no nodes have registered yet";
    return;
  }
  if (shape_.gpu_count == 0) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason = "no node with a GPU has registered yet";
    return;
  }
  if (std::optional<std::string> reason = InfeasibleReason(job, shape_)) {
    decision.outcome = Outcome::kInfeasible;
    decision.reason = *std::move(reason);
    return;
  }
  if (job.preempted_for != 0) {
    if (WaitsForPreemptor(job.preempted_for)) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = absl::StrFormat(
          "was preempted for job %d and waits until it starts",
          job.preempted_for);
      return;
    }
  }
  if (std::optional<std::string> quota = QuotaReason(job)) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason = absl::StrCat("over quota: ", *quota);
    return;
  }
  if (job.group_max_running > 0 && !job.group.empty()) {
    auto it = group_running_.find(job.group);
    const int running = it == group_running_.end() ? 0 : it->second;
    if (running >= job.group_max_running) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = absl::StrFormat(
          "group %s: %d of at most %d jobs running (its throttle)", job.group,
          running, job.group_max_running);
      return;
    }
  }
  if (!policy_.backfill && fifo_blocker_ != 0) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason = absl::StrFormat(
        "waiting for job %d, earlier in the queue, to start (strict FIFO)",
        fifo_blocker_);
    return;
  }
  const bool honor_hold = !MayUseHold(job);
  if (!KnownNotToFit(job, honor_hold) &&
      Place(job, honor_hold, decision.placement)) {
    decision.outcome = Outcome::kPlaced;
    Account(job, decision.placement);
    return;
  }
  if (job.victims_stopping) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason =
        "waiting for the jobs it preempted to stop and free their GPUs";
    return;
  }
  if (policy_.preemption) {
    if (std::optional<std::vector<int64_t>> victims =
            TryPreempt(job, honor_hold)) {
      Place(job, honor_hold, decision.placement);
      // The victims run until their tasks have stopped: for the rest of this
      // pass their GPUs stay taken (by them, and by the preemptor's placement
      // on top), so no later job is placed where a victim still runs. A
      // GPU's reservation may then exceed its memory here; nothing fits it.
      for (int v : last_victims_) ApplyRunning(v, +1);
      decision.outcome = Outcome::kPreempting;
      decision.preempt = *std::move(victims);
      std::vector<std::string> ids;
      for (int64_t id : decision.preempt) ids.push_back(absl::StrCat(id));
      decision.reason = absl::StrFormat(
          "preempting job%s %s (preemptible, ranked below it)",
          ids.size() == 1 ? "" : "s", JoinList(ids, "and"));
      Account(job, decision.placement);
      return;
    }
  }
  if (TryInterleave(job, decision)) return;
  decision.outcome = Outcome::kRetryLater;
  if (config_.wait_reasons || job.job_id == explain_id_) {
    decision.reason = WaitReason(job);
  }
  if (!policy_.backfill && fifo_blocker_ == 0) fifo_blocker_ = job.job_id;
  if (!hold_taken_ && job.waited_s < policy_.reservation_min_wait_s) {
    // Too young to reserve (Slurm's bf_min_age_reserve): later jobs may
    // take the GPUs it would need until it has waited long enough.
    if (config_.wait_reasons || job.job_id == explain_id_) {
      absl::StrAppend(&decision.reason, "; reserves GPUs once it has waited ",
                      ShortDuration(policy_.reservation_min_wait_s),
                      " (waited ", ShortDuration(std::max(job.waited_s, 0.0)),
                      ")");
    }
    return;
  }
  if (!hold_taken_) {
    hold_taken_ = true;
    holder_job_id_ = job.job_id;
    holder_priority_ = job.priority;
    holder_submit_seq_ = job.submit_seq;
    holder_level_ = LasLevel(policy_, job.attained_gpu_s);
    if (job.kind == JobKind::kExperiment) {
      HoldForExperiment(job);
    } else {
      HoldForGang(job);
    }
    hold_eta_s_ = HoldEta(job);
    ++state_version_;
    decision.eta_s = hold_eta_s_;
    if (hold_eta_s_ >= 0) {
      absl::StrAppend(&decision.reason, "; holds a reservation on ",
                      held_description_, ", estimated start in ",
                      ShortDuration(hold_eta_s_));
    }
  }
  return;
}

void SchedulePass::Account(const JobRequest& job, const Placement& placement) {
  AddUsage(QueueName(job.queue), job.user, job.project, UsageOf(placement),
           +1);
  if (!job.group.empty()) ++group_running_[job.group];
  placed_.insert(job.job_id);
  if (interleave_active_) {
    AddGroupMember(placement, {job.job_id, &job.interleave, -1});
  }
}

bool SchedulePass::Place(const JobRequest& job, bool honor_hold,
                         Placement& placement) {
  const bool placed = job.kind == JobKind::kExperiment
                          ? PlaceExperiment(job, honor_hold, placement)
                          : PlaceGang(job, honor_hold, placement);
  if (!placed && indexed_) {
    not_fitting_[FitKey(job, honor_hold)] = capacity_version_;
  }
  return placed;
}

SchedulePass::FitKeyT SchedulePass::FitKey(const JobRequest& job,
                                           bool honor_hold) {
  if (job.kind == JobKind::kExperiment) {
    return {0, job.gpu_fraction, job.gpu_memory_bytes, 0, 0, 0, 0, honor_hold};
  }
  return {1, 0.0, 0, job.nodes, job.gpus_per_node, job.total_gpus,
          static_cast<int>(job.placement), honor_hold};
}

// Whether a job of the same shape failed to fit since capacity was last
// added (then this one cannot fit either; see capacity_version_): once the
// cluster is full, the long tail of the queue costs a hash lookup per job,
// placements in between included.
bool SchedulePass::KnownNotToFit(const JobRequest& job, bool honor_hold) const {
  if (!indexed_) return false;
  auto it = not_fitting_.find(FitKey(job, honor_hold));
  return it != not_fitting_.end() && it->second == capacity_version_;
}

bool SchedulePass::FitsNow(const JobRequest& job, bool honor_hold) const {
  if (job.kind == JobKind::kExperiment) {
    return FindExperimentGpu(job, honor_hold).has_value();
  }
  return indexed_ ? GangFitsIndexed(job, honor_hold)
                  : FindGang(job, honor_hold).has_value();
}

}  // namespace internal

int64_t PlacementBytesOn(const Placement& placement, const GpuState& gpu) {
  return placement.whole_gpus ? gpu.memory_total_bytes : placement.reserved_bytes_per_gpu;
}

int64_t ReservationBytes(const JobRequest& job, int64_t gpu_total_bytes) {
  if (job.gpu_memory_bytes > 0) return job.gpu_memory_bytes;
  if (gpu_total_bytes <= 0 || !(job.gpu_fraction > 0.0)) return 0;
  if (job.gpu_fraction >= 1.0) return gpu_total_bytes;
  // Fractions like 0.2 are not exact in binary: 0.2 * 80 GiB comes out a hair
  // above a whole number and would round up one byte, so five 0.2 jobs would
  // not fit one GPU. A product within kTolerance of a whole number is that
  // number; anything else rounds up.
  constexpr long double kTolerance = 1e-3L;  // bytes
  const long double bytes =
      static_cast<long double>(job.gpu_fraction) * gpu_total_bytes;
  const long double nearest = std::round(bytes);
  const long double rounded =
      std::fabs(bytes - nearest) < kTolerance ? nearest : std::ceil(bytes);
  // At least one byte: a share of a GPU is never free of charge, and a GPU
  // with reserved_bytes == 0 must mean whole and free.
  return std::clamp<int64_t>(static_cast<int64_t>(rounded), 1, gpu_total_bytes);
}

Scheduler::Scheduler(SchedulerConfig config) : config_(config) {}

std::vector<Decision> Scheduler::Schedule(
    const ClusterSnapshot& cluster,
    const std::vector<JobRequest>& queue) const {
  internal::SchedulePass pass(cluster, config_, queue);
  return pass.Run(queue, /*explain_id=*/0, nullptr);
}

std::optional<Explanation> Scheduler::Explain(
    const ClusterSnapshot& cluster, const std::vector<JobRequest>& queue,
    int64_t job_id) const {
  if (std::none_of(queue.begin(), queue.end(), [job_id](const JobRequest& j) {
        return j.job_id == job_id;
      })) {
    return std::nullopt;
  }
  Explanation explanation;
  internal::SchedulePass pass(cluster, config_, queue);
  pass.Run(queue, job_id, &explanation);
  return explanation;
}

std::optional<std::string> Scheduler::WhyNeverFits(const ClusterSnapshot& cluster,
                                                   const JobRequest& job) const {
  if (std::optional<std::string> reason = internal::MalformedReason(job, config_)) {
    return reason;
  }
  return internal::InfeasibleReason(job, internal::ClusterShape(cluster));
}

}  // namespace trainctl::sched
