// MetricsReporter against a fake sink and a FakeClock: batching, flush rules,
// and what happens to points when the coordinator refuses or is unreachable.

#include "worker/nccl/metrics_reporter.h"

#include <cmath>
#include <vector>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;
using ::trainctl::testing::StatusIs;

// Records reports; answers with `next` (OK by default).
class FakeSink : public MetricsSink {
 public:
  absl::Status Send(const v1::ReportMetricsRequest& request) override {
    if (!next.ok()) return next;
    sent.push_back(request);
    return absl::OkStatus();
  }
  std::vector<v1::ReportMetricsRequest> sent;
  absl::Status next;
};

RankEnv Env() {
  RankEnv env;
  env.coordinator = "head:50051";
  env.job_id = 7;
  env.attempt = 2;
  env.token = "secret";
  env.rank = 1;
  env.world_size = 2;
  return env;
}

class MetricsReporterTest : public ::testing::Test {
 protected:
  MetricsReporterTest() : reporter_(Env(), &sink_, &clock_, Options()) {}
  static MetricsReporterOptions Options() {
    MetricsReporterOptions o;
    o.max_buffered_points = 3;
    o.flush_interval = absl::Seconds(1);
    o.max_pending_points = 5;
    return o;
  }
  FakeSink sink_;
  FakeClock clock_;
  MetricsReporter reporter_;
};

TEST_F(MetricsReporterTest, Report_BelowBatch_BufferedUntilThirdPoint) {
  TC_ASSERT_OK(reporter_.Report("loss", 2.0, 1));
  TC_ASSERT_OK(reporter_.Report("loss", 1.5, 2));
  EXPECT_THAT(sink_.sent, SizeIs(0));
  TC_ASSERT_OK(reporter_.Report("acc", 0.5, 2));
  // Three points: one report carrying all of them, with the env's identity.
  ASSERT_THAT(sink_.sent, SizeIs(1));
  const v1::ReportMetricsRequest& r = sink_.sent[0];
  EXPECT_EQ(r.job_id(), 7);
  EXPECT_EQ(r.attempt(), 2);
  EXPECT_EQ(r.rank(), 1);
  EXPECT_EQ(r.token(), "secret");
  ASSERT_THAT(r.points(), SizeIs(3));
  EXPECT_EQ(r.points(2).key(), "acc");
  EXPECT_EQ(reporter_.Pending(), 0);
}

TEST_F(MetricsReporterTest, Report_OldestPointPastInterval_SendsAtNextReport) {
  TC_ASSERT_OK(reporter_.Report("loss", 2.0, 1));
  clock_.Advance(absl::Milliseconds(1500));
  TC_ASSERT_OK(reporter_.Report("loss", 1.0, 2));
  ASSERT_THAT(sink_.sent, SizeIs(1));
  EXPECT_THAT(sink_.sent[0].points(), SizeIs(2));
}

TEST_F(MetricsReporterTest, Flush_Unavailable_KeepsPointsThenSendsThem) {
  TC_ASSERT_OK(reporter_.Report("loss", 2.0, 1));
  sink_.next = absl::UnavailableError("coordinator down");
  EXPECT_THAT(reporter_.Flush(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("down")));
  EXPECT_EQ(reporter_.Pending(), 1);
  sink_.next = absl::OkStatus();
  TC_ASSERT_OK(reporter_.Flush());
  ASSERT_THAT(sink_.sent, SizeIs(1));
  EXPECT_EQ(sink_.sent[0].points(0).value(), 2.0);
}

TEST_F(MetricsReporterTest, Flush_PermissionDenied_DropsRefusedPointsAndSaysSo) {
  TC_ASSERT_OK(reporter_.Report("loss", 2.0, 1));
  sink_.next = absl::PermissionDeniedError("token: not the token of job 7 attempt 3");
  EXPECT_THAT(reporter_.Flush(), StatusIs(absl::StatusCode::kPermissionDenied,
                                          HasSubstr("1 metric point(s) refused: token")));
  EXPECT_EQ(reporter_.Pending(), 0);
}

TEST_F(MetricsReporterTest, Report_CoordinatorUnreachable_RefusesPastPendingCap) {
  sink_.next = absl::UnavailableError("down");
  // Cap 5: points 1-5 are kept (sends fail at 3, 4 and 5), the 6th refused.
  for (int i = 0; i < 5; ++i) (void)reporter_.Report("loss", 1, i);
  EXPECT_EQ(reporter_.Pending(), 5);
  EXPECT_THAT(reporter_.Report("loss", 1, 5),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("head:50051")));
}

TEST_F(MetricsReporterTest, Report_BadPoint_InvalidArgumentNotBuffered) {
  EXPECT_THAT(reporter_.Report("val loss", 1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("val loss")));
  EXPECT_THAT(reporter_.Report("loss", std::nan(""), 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("finite")));
  EXPECT_THAT(reporter_.Report("loss", 1, -1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step")));
  // The coordinator would refuse the whole batch for it, with the good
  // points in it.
  EXPECT_THAT(reporter_.Report("samples_per_s", -3, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("samples_per_s")));
  EXPECT_EQ(reporter_.Pending(), 0);
}

}  // namespace
}  // namespace trainctl::worker
