// GPU types from GPU product names (see gpu_types.h for the rule).

#include "coordinator/gpu_types.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace trainctl::coord {
namespace {

// Words that name a vendor or a brand line, not a model.
bool IsBrandWord(absl::string_view w) {
  static const auto* const kBrands = new absl::flat_hash_set<std::string>{
      "nvidia", "tesla", "geforce", "quadro", "amd", "instinct", "radeon",
      "graphics", "gpu"};
  return kBrands->contains(w);
}

// "80gb", "16g", "40gib": a memory size.
bool IsMemoryWord(absl::string_view w) {
  size_t digits = 0;
  while (digits < w.size() && absl::ascii_isdigit(w[digits])) ++digits;
  if (digits == 0) return false;
  const absl::string_view unit = w.substr(digits);
  return unit == "g" || unit == "gb" || unit == "gib";
}

// Memory technology and form factors: "hbm3", "hbm2e", "sxm4", "pcie",
// "nvl", "nvlink".
bool IsPackagingWord(absl::string_view w) {
  return absl::StartsWith(w, "hbm") || absl::StartsWith(w, "sxm") ||
         absl::StartsWith(w, "pcie") || w == "nvl" || w == "nvlink" ||
         w == "gddr6" || w == "gddr6x";
}

}  // namespace

std::string GpuTypeOf(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  std::vector<std::string> words = absl::StrSplit(
      lower,
      absl::ByAnyChar(" -_/,.:;()[]{}+@#\t\n\"'"),
      absl::SkipEmpty());
  // Anything left outside [a-z0-9] goes: the type is a valid --gpu-type.
  for (std::string& w : words) {
    std::string kept;
    for (char c : w) {
      if (absl::ascii_isdigit(c) || (c >= 'a' && c <= 'z')) kept.push_back(c);
    }
    w = std::move(kept);
  }
  std::vector<std::string> model;
  for (const std::string& w : words) {
    if (w.empty() || IsBrandWord(w) || IsMemoryWord(w) || IsPackagingWord(w)) {
      continue;
    }
    model.push_back(w);
  }
  if (model.empty()) {
    for (const std::string& w : words) {
      if (!w.empty()) return w;
    }
    return "";
  }
  if ((model[0] == "rtx" || model[0] == "gtx" || model[0] == "titan") &&
      model.size() > 1) {
    return absl::StrCat(model[0], model[1]);
  }
  return model[0];
}

void SetGpuTypes(v1::Node& node) {
  for (v1::Gpu& gpu : *node.mutable_gpus()) {
    gpu.set_gpu_type(GpuTypeOf(gpu.name()));
  }
}

}  // namespace trainctl::coord
