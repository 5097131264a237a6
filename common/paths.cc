#include "common/paths.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace trainctl {

std::string DefaultDataDir() {
  if (const char* xdg = std::getenv("XDG_DATA_HOME"); xdg != nullptr && *xdg) {
    return absl::StrCat(xdg, "/trainctl");
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : "/tmp", "/.local/share/trainctl");
}

}  // namespace trainctl
