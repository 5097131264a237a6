// Scheduler: the public entry points (Schedule, Explain, ReservationBytes)
// and SchedulePass, the driver over the phases (schedule_pass.h): the queue
// walk, the tail's fast path, and the rules for one job in the order they
// apply (Decide). Each phase lives in its own class and file.

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
#include "coordinator/sched/node_selection.h"
#include "coordinator/sched/schedule_pass.h"

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
// restores them after: those named in JobRequest.constraints.excluded_nodes,
// those without a container runtime (task cgroups) for a job that needs
// one, and those its node selection rules out (SelectionRulesOut). With a
// non-empty `gpu_types`, GPUs of other types count as absent meanwhile: their
// memory_total_bytes is negated (IsUsable is false for them everywhere),
// and negated back after. Bumps the state version when it changes anything,
// so that no cache keyed on it carries over between jobs that see the
// cluster differently. Costs nothing for a job without any of these.
class JobViewScope {
 public:
  JobViewScope(PassState& state, const JobRequest& job,
               const std::vector<std::string>& gpu_types)
      : state_(state) {
    const JobRequest::NodeConstraints& c = job.constraints;
    const std::vector<std::string>& excluded = c.excluded_nodes;
    const bool selection = HasNodeSelection(job);
    if (excluded.empty() && !c.needs_container_runtime &&
        !c.needs_cgroup_limits && !selection && gpu_types.empty()) {
      return;
    }
    std::vector<NodeState>& nodes = state_.MutableNodes();
    const std::vector<NodeState>& snapshot = state_.cluster_nodes();
    for (size_t n = 0; n < nodes.size(); ++n) {
      if (!nodes[n].schedulable) continue;
      if ((c.needs_container_runtime && !nodes[n].container_runtime) ||
          (c.needs_cgroup_limits && !nodes[n].cgroups) ||
          std::find(excluded.begin(), excluded.end(), nodes[n].name) !=
              excluded.end() ||
          (selection && SelectionRulesOut(snapshot[n], job).has_value())) {
        nodes[n].schedulable = false;
        flipped_.push_back(n);
        continue;
      }
      if (gpu_types.empty()) continue;
      for (size_t g = 0; g < nodes[n].gpus.size(); ++g) {
        GpuState& gpu = nodes[n].gpus[g];
        if (gpu.memory_total_bytes > 0 &&
            std::find(gpu_types.begin(), gpu_types.end(),
                      snapshot[n].gpus[g].gpu_type) == gpu_types.end()) {
          gpu.memory_total_bytes = -gpu.memory_total_bytes;
          masked_.emplace_back(n, g);
        }
      }
    }
    if (!flipped_.empty() || !masked_.empty()) state_.BumpStateVersion();
  }
  ~JobViewScope() {
    std::vector<NodeState>& nodes = state_.MutableNodes();
    for (size_t n : flipped_) nodes[n].schedulable = true;
    for (const auto& [n, g] : masked_) {
      GpuState& gpu = nodes[n].gpus[g];
      gpu.memory_total_bytes = -gpu.memory_total_bytes;
    }
    if (!flipped_.empty() || !masked_.empty()) state_.BumpStateVersion();
  }
  JobViewScope(const JobViewScope&) = delete;
  JobViewScope& operator=(const JobViewScope&) = delete;

 private:
  PassState& state_;
  std::vector<size_t> flipped_;
  std::vector<std::pair<size_t, size_t>> masked_;
};

}  // namespace

// Whether `job` sees the cluster through a JobViewScope of its own beyond
// pre-flight exclusions and runtime needs: a node selection, or a gang that
// must keep to one GPU type on a cluster of several (`multi_type`).
bool NeedsSelectionView(const JobRequest& job, bool multi_type) {
  return HasNodeSelection(job) || job.constraints.allow_mixed_gpu_types ||
         (multi_type && job.kind == JobKind::kGang);
}

// Whether the snapshot's nodes have GPUs of more than one type.
bool MultiType(const ClusterSnapshot& cluster) {
  const std::string* first = nullptr;
  for (const NodeState& node : cluster.nodes) {
    for (const GpuState& gpu : node.gpus) {
      if (gpu.memory_total_bytes <= 0) continue;
      if (first == nullptr) {
        first = &gpu.gpu_type;
      } else if (gpu.gpu_type != *first) {
        return true;
      }
    }
  }
  return false;
}

