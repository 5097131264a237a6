#include "common/metric_rules.h"

#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trainctl {

absl::Status CheckMetricKey(absl::string_view field, absl::string_view key) {
  if (key.empty() || key.size() > kMaxMetricKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": must be 1 to ", kMaxMetricKeyBytes, " bytes, got ", key.size()));
  }
  for (char c : key) {
    if (!(absl::ascii_isalnum(c) || c == '_' || c == '.' || c == ':' || c == '/' ||
          c == '-')) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": \"", key, "\" may hold only letters, digits and _ . : / -"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckMetricPoint(absl::string_view point, absl::string_view key, double value,
                              int64_t step) {
  if (absl::Status s = CheckMetricKey(absl::StrCat(point, ".key"), key); !s.ok()) return s;
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(point, ".value: ", key, " must be finite, got ", value));
  }
  if (key == kThroughputMetricKey && value < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        point, ".value: ", key,
        " (the throughput the auto-packer compares) must be >= 0, got ", value));
  }
  if (step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(point, ".step: must be >= 0, got ", step));
  }
  return absl::OkStatus();
}

}  // namespace trainctl
