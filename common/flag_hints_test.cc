#include "common/flag_hints.h"

#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ClosestNameTest, PicksTheNearestWithinTwoEdits) {
  const std::vector<std::string> names = {"--state-dir", "--listen", "--log-level"};
  EXPECT_EQ(ClosestName("--state-dri", names), "--state-dir");
  EXPECT_EQ(ClosestName("--listn", names), "--listen");
  EXPECT_EQ(ClosestName("--completely-else", names), "");
}

class ParseFlagsTest : public ::testing::Test {
 protected:
  ParseFlagsTest() : app_("a daemon", "trainctl-coordinator") {
    app_.add_option("--state-dir", state_dir_, "where the state goes");
  }
  int Parse(std::vector<const char*> args) {
    args.insert(args.begin(), "trainctl-coordinator");
    return ParseFlagsOrExplain(app_, static_cast<int>(args.size()), args.data(), out_, err_);
  }
  CLI::App app_;
  std::string state_dir_;
  std::ostringstream out_, err_;
};

TEST_F(ParseFlagsTest, KnownFlags_GoOn) {
  EXPECT_EQ(Parse({"--state-dir", "/var/lib/t"}), -1);
  EXPECT_EQ(state_dir_, "/var/lib/t");
  EXPECT_EQ(err_.str(), "");
}

TEST_F(ParseFlagsTest, AMistypedFlag_IsRefusedWithTheClosestName) {
  const int rc = Parse({"--state-dri", "/var/lib/t"});
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1);
  EXPECT_THAT(err_.str(), HasSubstr("trainctl-coordinator: error: "));
  EXPECT_THAT(err_.str(), HasSubstr("did you mean --state-dir?"));
  EXPECT_THAT(err_.str(), HasSubstr("(see trainctl-coordinator --help)"));
}

TEST_F(ParseFlagsTest, AFlagNothingLike_IsRefusedWithoutAGuess) {
  EXPECT_NE(Parse({"--zzzzzzzz"}), -1);
  EXPECT_THAT(err_.str(), Not(HasSubstr("did you mean")));
}

TEST_F(ParseFlagsTest, Help_ExitsZero) {
  EXPECT_EQ(Parse({"--help"}), 0);
  EXPECT_THAT(out_.str(), HasSubstr("--state-dir"));
}

}  // namespace
}  // namespace trainctl