namespace {

// Whether a pass over `queue` keeps the free-capacity index. Pre-flight
// exclusions, node requirements and node selections (JobRequest.constraints)
// are applied by marking nodes unschedulable (GPUs absent) per job, which
// the linear scans honour; the index is built once per pass.
bool IndexedPass(const SchedulerConfig& config, const ClusterSnapshot& cluster,
                 const std::vector<JobRequest>& queue) {
  if (config.linear_search) return false;
  const bool multi_type = MultiType(cluster);
  return std::none_of(queue.begin(), queue.end(), [&](const JobRequest& j) {
    return !j.constraints.excluded_nodes.empty() ||
           j.constraints.needs_container_runtime ||
           j.constraints.needs_cgroup_limits ||
           NeedsSelectionView(j, multi_type);
  });
}

}  // namespace

SchedulePass::SchedulePass(const ClusterSnapshot& cluster,
                           const SchedulerConfig& config,
                           const std::vector<JobRequest>& queue)
    : queue_(queue),
      state_(cluster, config, IndexedPass(config, cluster, queue)),
      multi_type_(MultiType(cluster)),
      ranking_(config.policy, state_.total_gpus(), state_.total_bytes(),
               state_.shape().max_gpu_memory_bytes),
      reservation_(state_),
      preemption_(state_, ranking_, queue),
      experiments_(state_),
      gangs_(state_),
      interleave_(state_),
      tail_ok_(state_.indexed() && config.policy.backfill &&
               config.policy.user_gpu_quota.empty() &&
               config.policy.project_gpu_quota.empty() &&
               state_.shape().node_count > 0 && state_.shape().gpu_count > 0) {
  for (const RunningJob& r : state_.running()) {
    const Usage u = state_.UsageOf(r.placement);
    ranking_.AddUsage(QueueName(r.queue), r.user, r.project, u, +1);
    if (!r.group.empty()) ranking_.AddGroupRunning(r.group);
  }
  interleave_.Init(queue);
}

// Decides every job of `queue`; decisions in scheduling order.
std::vector<Decision> SchedulePass::Run(const std::vector<JobRequest>& queue,
                                        int64_t explain_id,
                                        Explanation* explanation) {
  explain_id_ = explain_id;
  explanation_ = explanation;
  // One list per queue, configured queues first.
  struct QueueList {
    std::string name;
    double weight = 1.0;
    std::vector<QueueEntry> jobs;
    size_t next = 0;
    // DominantShare(name) / weight as of usage_version() == share_version.
    double share = 0;
    int64_t share_version = -1;
  };
  std::vector<QueueList> lists;
  absl::flat_hash_map<std::string, size_t> list_of;
  for (const QueueConfig& q : state_.policy().queues) {
    list_of[q.name] = lists.size();
    lists.push_back({q.name, q.weight > 0 ? q.weight : 1.0, {}, 0});
  }
  // Two sequential sweeps over `queue` (the only times most jobs are
  // loaded): the list of each job (so each list is allocated once), then
  // order keys and what the tail's fast path needs.
  std::vector<uint32_t> list_index(queue.size());
  {
    size_t last_list = SIZE_MAX;
    absl::string_view last_name;
    std::vector<size_t> counts(lists.size(), 0);
    for (size_t i = 0; i < queue.size(); ++i) {
      const absl::string_view name = QueueName(queue[i].queue);
      if (last_list == SIZE_MAX || name != last_name) {
        auto it = list_of.find(name);
        if (it == list_of.end()) {
          it = list_of.emplace(std::string(name), lists.size()).first;
          lists.push_back({std::string(name), 1.0, {}, 0});
          counts.push_back(0);
        }
        last_list = it->second;
        last_name = name;
      }
      list_index[i] = static_cast<uint32_t>(last_list);
      ++counts[last_list];
    }
    for (size_t l = 0; l < lists.size(); ++l) lists[l].jobs.reserve(counts[l]);
  }
  for (size_t i = 0; i < queue.size(); ++i) {
    lists[list_index[i]].jobs.push_back(MakeEntry(queue[i], i));
  }
  for (QueueList& list : lists) QueueRanking::OrderEntries(list.jobs);
  std::vector<Decision> decisions;
  decisions.reserve(queue.size());
  for (size_t left = queue.size(); left > 0; --left) {
    QueueList* best = nullptr;
    std::tuple<int, int, double, int64_t> best_key;
    for (QueueList& list : lists) {
      if (list.next == list.jobs.size()) continue;
      const auto [neg_priority, level, seq, position] =
          list.jobs[list.next].key;
      double share = 0.0;
      if (lists.size() > 1) {
        if (list.share_version != ranking_.usage_version()) {
          list.share = ranking_.DominantShare(list.name) / list.weight;
          list.share_version = ranking_.usage_version();
        }
        share = list.share;
      }
      auto key = std::make_tuple(neg_priority, level, share, seq);
      if (best == nullptr || key < best_key) {
        best = &list;
        best_key = key;
      }
    }
    const QueueEntry& entry = best->jobs[best->next++];
    const int position = static_cast<int>(decisions.size()) + 1;
    Decision& decision = decisions.emplace_back();
    if (!DecideTail(entry, decision)) Decide(*entry.job, position, decision);
  }
  return decisions;
}

