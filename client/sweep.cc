#include "client/sweep.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <utility>

#include "absl/random/distributions.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trainctl::cli {
namespace {

// The coordinator's limit on a parameter name (coordinator/job_spec.h).
constexpr size_t kMaxParamNameBytes = 64;

bool IsIdentifier(absl::string_view s) {
  if (s.empty() || s.size() > kMaxParamNameBytes || absl::ascii_isdigit(s[0])) {
    return false;
  }
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return absl::ascii_isalnum(c) || c == '_'; });
}

absl::Status Invalid(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

// Splits "name=rest"; checks the name.
absl::StatusOr<std::pair<std::string, std::string>> SplitNameValue(
    absl::string_view flag, absl::string_view text, absl::string_view form) {
  const size_t eq = text.find('=');
  if (eq == absl::string_view::npos) {
    return Invalid(absl::StrFormat("%s %s: expected %s", flag, text, form));
  }
  std::string name(text.substr(0, eq));
  if (!IsIdentifier(name)) {
    return Invalid(absl::StrFormat(
        "%s %s: \"%s\" is not a parameter name ([A-Za-z_][A-Za-z0-9_]*, at "
        "most %d bytes)",
        flag, text, name, kMaxParamNameBytes));
  }
  return std::make_pair(std::move(name), std::string(text.substr(eq + 1)));
}

bool ParseFinite(absl::string_view text, double* value) {
  return absl::SimpleAtod(text, value) && std::isfinite(*value);
}

// Calls `on_placeholder(name)` for every "{name}" of `arg` and
// `on_text(literal)` for the rest, with "{{" and "}}" unescaped.
template <typename OnText, typename OnPlaceholder>
void ScanTemplate(absl::string_view arg, OnText on_text,
                  OnPlaceholder on_placeholder) {
  size_t i = 0;
  while (i < arg.size()) {
    const char c = arg[i];
    if ((c == '{' || c == '}') && i + 1 < arg.size() && arg[i + 1] == c) {
      on_text(absl::string_view(&arg[i], 1));
      i += 2;
      continue;
    }
    if (c == '{') {
      const size_t close = arg.find('}', i + 1);
      if (close != absl::string_view::npos) {
        absl::string_view name = arg.substr(i + 1, close - i - 1);
        if (IsIdentifier(name)) {
          on_placeholder(name);
          i = close + 1;
          continue;
        }
      }
    }
    on_text(absl::string_view(&arg[i], 1));
    ++i;
  }
}

std::string FormatSample(double value) { return absl::StrFormat("%g", value); }

}  // namespace

absl::StatusOr<GridParam> ParseGridFlag(absl::string_view text) {
  auto split = SplitNameValue("--grid", text, "NAME=V1,V2,... e.g. lr=1e-3,3e-4");
  if (!split.ok()) return split.status();
  GridParam param;
  param.name = std::move(split->first);
  param.values = absl::StrSplit(split->second, ',');
  for (const std::string& v : param.values) {
    if (v.empty()) {
      return Invalid(absl::StrFormat(
          "--grid %s: empty value; give NAME=V1,V2,... with no empty value",
          text));
    }
  }
  return param;
}

