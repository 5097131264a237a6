// The scheduler config file: text format and JSON through protobuf's
// parsers, defaults, and INVALID_ARGUMENT naming the field.

#include "coordinator/sched_config.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace trainctl::coord {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(SchedConfigTest, LoadSchedulerConfig_TextFormat_QueuesQuotasAndSwitches) {
  const std::string path = WriteFile("sched.textproto", R"pb(
    order: "fifo"
    disable_backfill: true
    overtake_preemption: true
    reservation_min_wait_s: 3600
    disable_interleave_packing: true
    interleave_max_jobs: 2
    interleave_min_gain: 0.25
    queues { name: "default" }
    queues { name: "prod" weight: 3 interactive_idle_timeout_s: 900 }
    user_quotas { name: "*" gpus: 16 }
    project_quotas { name: "vision" gpus: 64 }
  )pb");
  absl::StatusOr<sched::PolicyConfig> p = LoadSchedulerConfig(path);
  TC_ASSERT_OK(p);
  EXPECT_EQ(p->order, sched::QueueOrder::kFifo);
  EXPECT_FALSE(p->backfill);
  EXPECT_TRUE(p->preemption);  // not given: the default
  EXPECT_TRUE(p->overtake_preemption);
  EXPECT_EQ(p->reservation_min_wait_s, 3600);
  EXPECT_FALSE(p->interleave.enabled);
  EXPECT_EQ(p->interleave.max_jobs, 2);
  EXPECT_EQ(p->interleave.min_gain, 0.25);
  ASSERT_EQ(p->queues.size(), 2u);
  EXPECT_EQ(p->queues[0].name, "default");
  EXPECT_EQ(p->queues[0].weight, 1.0);  // 0 (absent) means 1
  EXPECT_EQ(p->queues[1].weight, 3.0);
  EXPECT_EQ(p->queues[0].interactive_idle_timeout_ms, 0);  // the coordinator's default
  EXPECT_EQ(p->queues[1].interactive_idle_timeout_ms, 900 * 1000);
  EXPECT_EQ(p->user_gpu_quota.at("*"), 16);
  EXPECT_EQ(p->project_gpu_quota.at("vision"), 64);
  // Not given: the default ladder.
  EXPECT_THAT(p->las_thresholds_gpu_s,
              ::testing::ElementsAre(3250, 13000, 52000, 208000, 832000, 3328000));
}

TEST(SchedConfigTest, LoadSchedulerConfig_Json_SameMessage) {
  const std::string path = WriteFile(
      "sched.json",
      R"({"order": "las", "lasThresholdsGpuS": [100, 200],
          "queues": [{"name": "a", "weight": 2}], "disablePreemption": true})");
  absl::StatusOr<sched::PolicyConfig> p = LoadSchedulerConfig(path);
  TC_ASSERT_OK(p);
  EXPECT_EQ(p->order, sched::QueueOrder::kLas);
  EXPECT_FALSE(p->preemption);
  EXPECT_THAT(p->las_thresholds_gpu_s, ::testing::ElementsAre(100, 200));
  EXPECT_EQ(p->queues[0].name, "a");
}

TEST(SchedConfigTest, LoadSchedulerConfig_BadInput_InvalidArgumentNamingField) {
  EXPECT_THAT(LoadSchedulerConfig(WriteFile("bad1.textproto", "order: \"sjf\"")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("order:")));
  EXPECT_THAT(LoadSchedulerConfig(WriteFile(
                  "bad2.textproto", "queues { name: \"a\" } queues { name: \"a\" }")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("queues[1]: \"a\" appears twice")));
  EXPECT_THAT(LoadSchedulerConfig(
                  WriteFile("bad3.textproto", "user_quotas { name: \"x\" gpus: -1 }")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("user_quotas[0]: gpus must be >= 0")));
  EXPECT_THAT(
      LoadSchedulerConfig(WriteFile("bad5.textproto", "reservation_min_wait_s: -1")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("reservation_min_wait_s: must be >= 0 seconds, got -1")));
  EXPECT_THAT(
      LoadSchedulerConfig(WriteFile("bad6.textproto", "interleave_max_jobs: 1")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("interleave_max_jobs: must be 0 (default 3) or >= 2, got 1")));
  EXPECT_THAT(
      LoadSchedulerConfig(WriteFile("bad7.textproto", "interleave_min_gain: -0.5")),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("interleave_min_gain: must be >= 0, got -0.5")));
  EXPECT_THAT(LoadSchedulerConfig(WriteFile(
                  "bad8.textproto", "queues { name: \"a\" interactive_idle_timeout_s: -60 }")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("queues[0]: interactive_idle_timeout_s must be in [0, 1 year], got -60")));
  EXPECT_THAT(LoadSchedulerConfig(WriteFile("bad4.textproto", "queues {")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("line 1")));
  EXPECT_THAT(LoadSchedulerConfig("/nonexistent/sched.textproto"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("cannot read")));
}

}  // namespace
}  // namespace trainctl::coord
