#include "common/clock.h"

#include <atomic>

#include "gtest/gtest.h"

namespace trainctl {
namespace {

// The calendar time is read once; after that the clock moves with the
// monotonic source alone, so a step of the host's clock cannot fire or hold
// back a lease or deadline measured with it.
TEST(RealClockTest, MovesWithTheMonotonicSourceOnly) {
  std::atomic<int64_t> ns{5'000'000'000};
  const absl::Time start = absl::FromUnixSeconds(1'700'000'000);
  RealClock clock(start, [&ns] { return ns.load(); });
  EXPECT_EQ(clock.Now(), start);
  ns += 1'500'000'000;
  EXPECT_EQ(clock.Now(), start + absl::Milliseconds(1500));
}

TEST(RealClockTest, StartsAtTheCalendarTimeAndNeverGoesBack) {
  RealClock clock;
  const absl::Time first = clock.Now();
  EXPECT_LT(absl::AbsDuration(first - absl::Now()), absl::Seconds(5));
  absl::Time last = first;
  for (int i = 0; i < 10000; ++i) {
    const absl::Time t = clock.Now();
    ASSERT_GE(t, last);
    last = t;
  }
}

}  // namespace
}  // namespace trainctl
