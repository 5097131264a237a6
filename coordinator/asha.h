#ifndef TRAINCTL_COORDINATOR_ASHA_H_
#define TRAINCTL_COORDINATOR_ASHA_H_

// Early stopping of a sweep's worst trials: asynchronous successive halving
// (ASHA; Li et al., "A System for Massively Parallel Hyperparameter Tuning",
// MLSys 2020), with the stopping rule of Ray Tune's ASHAScheduler
// (python/ray/tune/schedulers/async_hyperband.py, _Bracket.on_result): a trial
// reaching a rung is compared with the values the sweep's other trials had at
// that rung; below the (1 - 1/eta) percentile (numpy's linear interpolation)
// of theirs, it stops. Pure functions over values: no clock, no threads.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "trainctl/v1/metrics.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// One sweep's rungs: rung step -> trial job id -> the metric's value there.
using AshaRungs = absl::btree_map<int64_t, absl::btree_map<int64_t, double>>;

// What one report meant for a trial.
struct AshaVerdict {
  // The trial reached a rung it had no value at; `rung_step` and `value` say
  // which and what was recorded.
  bool recorded = false;
  int64_t rung_step = 0;
  double value = 0;
  // Stop the trial: its value is worse than `cutoff`, computed over the
  // `others` values recorded at the rung before it.
  bool stop = false;
  double cutoff = 0;
  int others = 0;
};

// Checks spec.early_stop when it is set. Errors: INVALID_ARGUMENT naming the
// field: no sweep_id, a malformed metric key, mode not "min"/"max",
// grace_steps < 1, reduction_factor 1 or negative, max_steps < 0 or not past
// grace_steps.
absl::Status ValidateEarlyStop(const v1::JobSpec& spec);

// The p-th percentile (0-100) of `values` with linear interpolation between
// closest ranks (numpy.percentile's default). `values` must not be empty.
double Percentile(std::vector<double> values, double p);

// Trial `job_id` reported the metric's `value` at `step`. Takes the highest
// rung at or below `step` (steps grace x eta^k, below max_steps); if the trial
// has no value there yet, decides (against the others' values at that rung)
// and records the value in `rungs`. No rung reached, or already recorded:
// nothing happens (verdict.recorded false).
AshaVerdict AshaOnReport(const v1::EarlyStop& config, AshaRungs& rungs,
                         int64_t job_id, int64_t step, double value);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_ASHA_H_
