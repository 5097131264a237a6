#ifndef TRAINCTL_COMMON_METRIC_RULES_H_
#define TRAINCTL_COMMON_METRIC_RULES_H_

// What a metric point must be to be stored: one rule for the coordinator
// (ReportMetrics, GetMetrics) and for the reporter inside a task
// (libtrainctl_nccl's trainctl_report_metric, `trainctl report`), so that a
// point the reporter accepted is never refused with the rest of its batch.

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace trainctl {

// Longest metric key, bytes.
inline constexpr size_t kMaxMetricKeyBytes = 128;

// The metric a trial reports its throughput under, samples/s. The auto-packer
// compares the sum over a GPU's trials as trials are added
// (coordinator/sched/packer.h), so it must be >= 0.
inline constexpr char kThroughputMetricKey[] = "samples_per_s";

// A key is 1 to kMaxMetricKeyBytes bytes of [A-Za-z0-9_.:/-] ("loss",
// "val/acc"). Errors: INVALID_ARGUMENT naming `field` and saying why.
absl::Status CheckMetricKey(absl::string_view field, absl::string_view key);

// One point: its key (CheckMetricKey), a finite value (>= 0 for
// kThroughputMetricKey) and a step >= 0. Errors: INVALID_ARGUMENT naming
// `<point>.key`, `<point>.value` or `<point>.step` (`point` is e.g.
// "points[3]") and saying why.
absl::Status CheckMetricPoint(absl::string_view point, absl::string_view key, double value,
                              int64_t step);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_METRIC_RULES_H_
