#ifndef TRAINCTL_CLIENT_SWEEP_H_
#define TRAINCTL_CLIENT_SWEEP_H_

// Hyper-parameter sweeps for `trainctl sweep`: parsing the --grid and --param
// flags and expanding a sweep into trials (parameter values plus the command
// with its {placeholders} filled in). Pure functions: no RPC, no clock, no
// global random state (a trial list depends only on its inputs and the seed).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainctl::cli {

// At most this many trials in one sweep; more is INVALID_ARGUMENT.
inline constexpr int64_t kMaxSweepTrials = 10'000;

// One --grid parameter: every value is tried, in the order given. Values are
// substituted verbatim ("1e-3" stays "1e-3").
struct GridParam {
  std::string name;
  std::vector<std::string> values;
};

// How a --param parameter is sampled.
struct Distribution {
  enum class Kind {
    kUniform,     // uniform:a:b, a real in [a, b]
    kLogUniform,  // loguniform:a:b, 0 < a < b: log-uniform real in [a, b]
    kChoice,      // choice:x|y|z, one of the values, equally likely
    kInt,         // int:a:b, an integer in [a, b], both ends included
  };
  Kind kind = Kind::kUniform;
  double low = 0;
  double high = 0;
  std::vector<std::string> choices;
};

// One --param parameter.
struct RandomParam {
  std::string name;
  Distribution distribution;
};

// A sweep: the cartesian product of `grid` (first parameter varies slowest),
// and for each grid point `random_count` samples of the `random` parameters
// (or `random_count` samples alone when there is no grid).
struct SweepSpec {
  std::vector<GridParam> grid;
  std::vector<RandomParam> random;
  // Samples per grid point; 0 when there are no random parameters.
  int64_t random_count = 0;
  // Seeds the sampler; the same spec and seed give the same trials.
  uint64_t seed = 0;
};

// One trial: its parameter values (name -> value) and its argv.
struct Trial {
  std::map<std::string, std::string> params;
  std::vector<std::string> command;
};

// Parses a --grid flag, "lr=1e-3,3e-4".
// Errors: INVALID_ARGUMENT (no '=', name not an identifier of at most 64
// bytes, an empty value).
absl::StatusOr<GridParam> ParseGridFlag(absl::string_view text);

// Parses a distribution: "uniform:0:1", "loguniform:1e-5:1e-2",
// "choice:adam|sgd", "int:1:8".
// Errors: INVALID_ARGUMENT saying which form was expected (unknown kind,
// bounds not finite numbers, low > high, loguniform low <= 0, int bounds not
// integers, an empty choice).
absl::StatusOr<Distribution> ParseDistribution(absl::string_view text);

// Parses a --param flag, "lr=loguniform:1e-5:1e-2".
// Errors: INVALID_ARGUMENT as ParseGridFlag and ParseDistribution.
absl::StatusOr<RandomParam> ParseParamFlag(absl::string_view text);

// Expands `spec` into its trials, grid order first, then samples. Every
// "{name}" in `command_template` is replaced by the trial's value of
// parameter `name`; "{{" and "}}" stand for literal braces; a '{' that does
// not start "{identifier}" is kept as is. Sampled reals are written with %g
// (6 significant digits), integers in decimal.
// Errors: INVALID_ARGUMENT when there is no parameter, a name is given twice,
// a {placeholder} names no parameter (the message names it), random
// parameters come without a sample count or a count without parameters, a
// grid parameter has no value, the command is empty, or the sweep has more
// than kMaxSweepTrials trials.
absl::StatusOr<std::vector<Trial>> ExpandSweep(
    const SweepSpec& spec, const std::vector<std::string>& command_template);

// Parameters of `spec` that no {placeholder} of `command_template` uses, in
// the order given (allowed: the program may read them otherwise; worth a
// warning).
std::vector<std::string> UnusedSweepParams(
    const SweepSpec& spec, const std::vector<std::string>& command_template);

}  // namespace trainctl::cli

#endif  // TRAINCTL_CLIENT_SWEEP_H_
