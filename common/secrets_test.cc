#include "common/secrets.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace trainctl {
namespace {

TEST(SecretsTest, TokensAreHexOfTheAskedLengthAndNeverRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string t = NewSecretToken();
    ASSERT_EQ(t.size(), 32u);
    ASSERT_EQ(t.find_first_not_of("0123456789abcdef"), std::string::npos) << t;
    ASSERT_TRUE(seen.insert(t).second) << "repeated token " << t;
  }
  EXPECT_EQ(NewSecretToken(32).size(), 64u);
}

TEST(SecretsTest, SameSecretComparesContentAndLength) {
  EXPECT_TRUE(SameSecret("abc123", "abc123"));
  EXPECT_FALSE(SameSecret("abc123", "abc124"));
  EXPECT_FALSE(SameSecret("abc123", "abc12"));
  EXPECT_FALSE(SameSecret("", "a"));
  EXPECT_TRUE(SameSecret("", ""));
}

TEST(SecretsTest, Sha256MatchesTheStandardTestVector) {
  // FIPS 180-2, appendix B.1.
  EXPECT_EQ(Sha256Hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

}  // namespace
}  // namespace trainctl
