// Scheduler: interleave packing (InterleavePacker, PolicyConfig.interleave):
// groups of running jobs with identical placements, and packing a waiting
// gang onto the group it interleaves with best. The interleave arithmetic
// itself is in interleave.cc.

#include "coordinator/sched/interleave_packer.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

namespace trainctl::sched::internal {

// The identity of a placement: node names and GPU indices in rank order.
std::string InterleavePacker::PlacementKey(const Placement& placement) {
  std::string key;
  for (const NodeAssignment& a : placement.nodes) {
    absl::StrAppend(&key, a.node, ":", absl::StrJoin(a.gpu_indices, ","), ";");
  }
  return key;
}

// Groups the running jobs by placement, once per call, when packing is on
// and some gang of the queue has a usable profile (otherwise packing
// costs nothing).
void InterleavePacker::Init(const std::vector<JobRequest>& queue) {
  if (!state_.policy().interleave.enabled) return;
  active_ = std::any_of(queue.begin(), queue.end(), [](const JobRequest& j) {
    return j.kind == JobKind::kGang && j.interleave.usable();
  });
  if (!active_) return;
  const std::vector<RunningJob>& running = state_.running();
  for (int i = 0; i < static_cast<int>(running.size()); ++i) {
    AddMember(running[i].placement,
              {running[i].job_id, &running[i].interleave, i});
  }
}

void InterleavePacker::AddMember(const Placement& placement,
                                 GroupMember member) {
  const std::string key = PlacementKey(placement);
  auto [it, added] = group_of_.try_emplace(key, groups_.size());
  if (added) {
    PackGroup& g = groups_.emplace_back();
    g.placement = placement;
    for (const NodeAssignment& a : placement.nodes) {
      g.gpus += static_cast<int>(a.gpu_indices.size());
    }
  }
  groups_[it->second].members.push_back(member);
}

// Whether `job` may join group `g` apart from the interleave criterion:
// its GPU count and layout, free of the hold, on schedulable nodes.
bool InterleavePacker::GroupTakes(const JobRequest& job, const PackGroup& g,
                                  bool hold_taken) const {
  if (g.gpus !=
      static_cast<int>(DemandGpus(job, state_.shape().max_gpu_memory_bytes))) {
    return false;
  }
  if (job.nodes >= 1) {
    if (static_cast<int>(g.placement.nodes.size()) != job.nodes) return false;
    for (const NodeAssignment& a : g.placement.nodes) {
      if (static_cast<int>(a.gpu_indices.size()) != job.gpus_per_node) {
        return false;
      }
    }
  }
  for (const NodeAssignment& a : g.placement.nodes) {
    const std::optional<int> index = state_.NodeIndex(a.node);
    if (!index) return false;
    const int n = *index;
    if (!state_.nodes()[n].schedulable) return false;
    const std::vector<GpuState>& gpus = state_.nodes()[n].gpus;
    // A GPU the job's GPU type rules out counts as absent (not usable).
    for (const GpuState& gpu : gpus) {
      if (!IsUsable(gpu) &&
          std::find(a.gpu_indices.begin(), a.gpu_indices.end(), gpu.index) !=
              a.gpu_indices.end()) {
        return false;
      }
    }
    if (!hold_taken) continue;
    for (int pos = 0; pos < static_cast<int>(gpus.size()); ++pos) {
      if (state_.IsHeld(n, pos) &&
          std::find(a.gpu_indices.begin(), a.gpu_indices.end(),
                    gpus[pos].index) != a.gpu_indices.end()) {
        return false;
      }
    }
  }
  return true;
}

// (interleaved iteration time, utilization) of `members`, memoized by the
// members' profiles (jobs of one model share a profile, so a long queue
// asks the same few questions).
std::pair<double, double> InterleavePacker::GroupFigures(
    std::vector<const InterleaveProfile*> members) {
  std::vector<double> key = CanonicalGroupKey(members);
  auto it = figures_.find(key);
  if (it != figures_.end()) return it->second;
  const auto span = absl::MakeConstSpan(members);
  std::pair<double, double> figures(0, 0);
  const InterleaveConfig& config = state_.policy().interleave;
  if (InterleaveWorthwhile(span, config)) {
    figures = {InterleavedIterationTime(span, config),
               InterleaveUtilization(span, config)};
  }
  figures_.emplace(std::move(key), figures);
  return figures;
}

bool InterleavePacker::TryPack(const JobRequest& job, bool hold_taken,
                               Decision& decision) {
  if (!active_ || job.kind != JobKind::kGang || !job.interleave.usable() ||
      job.standing.victims_stopping) {
    return false;
  }
  // A job of the same shape and profile found no group since the last
  // change to the cluster (every placement, packing, preemption and the
  // hold bump the state version): this one finds none either. So a long
  // queue costs one search per distinct (shape, profile), not per job.
  std::vector<double> key = {
      static_cast<double>(DemandGpus(job, state_.shape().max_gpu_memory_bytes)),
      static_cast<double>(job.nodes), static_cast<double>(job.gpus_per_node),
      job.interleave.iteration_time};
  key.insert(key.end(), job.interleave.resource_time.begin(),
             job.interleave.resource_time.end());
  // Exclusions (pre-flight) and a node selection make a job's view its
  // own: not remembered.
  const bool memo = job.constraints.excluded_nodes.empty() &&
                    !HasNodeSelection(job) &&
                    !job.constraints.allow_mixed_gpu_types;
  auto failed = failed_.find(key);
  if (memo && failed != failed_.end() &&
      failed->second == state_.state_version()) {
    return false;
  }
  int best = -1;
  double best_utilization = 0;
  size_t best_size = 0;
  std::vector<const InterleaveProfile*> profiles;
  for (int gi = 0; gi < static_cast<int>(groups_.size()); ++gi) {
    const PackGroup& g = groups_[gi];
    if (!GroupTakes(job, g, hold_taken)) continue;
    profiles.clear();
    bool ok = true;
    for (const GroupMember& m : g.members) {
      // Preempted by this call: gone from these GPUs.
      if (m.running >= 0 && state_.evicted(m.running)) continue;
      if (!m.profile->usable()) {
        ok = false;
        break;
      }
      profiles.push_back(m.profile);
    }
    if (!ok || profiles.empty() ||
        static_cast<int>(profiles.size()) >=
            state_.policy().interleave.max_jobs) {
      continue;
    }
    profiles.push_back(&job.interleave);
    const auto [period, utilization] = GroupFigures(profiles);
    if (!(period > 0)) continue;
    if (best < 0 || utilization > best_utilization ||
        (utilization == best_utilization && profiles.size() < best_size)) {
      best = gi;
      best_utilization = utilization;
      best_size = profiles.size();
    }
  }
  if (best < 0) {
    if (memo) failed_[std::move(key)] = state_.state_version();
    return false;
  }
  const Placement placement = groups_[best].placement;
  for (const GroupMember& m : groups_[best].members) {
    if (m.running >= 0 && state_.evicted(m.running)) continue;
    decision.packed_with.push_back(m.job_id);
  }
  std::sort(decision.packed_with.begin(), decision.packed_with.end());
  for (const NodeAssignment& a : placement.nodes) {
    const int n = *state_.NodeIndex(a.node);
    for (GpuState& gpu : state_.MutableNode(n).gpus) {
      if (std::find(a.gpu_indices.begin(), a.gpu_indices.end(), gpu.index) ==
          a.gpu_indices.end()) {
        continue;
      }
      gpu.reserved_bytes += PlacementBytesOn(placement, gpu);
      gpu.task_count += 1;
    }
    state_.NodeChanged(n);
  }
  decision.outcome = Outcome::kPlaced;
  decision.placement = placement;
  std::vector<std::string> ids;
  for (int64_t id : decision.packed_with) ids.push_back(absl::StrCat(id));
  decision.reason = absl::StrFormat(
      "interleaved with job%s %s on their GPUs (multi-resource packing)",
      ids.size() == 1 ? "" : "s", JoinList(ids, "and"));
  return true;
}

}  // namespace trainctl::sched::internal
