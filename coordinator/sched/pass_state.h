#ifndef TRAINCTL_COORDINATOR_SCHED_PASS_STATE_H_
#define TRAINCTL_COORDINATOR_SCHED_PASS_STATE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "coordinator/sched/free_capacity_index.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

// The working state of one Schedule() call that every phase reads: a copy of
// the snapshot's nodes that placements are applied to (and preemption
// victims' GPUs freed from), the head-of-queue hold's GPU marks, which
// running jobs this call evicts, the free-capacity index kept in step with
// all of it, and two version counters the phases' caches are keyed on.
//
// Phases read it through the const accessors; the few that change it
// (placing, holding, preempting) go through the mutators, each of which
// re-indexes what it touched. Units: bytes for memory, GPUs for counts;
// nodes and GPUs by position in nodes() (as in the snapshot), running jobs
// by position in running(). Single-threaded: used within one Schedule()
// call. It refers to the snapshot and the config, which must outlive it.
class PassState {
 public:
  // The GPUs of a running job: (node position, GPU positions) pairs.
  using NodeGpus = std::vector<std::pair<int, std::vector<int>>>;

  // A working copy of `cluster`. `indexed`: keep the free-capacity index
  // (else the phases use the linear scans).
  PassState(const ClusterSnapshot& cluster, const SchedulerConfig& config,
            bool indexed);
  PassState(const PassState&) = delete;
  PassState& operator=(const PassState&) = delete;

  // The call's config and its policy.
  const SchedulerConfig& config() const { return config_; }
  const PolicyConfig& policy() const { return config_.policy; }
  // Whether the free-capacity index is kept (index() is valid).
  bool indexed() const { return indexed_; }
  // The whole cluster, lost nodes included, ignoring use.
  const ClusterShape& shape() const { return shape_; }
  // The snapshot's nodes (with GPU UUIDs and NVLink peers).
  const std::vector<NodeState>& cluster_nodes() const { return cluster_nodes_; }
  // The working copy (no UUIDs, no peers).
  const std::vector<NodeState>& nodes() const { return nodes_; }
  // The snapshot's running jobs (those evicted by this call included).
  const std::vector<RunningJob>& running() const { return running_; }
  // The position of the node named `name`, if the snapshot has it.
  std::optional<int> NodeIndex(const std::string& name) const {
    auto it = node_index_.find(name);
    if (it == node_index_.end()) return std::nullopt;
    return it->second;
  }
  // Schedulable GPUs and their bytes (DRF shares' denominators).
  double total_gpus() const { return total_gpus_; }
  double total_bytes() const { return total_bytes_; }
  const HeldGpus& held() const { return held_; }
  // Inline: every GPU lookup asks it.
  bool IsHeld(int node, int gpu) const { return held_[node][gpu]; }
  const FreeCapacityIndex& index() const { return index_; }
  // Bumped by every change to nodes() or held() and by taking the hold.
  int64_t state_version() const { return state_version_; }
  // Bumped by every change that may add free capacity (freeing a running
  // job's GPUs, ApplyRunning(-1)). Everything else a pass does (placements,
  // the hold) only takes capacity away, and whether a job fits is monotone
  // in free capacity: a shape that did not fit at this version still does
  // not, however many placements came since.
  int64_t capacity_version() const { return capacity_version_; }
  // Whether running()[i] is preempted by this call.
  bool evicted(int i) const { return evicted_[i]; }

  // Whole free GPUs of node `n` a gang may take now (0 when unschedulable),
  // held ones left out when `honor_hold`.
  int GangFreeCount(int n, bool honor_hold) const;
  // GPUs and bytes `placement` holds on the snapshot's GPUs.
  Usage UsageOf(const Placement& placement) const;

  // Node `n` to change; call NodeChanged(n) after.
  NodeState& MutableNode(int n) { return nodes_[n]; }
  // Every node, for marking some unschedulable for one job (not indexed:
  // a pass with such a job runs with indexed() false).
  std::vector<NodeState>& MutableNodes() { return nodes_; }
  // Re-indexes node `n` after its GPUs or held marks changed.
  void NodeChanged(int n) {
    ++state_version_;
    if (indexed_) index_.NodeChanged(nodes_, held_, n);
  }
  // Marks GPU `g` of node `n` (or every GPU of node `n`) held, and
  // re-indexes the node.
  void Hold(int n, int g);
  void HoldNode(int n);
  // Bumps state_version() for a change the phases' caches must see that
  // touches no node (taking the hold).
  void BumpStateVersion() { ++state_version_; }
  // Frees (sign -1) or re-takes (+1) the GPUs of running()[i].
  void ApplyRunning(int i, int sign);
  // Marks running()[i] as preempted by this call.
  void Evict(int i) { evicted_[i] = true; }
  // The GPUs of running()[i] in nodes(), nodes not in the snapshot left
  // out; worked out on first use.
  const NodeGpus& RunningGpus(int i);

 private:
  static std::vector<NodeState> MutableCopy(
      const std::vector<NodeState>& nodes);

  const SchedulerConfig& config_;
  const bool indexed_;
  const ClusterShape shape_;
  const std::vector<NodeState>& cluster_nodes_;
  std::vector<NodeState> nodes_;
  absl::flat_hash_map<std::string, int> node_index_;
  const std::vector<RunningJob>& running_;
  std::vector<std::optional<NodeGpus>> running_gpus_;
  std::vector<bool> evicted_;
  // held_[node][gpu]: reserved for the head-of-queue job.
  HeldGpus held_;
  FreeCapacityIndex index_;
  double total_gpus_ = 0;
  double total_bytes_ = 0;
  int64_t state_version_ = 0;
  int64_t capacity_version_ = 0;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_PASS_STATE_H_
