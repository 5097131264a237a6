#ifndef TRAINCTL_COORDINATOR_MEASUREMENTS_H_
#define TRAINCTL_COORDINATOR_MEASUREMENTS_H_

// What the coordinator measures of its GPUs and jobs, and the auto-packer
// that acts on it: the usage history (UsageHistory: per-task usage from
// heartbeats, per-job utilization samples, reported throughput) and the
// packer's learned state (sched::Packer: caps per GPU, ramp plans).
//
// Which task is live and where it runs is job state: this part reads it from
// the JobTable, NodeRegistry and DrainingTasks it is given, never keeps it.
//
// Thread safety: usage() has its own lock (usage_history.h) and may be used
// without the coordinator's lock; everything else is not thread-safe and is
// called under the coordinator's lock, which guards it.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "coordinator/draining_tasks.h"
#include "coordinator/job_table.h"
#include "coordinator/node_registry.h"
#include "coordinator/sched/packer.h"
#include "coordinator/sched/scheduler.h"
#include "coordinator/usage_history.h"

namespace trainctl::coord {

class Measurements {
 public:
  // `usage`: the history's configuration (its sample_period is how often
  // SampleDue says yes); `packer`: the auto-packer's.
  Measurements(const UsageHistoryConfig& usage, const sched::PackerConfig& packer)
      : sample_period_(usage.sample_period), usage_(usage), packer_(packer) {}

  UsageHistory& usage() { return usage_; }
  const UsageHistory& usage() const { return usage_; }
  sched::Packer& packer() { return packer_; }

  // Hands the usage history the TaskUsage samples of heartbeat `hb` for
  // tasks `node` runs: a live task of that rank in its job's current
  // attempt, placed on `node`. Any other sample is ignored (a node never
  // speaks for another node's task; a running maximum like the peak memory
  // would keep a forged value for good) and logged once per heartbeat.
  // Returns how many were ignored.
  int RecordTaskUsage(const JobTable& jobs, const std::string& node,
                      const v1::Heartbeat& hb);

  // Whether a usage sample is due at `now` (every sample_period); when it
  // is, the next one is due a period later.
  bool SampleDue(absl::Time now);

  // One sample at `now`: the live tasks of every active job with the GPUs
  // they hold (as their nodes last reported them) go to the usage history;
  // the packer observes every GPU (PackGpus over `snapshot`), and gets the
  // throughput of GPUs whose auto-packed trials all settled and all report
  // one (its back-off).
  void Sample(absl::Time now, const JobTable& jobs, const NodeRegistry& nodes,
              const DrainingTasks& draining, const sched::ClusterSnapshot& snapshot);

  // Every GPU of `snap` as the packer sees it at `now_ms` (Unix ms): its
  // measurements (smoothed utilization and GPM counters), other jobs'
  // reservations, and the auto-packed trials on it with their peak memory.
  std::vector<sched::PackGpu> PackGpus(const sched::ClusterSnapshot& snap,
                                       const JobTable& jobs, const NodeRegistry& nodes,
                                       int64_t now_ms) const;

  // Live auto-packed tasks on GPU `gpu` of `node`.
  static int AutoPackedOnGpu(const JobTable& jobs, const std::string& node, int gpu);

  // An auto-packed trial to place, and where (one GPU, its reservation).
  struct PackedPlacement {
    v1::Job* job = nullptr;
    sched::Placement placement;
  };
  // Where the packer puts the pending auto-packed trials `pending` (in that
  // order: highest priority first) on `gpus` (PackGpus at now_ms), each
  // placement counted on its GPU before the next trial is chosen. A trial
  // left waiting gets the packer's reason (and, after running out of GPU
  // memory, what it now asks for) as its job's reason. The caller starts
  // the placements, in order.
  std::vector<PackedPlacement> PlanPacking(const std::vector<v1::Job*>& pending,
                                           std::vector<sched::PackGpu> gpus,
                                           int64_t now_ms);

  // What an auto-packed trial that ran out of GPU memory gets: a larger
  // request (bytes) and the sentence saying so. nullopt when it cannot grow
  // (no such GPU, or it asked for the whole GPU already): the attempt then
  // fails as any other.
  struct OomRequeue {
    int64_t next_request_bytes = 0;
    std::string why;
  };
  // `task` (of `job`'s current attempt) ran out of memory on its GPU of
  // `nodes`; the packer lowers that GPU's cap (sched::Packer::OnOutOfMemory).
  std::optional<OomRequeue> OnOutOfMemory(const v1::Job& job, const v1::Task& task,
                                          const JobTable& jobs, const NodeRegistry& nodes);

 private:
  const absl::Duration sample_period_;
  absl::Time next_sample_ = absl::InfinitePast();
  UsageHistory usage_;
  sched::Packer packer_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_MEASUREMENTS_H_