QueueEntry SchedulePass::MakeEntry(const JobRequest& job, size_t position) {
  QueueEntry e;
  const auto [neg_priority, level, seq] = ranking_.OrderKey(job);
  e.key = {neg_priority, level, seq, position};
  e.job = &job;
  e.job_id = job.job_id;
  e.time_limit_s = job.time_limit_s;
  e.preemptible = job.preemptible;
  if (!tail_ok_) return e;
  const ShapeKey key{static_cast<int>(job.kind), job.gpu_fraction,
                     job.gpu_memory_bytes, job.nodes, job.gpus_per_node,
                     job.total_gpus, static_cast<int>(job.placement)};
  auto [it, added] =
      shape_ids_.try_emplace(key, static_cast<int>(shapes_.size()));
  if (added) {
    Shape& shape = shapes_.emplace_back();
    shape.rep = &job;
    shape.plain = !MalformedReason(job, state_.config()).has_value() &&
                  !InfeasibleReason(job, state_.shape()).has_value();
  }
  e.shape = it->second;
  // A gang that interleave packing may place on a running group
  // (InterleavePacker) takes the full rules.
  e.plain = shapes_[e.shape].plain && job.standing.preempted_for == 0 &&
            job.group_limit.max_running == 0 &&
            !job.standing.victims_stopping &&
            job.constraints.excluded_nodes.empty() &&
            !NeedsSelectionView(job, multi_type_) &&
            !(interleave_.active() && job.kind == JobKind::kGang &&
              job.interleave.usable());
  return e;
}

// The tail's fast path: decides `e` without loading its JobRequest when
// the full rules (DecideInner) would make it kRetryLater and change
// nothing: the head-of-queue hold is taken, the job is plain, a job of its
// shape already failed to fit the cluster as it is now (with or without
// the hold, as this job may use it), and it may not preempt (no searches
// left or nothing it outranks). Its reason is its shape's, shared. Returns
// false, deciding nothing, when the full rules must run. Once the cluster
// is full this decides the long tail of the queue in O(1) per job; the
// differential test (scheduler_index_test.cc) checks it decides exactly
// as the linear scans do.
bool SchedulePass::DecideTail(const QueueEntry& e, Decision& decision) {
  if (!tail_ok_ || !reservation_.taken() || !e.plain ||
      e.job_id == explain_id_) {
    return false;
  }
  const auto& [neg_priority, level, seq, position] = e.key;
  Shape& shape = shapes_[e.shape];
  const JobRequest& rep = *shape.rep;
  const bool honor_hold = !reservation_.MayUse(-neg_priority, level, seq,
                                               e.time_limit_s, e.preemptible);
  if (shape.no_fit_at[honor_hold] != state_.capacity_version()) {
    if (!KnownNotToFit(rep, honor_hold)) return false;
    shape.no_fit_at[honor_hold] = state_.capacity_version();
  }
  if (state_.policy().preemption && preemption_.SearchesLeft() &&
      preemption_.AnyMayBePreempted(-neg_priority, level, seq)) {
    return false;
  }
  decision.job_id = e.job_id;
  decision.outcome = Outcome::kRetryLater;
  if (state_.config().wait_reasons) {
    if (shape.reason_at != state_.state_version()) {
      shape.reason = WaitReason(rep);
      shape.reason_at = state_.state_version();
    }
    decision.reason = shape.reason;
  }
  return true;
}

// Decides `job` into `decision` (a default Decision, built in place in
// the result: no copy per job).
void SchedulePass::Decide(const JobRequest& job, int position,
                          Decision& decision) {
  if (NeedsSelectionView(job, multi_type_)) {
    DecideSelected(job, decision);
  } else {
    // Nodes excluded for this job count as unschedulable while it is
    // decided (placement, preemption, its hold), and only then. (A pass
    // with such a job uses the linear scans: the indexes do not see it.)
    JobViewScope excluded(state_, job, {});
    DecideInner(job, decision);
  }
  if (job.job_id == explain_id_ && explanation_ != nullptr) {
    Explain(job, decision, position);
  }
}

