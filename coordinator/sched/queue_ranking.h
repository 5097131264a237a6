#ifndef TRAINCTL_COORDINATOR_SCHED_QUEUE_RANKING_H_
#define TRAINCTL_COORDINATOR_SCHED_QUEUE_RANKING_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

// A pending job in a queue list, with its order key worked out once and
// what the tail's fast path needs, so that a job decided on the fast path is
// never loaded again (at 100,000 pending jobs, loading each JobRequest in
// scheduling order, a cache miss per job, was most of a pass).
struct QueueEntry {
  // QueueRanking::OrderKey, then the position in the queue (so the order
  // is total).
  std::tuple<int, int, int64_t, size_t> key;
  const JobRequest* job = nullptr;
  int64_t job_id = 0;
  int64_t time_limit_s = 0;
  // Index in the pass's shapes (-1 when the fast path is off for this pass).
  int shape = -1;
  // Nothing but its shape and order key can change its decision: a
  // well-formed shape that fits the cluster, not preempted for a job
  // (standing.preempted_for), no victims stopping, no excluded nodes, not a
  // gang interleave packing could place.
  bool plain = false;
  bool preemptible = false;
};

// Queue order and usage for one Schedule() call: each job's order key
// (priority, LAS level, submit order), sorting a queue list by it, the
// running usage per queue (its weighted dominant share, DRF), per user and
// per project (hard GPU quotas), and the jobs holding GPUs per job group
// (group limits). Usage is in whole-GPU equivalents and bytes; shares are
// fractions of the schedulable GPUs and bytes. Placements and preemptions
// of the call are added as they happen (AddUsage), so later jobs see them.
// Single-threaded: used within one Schedule() call.
class QueueRanking {
 public:
  // Under `policy`, on a cluster of `total_gpus` schedulable GPUs holding
  // `total_bytes` (shares' denominators; 0: every share is 0) whose largest
  // GPU has `max_gpu_memory_bytes` (demand of byte-sized experiments).
  QueueRanking(const PolicyConfig& policy, double total_gpus,
               double total_bytes, int64_t max_gpu_memory_bytes);

  // (-priority, LAS level, submit_seq) of `job`: smaller goes first.
  std::tuple<int, int, int64_t> OrderKey(const JobRequest& job) const;

  // Sorts one queue list by key. Jobs arrive mostly in submit order:
  // O(Q) for a sorted list, O(Q + k log k) for k jobs out of place.
  static void OrderEntries(std::vector<QueueEntry>& jobs);

  // Usage of queue `queue` as its dominant share: the larger of its GPU
  // and byte fractions of the cluster.
  double DominantShare(const std::string& queue) const;
  // Bumped by every AddUsage (cache shares against it).
  int64_t usage_version() const { return usage_version_; }

  // Adds (sign +1) or removes (-1) `u` to queue `queue`, `user` and
  // `project`.
  void AddUsage(absl::string_view queue, const std::string& user,
                const std::string& project, const Usage& u, int sign);

  // Why a hard quota keeps `job` waiting ("user alice: quota 4 GPUs, 3 GPUs
  // in use, this job needs 2 GPUs"), or nullopt when none does.
  std::optional<std::string> QuotaReason(const JobRequest& job) const;

  // Jobs of job group `group` holding GPUs, and one more.
  int GroupRunning(const std::string& group) const;
  void AddGroupRunning(const std::string& group) { ++group_running_[group]; }

 private:
  const PolicyConfig& policy_;
  const double total_gpus_;
  const double total_bytes_;
  const int64_t max_gpu_memory_bytes_;
  absl::flat_hash_map<std::string, Usage> queue_usage_;
  absl::flat_hash_map<std::string, double> user_gpus_;
  absl::flat_hash_map<std::string, double> project_gpus_;
  // Jobs of each group (JobRequest.group_limit) holding GPUs: running ones
  // and this call's placements.
  absl::flat_hash_map<std::string, int> group_running_;
  int64_t usage_version_ = 0;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_QUEUE_RANKING_H_
