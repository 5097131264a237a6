#ifndef TRAINCTL_COMMON_CLOCK_H_
#define TRAINCTL_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace trainctl {

// The time source of domain code. Domain code never reads the system clock;
// it is handed a Clock, so tests and simulations run on a FakeClock.
// Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  // Wall-clock now (used for timestamps shown to users and for timeouts).
  virtual absl::Time Now() const = 0;
};

// The system clock.
class RealClock : public Clock {
 public:
  absl::Time Now() const override;
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
