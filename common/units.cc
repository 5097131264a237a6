#include "common/units.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace trainctl {
namespace {

constexpr absl::string_view kAcceptedForms =
    "expected a whole number of bytes or a number with a unit K, M, G, T or P "
    "(optionally followed by \"iB\" or \"B\"; powers of 1024), e.g. \"1024\", "
    "\"512MiB\", \"10GiB\", \"1.5TiB\", \"80G\"";

absl::Status BadSize(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "invalid byte size \"%s\": %s; %s", text, why, kAcceptedForms));
}

// The power of 1024 a unit letter stands for, or -1.
int UnitExponent(char c) {
  switch (absl::ascii_tolower(static_cast<unsigned char>(c))) {
    case 'k': return 1;
    case 'm': return 2;
    case 'g': return 3;
    case 't': return 4;
    case 'p': return 5;
    default: return -1;
  }
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view s = absl::StripAsciiWhitespace(text);
  if (s.empty()) return BadSize(text, "it is empty");
  if (s[0] == '-') return BadSize(text, "it is negative");

  // Number: digits, optionally '.' and more digits.
  size_t i = 0;
  unsigned __int128 whole = 0;
  size_t whole_digits = 0;
  for (; i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]));
       ++i, ++whole_digits) {
    whole = whole * 10 + static_cast<unsigned>(s[i] - '0');
    if (whole > std::numeric_limits<int64_t>::max()) {
      return BadSize(text, "it does not fit in 64 bits");
    }
  }
  // Fraction kept as frac_num / frac_den, at most 18 digits (finer than a byte
  // of an exbibyte).
  unsigned __int128 frac_num = 0;
  unsigned __int128 frac_den = 1;
  size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    ++i;
    for (; i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]));
         ++i, ++frac_digits) {
      if (frac_digits < 18) {
        frac_num = frac_num * 10 + static_cast<unsigned>(s[i] - '0');
        frac_den *= 10;
      }
    }
    if (frac_digits == 0) return BadSize(text, "no digits after '.'");
  }
  if (whole_digits == 0) return BadSize(text, "it does not start with a number");

  // Unit: optional spaces, then "", "B", "K", "KB", "KiB" (any case).
  absl::string_view unit = absl::StripLeadingAsciiWhitespace(s.substr(i));
  int exponent = 0;
  if (!unit.empty()) {
    const std::string lower = absl::AsciiStrToLower(unit);
    if (lower == "b") {
      exponent = 0;
    } else if (UnitExponent(lower[0]) > 0 &&
               (lower.size() == 1 || lower.substr(1) == "b" ||
                lower.substr(1) == "ib")) {
      exponent = UnitExponent(lower[0]);
    } else {
      return BadSize(text, absl::StrFormat("unknown unit \"%s\"", unit));
    }
  }

  unsigned __int128 multiplier = 1;
  for (int e = 0; e < exponent; ++e) multiplier *= 1024;
  if (exponent == 0 && frac_num != 0) {
    return BadSize(text, "it is not a whole number of bytes");
  }
  // A fraction of a unit is rounded down to whole bytes ("1.1GiB").
  const unsigned __int128 bytes =
      whole * multiplier + frac_num * multiplier / frac_den;
  if (bytes > static_cast<unsigned __int128>(std::numeric_limits<int64_t>::max())) {
    return BadSize(text, "it does not fit in 64 bits");
  }
  return static_cast<int64_t>(bytes);
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB",
                                           "PiB", "EiB"};
  constexpr int kLastUnit = 6;
  const bool negative = bytes < 0;
  // |INT64_MIN| does not fit in int64_t; long double holds it exactly.
  const long double magnitude =
      negative ? -static_cast<long double>(bytes) : static_cast<long double>(bytes);
  int unit = 0;
  long double value = magnitude;
  while (unit < kLastUnit && value >= 1024) {
    value /= 1024;
    ++unit;
  }
  std::string number;
  if (unit == 0) {
    number = absl::StrFormat("%.0Lf", value);
  } else {
    number = absl::StrFormat("%.1Lf", value);
    // 1023.96 KiB rounds to "1024.0": say "1.0 MiB" instead.
    if (number == "1024.0" && unit < kLastUnit) {
      ++unit;
      number = "1.0";
    }
    if (absl::EndsWith(number, ".0")) number.resize(number.size() - 2);
  }
  return absl::StrFormat("%s%s %s", negative ? "-" : "", number, kUnits[unit]);
}

absl::StatusOr<absl::Duration> ParseLongDuration(absl::string_view text) {
  absl::string_view rest = absl::StripAsciiWhitespace(text);
  absl::Duration total;
  // A leading whole number of weeks or days ("2w", "90d", "1d12h"), then
  // what absl::ParseDuration reads ("36h", "90m", "1h30m").
  const size_t unit = rest.find_first_of("wd");
  if (unit != absl::string_view::npos) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(rest.substr(0, unit), &n) || n < 0 || n > 36600) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", text, "\" is not a duration such as 90d, 2w, 36h or 1d12h"));
    }
    total = absl::Hours(24) * n * (rest[unit] == 'w' ? 7 : 1);
    rest.remove_prefix(unit + 1);
  }
  if (!rest.empty()) {
    absl::Duration d;
    if (!absl::ParseDuration(rest, &d) || d < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", text, "\" is not a duration such as 90d, 2w, 36h or 1d12h"));
    }
    total += d;
  }
  if (total <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a positive duration such as 90d, 2w, 36h or 1d12h"));
  }
  return total;
}

}  // namespace trainctl
