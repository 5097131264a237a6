#ifndef TRAINCTL_COORDINATOR_SCHED_PACKER_H_
#define TRAINCTL_COORDINATOR_SCHED_PACKER_H_

// Auto-packing of experiment trials: how many trials share a GPU is
// decided from *measured* GPU memory, utilization and throughput, not from a
// fixed share. Pure like the scheduler: no proto, no gRPC,
// no clock (times come in as milliseconds), no threads. The coordinator feeds
// it what the agents measured and asks it where the next trial goes.
//
// The rule, one GPU at a time (the packing loop practitioners run by hand:
// SHARCNET, "squeeze more juice out of a single GPU", runs 1, 3, 5, 8
// trainings per GPU and stops where time per training stops improving):
//   1. An empty GPU (no task at all) takes a trial. A GPU shared with
//      other jobs' fractions is judged by rule 2 (measured util and memory).
//   2. Another trial is admitted while
//      - every trial on the GPU has settled: its own counters reached a
//        plateau (Observe(): over `plateau_samples` consecutive samples with
//        no trial added, each trial's peak memory within
//        `plateau_memory_tolerance` and the GPU's SM activity (or
//        utilization without GPM) within `plateau_activity_tolerance_pct`,
//        at least `plateau_min_activity_pct` busy), or it has run
//        `settle_ms` (the upper bound: cuDNN autotuning, the caching
//        allocator and the data loader reach their steady state within the
//        first tens of seconds),
//      - the GPU leaves room: where it reports GPM counters (Hopper and
//        newer), SM activity below `sm_active_target_pct` and DRAM bandwidth
//        below `dram_bw_target_pct`; or its NVML utilization is below
//        `util_target_pct` (the rule before GPM, kept so that GPM never
//        admits fewer); or, where trials report throughput, the GPU's
//        aggregate throughput with its current k trials says more may help
//        (k = 1 measured: probe k = 2; k > 1: k gave at least
//        `min_throughput_gain` more than any smaller k). NVML utilization is
//        the fraction of time any kernel ran, not how much of the GPU it
//        used, so a small launch-bound training reads "busy" while most SMs
//        idle; SM activity and measured throughput overrule it,
//      - its measured free memory, less `memory_headroom_fraction` of the
//        GPU and less what trials that have not settled may still grow into
//        (their reservation above their peak so far), holds the new trial's
//        estimate: the largest peak measured for a trial on that GPU (or the
//        job's own learned request) times `memory_safety_factor`,
//      - fewer than the GPU's learned cap (below) and `max_tasks_per_gpu`.
//   3. Fast ramp (trials of one sweep are alike): once the trials of one
//      sweep on a GPU have settled, Observe() predicts how many of them the
//      GPU holds (Predict(): the smallest of what memory, SM activity and
//      DRAM bandwidth allow, each measured per trial) and trials of that
//      sweep are admitted up to that many at once, without waiting for each
//      to settle; the memory rule of 2 still applies to each. The first
//      prediction comes from the first settled measurement; each later one
//      moves the plan by at most one trial up or down. Rule 2 still admits
//      one more on top of the plan where it finds room, so the ramp never
//      admits fewer than rule 2 alone.
//   3a. Declared start (trials that state their GPU memory: JobSpec.
//      gpu_memory_bytes with auto_pack, `trainctl sweep --auto-pack
//      --gpu-mem 4GiB`): before the first plan of a sweep on a GPU,
//      trials of that sweep whose size is declared are admitted at once,
//      without settling, while the declared sizes fit (the memory rule of 2
//      with the declaration as the estimate, and every reservation on the
//      GPU within its memory) and fewer than the GPU's cap and
//      `max_tasks_per_gpu` run. A declaration is the user's bound, as a
//      memory request is to Kubernetes or Slurm (`--mem`): the agent
//      enforces it where it can (StartTask.shared_gpu_memory_limit_bytes).
//      Compute is judged once they settle: the plan of rule 3 then holds new
//      admissions to what SM activity and DRAM bandwidth allow. Without a
//      declaration the first trial is measured alone (rules 1-3): a trial's
//      memory is unknown until it ran, and a GPU out of memory kills trials.
//   4. Back off: a trial that ran out of GPU memory caps its GPU at one
//      fewer trial than it ran with and is requeued with a larger memory
//      request (OnOutOfMemory); when the GPU's aggregate throughput
//      (samples/s summed over its trials) with k trials is not at least
//      `min_throughput_gain` above the best any smaller k gave, the GPU is
//      capped at k-1 (ObserveThroughput). Running trials are never stopped
//      by a back-off; the cap holds new admissions until trials finish.
//
// State: the learned caps, throughput, recent samples and ramp plan per
// GPU, kept across calls.
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
  // Where GPM counters exist: admit another trial while the GPU's SM activity
  // (percent of SMs busy, NVML_GPM_METRIC_SM_UTIL) is below this, 0-100...
  double sm_active_target_pct = 90;
  // ...and its DRAM bandwidth (percent of the theoretical peak,
  // NVML_GPM_METRIC_DRAM_BW_UTIL) below this, 0-100. Our choice: streaming
  // kernels reach about 80-90 % of an HBM GPU's theoretical bandwidth, so
  // at 80 % a memory-bound trial has little left to share.
  double dram_bw_target_pct = 80;
  // Plateau detection (Observe()): this many consecutive samples with the
  // same trials on the GPU...
  int plateau_samples = 5;
  // ...each trial's peak memory within this fraction of its largest value
  // (0.05 = 5 %)...
  double plateau_memory_tolerance = 0.05;
  // ...the GPU's SM activity (utilization without GPM) within this many
  // percentage points...
  double plateau_activity_tolerance_pct = 5;
  // ...and at least this busy, 0-100: any kernel at all (a trial that has
  // its CUDA context but still loads its data is flat at zero: not a
  // plateau; our choice). Launch-bound trials (many tiny kernels) keep an
  // H100 at 1-2 % SM activity (GPM) while they train, so the floor is low.
  double plateau_min_activity_pct = 0.5;
  // Admit trials of a sweep up to the predicted count at once (rule 3).
  bool fast_ramp = true;
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
  // The sweep it is a trial of (JobSpec.sweep_id); empty for a lone job.
  // The fast ramp admits only trials of the sweep it measured.
  std::string group;
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
  // True when the GPU reports GPM counters (the three below).
  bool gpm = false;
  // Recent SM activity, SM occupancy and DRAM bandwidth, percent 0-100
  // (NVML GPM); meaningful only when `gpm`.
  double sm_active_pct = 0;
  double sm_occupancy_pct = 0;
  double dram_bw_pct = 0;
  // Bytes reserved by tasks that are not auto-packed (fraction experiments);
  // a GPU held whole by a gang or a whole-GPU job is left out by the caller.
  int64_t other_reserved_bytes = 0;
  // Whether the node takes new work (connected and ready).
  bool schedulable = true;
  // The GPU's type and its node's features (GpuState.gpu_type,
  // NodeState.features), for a trial's node selection: the caller marks
  // GPUs the selection rules out unschedulable for that trial.
  std::string gpu_type;
  std::vector<std::string> node_features;
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

