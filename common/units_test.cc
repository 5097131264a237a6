#include "common/units.h"

#include <cstdint>
#include <limits>

#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace trainctl {
namespace {

using ::testing::HasSubstr;
using ::trainctl::testing::StatusIs;

constexpr int64_t kKiB = int64_t{1} << 10;
constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;
constexpr int64_t kTiB = int64_t{1} << 40;

TEST(ParseByteSize, PlainNumber_IsBytes) {
  EXPECT_EQ(*ParseByteSize("0"), 0);
  EXPECT_EQ(*ParseByteSize("1024"), 1024);
  EXPECT_EQ(*ParseByteSize(" 7 "), 7);
  EXPECT_EQ(*ParseByteSize("7B"), 7);
}

TEST(ParseByteSize, Units_ArePowersOf1024InAnyCaseAndSpelling) {
  EXPECT_EQ(*ParseByteSize("512MiB"), 512 * kMiB);
  EXPECT_EQ(*ParseByteSize("10GiB"), 10 * kGiB);
  EXPECT_EQ(*ParseByteSize("80G"), 80 * kGiB);
  EXPECT_EQ(*ParseByteSize("80GB"), 80 * kGiB);
  EXPECT_EQ(*ParseByteSize("80gib"), 80 * kGiB);
  EXPECT_EQ(*ParseByteSize("4k"), 4 * kKiB);
  EXPECT_EQ(*ParseByteSize("2 TiB"), 2 * kTiB);
}

TEST(ParseByteSize, Fraction_OfAUnitIsRoundedDownToBytes) {
  EXPECT_EQ(*ParseByteSize("1.5TiB"), kTiB + kTiB / 2);
  EXPECT_EQ(*ParseByteSize("0.5KiB"), 512);
  // 1.1 GiB = 1181116006.4 bytes.
  EXPECT_EQ(*ParseByteSize("1.1GiB"), 1181116006);
}

TEST(ParseByteSize, LargestValue_Fits) {
  EXPECT_EQ(*ParseByteSize("9223372036854775807"),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(*ParseByteSize("8191PiB"), 8191 * (kTiB * 1024));
}

TEST(ParseByteSize, BadText_IsInvalidArgumentNamingTextAndForms) {
  for (const char* bad :
       {"", "   ", "-1", "-5GiB", "GiB", "1.", ".5G", "1.5", "10 GiBs", "10X",
        "10 Gi", "1e9", "0x10", "1,000", "10GiB extra"}) {
    EXPECT_THAT(ParseByteSize(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("\"" + std::string(bad) + "\""),
                                          HasSubstr("512MiB"))))
        << "input: \"" << bad << "\"";
  }
}

TEST(ParseByteSize, Overflow_IsInvalidArgument) {
  EXPECT_THAT(ParseByteSize("9223372036854775808"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("64 bits")));
  EXPECT_THAT(ParseByteSize("8192PiB"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("64 bits")));
  EXPECT_THAT(ParseByteSize("99999999999999999999999999TiB"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("64 bits")));
}

TEST(FormatBytes, Values_UseLargestUnitWithAtMostOneDecimal) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1024), "1 KiB");
  EXPECT_EQ(FormatBytes(512 * kMiB), "512 MiB");
  EXPECT_EQ(FormatBytes(kGiB + kGiB / 2), "1.5 GiB");
  // An H100's NVML total: 81559 MiB = 79.647... GiB.
  EXPECT_EQ(FormatBytes(81559 * kMiB), "79.6 GiB");
  EXPECT_EQ(FormatBytes(-2 * kGiB), "-2 GiB");
}

TEST(FormatBytes, JustBelowNextUnit_RoundsUpToIt) {
  // 1048575 B = 1023.999 KiB, which would print as "1024.0 KiB".
  EXPECT_EQ(FormatBytes(kMiB - 1), "1 MiB");
}

TEST(FormatBytes, Extremes_DoNotOverflow) {
  EXPECT_EQ(FormatBytes(std::numeric_limits<int64_t>::max()), "8 EiB");
  EXPECT_EQ(FormatBytes(std::numeric_limits<int64_t>::min()), "-8 EiB");
}

TEST(Units, FormatThenParse_RoundTripsExactMultiples) {
  for (int64_t bytes : {int64_t{0}, int64_t{5}, 3 * kKiB, 512 * kMiB,
                        80 * kGiB, kGiB + kGiB / 2, 2 * kTiB}) {
    auto parsed = ParseByteSize(FormatBytes(bytes));
    TC_ASSERT_OK(parsed);
    EXPECT_EQ(*parsed, bytes) << FormatBytes(bytes);
  }
}

TEST(Units, ParseThenFormat_GivesCanonicalSpelling) {
  EXPECT_EQ(FormatBytes(*ParseByteSize("80g")), "80 GiB");
  EXPECT_EQ(FormatBytes(*ParseByteSize("1.5TiB")), "1.5 TiB");
  EXPECT_EQ(FormatBytes(*ParseByteSize("2048KB")), "2 MiB");
}

TEST(ParseLongDuration, WeeksOrDaysThenAbslUnits) {
  EXPECT_EQ(*ParseLongDuration("90d"), absl::Hours(24 * 90));
  EXPECT_EQ(*ParseLongDuration("2w"), absl::Hours(24 * 14));
  EXPECT_EQ(*ParseLongDuration("1d12h"), absl::Hours(36));
  EXPECT_EQ(*ParseLongDuration("36h"), absl::Hours(36));
  EXPECT_EQ(*ParseLongDuration(" 1h30m "), absl::Minutes(90));
}

TEST(ParseLongDuration, ZeroNegativeOrMalformed_InvalidArgumentQuotingIt) {
  for (const char* bad : {"0", "0d", "-1d", "1y", "d", "12", "1d-1h", "99999d", ""}) {
    EXPECT_THAT(ParseLongDuration(bad),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::HasSubstr(absl::StrCat("\"", bad, "\""))))
        << bad;
  }
}

}  // namespace
}  // namespace trainctl
