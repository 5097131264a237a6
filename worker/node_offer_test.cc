// An agent's --features and --labels: what reaches its registration, and
// the flag named when one is malformed.

#include "worker/node_offer.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(NodeOfferTest, Features_KeptInOrderWithoutDuplicates) {
  absl::StatusOr<std::vector<std::string>> f =
      ParseFeatures({"ib", "nvlink", "ib", "gpu-direct_2"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_THAT(*f, ElementsAre("ib", "nvlink", "gpu-direct_2"));
}

TEST(NodeOfferTest, Features_BadNamesNameTheFlag) {
  for (const char* bad : {"IB", "", "a b", "x=y"}) {
    absl::StatusOr<std::vector<std::string>> f = ParseFeatures({bad});
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(f.status().message(), HasSubstr("--features"));
  }
}

TEST(NodeOfferTest, Labels_KeyEqualsValue) {
  absl::StatusOr<std::map<std::string, std::string>> l =
      ParseLabels({"rack=r1", "zone=a=b", "empty="});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_THAT(*l, ElementsAre(Pair("empty", ""), Pair("rack", "r1"), Pair("zone", "a=b")));
  EXPECT_THAT(ParseLabels({"rack"}).status().message(), HasSubstr("is not key=value"));
  EXPECT_THAT(ParseLabels({"Rack=1"}).status().message(), HasSubstr("--labels: key"));
  EXPECT_THAT(ParseLabels({"a=1", "a=2"}).status().message(), HasSubstr("given twice"));
}

}  // namespace
}  // namespace trainctl::worker