// Decides a job with a node selection (or a gang on a cluster of several
// GPU types): kInfeasible when no GPU type set it tries could ever hold it
// on the nodes it allows; else the full rules (DecideInner) with the first
// type set that fits now, or failing that the first that could ever hold
// it. A kRetryLater reason then names what its selection rules out.
void SchedulePass::DecideSelected(const JobRequest& job, Decision& decision) {
  const std::vector<std::vector<std::string>> sets =
      GpuTypeSets(state_.cluster_nodes(), job);
  std::vector<size_t> possible;
  std::string first_reason;
  if (!MalformedReason(job, state_.config())) {
    for (size_t i = 0; i < sets.size(); ++i) {
      std::optional<std::string> why = SelectionInfeasible(job, sets[i]);
      if (!why) {
        possible.push_back(i);
      } else if (first_reason.empty()) {
        first_reason = *std::move(why);
      }
    }
    if (possible.empty() && state_.shape().gpu_count > 0) {
      decision.job_id = job.job_id;
      decision.outcome = Outcome::kInfeasible;
      decision.reason = first_reason;
      return;
    }
  }
  size_t chosen = possible.empty() ? 0 : possible.front();
  if (possible.size() > 1) {
    const bool honor_hold = !reservation_.MayUse(job);
    for (size_t i : possible) {
      JobViewScope view(state_, job, sets[i]);
      if (FitsNow(job, honor_hold)) {
        chosen = i;
        break;
      }
    }
  }
  {
    JobViewScope view(state_, job, sets.empty() ? std::vector<std::string>{}
                                                : sets[chosen]);
    DecideInner(job, decision);
  }
  if (decision.outcome == Outcome::kRetryLater && HasNodeSelection(job) &&
      (state_.config().wait_reasons || job.job_id == explain_id_)) {
    int ruled_out = 0;
    for (const NodeState& node : state_.cluster_nodes()) {
      if (SelectionRulesOut(node, job)) ++ruled_out;
    }
    if (ruled_out > 0) {
      absl::StrAppendFormat(&decision.reason,
                            "; its node selection rules out %d of %d nodes",
                            ruled_out, state_.shape().node_count);
    }
  }
}

// Why `job` could never run on the nodes its selection allows with GPUs of
// `gpu_types` (empty: any), lost nodes included, ignoring use; the reason
// names the selection. nullopt when it could.
std::optional<std::string> SchedulePass::SelectionInfeasible(
    const JobRequest& job, const std::vector<std::string>& gpu_types) const {
  return SelectionInfeasibleOn(state_.cluster_nodes(), job, gpu_types);
}

