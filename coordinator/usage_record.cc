#include "coordinator/usage_record.h"

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trainctl::coord {

std::string HistoryState(const v1::UsageRecord& r) {
  if (r.preempted()) return "preempted";
  switch (r.outcome()) {
    case v1::ATTEMPT_OUTCOME_SUCCEEDED:
      return "succeeded";
    case v1::ATTEMPT_OUTCOME_FAILED:
      return "failed";
    case v1::ATTEMPT_OUTCOME_RESTARTED:
      return "restarted";
    case v1::ATTEMPT_OUTCOME_CANCELLED:
      return "cancelled";
    case v1::ATTEMPT_OUTCOME_STOPPED_EARLY:
      return "stopped_early";
    default:
      return "running";
  }
}

absl::StatusOr<bool> MatchesHistoryState(const v1::UsageRecord& record, absl::string_view state) {
  const std::string s = absl::AsciiStrToLower(state);
  if (s.empty()) return true;
  if (s != "succeeded" && s != "failed" && s != "restarted" && s != "cancelled" &&
      s != "stopped_early" && s != "preempted") {
    return absl::InvalidArgumentError(absl::StrCat(
        "state: \"", state,
        "\" is not one of succeeded, failed, restarted, cancelled, stopped_early, preempted"));
  }
  const std::string have = HistoryState(record);
  return have == s || (s == "restarted" && record.outcome() == v1::ATTEMPT_OUTCOME_RESTARTED);
}

}  // namespace trainctl::coord
