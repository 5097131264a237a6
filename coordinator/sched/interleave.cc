#include "coordinator/sched/interleave.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <vector>

namespace trainctl::sched {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Period of Muri's 4-stage pipeline with the members `slot[0..k-1]` in slots
// 0..k-1 (slots k..3 empty); see InterleavedIterationTime.
double PipelinePeriod(const std::array<const InterleaveProfile*, 4>& slot,
                      int k) {
  std::array<double, 9> f{};
  auto rt = [&](int s, int r) { return slot[s % 4]->resource_time[r]; };
  auto present = [&](int s) { return s % 4 < k; };
  for (int s = 1; s <= 8; ++s) {
    double end = 0;
    if (present(s)) end = std::max(end, f[s - 1] + rt(s, 2));
    if (present(s + 1)) end = std::max(end, f[s - 1] + rt(s + 1, 1));
    if (s >= 2 && present(s + 2)) end = std::max(end, f[s - 2] + rt(s + 2, 0));
    f[s] = end;
    if (s >= 5) {
      const double now = f[s] - f[s - 4];
      const double before = f[s - 1] - f[s - 5];
      // Python's math.isclose(now, before, rel_tol=1e-3), as upstream.
      if (std::fabs(now - before) <=
              1e-3 * std::max(std::fabs(now), std::fabs(before)) &&
          now > 0) {
        return now;
      }
    }
  }
  return f[8] - f[4];
}

// R staggered stages: sum over stages of the longest member in it.
double StaggeredPeriod(absl::Span<const InterleaveProfile* const> order) {
  const int r = static_cast<int>(order[0]->resource_time.size());
  const int k = static_cast<int>(order.size());
  double total = 0;
  for (int i = 0; i < r; ++i) {
    double longest = 0;
    for (int m = 0; m < k; ++m) {
      longest = std::max(longest, order[m]->resource_time[((i - m) % r + r) % r]);
    }
    total += longest;
  }
  return total;
}

}  // namespace

bool InterleaveProfile::usable() const {
  if (resource_time.empty()) return false;
  if (!std::isfinite(iteration_time) || iteration_time < 0) return false;
  double sum = 0;
  for (double t : resource_time) {
    if (!std::isfinite(t) || t < 0) return false;
    sum += t;
  }
  return sum > 0;
}

double InterleaveProfile::solo_time() const {
  return iteration_time > 0 ? iteration_time : work();
}

double InterleaveProfile::work() const {
  return std::accumulate(resource_time.begin(), resource_time.end(), 0.0);
}

double InterleavedIterationTime(
    absl::Span<const InterleaveProfile* const> members,
    const InterleaveConfig& config) {
  const int k = static_cast<int>(members.size());
  if (k == 0 || k > std::max(config.max_jobs, 1)) return kInf;
  for (const InterleaveProfile* m : members) {
    if (m == nullptr || !m->usable() ||
        m->resource_time.size() != members[0]->resource_time.size()) {
      return kInf;
    }
  }
  if (k == 1) return members[0]->solo_time();
  const int r = static_cast<int>(members[0]->resource_time.size());
  const bool pipeline = r == 3;
  if (pipeline ? k > 4 : k > r) return kInf;

  std::array<int, 4> perm = {0, 1, 2, 3};
  double best = kInf;
  do {
    double period;
    if (pipeline) {
      std::array<const InterleaveProfile*, 4> slot{};
      for (int i = 0; i < k; ++i) slot[i] = members[perm[i]];
      period = PipelinePeriod(slot, k);
    } else {
      std::array<const InterleaveProfile*, 4> order{};
      for (int i = 0; i < k; ++i) order[i] = members[perm[i]];
      period = StaggeredPeriod(absl::MakeConstSpan(order.data(), k));
    }
    if (period > 0) best = std::min(best, period);
  } while (std::next_permutation(perm.begin(), perm.begin() + k));
  if (pipeline && k == 2) {
    const std::vector<double>& a = members[0]->resource_time;
    const std::vector<double>& b = members[1]->resource_time;
    best = std::min(best, std::max(a[0], b[1] + b[2]) +
                              std::max(b[0], a[1] + a[2]));
  }
  if (!(best < kInf)) return kInf;
  if (!config.group_slowdown.empty()) {
    const size_t i = std::min<size_t>(k - 2, config.group_slowdown.size() - 1);
    best *= config.group_slowdown[i];
  }
  return best;
}

bool InterleaveWorthwhile(absl::Span<const InterleaveProfile* const> members,
                          const InterleaveConfig& config) {
  const double together = InterleavedIterationTime(members, config);
  if (!(together < kInf)) return false;
  double apart = 0;
  for (const InterleaveProfile* m : members) apart += m->solo_time();
  return apart >= (1 + config.min_gain) * together;
}

double InterleaveUtilization(
    absl::Span<const InterleaveProfile* const> members,
    const InterleaveConfig& config) {
  const double together = InterleavedIterationTime(members, config);
  if (!(together < kInf) || together <= 0) return 0;
  double work = 0;
  for (const InterleaveProfile* m : members) work += m->work();
  const size_t r = members[0]->resource_time.size();
  const double resources = r == 3 ? 4.0 : static_cast<double>(r);
  return work / (together * resources);
}

std::vector<double> CanonicalGroupKey(std::vector<const InterleaveProfile*>& members) {
  std::sort(members.begin(), members.end(),
            [](const InterleaveProfile* a, const InterleaveProfile* b) {
              return std::tie(a->resource_time, a->iteration_time) <
                     std::tie(b->resource_time, b->iteration_time);
            });
  std::vector<double> key;
  for (const InterleaveProfile* m : members) {
    key.push_back(static_cast<double>(m->resource_time.size()));
    key.insert(key.end(), m->resource_time.begin(), m->resource_time.end());
    key.push_back(m->iteration_time);
  }
  return key;
}

}  // namespace trainctl::sched
