// The multi-resource interleave model (interleave.h), with the arithmetic
// narrated so it can be checked by hand (Mesos DRF test style). Profiles in
// ms per iteration; the 3-resource ones are the Muri traces' 4-GPU rows
// (resource_time_0..2, iteration_time x 1.015).

#include "coordinator/sched/interleave.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace trainctl::sched {
namespace {

InterleaveProfile Profile(std::vector<double> rt, double iteration = 0) {
  InterleaveProfile p;
  p.resource_time = std::move(rt);
  p.iteration_time = iteration;
  return p;
}

double Time(const std::vector<const InterleaveProfile*>& m,
            const InterleaveConfig& c = {}) {
  return InterleavedIterationTime(absl::MakeConstSpan(m), c);
}

TEST(InterleaveTest, InterleavedIterationTime_OneJob_IsItsSoloTime) {
  const InterleaveProfile a = Profile({3, 1});
  const InterleaveProfile b = Profile({3, 1}, 4.5);
  // Alone: iteration_time when given, else the sum 3 + 1 = 4. No slow-down.
  EXPECT_DOUBLE_EQ(Time({&a}), 4);
  EXPECT_DOUBLE_EQ(Time({&b}), 4.5);
}

TEST(InterleaveTest,
     InterleavedIterationTime_TwoResources_ComplementaryPairOverlaps) {
  // R = 2 resources, slow-down 1.5 for a pair (round numbers).
  InterleaveConfig c;
  c.group_slowdown = {1.5};
  const InterleaveProfile a = Profile({3, 1});  // heavy on resource 0
  const InterleaveProfile b = Profile({1, 3});  // heavy on resource 1
  // Order (a, b): stage 0 runs a on r0 (3) and b on r1 (3): 3;
  //               stage 1 runs a on r1 (1) and b on r0 (1): 1; period 4.
  // Order (b, a): stage 0: b r0 (1), a r1 (1): 1; stage 1: 3; period 4.
  // Least 4, x 1.5 = 6 per iteration of each.
  EXPECT_DOUBLE_EQ(Time({&a, &b}, c), 6);
  // Apart they need 4 + 4 = 8 >= 6: worth it. Utilization: work 8 over
  // 6 x 2 resources = 2/3.
  EXPECT_TRUE(InterleaveWorthwhile({&a, &b}, c));
  EXPECT_DOUBLE_EQ(InterleaveUtilization({&a, &b}, c), 8.0 / 12.0);
  // Two copies of a: stage 0 max(3, 1) = 3, stage 1 max(1, 3) = 3, period
  // 6, x 1.5 = 9 > 8 apart: not worth it.
  EXPECT_DOUBLE_EQ(Time({&a, &a}, c), 9);
  EXPECT_FALSE(InterleaveWorthwhile({&a, &a}, c));
  // Asking for a 25 % gain: 8 >= 1.25 x 6 = 7.5 still holds; 40 % (8.4)
  // does not.
  c.min_gain = 0.25;
  EXPECT_TRUE(InterleaveWorthwhile({&a, &b}, c));
  c.min_gain = 0.40;
  EXPECT_FALSE(InterleaveWorthwhile({&a, &b}, c));
}

TEST(InterleaveTest, InterleavedIterationTime_MuriPipeline_Gpt2WithShufflenet) {
  // 4-GPU rows of the Muri traces: gpt2 (0.6, 413, 20) ms, iteration 433;
  // shufflenet (703, 62, 17) ms, iteration 886.
  const InterleaveProfile gpt2 = Profile({0.6, 413, 20}, 433 * 1.015);
  const InterleaveProfile shuf = Profile({703, 62, 17}, 886 * 1.015);
  // Pipeline with A in slot 0 and B in slot 1 settles to a period of
  // max(A0 + A1, B0 + B2) + max(A2, B1):
  //   A = shuf: max(765, 20.6) + max(17, 413) = 1178;
  //   A = gpt2: max(413.6, 720) + max(20, 62) = 782.
  // Two-phase schedule: max(0.6, 62 + 17) + max(703, 413 + 20) = 782.
  // Least 782, x Muri's pair slow-down 1.33 / 1.015 = 1024.69 ms.
  EXPECT_NEAR(Time({&gpt2, &shuf}), 782 * 1.33 / 1.015, 1e-9);
  EXPECT_NEAR(Time({&shuf, &gpt2}), 782 * 1.33 / 1.015, 1e-9);
  // Apart: (433 + 886) x 1.015 = 1338.8 ms >= 1024.7: worth it.
  EXPECT_TRUE(InterleaveWorthwhile({&gpt2, &shuf}));
}

TEST(InterleaveTest, InterleaveWorthwhile_ResnetWithBert_NotWorthIt) {
  // resnet18 (723, 113, 73), iteration 921; bert (0.5, 163, 18), 190.
  const InterleaveProfile resnet = Profile({723, 113, 73}, 921 * 1.015);
  const InterleaveProfile bert = Profile({0.5, 163, 18}, 190 * 1.015);
  // Slots (resnet, bert): max(836, 18.5) + max(73, 163) = 999;
  // slots (bert, resnet): max(163.5, 796) + max(18, 113) = 909;
  // two-phase: max(723, 181) + max(0.5, 186) = 909. Least 909 x 1.33 /
  // 1.015 = 1191.1 ms > (921 + 190) x 1.015 = 1127.7 ms apart.
  EXPECT_NEAR(Time({&resnet, &bert}), 909 * 1.33 / 1.015, 1e-9);
  EXPECT_FALSE(InterleaveWorthwhile({&resnet, &bert}));
  EXPECT_GT(InterleaveUtilization({&resnet, &bert}), 0);
}

TEST(InterleaveTest, InterleavedIterationTime_CannotInterleave_IsInfinite) {
  const double inf = std::numeric_limits<double>::infinity();
  const InterleaveProfile a = Profile({3, 1});
  const InterleaveProfile three = Profile({1, 2, 3});
  const InterleaveProfile zeros = Profile({0, 0, 0});
  const InterleaveProfile none;
  EXPECT_EQ(Time({}), inf);
  EXPECT_EQ(Time({&a, &three}), inf);   // different resource counts
  EXPECT_EQ(Time({&three, &zeros}), inf);  // all-zero: says nothing
  EXPECT_EQ(Time({&three, &none}), inf);   // no profile
  EXPECT_EQ(Time({&a, &a, &a}), inf);      // 3 jobs, 2 resources
  // 5 jobs > max_jobs 4.
  EXPECT_EQ(Time({&three, &three, &three, &three, &three}), inf);
  EXPECT_FALSE(InterleaveWorthwhile({&three, &none}));
  EXPECT_EQ(InterleaveUtilization({&three, &none}), 0);
  EXPECT_FALSE(zeros.usable());
  EXPECT_FALSE(none.usable());
  EXPECT_TRUE(three.usable());
}

}  // namespace
}  // namespace trainctl::sched
