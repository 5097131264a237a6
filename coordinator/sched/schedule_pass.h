#ifndef TRAINCTL_COORDINATOR_SCHED_SCHEDULE_PASS_H_
#define TRAINCTL_COORDINATOR_SCHED_SCHEDULE_PASS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "coordinator/sched/experiment_placer.h"
#include "coordinator/sched/gang_placer.h"
#include "coordinator/sched/interleave_packer.h"
#include "coordinator/sched/pass_state.h"
#include "coordinator/sched/preemption.h"
#include "coordinator/sched/queue_ranking.h"
#include "coordinator/sched/reservation.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {

// One Schedule() (or Explain()) call: the driver over the phases. It owns
// the working state (PassState) and one object per phase (QueueRanking,
// Reservation, Preemption, ExperimentPlacer, GangPlacer, InterleavePacker),
// walks the queue in order and applies the rules to each job in the order
// they apply (Decide), and keeps the caches that let the tail of a long
// queue be decided in O(1) a job (DecideTail) and jobs of one shape share
// one wait reason. Single-threaded; refers to its arguments, which must
// outlive it.
class SchedulePass {
 public:
  // A pass over `cluster` under `config` for the pending jobs `queue`: the
  // working state, the running jobs' usage counted, packing groups formed.
  SchedulePass(const ClusterSnapshot& cluster, const SchedulerConfig& config,
               const std::vector<JobRequest>& queue);
  // Decides every job of `queue` (the one given to the constructor);
  // decisions in scheduling order. When `explanation` is set, fills it for
  // job `explain_id`.
  std::vector<Decision> Run(const std::vector<JobRequest>& queue,
                            int64_t explain_id, Explanation* explanation);

 private:
  // What decides a job's fit and wait reason: kind, size, placement.
  using ShapeKey = std::tuple<int, double, int64_t, int, int, int, int>;
  struct Shape {
    // The first job of the shape (its fit and reason stand for all).
    const JobRequest* rep = nullptr;
    // Well-formed and feasible on this cluster.
    bool plain = false;
    // The capacity version at which a job of the shape was last seen not
    // to fit, per honor_hold (KnownNotToFit without hashing), and its wait
    // reason as of reason_at (WaitReason's, which depends only on the shape
    // and the state).
    int64_t no_fit_at[2] = {-1, -1};
    int64_t reason_at = -1;
    std::string reason;
  };
  // What decides whether Place(job, honor_hold) succeeds, besides the state.
  using FitKeyT = std::tuple<int, double, int64_t, int, int, int, int, bool>;

  // scheduler.cc: the queue walk and deciding one job.
  QueueEntry MakeEntry(const JobRequest& job, size_t position);
  bool DecideTail(const QueueEntry& e, Decision& decision);
  void Decide(const JobRequest& job, int position, Decision& decision);
  void DecideInner(const JobRequest& job, Decision& decision);
  void DecideSelected(const JobRequest& job, Decision& decision);
  std::optional<std::string> SelectionInfeasible(
      const JobRequest& job, const std::vector<std::string>& gpu_types) const;
  void Account(const JobRequest& job, const Placement& placement);
  bool Place(const JobRequest& job, bool honor_hold, Placement& placement);
  static FitKeyT FitKey(const JobRequest& job, bool honor_hold);
  bool KnownNotToFit(const JobRequest& job, bool honor_hold) const;
  bool FitsNow(const JobRequest& job, bool honor_hold) const;

  // scheduler_explain.cc: wait reasons and Scheduler::Explain.
  void Explain(const JobRequest& job, const Decision& decision, int position);
  std::optional<std::string> NodeShortfall(const JobRequest& job, int n) const;
  std::string WaitReason(const JobRequest& job);

  const std::vector<JobRequest>& queue_;
  PassState state_;
  // The cluster has GPUs of more than one type (gangs then keep to one).
  const bool multi_type_;
  QueueRanking ranking_;
  Reservation reservation_;
  Preemption preemption_;
  ExperimentPlacer experiments_;
  GangPlacer gangs_;
  InterleavePacker interleave_;
  // Whether DecideTail may decide jobs in this pass: the indexed search
  // (KnownNotToFit), backfill on (no strict-FIFO reasons), no quotas (no
  // per-user reasons), a cluster with GPUs.
  const bool tail_ok_;
  absl::flat_hash_map<ShapeKey, int> shape_ids_;
  std::vector<Shape> shapes_;
  // FitKey -> the capacity version at which Place last failed for it.
  absl::flat_hash_map<FitKeyT, int64_t> not_fitting_;
  // WaitReason's sentences by (shape, facts). The hold's blocked reason is
  // the same for every job after the hold is taken.
  absl::node_hash_map<
      std::tuple<int, double, int64_t, int, int, int, bool, bool, int64_t, int>,
      std::string>
      reasons_;
  // The last sentence per shape and the state version it was made at.
  absl::flat_hash_map<std::tuple<int, double, int64_t, int, int, int>,
                      std::pair<int64_t, const std::string*>>
      last_reason_;
  // Strict FIFO: the first job that waits for GPUs.
  int64_t fifo_blocker_ = 0;
  int64_t explain_id_ = 0;
  Explanation* explanation_ = nullptr;
};

}  // namespace trainctl::sched::internal

#endif  // TRAINCTL_COORDINATOR_SCHED_SCHEDULE_PASS_H_
