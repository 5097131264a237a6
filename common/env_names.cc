#include "common/env_names.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

#include <string>

namespace trainctl {

bool IsEnvName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool IsReservedEnvVar(absl::string_view name) {
  static constexpr absl::string_view kReserved[] = {
      "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "RANK",
      "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
      "GROUP_WORLD_SIZE", "NODE_RANK", "ROLE_RANK", "ROLE_WORLD_SIZE",
      "ROLE_NAME"};
  for (absl::string_view r : kReserved) {
    if (name == r) return true;
  }
  if (name == "TRAINCTL_NCCL_UNIQUE_IDS") return false;
  return absl::StartsWith(name, "TRAINCTL_") || absl::StartsWith(name, "TORCHELASTIC_");
}

bool LooksSecret(absl::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(name);
  for (absl::string_view word :
       {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY", "AUTH"}) {
    if (absl::StrContains(upper, word)) return true;
  }
  return false;
}

}  // namespace trainctl
