// AgentLease: when a cut-off agent must fence, with times passed in (no
// clock, no sleeps).

#include "worker/lease.h"

#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);
const absl::Duration kLease = absl::Seconds(10);

TEST(AgentLeaseTest, NoRegistration_NeverExpires) {
  AgentLease lease;
  EXPECT_FALSE(lease.ExpiredAt(kT0 + absl::Hours(1)));
  EXPECT_EQ(lease.Expiry(), absl::InfiniteFuture());
}

TEST(AgentLeaseTest, Registered_ExpiresLeaseAfterTheRegistrationWasSent) {
  AgentLease lease;
  lease.Registered(kT0, kLease);
  EXPECT_FALSE(lease.ExpiredAt(kT0 + kLease - absl::Milliseconds(1)));
  EXPECT_TRUE(lease.ExpiredAt(kT0 + kLease));
  // Once: the caller fences once, then waits for a new registration.
  EXPECT_FALSE(lease.ExpiredAt(kT0 + kLease + absl::Seconds(1)));
}

TEST(AgentLeaseTest, Granted_RenewsFromTheSendTimeOfTheAnsweredHeartbeat) {
  AgentLease lease;
  lease.Registered(kT0, kLease);
  // Heartbeats sent at t0+1 s and t0+2 s; the answer to the first arrives
  // late (at t0+5 s): the lease runs from t0+1 s, the time the coordinator
  // can have received it at the earliest, so it ends at t0+11 s.
  lease.HeartbeatSent(kT0 + absl::Seconds(1));
  lease.HeartbeatSent(kT0 + absl::Seconds(2));
  lease.Granted(kLease);
  EXPECT_EQ(lease.Expiry(), kT0 + absl::Seconds(11));
  // The second answer moves it to t0+12 s.
  lease.Granted(kLease);
  EXPECT_EQ(lease.Expiry(), kT0 + absl::Seconds(12));
  EXPECT_FALSE(lease.ExpiredAt(kT0 + absl::Seconds(11)));
  EXPECT_TRUE(lease.ExpiredAt(kT0 + absl::Seconds(12)));
}

TEST(AgentLeaseTest, Granted_WithoutHeartbeat_IsIgnored) {
  AgentLease lease;
  lease.Registered(kT0, kLease);
  lease.Granted(absl::Hours(1));
  EXPECT_EQ(lease.Expiry(), kT0 + kLease);
}

TEST(AgentLeaseTest, CutOff_HeartbeatsUnanswered_ExpiresAfterLastAnswer) {
  AgentLease lease;
  lease.Registered(kT0, kLease);
  lease.HeartbeatSent(kT0 + absl::Seconds(1));
  lease.Granted(kLease);
  // The link is cut: heartbeats go out but no answer comes back.
  for (int i = 2; i < 30; ++i) lease.HeartbeatSent(kT0 + absl::Seconds(i));
  EXPECT_FALSE(lease.ExpiredAt(kT0 + absl::Seconds(10)));
  EXPECT_TRUE(lease.ExpiredAt(kT0 + absl::Seconds(11)));
}

TEST(AgentLeaseTest, Reregistered_AfterExpiry_HoldsANewLease) {
  AgentLease lease;
  lease.Registered(kT0, kLease);
  lease.HeartbeatSent(kT0 + absl::Seconds(1));  // never answered
  ASSERT_TRUE(lease.ExpiredAt(kT0 + kLease));
  lease.Registered(kT0 + absl::Seconds(60), kLease);
  // The unanswered heartbeat of the old stream is forgotten: this grant
  // answers the new stream's heartbeat at t0+61 s.
  lease.HeartbeatSent(kT0 + absl::Seconds(61));
  lease.Granted(kLease);
  EXPECT_EQ(lease.Expiry(), kT0 + absl::Seconds(71));
}

TEST(AgentLeaseTest, CoordinatorGrantsNoLease_NeverExpires) {
  AgentLease lease;
  lease.Registered(kT0, absl::ZeroDuration());
  EXPECT_FALSE(lease.ExpiredAt(kT0 + absl::Hours(10)));
}

}  // namespace
}  // namespace trainctl::worker
