// An agent's --features and --labels (see node_offer.h).

#include "worker/node_offer.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/sched/node_selection.h"

namespace trainctl::worker {

absl::StatusOr<std::vector<std::string>> ParseFeatures(
    const std::vector<std::string>& items) {
  std::vector<std::string> features;
  for (const std::string& f : items) {
    if (!sched::IsValidSelectionName(f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--features: \"", f,
          "\" is not a feature name: 1-64 characters of a-z, 0-9, _ and -"));
    }
    if (std::find(features.begin(), features.end(), f) == features.end()) {
      features.push_back(f);
    }
  }
  return features;
}

absl::StatusOr<std::map<std::string, std::string>> ParseLabels(
    const std::vector<std::string>& items) {
  std::map<std::string, std::string> labels;
  for (const std::string& item : items) {
    std::vector<std::string> kv = absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (kv.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--labels: \"", item, "\" is not key=value"));
    }
    if (!sched::IsValidSelectionName(kv[0])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--labels: key \"", kv[0],
          "\" must be 1-64 characters of a-z, 0-9, _ and -"));
    }
    if (!labels.emplace(kv[0], std::move(kv[1])).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("--labels: key \"", kv[0], "\" is given twice"));
    }
  }
  return labels;
}

}  // namespace trainctl::worker