void SchedulePass::DecideInner(const JobRequest& job, Decision& decision) {
  decision.job_id = job.job_id;
  const SchedulerConfig& config = state_.config();
  const PolicyConfig& policy = state_.policy();
  const ClusterShape& shape = state_.shape();
  if (std::optional<std::string> reason = MalformedReason(job, config)) {
    decision.outcome = Outcome::kInfeasible;
    decision.reason = *std::move(reason);
    return;
  }
  if (shape.node_count == 0) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason = "no nodes have registered yet";
    return;
  }
  if (shape.gpu_count == 0) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason = "no node with a GPU has registered yet";
    return;
  }
  if (std::optional<std::string> reason = InfeasibleReason(job, shape)) {
    decision.outcome = Outcome::kInfeasible;
    decision.reason = *std::move(reason);
    return;
  }
  if (job.standing.preempted_for != 0) {
    if (preemption_.WaitsForPreemptor(job.standing.preempted_for)) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason =
          absl::StrFormat("was preempted for job %d and waits until it starts",
                          job.standing.preempted_for);
      return;
    }
  }
  if (std::optional<std::string> quota = ranking_.QuotaReason(job)) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason = absl::StrCat("over quota: ", *quota);
    return;
  }
  const JobRequest::GroupLimit& limit = job.group_limit;
  if (limit.max_running > 0 && !limit.group.empty()) {
    const int running = ranking_.GroupRunning(limit.group);
    if (running >= limit.max_running) {
      decision.outcome = Outcome::kRetryLater;
      decision.reason = absl::StrFormat(
          "group %s: %d of at most %d jobs running (its throttle)", limit.group,
          running, limit.max_running);
      return;
    }
  }
  if (!policy.backfill && fifo_blocker_ != 0) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason = absl::StrFormat(
        "waiting for job %d, earlier in the queue, to start (strict FIFO)",
        fifo_blocker_);
    return;
  }
  const bool honor_hold = !reservation_.MayUse(job);
  if (!KnownNotToFit(job, honor_hold) &&
      Place(job, honor_hold, decision.placement)) {
    decision.outcome = Outcome::kPlaced;
    Account(job, decision.placement);
    return;
  }
  if (job.standing.victims_stopping) {
    decision.outcome = Outcome::kRetryLater;
    decision.reason =
        "waiting for the jobs it preempted to stop and free their GPUs";
    return;
  }
  if (policy.preemption) {
    if (std::optional<std::vector<int64_t>> victims = preemption_.TryPreempt(
            job, honor_hold, [&] { return FitsNow(job, honor_hold); })) {
      Place(job, honor_hold, decision.placement);
      // The victims run until their tasks have stopped: for the rest of this
      // pass their GPUs stay taken (by them, and by the preemptor's placement
      // on top), so no later job is placed where a victim still runs. A
      // GPU's reservation may then exceed its memory here; nothing fits it.
      for (int v : preemption_.last_victims()) state_.ApplyRunning(v, +1);
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
  if (interleave_.TryPack(job, reservation_.taken(), decision)) {
    Account(job, decision.placement);
    return;
  }
  decision.outcome = Outcome::kRetryLater;
  if (config.wait_reasons || job.job_id == explain_id_) {
    decision.reason = WaitReason(job);
  }
  if (!policy.backfill && fifo_blocker_ == 0) fifo_blocker_ = job.job_id;
  const double waited_s = job.standing.waited_s;
  if (!reservation_.taken() && waited_s < policy.reservation_min_wait_s) {
    // Too young to reserve (Slurm's bf_min_age_reserve): later jobs may
    // take the GPUs it would need until it has waited long enough.
    if (config.wait_reasons || job.job_id == explain_id_) {
      absl::StrAppend(&decision.reason, "; reserves GPUs once it has waited ",
                      ShortDuration(policy.reservation_min_wait_s), " (waited ",
                      ShortDuration(std::max(waited_s, 0.0)), ")");
    }
    return;
  }
  if (!reservation_.taken()) {
    reservation_.Take(job, [&] { return FitsNow(job, /*honor_hold=*/false); });
    decision.eta_s = reservation_.eta_s();
    if (reservation_.eta_s() >= 0) {
      absl::StrAppend(&decision.reason, "; holds a reservation on ",
                      reservation_.description(), ", estimated start in ",
                      ShortDuration(reservation_.eta_s()));
    }
  }
  return;
}

void SchedulePass::Account(const JobRequest& job, const Placement& placement) {
  ranking_.AddUsage(QueueName(job.queue), job.user, job.project,
                    state_.UsageOf(placement), +1);
  if (!job.group_limit.group.empty()) {
    ranking_.AddGroupRunning(job.group_limit.group);
  }
  preemption_.MarkPlaced(job.job_id);
  if (interleave_.active()) {
    interleave_.AddPlaced(placement, job.job_id, &job.interleave);
  }
}

bool SchedulePass::Place(const JobRequest& job, bool honor_hold,
                         Placement& placement) {
  const bool placed = job.kind == JobKind::kExperiment
                          ? experiments_.Place(job, honor_hold, placement)
                          : gangs_.Place(job, honor_hold, placement);
  if (!placed && state_.indexed()) {
    not_fitting_[FitKey(job, honor_hold)] = state_.capacity_version();
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
// added (then this one cannot fit either; see capacity_version()): once the
// cluster is full, the long tail of the queue costs a hash lookup per job,
// placements in between included.
bool SchedulePass::KnownNotToFit(const JobRequest& job, bool honor_hold) const {
  if (!state_.indexed()) return false;
  auto it = not_fitting_.find(FitKey(job, honor_hold));
  return it != not_fitting_.end() && it->second == state_.capacity_version();
}

bool SchedulePass::FitsNow(const JobRequest& job, bool honor_hold) const {
  if (job.kind == JobKind::kExperiment) {
    return experiments_.Find(job, honor_hold).has_value();
  }
  return gangs_.Fits(job, honor_hold);
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
  if (std::optional<std::string> reason =
          internal::InfeasibleReason(job, internal::ClusterShape(cluster))) {
    return reason;
  }
  if (cluster.nodes.empty() ||
      !internal::NeedsSelectionView(job, internal::MultiType(cluster))) {
    return std::nullopt;
  }
  std::string first;
  for (const std::vector<std::string>& types :
       GpuTypeSets(cluster.nodes, job)) {
    std::optional<std::string> reason =
        internal::SelectionInfeasibleOn(cluster.nodes, job, types);
    if (!reason) return std::nullopt;
    if (first.empty()) first = *std::move(reason);
  }
  return first;
}

}  // namespace trainctl::sched
