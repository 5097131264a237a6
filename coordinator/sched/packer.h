#ifndef TRAINCTL_COORDINATOR_SCHED_PACKER_H_
#define TRAINCTL_COORDINATOR_SCHED_PACKER_H_

// Auto-packing of experiment trials: how many trials share a GPU is
// decided from *measured* GPU memory, utilization and throughput, not from a
// fixed share. Pure like the scheduler (STYLE.md habit 2): no proto, no gRPC,
// no clock (times come in as milliseconds), no threads. The coordinator feeds
// it what the agents measured and asks it where the next trial goes.
//
// The rule, one GPU at a time (the packing loop practitioners run by hand:
// SHARCNET, "squeeze more juice out of a single GPU", runs 1, 3, 5, 8
// trainings per GPU and stops where time per training stops improving):
//   1. An empty GPU (no task at all) takes a trial. A GPU shared with
//      other jobs' fractions is judged by rule 2 (measured util and memory).
//   2. Another trial is admitted while
//      - every trial on the GPU has run at least `settle_ms` (warm-up:
//        cuDNN autotuning, the caching allocator and the data loader reach
//        their steady state within the first tens of seconds),
//      - the GPU's measured utilization is below `util_target_pct`, or,
//        where trials report throughput, the GPU's aggregate throughput with
//        its current k trials says more may help (k = 1 measured: probe
//        k = 2; k > 1: k gave at least `min_throughput_gain` more than
//        k - 1). NVML utilization is the fraction of time any kernel ran,
//        not how much of the GPU it used, so a small launch-bound training
//        reads "busy" while most SMs idle; measured throughput overrules it,
//      - its measured free memory, less `memory_headroom_fraction` of the
//        GPU, holds the new trial's estimate: the largest peak measured for a
//        trial on that GPU (or the job's own learned request) times
//        `memory_safety_factor`,
//      - fewer than the GPU's learned cap (below) and `max_tasks_per_gpu`.
//   3. Back off: a trial that ran out of GPU memory caps its GPU at one
//      fewer trial than it ran with and is requeued with a larger memory
//      request (OnOutOfMemory); when the GPU's aggregate throughput
//      (samples/s summed over its trials) with k trials is not at least
//      `min_throughput_gain` above what k-1 gave, the GPU is capped at k-1
//      (ObserveThroughput). Running trials are never stopped by a back-off;
//      the cap holds new admissions until trials finish.
//
// State: the learned caps and throughput per GPU, kept across calls.
// Single-threaded (the coordinator calls it under its lock).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace trainctl::sched {

struct PackerConfig {
  // Admit another trial only while the GPU's measured utilization (0-100) is
  // below this. 90 is our choice, not a published figure: a GPU 90 % busy
  // has little left to give, and the SHARCNET study's gains come from GPUs
  // running far below that.
  int util_target_pct = 90;
  // Fraction of each GPU's memory kept free (fragmentation, CUDA context
  // growth), 0-1.
  double memory_headroom_fraction = 0.10;
  // A new trial's memory estimate is the largest measured peak of the trials
  // on the GPU times this (trials of one sweep differ in batch size and
  // model width within a small factor).
  double memory_safety_factor = 1.25;
  // A trial counts as measured once it has run this long, ms.
  int64_t settle_ms = 20000;
  // k trials must give at least this much more aggregate throughput than
  // k-1 did, as a fraction (0.05 = 5 %), or the GPU is capped at k-1.
  double min_throughput_gain = 0.05;
  // Never more than this many trials on one GPU.
  int max_tasks_per_gpu = 8;
  // Memory reserved for a trial before anything was measured, as a fraction
  // of the GPU; it only keeps the scheduler's bookkeeping honest (other jobs
  // see the GPU as partly used), admission uses measurements.
  double initial_reservation_fraction = 0.05;
};

// A packed trial on a GPU as measured.
struct PackedTrial {
  int64_t job_id = 0;
  // When it started, ms (any epoch, the same as `now_ms`).
  int64_t start_ms = 0;
  // Largest GPU memory it has used so far, bytes; 0 when not measured.
  int64_t peak_memory_bytes = 0;
  // What it reserves on this GPU in the scheduler's books, bytes (its
  // request, raised after an out-of-memory error).
  int64_t reserved_bytes = 0;
};

// One GPU as the packer sees it.
struct PackGpu {
  std::string node;
  int index = 0;
  int64_t memory_total_bytes = 0;
  // Measured now (last heartbeat), bytes.
  int64_t memory_used_bytes = 0;
  // Measured recent utilization, 0-100.
  double util_pct = 0;
  // Bytes reserved by tasks that are not auto-packed (fraction experiments);
  // a GPU held whole by a gang or a whole-GPU job is left out by the caller.
  int64_t other_reserved_bytes = 0;
  // Whether the node takes new work (connected and ready).
  bool schedulable = true;
  std::vector<PackedTrial> trials;
};

// Where the next trial goes.
struct PackChoice {
  // Index into the `gpus` argument of Choose(); unset when none fits now.
  std::optional<size_t> gpu;
  // Bytes to reserve for the trial on that GPU.
  int64_t reserved_bytes = 0;
  // Why no GPU was chosen, in a user's words (empty when one was).
  std::string reason;
};

class Packer {
 public:
  explicit Packer(PackerConfig config = {});

  // Picks the GPU for one auto-packed trial whose learned memory request is
  // `job_memory_bytes` (0: nothing learned). Among the GPUs that may take it
  // (rules 1-2 above), GPUs already running trials come first, the most
  // loaded first (best fit: whole GPUs stay free for gangs), then empty GPUs;
  // ties by node name, then index. No errors: "none now" comes back with a
  // reason.
  PackChoice Choose(const std::vector<PackGpu>& gpus, int64_t job_memory_bytes,
                    int64_t now_ms) const;

  // A trial on (node, gpu) ran out of GPU memory while `trials_on_gpu`
  // trials (itself included) ran there: caps that GPU at trials_on_gpu - 1
  // (at least 1) and returns the memory to request for the trial's next
  // attempt, bytes: twice the larger of its measured peak and its previous
  // request, at least a quarter of the GPU, at most the whole GPU.
  int64_t OnOutOfMemory(const std::string& node, int gpu, int trials_on_gpu,
                        int64_t peak_memory_bytes, int64_t request_bytes,
                        int64_t memory_total_bytes);

  // Records the aggregate throughput (samples/s summed over its trials) of a
  // GPU running `k` trials that have all settled. Keeps the best figure seen
  // per k; when the figure for k is below (1 + min_throughput_gain) times
  // the figure for k-1, caps the GPU at k-1. Returns true when this call set
  // or lowered the cap.
  bool ObserveThroughput(const std::string& node, int gpu, int k,
                         double samples_per_s);

  // The learned cap of a GPU: at most this many trials; 0 when none learned.
  int Cap(const std::string& node, int gpu) const;

  // True when the throughput recorded for k = `trials` trials on the GPU
  // invites one more (see rule 2). No errors.
  bool ThroughputInvitesMore(const std::string& node, int gpu, int trials) const;

  const PackerConfig& config() const { return config_; }

 private:
  using Key = std::pair<std::string, int>;
  struct GpuLearned {
    int cap = 0;
    // k -> best aggregate samples/s seen with k settled trials.
    std::map<int, double> throughput;
  };
  void LowerCap(GpuLearned& g, int cap);

  PackerConfig config_;
  std::map<Key, GpuLearned> learned_;
};

}  // namespace trainctl::sched

#endif  // TRAINCTL_COORDINATOR_SCHED_PACKER_H_
