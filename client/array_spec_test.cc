// `trainctl submit --array`: Slurm's index syntax (sbatch --array), and
// errors that say what is wrong.

#include "client/array_spec.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

std::vector<int> Ids(absl::string_view text) {
  absl::StatusOr<ArraySpec> spec = ParseArraySpec(text);
  EXPECT_TRUE(spec.ok()) << text << ": " << spec.status();
  return spec.ok() ? spec->task_ids : std::vector<int>{};
}

TEST(ParseArraySpecTest, Parse_Range_EveryIndexNoLimit) {
  absl::StatusOr<ArraySpec> spec = ParseArraySpec("0-9");
  ASSERT_TRUE(spec.ok());
  EXPECT_THAT(spec->task_ids, ElementsAre(0, 1, 2, 3, 4, 5, 6, 7, 8, 9));
  EXPECT_EQ(spec->max_running, 0);
}

TEST(ParseArraySpecTest, Parse_CommaListWithRange_SortedOnce) {
  EXPECT_THAT(Ids("1,3,5-7"), ElementsAre(1, 3, 5, 6, 7));
  // Out of order and overlapping: ascending, each index once (Slurm's
  // bitmap).
  EXPECT_THAT(Ids("7,2-4,3"), ElementsAre(2, 3, 4, 7));
  EXPECT_THAT(Ids("42"), ElementsAre(42));
}

TEST(ParseArraySpecTest, Parse_Step_EveryStepthIndex) {
  EXPECT_THAT(Ids("0-15:4"), ElementsAre(0, 4, 8, 12));
  EXPECT_THAT(Ids("1-10:3"), ElementsAre(1, 4, 7, 10));
}

TEST(ParseArraySpecTest, Parse_PercentLimit_MaxRunning) {
  absl::StatusOr<ArraySpec> spec = ParseArraySpec("0-999%8");
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(spec->task_ids.size(), 1000u);
  EXPECT_EQ(spec->max_running, 8);
  spec = ParseArraySpec("1,3,5-7:2%2");
  ASSERT_TRUE(spec.ok());
  EXPECT_THAT(spec->task_ids, ElementsAre(1, 3, 5, 7));
  EXPECT_EQ(spec->max_running, 2);
}

TEST(ParseArraySpecTest, Parse_BadSyntax_InvalidArgumentQuotingThePart) {
  EXPECT_THAT(ParseArraySpec(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                           HasSubstr("empty")));
  EXPECT_THAT(ParseArraySpec("9-2"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"9-2\": the range ends before it starts")));
  EXPECT_THAT(ParseArraySpec("a-3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"a\" is not a task index")));
  EXPECT_THAT(ParseArraySpec("-3"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"\" is not a task index")));
  EXPECT_THAT(ParseArraySpec("1,,3"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty item")));
  EXPECT_THAT(ParseArraySpec("0-15:0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("step >= 1")));
  EXPECT_THAT(ParseArraySpec("5:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs a range")));
  EXPECT_THAT(ParseArraySpec("0-9%"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("P >= 1")));
  EXPECT_THAT(ParseArraySpec("0-9%0"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("P >= 1")));
  EXPECT_THAT(ParseArraySpec("0-9%x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("P >= 1")));
  EXPECT_THAT(ParseArraySpec("0-9999999"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("above the largest")));
  EXPECT_THAT(ParseArraySpec("0-10000"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than 10000 tasks")));
  EXPECT_THAT(ParseArraySpec(" 1"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a task index")));
}

}  // namespace
}  // namespace trainctl::cli
