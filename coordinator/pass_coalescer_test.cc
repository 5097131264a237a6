#include "coordinator/pass_coalescer.h"

#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(PassCoalescerTest, NothingRequested_NothingRuns) {
  PassCoalescer p;
  EXPECT_FALSE(p.requested());
  EXPECT_FALSE(p.MustRunNow(kT0));
}

TEST(PassCoalescerTest, NoEventWaiting_ThePassRunsAtOnce) {
  PassCoalescer p;
  p.Request(kT0);
  EXPECT_TRUE(p.MustRunNow(kT0));
}

TEST(PassCoalescerTest, AnEventWaits_ThePassIsLeftToIt) {
  PassCoalescer p;
  p.EnterWait();
  p.Request(kT0);
  EXPECT_FALSE(p.MustRunNow(kT0 + absl::Milliseconds(1)));
  p.LeaveWait();
  EXPECT_TRUE(p.MustRunNow(kT0 + absl::Milliseconds(1)));
}

TEST(PassCoalescerTest, TheLastEventQueuedWhenItWasAskedFor_RunsIt) {
  PassCoalescer p;
  p.EnterWait();
  p.EnterWait();
  p.Request(kT0);  // two events queued behind the one asking
  p.LeaveWait();
  p.Entered();  // the first of them has the lock
  p.EnterWait();  // one more arrives behind the burst
  EXPECT_FALSE(p.MustRunNow(kT0));
  p.LeaveWait();
  p.Entered();  // the second: the last of the burst
  p.Request(kT0);
  // Another event waits, but it came after the pass was asked for: under a
  // steady load the queue never drains, and the pass must not wait for it.
  EXPECT_TRUE(p.MustRunNow(kT0));
}

TEST(PassCoalescerTest, ABurstIsCutAfterItsDelay) {
  PassCoalescer p;
  p.EnterWait();
  p.Request(kT0);
  p.Request(kT0 + absl::Milliseconds(1));  // the burst keeps its first time
  EXPECT_FALSE(p.MustRunNow(kT0 + PassCoalescer::kMaxDelay - absl::Microseconds(1)));
  EXPECT_TRUE(p.MustRunNow(kT0 + PassCoalescer::kMaxDelay));
}

TEST(PassCoalescerTest, ABurstIsCutAfterMaxEvents) {
  PassCoalescer p;
  p.EnterWait();
  for (int i = 0; i < PassCoalescer::kMaxEvents - 1; ++i) p.Request(kT0);
  EXPECT_FALSE(p.MustRunNow(kT0));
  p.Request(kT0);
  EXPECT_TRUE(p.MustRunNow(kT0));
}

TEST(PassCoalescerTest, ClearEndsTheBurst) {
  PassCoalescer p;
  p.EnterWait();
  for (int i = 0; i < PassCoalescer::kMaxEvents; ++i) p.Request(kT0);
  p.Clear();
  EXPECT_FALSE(p.requested());
  p.Request(kT0 + absl::Seconds(1));  // a new burst: count and time restart
  EXPECT_FALSE(p.MustRunNow(kT0 + absl::Seconds(1)));
}

}  // namespace
}  // namespace trainctl::coord