// How many trials like the ones measured on a GPU it holds (rule 3), and
// what each resource allows; a resource not measured allows
// `max_tasks_per_gpu`.
struct RampPrediction {
  int k = 0;
  // floor(((1 - headroom) x total - other jobs' reservations) /
  //       (largest trial peak x safety factor)).
  int by_memory = 0;
  // floor(sm_active_target_pct / (SM activity / trials)); GPM only.
  int by_sm = 0;
  // floor(dram_bw_target_pct / (DRAM bandwidth / trials)); GPM only.
  int by_dram = 0;
  // Without GPM: floor(util_target_pct / (utilization / trials)).
  int by_util = 0;
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
  // `group` is the job's sweep (JobSpec.sweep_id, empty for none): the fast
  // ramp (rule 3) admits it without waiting for settling only on a GPU whose
  // trials are all of that sweep.
  // `declared`: `job_memory_bytes` is the trial's own declared size
  // (JobSpec.gpu_memory_bytes), which enables rule 3a for it.
  PackChoice Choose(const std::vector<PackGpu>& gpus, int64_t job_memory_bytes,
                    int64_t now_ms, const std::string& group = "",
                    bool declared = false) const;

  // Takes one sample of every GPU in `gpus` (the same view Choose() gets),
  // called once per sample period: detects plateaus (rule 2), and where the
  // trials on a GPU are all settled, all of one sweep, updates its ramp plan
  // (rule 3) and, when the GPU's measured memory leaves less than the
  // headroom, caps it at one trial fewer. Forgets the state of GPUs without
  // trials. No errors.
  void Observe(const std::vector<PackGpu>& gpus, int64_t now_ms);

  // True when the trial `job_id` on (node, gpu) started at `start_ms` has
  // settled at `now_ms`: its GPU reached a plateau with it running, or it
  // has run settle_ms. No errors.
  bool Settled(const std::string& node, int gpu, int64_t job_id,
               int64_t start_ms, int64_t now_ms) const;

  // What the measurements of `g` (all its trials settled) predict it holds
  // of trials like them (rule 3); k is at least 1, at most
  // max_tasks_per_gpu and the GPU's cap (it may be below the trials running
  // now: the GPU holds too many). No errors.
  RampPrediction Predict(const PackGpu& g) const;

  // The ramp plan of a GPU: trials of its sweep are admitted without
  // settling while fewer than this run; 0 when none.
  int Planned(const std::string& node, int gpu) const;

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
  // One Observe() sample of a GPU.
  struct Obs {
    // (job id, peak memory bytes) per trial, by job id.
    std::vector<std::pair<int64_t, int64_t>> trials;
    // SM activity (GPM) or utilization, 0-100.
    double activity = 0;
  };
  struct GpuLearned {
    int cap = 0;
    // k -> best aggregate samples/s seen with k settled trials.
    std::map<int, double> throughput;
    // The newest samples with the current trials, oldest first (at most
    // plateau_samples).
    std::vector<Obs> recent;
    // Trials that were running when the GPU reached a plateau.
    std::vector<int64_t> settled;
    // Rule 3: the sweep planned for, the plan (trials), and the trials the
    // plan was last made with (a plan is made once per set of trials).
    std::string plan_group;
    int plan_k = 0;
    std::vector<int64_t> planned_with;
  };
  void LowerCap(GpuLearned& g, int cap);
  // The plan of `g` for trials of `group`; 0 when it has none for it.
  int PlannedFor(const PackGpu& g, const std::string& group) const;

  PackerConfig config_;
  std::map<Key, GpuLearned> learned_;
};

}  // namespace trainctl::sched

#endif  // TRAINCTL_COORDINATOR_SCHED_PACKER_H_
