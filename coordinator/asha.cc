#include "coordinator/asha.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace trainctl::coord {
namespace {

constexpr int kDefaultReductionFactor = 3;

int Eta(const v1::EarlyStop& c) {
  return c.reduction_factor() == 0 ? kDefaultReductionFactor : c.reduction_factor();
}

}  // namespace

absl::Status ValidateEarlyStop(const v1::JobSpec& spec) {
  if (!spec.has_early_stop()) return absl::OkStatus();
  const v1::EarlyStop& c = spec.early_stop();
  if (spec.sweep_id().empty()) {
    return absl::InvalidArgumentError(
        "spec.early_stop: only for sweep trials (spec.sweep_id is empty)");
  }
  const std::string& m = c.metric();
  if (m.empty() || m.size() > 128 ||
      !std::all_of(m.begin(), m.end(), [](char ch) {
        return absl::ascii_isalnum(ch) || ch == '_' || ch == '.' || ch == ':' ||
               ch == '/' || ch == '-';
      })) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.early_stop.metric: \"", m,
        "\" must be 1-128 bytes of letters, digits and _ . : / -"));
  }
  if (c.mode() != "min" && c.mode() != "max") {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.early_stop.mode: must be \"min\" or \"max\", got \"", c.mode(), "\""));
  }
  if (c.grace_steps() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.early_stop.grace_steps: must be >= 1, got ", c.grace_steps()));
  }
  if (c.reduction_factor() < 0 || c.reduction_factor() == 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.early_stop.reduction_factor: must be >= 2 (0 means 3), got ",
        c.reduction_factor()));
  }
  if (c.max_steps() < 0 || (c.max_steps() > 0 && c.max_steps() <= c.grace_steps())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.early_stop.max_steps: must be 0 (no limit) or past grace_steps (",
        c.grace_steps(), "), got ", c.max_steps()));
  }
  return absl::OkStatus();
}

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  const double pos = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

AshaVerdict AshaOnReport(const v1::EarlyStop& config, AshaRungs& rungs,
                         int64_t job_id, int64_t step, double value) {
  AshaVerdict v;
  const int64_t eta = Eta(config);
  // The highest rung at or below `step`.
  int64_t rung = 0;
  for (int64_t s = config.grace_steps(); s <= step; s *= eta) {
    if (config.max_steps() > 0 && s >= config.max_steps()) break;
    rung = s;
    if (s > INT64_MAX / eta) break;
  }
  if (rung == 0) return v;
  absl::btree_map<int64_t, double>& at = rungs[rung];
  if (at.contains(job_id)) return v;
  v.recorded = true;
  v.rung_step = rung;
  v.value = value;
  v.others = static_cast<int>(at.size());
  if (!at.empty()) {
    // Ray's rule on values where larger is better: stop below the
    // (1 - 1/eta) percentile. For "min", negate.
    const double sign = config.mode() == "min" ? -1.0 : 1.0;
    std::vector<double> others;
    for (const auto& [id, x] : at) others.push_back(sign * x);
    const double cutoff = Percentile(std::move(others), (1.0 - 1.0 / eta) * 100.0);
    v.cutoff = sign * cutoff;
    v.stop = sign * value < cutoff;
  }
  at[job_id] = value;
  return v;
}

}  // namespace trainctl::coord
