#include "client/array_spec.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace trainctl::cli {
namespace {

absl::Status Bad(absl::string_view part, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrFormat("\"%s\": %s", part, why));
}

// A task index: decimal digits only (no sign, no spaces), <= kMaxArrayTaskId.
absl::StatusOr<int> Index(absl::string_view item, absl::string_view text) {
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return Bad(item, absl::StrFormat("\"%s\" is not a task index (a number >= 0)", text));
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value > kMaxArrayTaskId) {
    return Bad(item, absl::StrFormat("task index %s is above the largest, %d", text,
                                     kMaxArrayTaskId));
  }
  return static_cast<int>(value);
}

}  // namespace

absl::StatusOr<ArraySpec> ParseArraySpec(absl::string_view text) {
  ArraySpec spec;
  if (text.empty()) {
    return absl::InvalidArgumentError(
        "empty; expected indices such as 0-9, 1,3,5-7, 0-15:4, optionally %P "
        "(at most P running)");
  }
  absl::string_view list = text;
  if (const size_t pct = text.find('%'); pct != absl::string_view::npos) {
    list = text.substr(0, pct);
    const absl::string_view limit = text.substr(pct + 1);
    int value = 0;
    if (limit.empty() ||
        !std::all_of(limit.begin(), limit.end(),
                     [](char c) { return absl::ascii_isdigit(c); }) ||
        !absl::SimpleAtoi(limit, &value) || value < 1) {
      return Bad(text.substr(pct), "expected %P with P >= 1, the most tasks running at once");
    }
    spec.max_running = value;
  }
  for (absl::string_view item : absl::StrSplit(list, ',')) {
    if (item.empty()) {
      return Bad(list, "empty item; separate indices and ranges by single commas");
    }
    absl::string_view range = item;
    int step = 1;
    if (const size_t colon = item.find(':'); colon != absl::string_view::npos) {
      range = item.substr(0, colon);
      const absl::string_view step_text = item.substr(colon + 1);
      int64_t value = 0;
      if (step_text.empty() ||
          !std::all_of(step_text.begin(), step_text.end(),
                       [](char c) { return absl::ascii_isdigit(c); }) ||
          !absl::SimpleAtoi(step_text, &value) || value < 1 || value > kMaxArrayTaskId) {
        return Bad(item, "expected a step >= 1 after ':' (0-15:4)");
      }
      if (range.find('-') == absl::string_view::npos) {
        return Bad(item, "a step needs a range (0-15:4)");
      }
      step = static_cast<int>(value);
    }
    const size_t dash = range.find('-');
    if (dash == absl::string_view::npos) {
      absl::StatusOr<int> index = Index(item, range);
      if (!index.ok()) return index.status();
      spec.task_ids.push_back(*index);
    } else {
      absl::StatusOr<int> first = Index(item, range.substr(0, dash));
      if (!first.ok()) return first.status();
      absl::StatusOr<int> last = Index(item, range.substr(dash + 1));
      if (!last.ok()) return last.status();
      if (*last < *first) return Bad(item, "the range ends before it starts");
      for (int64_t i = *first; i <= *last; i += step) {
        spec.task_ids.push_back(static_cast<int>(i));
        if (spec.task_ids.size() > static_cast<size_t>(kMaxArrayTaskCount)) break;
      }
    }
    if (spec.task_ids.size() > static_cast<size_t>(kMaxArrayTaskCount)) {
      return Bad(text, absl::StrFormat("more than %d tasks in one array",
                                       kMaxArrayTaskCount));
    }
  }
  std::sort(spec.task_ids.begin(), spec.task_ids.end());
  spec.task_ids.erase(std::unique(spec.task_ids.begin(), spec.task_ids.end()),
                      spec.task_ids.end());
  return spec;
}

}  // namespace trainctl::cli