absl::StatusOr<Distribution> ParseDistribution(absl::string_view text) {
  constexpr char kForms[] =
      "uniform:LOW:HIGH, loguniform:LOW:HIGH, int:LOW:HIGH or choice:A|B|...";
  const size_t colon = text.find(':');
  if (colon == absl::string_view::npos) {
    return Invalid(absl::StrFormat("\"%s\": expected %s", text, kForms));
  }
  absl::string_view kind = text.substr(0, colon);
  absl::string_view rest = text.substr(colon + 1);
  Distribution d;
  if (kind == "choice") {
    d.kind = Distribution::Kind::kChoice;
    d.choices = absl::StrSplit(rest, '|');
    for (const std::string& c : d.choices) {
      if (c.empty()) {
        return Invalid(absl::StrFormat(
            "\"%s\": empty choice; expected choice:A|B|... with no empty value",
            text));
      }
    }
    return d;
  }
  if (kind == "uniform") {
    d.kind = Distribution::Kind::kUniform;
  } else if (kind == "loguniform") {
    d.kind = Distribution::Kind::kLogUniform;
  } else if (kind == "int") {
    d.kind = Distribution::Kind::kInt;
  } else {
    return Invalid(absl::StrFormat("\"%s\": unknown distribution \"%s\"; expected %s",
                                   text, kind, kForms));
  }
  std::vector<absl::string_view> bounds = absl::StrSplit(rest, ':');
  if (bounds.size() != 2 || !ParseFinite(bounds[0], &d.low) ||
      !ParseFinite(bounds[1], &d.high)) {
    return Invalid(absl::StrFormat(
        "\"%s\": expected %s:LOW:HIGH with LOW and HIGH finite numbers", text,
        kind));
  }
  if (d.low > d.high) {
    return Invalid(absl::StrFormat("\"%s\": LOW %g is above HIGH %g", text,
                                   d.low, d.high));
  }
  if (d.kind == Distribution::Kind::kLogUniform && d.low <= 0) {
    return Invalid(absl::StrFormat(
        "\"%s\": loguniform needs 0 < LOW <= HIGH, got LOW %g", text, d.low));
  }
  if (d.kind == Distribution::Kind::kInt) {
    int64_t lo, hi;
    if (!absl::SimpleAtoi(bounds[0], &lo) || !absl::SimpleAtoi(bounds[1], &hi)) {
      return Invalid(absl::StrFormat(
          "\"%s\": int:LOW:HIGH takes integers, e.g. int:1:8", text));
    }
  }
  return d;
}

absl::StatusOr<RandomParam> ParseParamFlag(absl::string_view text) {
  auto split = SplitNameValue("--param", text,
                              "NAME=DIST e.g. lr=loguniform:1e-5:1e-2");
  if (!split.ok()) return split.status();
  absl::StatusOr<Distribution> d = ParseDistribution(split->second);
  if (!d.ok()) {
    return Invalid(absl::StrCat("--param ", split->first, ": ", d.status().message()));
  }
  return RandomParam{std::move(split->first), *std::move(d)};
}

std::vector<std::string> UnusedSweepParams(
    const SweepSpec& spec, const std::vector<std::string>& command_template) {
  std::set<std::string, std::less<>> used;
  for (const std::string& arg : command_template) {
    ScanTemplate(
        arg, [](absl::string_view) {},
        [&](absl::string_view name) { used.emplace(name); });
  }
  std::vector<std::string> unused;
  for (const GridParam& p : spec.grid) {
    if (used.count(p.name) == 0) unused.push_back(p.name);
  }
  for (const RandomParam& p : spec.random) {
    if (used.count(p.name) == 0) unused.push_back(p.name);
  }
  return unused;
}

