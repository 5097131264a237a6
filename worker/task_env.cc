#include "worker/task_env.h"

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace trainctl::worker {
namespace {

constexpr absl::string_view kNames[] = {"PATH", "LANG", "LANGUAGE", "TZ",
                                        "LD_LIBRARY_PATH"};
constexpr absl::string_view kPrefixes[] = {"LC_", "CUDA_", "NCCL_"};

bool Matches(absl::string_view name, absl::string_view pattern) {
  if (absl::EndsWith(pattern, "*")) {
    return absl::StartsWith(name, pattern.substr(0, pattern.size() - 1));
  }
  return name == pattern;
}

bool Passes(absl::string_view name, const std::vector<std::string>& extra) {
  for (absl::string_view n : kNames) {
    if (name == n) return true;
  }
  for (absl::string_view p : kPrefixes) {
    if (absl::StartsWith(name, p)) return true;
  }
  for (const std::string& e : extra) {
    if (Matches(name, e)) return true;
  }
  return false;
}

}  // namespace

std::map<std::string, std::string> PassThroughEnv(
    const char* const* environ, const std::vector<std::string>& extra) {
  std::map<std::string, std::string> env;
  for (const char* const* e = environ; e != nullptr && *e != nullptr; ++e) {
    absl::string_view kv(*e);
    const size_t eq = kv.find('=');
    if (eq == absl::string_view::npos || eq == 0) continue;
    const absl::string_view name = kv.substr(0, eq);
    if (Passes(name, extra)) env.emplace(std::string(name), std::string(kv.substr(eq + 1)));
  }
  return env;
}

}  // namespace trainctl::worker
