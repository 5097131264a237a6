#ifndef TRAINCTL_COORDINATOR_SCHED_FREE_CAPACITY_INDEX_H_
#define TRAINCTL_COORDINATOR_SCHED_FREE_CAPACITY_INDEX_H_

#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

// held[n][g]: GPU g of node n is reserved for the head-of-queue job (the
// Reservation phase); same shape as the nodes it describes.
using HeldGpus = std::vector<std::vector<bool>>;

// The free-capacity indexes of one Schedule() call (SchedulerConfig.
// linear_search off): per GPU memory size, the GPUs that can take another
// task in best-fit order; per count, the schedulable nodes with that many
// whole free GPUs (all of them, and not counting held GPUs). Lookups cost
// O(log GPUs) instead of the linear scans' O(GPUs).
//
// The index mirrors a list of nodes and their held marks that it does not
// own: the caller (PassState) passes them in and calls NodeChanged(n) after
// every change to node n or its held marks, so that every answer equals
// what the linear scans compute. Units: bytes for memory, GPUs for counts;
// nodes and GPUs by their positions in the node list (not names or NVML
// indexes). Single-threaded: used within one Schedule() call.
class FreeCapacityIndex {
 public:
  // Best-fit key of GPU (n, g) in its memory class: (free bytes, whole free
  // GPUs on node n, rank of n's name, GPU index, n, g): the linear scan's
  // order (room left, whole free, name, index, scan order) within a class.
  using ExpKey = std::tuple<int64_t, int, int, int, int, int>;
  // The GPUs of one memory size that can take another task (usable, on a
  // schedulable node, below max_tasks_per_gpu).
  struct MemoryClass {
    int64_t memory_bytes = 0;
    absl::btree_set<ExpKey> gpus;
    // Free bytes of every GPU of the class, at the task limit or not (wait
    // reasons).
    absl::btree_multiset<int64_t> free_all;
  };
  // (name rank, n) of the schedulable nodes with one count of whole free
  // GPUs, in name order.
  using NodeBucket = absl::btree_set<std::pair<int, int>>;

  // An empty index; a GPU running `max_tasks_per_gpu` tasks takes no more.
  explicit FreeCapacityIndex(int max_tasks_per_gpu)
      : max_tasks_per_gpu_(max_tasks_per_gpu) {}

  // Indexes every node of `nodes` (held marks from `held`). Call once.
  void Build(const std::vector<NodeState>& nodes, const HeldGpus& held);

  // Re-indexes node `n` after its GPUs or held marks changed. Only the
  // entries whose keys changed are touched. Unschedulable nodes are never
  // indexed.
  void NodeChanged(const std::vector<NodeState>& nodes, const HeldGpus& held,
                   int n);

  // The best-fit GPU for `job` (an experiment): in each memory class the
  // first GPU with free bytes >= its reservation, skipping held GPUs if
  // `honor_hold`; the one with the least room left wins. nullopt when no
  // GPU has room. O(classes x log GPUs), plus the held GPUs skipped.
  std::optional<GpuRef> BestExperimentGpu(const JobRequest& job,
                                          bool honor_hold,
                                          const HeldGpus& held) const;

  // The node buckets by whole free GPU count; index k holds the nodes with
  // exactly k (not counting held GPUs when `honor_hold`).
  const std::vector<NodeBucket>& Buckets(bool honor_hold) const {
    return honor_hold ? unheld_buckets_ : all_buckets_;
  }

  // Whole free GPUs of node `n` (0 when unschedulable), not counting held
  // ones when `honor_hold`.
  int FreeCount(int n, bool honor_hold) const {
    return honor_hold ? unheld_free_[n] : whole_free_[n];
  }

  // Whether some layout of `layouts` has enough nodes with per_node whole
  // free GPUs. O(layouts x GPUs per node).
  bool AnyLayoutFits(const Layouts& layouts, bool honor_hold) const;

  // The memory classes, in the order first seen.
  const std::vector<MemoryClass>& classes() const { return classes_; }

 private:
  std::vector<MemoryClass> classes_;
  // class_of_[n][g]: index in classes_, -1 for an unusable GPU or one on an
  // unschedulable node. exp_key_[n][g]: its key in that class, if there.
  std::vector<std::vector<int>> class_of_;
  std::vector<std::vector<std::optional<ExpKey>>> exp_key_;
  // free_key_[n][g]: its entry in the class's free_all, if there.
  std::vector<std::vector<std::optional<int64_t>>> free_key_;
  std::vector<int> name_rank_;
  // Whole free GPUs of node n (0 when unschedulable), and those not held.
  std::vector<int> whole_free_;
  std::vector<int> unheld_free_;
  // Whether node n is in the buckets (schedulable nodes, once indexed).
  std::vector<bool> node_indexed_;
  // [count]: the nodes with that many whole free (resp. whole free, unheld)
  // GPUs.
  std::vector<NodeBucket> all_buckets_;
  std::vector<NodeBucket> unheld_buckets_;
  int max_tasks_per_gpu_ = 1;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_FREE_CAPACITY_INDEX_H_
