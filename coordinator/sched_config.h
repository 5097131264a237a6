#ifndef TRAINCTL_COORDINATOR_SCHED_CONFIG_H_
#define TRAINCTL_COORDINATOR_SCHED_CONFIG_H_

// The scheduler configuration file of trainctl-coordinator
// (--scheduler-config): queues with weights, user and project GPU quotas,
// queue order, backfill and preemption switches. The file is a
// v1::SchedulerConfigFile (proto/trainctl/v1/sched.proto) in protobuf text
// format, or in JSON (protobuf's JSON mapping) when its name ends in
// ".json". Parsing is protobuf's; this file only validates and converts.

#include <string>

#include "absl/status/statusor.h"
#include "coordinator/sched/scheduler.h"
#include "trainctl/v1/sched.pb.h"

namespace trainctl::coord {

// Converts a parsed file to the scheduler's policy. Defaults: order "las",
// thresholds 3250, 13000, 52000, 208000, 832000, 3328000 GPU-s, backfill and
// preemption on (across priorities and LAS levels; overtake_preemption off),
// one queue "default" of weight 1, no quotas.
// Errors: INVALID_ARGUMENT naming the field: unknown order; thresholds not
// positive and ascending; a queue without a name, named twice, or of weight
// < 0 (0 means 1); a quota without a name, named twice, or negative.
absl::StatusOr<sched::PolicyConfig> PolicyFromProto(
    const v1::SchedulerConfigFile& file);

// Reads and converts the file at `path`.
// Errors: NOT_FOUND when it cannot be read; INVALID_ARGUMENT when it does not
// parse (the parser's message names the line) or PolicyFromProto refuses it.
absl::StatusOr<sched::PolicyConfig> LoadSchedulerConfig(const std::string& path);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_SCHED_CONFIG_H_
