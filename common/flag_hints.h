#ifndef TRAINCTL_COMMON_FLAG_HINTS_H_
#define TRAINCTL_COMMON_FLAG_HINTS_H_

// Command-line mistakes explained, for every binary: the closest known name
// to a mistyped one ("did you mean --state-dir?"), and CLI11 parsing for the
// daemons with that hint added to an unknown flag's error.

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "CLI/CLI.hpp"

namespace trainctl {

// The candidate closest to `word` by edit distance (Levenshtein: one
// insertion, deletion or substitution each), when at most `max_distance`
// away; "" when none is. Ties go to the first candidate.
std::string ClosestName(absl::string_view word, const std::vector<std::string>& candidates,
                        int max_distance = 2);

// Parses argv into `app` (CLI11). Returns -1 when the program should go on;
// otherwise the exit code to return at once: 0 after --help or --version
// (printed to `out`), CLI11's code for a parse error after writing the
// error to `err`: "NAME: error: MESSAGE", with "; did you mean --FLAG?"
// when an unexpected argument is a mistyped long flag of `app`, and
// "(see NAME --help)".
int ParseFlagsOrExplain(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                        std::ostream& err);

}  // namespace trainctl

#endif  // TRAINCTL_COMMON_FLAG_HINTS_H_
