#ifndef TRAINCTL_BENCH_SIM_SIMULATOR_H_
#define TRAINCTL_BENCH_SIM_SIMULATOR_H_

// Discrete-event replay of a job trace on simulated nodes: a simulated clock,
// no network, no threads. Scheduling decisions come from the coordinator's
// scheduler library (coordinator/sched/muri_policy.h); this file holds only
// the event loop and the cost model (how much work a job gets done between
// two events).
//
// Cost models:
// - kMuri (`--compat muri`): the Muri artifact's (Muri rules 1-7, bench/sim/README.md).
//   iteration time = trace ms * 1.015 / 1000; at every event each running
//   job is credited max(dt - oh, 0) s of progress, oh being the restart
//   overhead of its (num_gpu, model); upstream's order of floating-point
//   operations is mirrored so thresholds and event times compare the same.
// - kOurs (default): the same units, but the restart overhead is paid once
//   per (re)start or migration, not at every event.
// Both: jobs that share GPUs (interleave packing: las, las-overtake,
// muri-l) progress at their group's interleaved iteration time,
// sched::InterleavedIterationTime over the members' trace profiles
// (resource_time_* ms; solo iteration_time ms x 1.015) / 1000 s per
// iteration, recomputed whenever the group changes (a member starts, ends or
// is preempted); a job alone runs at its own iteration time. Joining a
// group costs the joiner its restart overhead, not the members already
// there (kOurs); under --compat muri a Muri-L group is charged the sum of
// its members' overheads at every event, as upstream. GPU allocation counts
// the GPUs of a group once.
//
// Single-threaded; Simulate() is a pure function of its arguments.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/sim/trace_io.h"
#include "coordinator/sched/muri_policy.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::sim {

// kSrtf, kSrsf, kTiresias: the Muri artifact's policies (muri_policy.h; they
// know job durations or, for Tiresias, use them not at all but migrate).
// kFifo, kFifoBackfill, kLas, kLasTiresias: with the default cost model
// these run through sched::Scheduler, the coordinator's own scheduler
// (reservation, backfill, preemption, LAS order): fifo = strict FIFO;
// fifo-backfill = FIFO with the head-of-queue reservation and backfill
// around it; las = the coordinator's default PolicyConfig untouched (LAS
// order on attained GPU-time over its geometric ladder of levels,
// reservation + backfill, preemption across LAS levels only, every trace
// job preemptible, jobs keep their GPUs until preempted: no migration);
// las-tiresias = the default of before (Tiresias's thresholds 3250/7200
// GPU-s and preemption of same-level jobs that overtook), kept to measure
// the change; las-overtake = las with overtake_preemption. las and
// las-overtake keep the default interleave packing (PolicyConfig.interleave:
// gangs with a trace profile may share the GPUs of running gangs of their
// GPU count); las-nopack = las with it off; fifo, fifo-backfill and
// las-tiresias run without it. kMuriL: Muri-L (muri_policy.h
// ScheduleMuriL), an approximate reproduction of the artifact's LAS +
// blossom-matched interleave packing. Under --compat muri, fifo and fifo-backfill keep
// muri_policy.h's yarn-placement baselines.
enum class Policy {
  kSrtf,
  kSrsf,
  kTiresias,
  kFifo,
  kFifoBackfill,
  kLas,
  kLasTiresias,
  kLasOvertake,
  kLasNoPack,
  kMuriL
};
enum class CostModel { kOurs, kMuri };

// Parses "srtf", "srsf", "tiresias", "fifo", "fifo-backfill", "las",
// "las-nopack", "las-tiresias", "las-overtake", "muri-l". Errors:
// InvalidArgument naming the accepted names.
absl::StatusOr<Policy> ParsePolicy(const std::string& name);

struct SimConfig {
  Policy policy = Policy::kSrtf;
  CostModel cost_model = CostModel::kOurs;
  sched::muri::GpuCluster cluster;
  sched::muri::TiresiasConfig tiresias;
  // Guard against an event loop that stops advancing (upstream can stall on
  // floating-point ties): give up after this many events in a row at one
  // simulated time.
  int64_t max_events_at_one_time = 1000000;
  // Policies through sched::Scheduler: PolicyConfig.reservation_min_wait_s
  // (s) instead of the policy's own; < 0 keeps the policy's. Not a per-trace
  // constant: a knob for sweeps (--reservation-min-wait-s).
  double reservation_min_wait_s = -1;
  // Policies through sched::Scheduler and muri-l: PolicyConfig.interleave
  // max_jobs / min_gain instead of the defaults when >= 0 (sweeps:
  // --interleave-max-jobs, --interleave-min-gain).
  int interleave_max_jobs = -1;
  double interleave_min_gain = -1;
};

// Restart overhead in seconds of a job of `num_gpu` GPUs running `model`
// (the artifact's profiled table, run_sim.py overhead_dict; 10 s for a model
// or GPU count not in it). A property of the models, not of a trace.
double RestartOverheadS(int num_gpu, const std::string& model);

struct SimMetrics {
  int64_t jobs = 0;
  // Mean of end - submit over all jobs, s.
  double avg_jct_s = 0;
  // Latest end time, s.
  double makespan_s = 0;
  // sorted(JCT)[int(0.99 * n)], as Muri calc.py.
  double p99_jct_s = 0;
  // GPU-seconds held by running jobs (GPUs shared by a packed group count
  // once) / (total GPUs x (makespan - first submit)), in [0, 1].
  double gpu_allocation = 0;
  // GPU-seconds held by running jobs over total GPUs x the seconds during
  // which at least one submitted job was not running (waiting or preempted),
  // in [0, 1]; 1 when no job ever waited. Idle GPUs while work waits are
  // what fragmentation and reservations cost.
  double gpu_allocation_while_queued = 1.0;
  // Seconds during which at least one submitted job was not running.
  double queued_s = 0;
  int64_t events = 0;
  int64_t preemptions = 0;
};

struct SimResult {
  std::vector<JobRecord> jobs;  // in completion order
  SimMetrics metrics;
};

// Replays `trace` under `config`. Errors: InvalidArgument when a job needs
// more GPUs than the cluster has (it could never run) or the cluster is
// empty; Internal when the event loop stops advancing.
absl::StatusOr<SimResult> Simulate(const SimConfig& config,
                                   const std::vector<TraceJob>& trace);

// Metrics of finished jobs (Muri calc.py). gpu_allocation and events are
// left 0.
SimMetrics ComputeMetrics(const std::vector<JobRecord>& jobs);

}  // namespace trainctl::sim

#endif  // TRAINCTL_BENCH_SIM_SIMULATOR_H_
