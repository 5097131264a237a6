// A job's node selection: the feature constraint's syntax, which nodes a
// job's selection rules out and why, and the GPU type sets a gang tries.

#include "coordinator/sched/node_selection.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::sched {
namespace {

bool Contains(const std::vector<std::string>& list, absl::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// The types of `node`'s usable GPUs, sorted, distinct.
std::vector<std::string> NodeGpuTypes(const NodeState& node) {
  std::vector<std::string> types;
  for (const GpuState& gpu : node.gpus) {
    if (gpu.memory_total_bytes > 0 && !Contains(types, gpu.gpu_type)) {
      types.push_back(gpu.gpu_type);
    }
  }
  std::sort(types.begin(), types.end());
  return types;
}

std::string TypesForDisplay(const std::vector<std::string>& types) {
  if (types.empty()) return "no GPUs";
  std::vector<std::string> shown;
  for (const std::string& t : types) shown.push_back(t.empty() ? "untyped" : t);
  return absl::StrJoin(shown, ", ");
}

}  // namespace

bool IsValidSelectionName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

bool FeatureConstraint::SatisfiedBy(
    const std::vector<std::string>& node_features) const {
  if (features.empty()) return true;
  if (op == Op::kAll) {
    return std::all_of(features.begin(), features.end(),
                       [&](const std::string& f) {
                         return Contains(node_features, f);
                       });
  }
  return std::any_of(
      features.begin(), features.end(),
      [&](const std::string& f) { return Contains(node_features, f); });
}

std::string FeatureConstraint::ToString() const {
  return absl::StrJoin(features, op == Op::kAll ? "&" : "|");
}

absl::StatusOr<FeatureConstraint> ParseFeatureConstraint(
    absl::string_view text) {
  FeatureConstraint c;
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return c;
  const bool has_and = absl::StrContains(text, '&');
  const bool has_or = absl::StrContains(text, '|');
  if (has_and && has_or) {
    return absl::InvalidArgumentError(absl::StrCat(
        "constraint \"", text,
        "\" mixes & and |; use one operator (\"a&b\" or \"a|b\")"));
  }
  c.op = has_or ? FeatureConstraint::Op::kAny : FeatureConstraint::Op::kAll;
  for (absl::string_view term : absl::StrSplit(text, has_or ? '|' : '&')) {
    term = absl::StripAsciiWhitespace(term);
    if (term.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "constraint \"", text, "\" has an empty term"));
    }
    if (!IsValidSelectionName(term)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "constraint \"", text, "\": feature \"", term,
          "\" must be 1-64 characters of a-z, 0-9, _ and -"));
    }
    if (!Contains(c.features, term)) c.features.emplace_back(term);
  }
  return c;
}

std::optional<std::string> SelectionRulesOut(const NodeState& node,
                                             const JobRequest& job) {
  const JobRequest::NodeConstraints& c = job.constraints;
  if (!c.nodelist.empty() && !Contains(c.nodelist, node.name)) {
    return std::string("not in --nodelist");
  }
  if (Contains(c.exclude, node.name)) return std::string("--exclude");
  if (!c.features.SatisfiedBy(node.features)) {
    return absl::StrCat("--constraint ", c.features.ToString(), " (has ",
                        node.features.empty()
                            ? std::string("no features")
                            : absl::StrJoin(node.features, ","),
                        ")");
  }
  if (!c.gpu_types.empty()) {
    const std::vector<std::string> types = NodeGpuTypes(node);
    if (std::none_of(types.begin(), types.end(), [&](const std::string& t) {
          return Contains(c.gpu_types, t);
        })) {
      return absl::StrCat("--gpu-type ", absl::StrJoin(c.gpu_types, ","),
                          " (has ", TypesForDisplay(types), ")");
    }
  }
  return std::nullopt;
}

