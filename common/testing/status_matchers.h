#ifndef TRAINCTL_COMMON_TESTING_STATUS_MATCHERS_H_
#define TRAINCTL_COMMON_TESTING_STATUS_MATCHERS_H_

// GoogleTest matchers for absl::Status / absl::StatusOr (Abseil 20220623 ships
// none).

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace trainctl::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

// EXPECT_THAT(x, IsOk());
MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s.ToString();
  return s.ok();
}

// EXPECT_THAT(x, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("gpus")));
MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + ::testing::PrintToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code &&
         ::testing::Matches(message_matcher)(std::string(s.message()));
}

}  // namespace trainctl::testing

#define TC_ASSERT_OK(expr) ASSERT_THAT((expr), ::trainctl::testing::IsOk())
#define TC_EXPECT_OK(expr) EXPECT_THAT((expr), ::trainctl::testing::IsOk())

#endif  // TRAINCTL_COMMON_TESTING_STATUS_MATCHERS_H_
