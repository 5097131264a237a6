#ifndef TRAINCTL_COORDINATOR_USAGE_RECORD_H_
#define TRAINCTL_COORDINATOR_USAGE_RECORD_H_

// The history states of an accounting record (v1::UsageRecord, one ended
// attempt): how `trainctl history` spells them and how its --state filter
// matches them. Pure; shared by the coordinator's accounting part
// (accounting.h) and the CLI, so the two never spell a state differently.

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainctl/v1/accounting.pb.h"

namespace trainctl::coord {

// Whether `record` has history state `state` ("succeeded", "failed",
// "restarted", "cancelled", "stopped_early", "preempted"; "" matches all).
// A preempted attempt matches "preempted" and "restarted".
// Errors: INVALID_ARGUMENT naming "state" for any other value.
absl::StatusOr<bool> MatchesHistoryState(const v1::UsageRecord& record,
                                         absl::string_view state);

// The history state of `record`, as MatchesHistoryState spells it
// ("running" for an attempt with no outcome).
std::string HistoryState(const v1::UsageRecord& record);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_USAGE_RECORD_H_
