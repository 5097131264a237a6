#include "common/flag_hints.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace trainctl {

std::string ClosestName(absl::string_view word, const std::vector<std::string>& candidates,
                        int max_distance) {
  std::string best;
  int best_distance = max_distance + 1;
  for (const std::string& c : candidates) {
    // One row of the dynamic-programming table at a time.
    std::vector<int> row(c.size() + 1);
    for (size_t j = 0; j <= c.size(); ++j) row[j] = static_cast<int>(j);
    for (size_t i = 1; i <= word.size(); ++i) {
      int diagonal = row[0];
      row[0] = static_cast<int>(i);
      for (size_t j = 1; j <= c.size(); ++j) {
        const int above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                           diagonal + (word[i - 1] == c[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    if (row[c.size()] < best_distance) {
      best_distance = row[c.size()];
      best = c;
    }
  }
  return best;
}

int ParseFlagsOrExplain(CLI::App& app, int argc, const char* const* argv, std::ostream& out,
                        std::ostream& err) {
  try {
    app.parse(argc, argv);
    return -1;
  } catch (const CLI::Success& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, out, err);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e, out, err);
  } catch (const CLI::ParseError& e) {
    std::string hint;
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      // "The following argument was not expected: --state-dri": the first
      // flag among the unexpected words.
      std::vector<std::string> flags;
      for (const CLI::Option* o : app.get_options()) {
        for (const std::string& n : o->get_lnames()) flags.push_back("--" + n);
      }
      const std::string what = e.what();
      const size_t colon = what.rfind(": ");
      if (colon != std::string::npos) {
        for (absl::string_view word :
             absl::StrSplit(absl::string_view(what).substr(colon + 2), ' ', absl::SkipEmpty())) {
          if (!absl::StartsWith(word, "--")) continue;
          const std::string flag(word.substr(0, word.find('=')));
          if (const std::string near = ClosestName(flag, flags); !near.empty()) {
            hint = "; did you mean " + near + "?";
          }
          break;
        }
      }
    }
    err << app.get_name() << ": error: " << e.what() << hint << " (see " << app.get_name()
        << " --help)\n";
    return e.get_exit_code();
  }
}

}  // namespace trainctl