std::vector<std::vector<std::string>> GpuTypeSets(
    const std::vector<NodeState>& nodes, const JobRequest& job) {
  const JobRequest::NodeConstraints& c = job.constraints;
  if (c.allow_mixed_gpu_types) return {c.gpu_types};
  std::vector<std::vector<std::string>> sets;
  if (!c.gpu_types.empty()) {
    for (const std::string& t : c.gpu_types) sets.push_back({t});
    return sets;
  }
  if (job.kind != JobKind::kGang) return {{}};
  std::vector<std::string> types;
  for (const NodeState& node : nodes) {
    if (SelectionRulesOut(node, job)) continue;
    for (std::string& t : NodeGpuTypes(node)) {
      if (!Contains(types, t)) types.push_back(std::move(t));
    }
  }
  if (types.size() <= 1) return {{}};
  std::sort(types.begin(), types.end());
  for (const std::string& t : types) sets.push_back({t});
  return sets;
}

std::vector<std::string> DescribeRuledOut(const std::vector<NodeState>& nodes,
                                          const JobRequest& job) {
  constexpr size_t kMaxNodes = 10;
  const JobRequest::NodeConstraints& c = job.constraints;
  std::vector<std::string> lines;
  auto add = [&](const std::string& flag, const std::vector<std::string>& out) {
    if (out.empty()) return;
    std::vector<std::string> shown(
        out.begin(), out.begin() + std::min(out.size(), kMaxNodes));
    std::string line =
        absl::StrCat(flag, ": rules out ", absl::StrJoin(shown, ", "));
    if (out.size() > kMaxNodes) {
      absl::StrAppend(&line, " and ", out.size() - kMaxNodes, " more");
    }
    lines.push_back(std::move(line));
  };
  std::vector<std::string> out;
  if (!c.gpu_types.empty()) {
    for (const NodeState& node : nodes) {
      const std::vector<std::string> types = NodeGpuTypes(node);
      if (std::none_of(types.begin(), types.end(), [&](const std::string& t) {
            return Contains(c.gpu_types, t);
          })) {
        out.push_back(
            absl::StrCat(node.name, " (", TypesForDisplay(types), ")"));
      }
    }
    add(absl::StrCat("--gpu-type ", absl::StrJoin(c.gpu_types, ",")), out);
  }
  if (!c.features.empty()) {
    out.clear();
    for (const NodeState& node : nodes) {
      if (c.features.SatisfiedBy(node.features)) continue;
      out.push_back(absl::StrCat(
          node.name, " (",
          node.features.empty() ? std::string("no features")
                                : absl::StrJoin(node.features, ","),
          ")"));
    }
    add(absl::StrCat("--constraint ", c.features.ToString()), out);
  }
  if (!c.nodelist.empty()) {
    out.clear();
    for (const NodeState& node : nodes) {
      if (!Contains(c.nodelist, node.name)) out.push_back(node.name);
    }
    add(absl::StrCat("--nodelist ", absl::StrJoin(c.nodelist, ",")), out);
  }
  if (!c.exclude.empty()) {
    out.clear();
    for (const NodeState& node : nodes) {
      if (Contains(c.exclude, node.name)) out.push_back(node.name);
    }
    add(absl::StrCat("--exclude ", absl::StrJoin(c.exclude, ",")), out);
  }
  return lines;
}

bool HasNodeSelection(const JobRequest& job) {
  const JobRequest::NodeConstraints& c = job.constraints;
  return !c.gpu_types.empty() || !c.features.empty() || !c.nodelist.empty() ||
         !c.exclude.empty();
}

std::vector<std::string> GpuTypesOf(const std::vector<NodeState>& nodes) {
  std::vector<std::string> types;
  for (const NodeState& node : nodes) {
    for (std::string& t : NodeGpuTypes(node)) {
      if (!Contains(types, t)) types.push_back(std::move(t));
    }
  }
  std::sort(types.begin(), types.end());
  return types;
}

std::string DescribeGpuTypes(const std::vector<NodeState>& nodes) {
  std::map<std::string, int> counts;
  for (const NodeState& node : nodes) {
    for (const GpuState& gpu : node.gpus) {
      if (gpu.memory_total_bytes > 0) {
        ++counts[gpu.gpu_type.empty() ? "untyped" : gpu.gpu_type];
      }
    }
  }
  if (counts.empty()) return "no GPUs";
  std::vector<std::string> parts;
  for (const auto& [type, n] : counts) parts.push_back(absl::StrCat(type, " x", n));
  return absl::StrJoin(parts, ", ");
}

}  // namespace trainctl::sched
