#include "common/grpc_target.h"

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::IsOk;
using ::trainctl::testing::StatusIs;

TEST(GrpcTargetForTest, OneAddress_IsUnchanged) {
  EXPECT_THAT(GrpcTargetFor("head:50051"), IsOk());
  EXPECT_EQ(*GrpcTargetFor("head:50051"), "head:50051");
  EXPECT_EQ(*GrpcTargetFor("[::1]:7"), "[::1]:7");
}

TEST(GrpcTargetForTest, SeveralAddresses_BecomeOrderedStaticList) {
  EXPECT_EQ(*GrpcTargetFor("127.0.0.1:5001,localhost:5002, 127.0.0.3:5003"),
            "ipv4:127.0.0.1:5001,127.0.0.1:5002,127.0.0.3:5003");
  EXPECT_EQ(*GrpcTargetFor("[::1]:1,[::1]:2"), "ipv6:[::1]:1,[::1]:2");
}

TEST(GrpcTargetForTest, BadEntries_AreInvalidArgumentNamingTheEntry) {
  EXPECT_THAT(GrpcTargetFor(""), StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(GrpcTargetFor("head"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("host:port")));
  EXPECT_THAT(GrpcTargetFor("127.0.0.1:1,head:99999"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("head:99999")));
  EXPECT_THAT(GrpcTargetFor("127.0.0.1:1,:5"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty host")));
  EXPECT_THAT(GrpcTargetFor("127.0.0.1:1,[::1]:2"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mix")));
}

TEST(GrpcTargetForTest, UnresolvableName_IsUnavailable) {
  EXPECT_THAT(GrpcTargetFor("127.0.0.1:1,no-such-host.invalid:2"),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("no-such-host.invalid")));
}

}  // namespace
}  // namespace trainctl
