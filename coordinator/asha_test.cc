// ASHA's rungs and stopping rule, checked by hand against Ray Tune's
// ASHAScheduler arithmetic (cutoff = numpy.percentile of the others' values
// at (1 - 1/eta) * 100, on values where larger is better).

#include "coordinator/asha.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

v1::EarlyStop MinLoss() {
  v1::EarlyStop c;
  c.set_metric("val_loss");
  c.set_mode("min");
  c.set_grace_steps(10);
  c.set_reduction_factor(3);
  return c;
}

TEST(PercentileTest, Percentile_Interpolates_AsNumpy) {
  // numpy.percentile([1, 2, 3, 4], 50) == 2.5; (..., 66.67) == 3.0
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_NEAR(Percentile({1, 2, 3, 4}, 200.0 / 3), 3.0, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile({7}, 66), 7);
}

TEST(AshaTest, AshaOnReport_BeforeGrace_NothingRecorded) {
  AshaRungs rungs;
  AshaVerdict v = AshaOnReport(MinLoss(), rungs, 1, 9, 0.5);
  EXPECT_FALSE(v.recorded);
  EXPECT_TRUE(rungs.empty());
}

TEST(AshaTest, AshaOnReport_FourTrialsAtFirstRung_WorstStopped) {
  AshaRungs rungs;
  // Trial 1 is first at rung 10: nothing to compare with, it continues.
  AshaVerdict v = AshaOnReport(MinLoss(), rungs, 1, 10, 0.40);
  EXPECT_TRUE(v.recorded);
  EXPECT_EQ(v.rung_step, 10);
  EXPECT_FALSE(v.stop);
  // Trial 2 at 0.30 is better than 0.40: continues.
  EXPECT_FALSE(AshaOnReport(MinLoss(), rungs, 2, 12, 0.30).stop);
  // Trial 3 at 0.35: others {0.40, 0.30}; negated {-0.40, -0.30}; the
  // 66.7th percentile is -0.40 + 0.667 * 0.10 = -0.333, so the cutoff is a
  // loss of 0.333 and 0.35 is worse: stopped.
  v = AshaOnReport(MinLoss(), rungs, 3, 10, 0.35);
  EXPECT_TRUE(v.stop);
  EXPECT_NEAR(v.cutoff, 0.3333, 1e-3);
  EXPECT_EQ(v.others, 2);
  // A report at the same rung again changes nothing.
  EXPECT_FALSE(AshaOnReport(MinLoss(), rungs, 2, 15, 9.0).recorded);
  EXPECT_EQ(rungs[10].size(), 3u);
}

TEST(AshaTest, AshaOnReport_JumpPastRungs_HighestRungBelowMaxSteps) {
  v1::EarlyStop c = MinLoss();
  c.set_max_steps(200);
  AshaRungs rungs;
  // Rungs 10, 30, 90 (270 is past max_steps): step 500 lands on 90.
  EXPECT_EQ(AshaOnReport(c, rungs, 1, 500, 0.1).rung_step, 90);
  EXPECT_EQ(AshaOnReport(c, rungs, 2, 29, 0.1).rung_step, 10);
}

TEST(AshaTest, AshaOnReport_MaxMode_LowerAccuracyStopped) {
  v1::EarlyStop c = MinLoss();
  c.set_metric("acc");
  c.set_mode("max");
  c.set_reduction_factor(2);
  AshaRungs rungs;
  AshaOnReport(c, rungs, 1, 10, 0.8);
  // Others {0.8}: cutoff 0.8; 0.7 < 0.8 stops, 0.9 continues.
  EXPECT_TRUE(AshaOnReport(c, rungs, 2, 10, 0.7).stop);
  EXPECT_FALSE(AshaOnReport(c, rungs, 3, 10, 0.9).stop);
}

TEST(AshaTest, ValidateEarlyStop_BadFields_InvalidArgumentNamingField) {
  v1::JobSpec spec;
  *spec.mutable_early_stop() = MinLoss();
  EXPECT_THAT(ValidateEarlyStop(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sweep_id")));
  spec.set_sweep_id("sw");
  TC_EXPECT_OK(ValidateEarlyStop(spec));
  spec.mutable_early_stop()->set_mode("lowest");
  EXPECT_THAT(ValidateEarlyStop(spec),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("early_stop.mode")));
  spec.mutable_early_stop()->set_mode("min");
  spec.mutable_early_stop()->set_reduction_factor(1);
  EXPECT_THAT(ValidateEarlyStop(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("early_stop.reduction_factor")));
  spec.mutable_early_stop()->set_reduction_factor(3);
  spec.mutable_early_stop()->set_grace_steps(0);
  EXPECT_THAT(ValidateEarlyStop(spec), StatusIs(absl::StatusCode::kInvalidArgument,
                                                HasSubstr("early_stop.grace_steps")));
}

}  // namespace
}  // namespace trainctl::coord
