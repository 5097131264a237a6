#include "common/clock.h"

#include <chrono>
#include <utility>

namespace trainctl {

namespace {

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RealClock::RealClock() : RealClock(absl::Now(), SteadyNs) {}

RealClock::RealClock(absl::Time calendar_start, std::function<int64_t()> monotonic_ns)
    : calendar_start_(calendar_start),
      monotonic_ns_(std::move(monotonic_ns)),
      monotonic_start_ns_(monotonic_ns_()) {}

absl::Time RealClock::Now() const {
  return calendar_start_ + absl::Nanoseconds(monotonic_ns_() - monotonic_start_ns_);
}

FakeClock::FakeClock(absl::Time start) : now_(start) {}

absl::Time FakeClock::Now() const {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

}  // namespace trainctl
