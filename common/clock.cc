#include "common/clock.h"

namespace trainctl {

absl::Time RealClock::Now() const { return absl::Now(); }

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
