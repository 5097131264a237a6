#ifndef TRAINCTL_COMMON_CLOCK_H_
#define TRAINCTL_COMMON_CLOCK_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainctl {

// The time source of domain code. Domain code never reads the system clock;
// it is handed a Clock, so tests and simulations run on a FakeClock.
// Now() never goes back: leases, heartbeat liveness, deadlines and waits
// measured with it are immune to steps of the host's clock. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Now, as a calendar time (the *_ms timestamps users see) that only moves
  // forward.
  virtual absl::Time Now() const = 0;
};

// The system clock made monotonic: the calendar time read once, when the
// clock is made, plus the time elapsed since on CLOCK_MONOTONIC
// (std::chrono::steady_clock). A step of the host's clock (an NTP step, an
// operator's `date -s`) while it runs shifts its timestamps by the step
// instead of firing or holding back a lease or a deadline; a restarted
// process reads the calendar time afresh.
class RealClock : public Clock {
 public:
  RealClock();
  // For tests: starts at `calendar_start`, advancing with `monotonic_ns`
  // (nanoseconds on any monotonic scale).
  RealClock(absl::Time calendar_start, std::function<int64_t()> monotonic_ns);
  absl::Time Now() const override;

 private:
  const absl::Time calendar_start_;
  const std::function<int64_t()> monotonic_ns_;
  const int64_t monotonic_start_ns_;
};

// A clock that moves only when told to. Thread-safe.
class FakeClock : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'700'000'000));
  absl::Time Now() const override;
  // Moves the clock forward by `d` (d >= 0).
  void Advance(absl::Duration d);

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

// Milliseconds since the Unix epoch, the unit of every *_ms time in the protos.
inline int64_t ToUnixMs(absl::Time t) { return absl::ToUnixMillis(t); }

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_CLOCK_H_
