#ifndef TRAINCTL_COORDINATOR_SCHED_NODE_SELECTION_H_
#define TRAINCTL_COORDINATOR_SCHED_NODE_SELECTION_H_

// A job's node selection (JobSpec.gpu_types, constraint, nodelist,
// exclude_nodes, allow_mixed_gpu_types; Slurm's --gres type, --constraint,
// -w and -x): parsing the feature constraint, and which nodes and GPUs a job
// may use. Pure functions; links only Abseil.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace trainctl::sched {

struct NodeState;
struct JobRequest;

// Whether `name` is a valid node feature or GPU type name: 1 to 64
// characters of [a-z0-9_-] (lower case, as Node.features and Gpu.gpu_type
// are spelled).
bool IsValidSelectionName(absl::string_view name);

// A parsed feature constraint (JobSpec.constraint). Slurm's --constraint
// syntax, restricted to one operator: names joined by "&" (the node must
// offer all of them) or by "|" (any one of them). Slurm's brackets, counts
// and mixed operators are not supported.
struct FeatureConstraint {
  enum class Op { kAll, kAny };
  Op op = Op::kAll;
  // Empty: no constraint (every node satisfies it).
  std::vector<std::string> features;

  bool empty() const { return features.empty(); }
  // Whether a node offering `node_features` satisfies it.
  bool SatisfiedBy(const std::vector<std::string>& node_features) const;
  // The constraint as written canonically ("ib&nvlink", "a|b"; "" if empty).
  std::string ToString() const;
};

// Parses `text` ("ib&nvlink", "a|b", "ib", or "" for none; spaces around
// names are ignored). Errors: INVALID_ARGUMENT when it mixes "&" and "|",
// has an empty term ("ib&", "&&"), or a name outside [a-z0-9_-].
absl::StatusOr<FeatureConstraint> ParseFeatureConstraint(absl::string_view text);

// Why `node` may not take any task of `job` because of the job's node
// selection (nodelist, exclude, constraint, GPU types), naming the flag:
// "--gpu-type h100 (has a100)", "--constraint ib&nvlink (has ib)",
// "--exclude", "not in --nodelist". nullopt when the selection allows it
// (some GPU of an accepted type, for GPU types). Pre-flight exclusions and
// container/cgroup needs are not judged here. O(GPUs + features of node).
std::optional<std::string> SelectionRulesOut(const NodeState& node,
                                             const JobRequest& job);

// The GPU type sets `job` tries, in order, each a set of Gpu types it may
// use at once: with allow_mixed_gpu_types, one set of all its gpu_types;
// else one set per type of gpu_types in its order of preference, or, when
// it names none, for a gang one set per GPU type the allowed nodes of
// `nodes` have (sorted by name), so a gang never mixes types. One empty set
// means: any GPU. O(GPUs).
std::vector<std::vector<std::string>> GpuTypeSets(
    const std::vector<NodeState>& nodes, const JobRequest& job);

// One line per part of `job`'s node selection that rules nodes of `nodes`
// out, with those nodes and what they have: "--gpu-type h100: rules out
// node-a (a100), node-b (a100)", "--constraint ib&nvlink: rules out node-c
// (no features)", "--nodelist a,b: rules out node-c", "--exclude c: rules
// out c". At most 10 nodes a line, then "and N more". Empty when it has no
// selection or rules nothing out. O(GPUs).
std::vector<std::string> DescribeRuledOut(const std::vector<NodeState>& nodes,
                                          const JobRequest& job);

// Whether `job` has any node selection (gpu_types, constraint, nodelist,
// exclude).
bool HasNodeSelection(const JobRequest& job);

// The distinct GPU types of `nodes` (sorted; "" for GPUs without one).
std::vector<std::string> GpuTypesOf(const std::vector<NodeState>& nodes);

// "h100 x8, a100 x4": what GPU types `nodes` have and how many of each
// (usable GPUs; "untyped" for GPUs without a type), for reasons.
std::string DescribeGpuTypes(const std::vector<NodeState>& nodes);

}  // namespace trainctl::sched

#endif  // TRAINCTL_COORDINATOR_SCHED_NODE_SELECTION_H_