absl::StatusOr<std::vector<Trial>> ExpandSweep(
    const SweepSpec& spec, const std::vector<std::string>& command_template) {
  if (spec.grid.empty() && spec.random.empty()) {
    return Invalid("no parameters: give --grid NAME=V1,V2 and/or --random N "
                   "--param NAME=DIST");
  }
  if (command_template.empty()) {
    return Invalid("no command to run; give it after --, e.g. "
                   "`-- python train.py --lr {lr}`");
  }
  if (!spec.random.empty() && spec.random_count <= 0) {
    return Invalid(absl::StrFormat(
        "--param %s: random parameters need --random N (samples per grid "
        "point)",
        spec.random[0].name));
  }
  if (spec.random.empty() && spec.random_count != 0) {
    return Invalid("--random N needs at least one --param NAME=DIST to sample");
  }
  std::set<std::string, std::less<>> names;
  for (const GridParam& p : spec.grid) {
    if (!names.insert(p.name).second) {
      return Invalid(absl::StrFormat("parameter %s is given twice", p.name));
    }
    if (p.values.empty()) {
      return Invalid(absl::StrFormat("--grid %s: no value", p.name));
    }
    for (const std::string& v : p.values) {
      if (v.empty()) {
        return Invalid(absl::StrFormat("--grid %s: empty value", p.name));
      }
    }
  }
  for (const RandomParam& p : spec.random) {
    if (!names.insert(p.name).second) {
      return Invalid(absl::StrFormat("parameter %s is given twice", p.name));
    }
    if (p.distribution.kind == Distribution::Kind::kChoice &&
        p.distribution.choices.empty()) {
      return Invalid(absl::StrFormat("--param %s: choice with no value", p.name));
    }
  }
  // Every placeholder must name a parameter.
  for (const std::string& arg : command_template) {
    std::string unknown;
    ScanTemplate(
        arg, [](absl::string_view) {},
        [&](absl::string_view name) {
          if (unknown.empty() && names.count(name) == 0) unknown = std::string(name);
        });
    if (!unknown.empty()) {
      return Invalid(absl::StrFormat(
          "command argument \"%s\": placeholder {%s} is not a parameter "
          "(parameters: %s); write {{ and }} for literal braces",
          arg, unknown, absl::StrJoin(names, ", ")));
    }
  }

  // Trial count, without overflow.
  int64_t grid_points = 1;
  for (const GridParam& p : spec.grid) {
    grid_points *= static_cast<int64_t>(p.values.size());
    if (grid_points > kMaxSweepTrials) break;
  }
  const int64_t per_point = spec.random.empty() ? 1 : spec.random_count;
  if (grid_points > kMaxSweepTrials || per_point > kMaxSweepTrials ||
      grid_points * per_point > kMaxSweepTrials) {
    return Invalid(absl::StrFormat(
        "the sweep has more than %d trials (%d grid point(s) x %d sample(s)); "
        "use fewer values or a smaller --random",
        kMaxSweepTrials, grid_points, per_point));
  }

  std::seed_seq seq{static_cast<uint32_t>(spec.seed),
                    static_cast<uint32_t>(spec.seed >> 32)};
  std::mt19937_64 rng(seq);
  auto sample = [&rng](const Distribution& d) -> std::string {
    switch (d.kind) {
      case Distribution::Kind::kUniform:
        return FormatSample(
            absl::Uniform(absl::IntervalClosedClosed, rng, d.low, d.high));
      case Distribution::Kind::kLogUniform: {
        const double x = std::exp(absl::Uniform(
            absl::IntervalClosedClosed, rng, std::log(d.low), std::log(d.high)));
        return FormatSample(std::clamp(x, d.low, d.high));
      }
      case Distribution::Kind::kInt:
        return absl::StrCat(absl::Uniform(absl::IntervalClosedClosed, rng,
                                          static_cast<int64_t>(d.low),
                                          static_cast<int64_t>(d.high)));
      case Distribution::Kind::kChoice:
        return d.choices[absl::Uniform<size_t>(rng, 0, d.choices.size())];
    }
    return "";
  };

  std::vector<Trial> trials;
  trials.reserve(grid_points * per_point);
  // Odometer over the grid, last parameter fastest.
  std::vector<size_t> index(spec.grid.size(), 0);
  for (int64_t point = 0; point < grid_points; ++point) {
    std::map<std::string, std::string> base;
    for (size_t g = 0; g < spec.grid.size(); ++g) {
      base[spec.grid[g].name] = spec.grid[g].values[index[g]];
    }
    for (int64_t s = 0; s < per_point; ++s) {
      Trial trial;
      trial.params = base;
      for (const RandomParam& p : spec.random) {
        trial.params[p.name] = sample(p.distribution);
      }
      for (const std::string& arg : command_template) {
        std::string filled;
        ScanTemplate(
            arg, [&](absl::string_view text) { filled.append(text.data(), text.size()); },
            [&](absl::string_view name) {
              filled.append(trial.params.at(std::string(name)));
            });
        trial.command.push_back(std::move(filled));
      }
      trials.push_back(std::move(trial));
    }
    for (size_t g = spec.grid.size(); g-- > 0;) {
      if (++index[g] < spec.grid[g].values.size()) break;
      index[g] = 0;
    }
  }
  return trials;
}

}  // namespace trainctl::cli
