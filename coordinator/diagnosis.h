#ifndef TRAINCTL_COORDINATOR_DIAGNOSIS_H_
#define TRAINCTL_COORDINATOR_DIAGNOSIS_H_

// Diagnosis of a job's recorded utilization: pure functions over the
// samples the coordinator keeps per job (telemetry.proto JobUsageSample); no
// clock, no state. `trainctl describe` prints what they find.
//
// The rules are the ones practitioners apply by eye to nvidia-smi and top.
// "Activity" below is the GPU's SM activity (NVML GPM, the share of SMs
// busy) where every sample has it, else NVML utilization (the share of time
// any kernel ran):
//   - not enough samples: the window is shorter than min_window_ms; says how
//     long it needs and has.
//   - GPU idle: the job holds a GPU it does not use at all: activity at most
//     idle_util_pct and no GPU memory (at most idle_memory_bytes).
//   - stalled: activity that low while it holds GPU memory and its CPU is
//     not busy either: it waits (I/O, a lock, a peer rank).
//   - input-pipeline bound: the GPU waits while the CPU is busy (at least
//     busy_cpu_pct_per_task of a core per task): activity at most
//     idle_util_pct while it holds GPU memory, or utilization below
//     input_bound_util_pct (time-based: a GPU running small kernels all the
//     time is not waiting for data, however few SMs they use); remedies
//     from the PyTorch Performance Tuning Guide ("enable asynchronous data
//     loading": DataLoader num_workers > 0, pin_memory=True;
//     https://pytorch.org/tutorials/recipes/recipes/tuning_guide.html).
//   - low GPU memory use: a larger batch (the same guide; Goyal et al. 2017,
//     "Accurate, Large Minibatch SGD", for scaling the learning rate with
//     it) or more trials per GPU.
//   - activity below 70 % sustained: a candidate for packing
//     (trainctl's packing threshold, as README.md states it; the SHARCNET
//     "squeeze more juice out of a single GPU" study shows small trainings
//     gaining several-fold when packed).
// Where a number below is not from a source it says "our choice".

#include <cstdint>
#include <vector>

#include "trainctl/v1/telemetry.pb.h"

namespace trainctl::coord {

struct DiagnosisConfig {
  // Samples older than this before the newest one are not looked at, ms
  // (5 minutes: "sustained", our choice).
  int64_t window_ms = 5 * 60 * 1000;
  // Nothing is said about a window shorter than this, ms (warm-up hides the
  // steady state; our choice).
  int64_t min_window_ms = 60 * 1000;
  // Mean activity at or below which the GPU counts as (nearly) idle, 0-100
  // (our choice).
  double idle_util_pct = 5;
  // GPU memory at or below which a job counts as not using the GPU at all,
  // bytes (peak over the window; 0: none allocated).
  int64_t idle_memory_bytes = 0;
  // Input-pipeline bound: mean GPU utilization below this (our choice)...
  double input_bound_util_pct = 50;
  // ...while the CPU is busy: mean CPU use at least this percent of one core
  // per task (the Python process feeding the GPU saturates its core; our
  // choice).
  double busy_cpu_pct_per_task = 90;
  // Low memory: peak GPU memory below this fraction of the GPUs' memory
  // (our choice).
  double low_memory_fraction = 0.25;
  // Packing candidate: GPU utilization below this (README.md: 70 %)...
  double pack_util_pct = 70;
  // ...in at least this fraction of the window's samples ("sustained").
  double pack_sustained_fraction = 0.9;
};

// Summary of a history: min/mean/max of GPU utilization (0-100) and of GPU
// memory used (bytes), over all samples.
struct UsageSummary {
  int samples = 0;
  int64_t span_ms = 0;
  double util_min = 0, util_mean = 0, util_max = 0;
  // True when every sample carries GPM counters; then the means below of
  // SM activity, SM occupancy and DRAM bandwidth (percent 0-100) are set.
  bool gpm = false;
  double sm_active_min = 0, sm_active_mean = 0, sm_active_max = 0;
  double sm_occupancy_mean = 0, dram_bw_mean = 0;
  int64_t memory_min = 0, memory_mean = 0, memory_max = 0;
  int64_t memory_total = 0;
  double cpu_mean = 0;
};

// Oldest-first `samples` -> summary. No errors; an empty history gives zeros.
UsageSummary Summarize(const std::vector<v1::JobUsageSample>& samples);

// Findings for a job's oldest-first `samples`, most important first:
// "idle", "stalled", "input_bound", "low_memory", "pack_candidate" (idle
// and stalled exclude the others). `auto_packed` says the job already lets
// the packer share its GPU (the packing advice then says so). When the
// window is shorter than min_window_ms, only "not_enough_samples" (with the
// seconds needed and had). Empty for no samples or nothing wrong. No errors.
std::vector<v1::UsageFinding> Diagnose(const std::vector<v1::JobUsageSample>& samples,
                                       bool auto_packed,
                                       const DiagnosisConfig& config = {});

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_DIAGNOSIS_H_
