// Scheduler: what a job could ever get, ignoring what is in use: a gang's
// layouts, and why a job is malformed or can never fit this cluster
// (kInfeasible, judged against ClusterShape in scheduler_internal.h).

#include <cstdint>
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/sched/node_selection.h"
#include "coordinator/sched/scheduler_internal.h"

namespace trainctl::sched::internal {
namespace {

// "1 GPU", "4 GPUs".
std::string Gpus(int64_t n) {
  return absl::StrFormat("%d %s", n, n == 1 ? "GPU" : "GPUs");
}

}  // namespace

std::string DescribeLayout(const Layout& layout, bool free) {
  std::string gpus =
      absl::StrFormat("%d %s%s", layout.per_node, free ? "free " : "",
                      layout.per_node == 1 ? "GPU" : "GPUs");
  if (layout.nodes == 1) return absl::StrCat(gpus, " on one node");
  return absl::StrFormat("%s on each of %d nodes", gpus, layout.nodes);
}

Layouts GangLayouts(const JobRequest& job, int max_nodes) {
  // A gang with a nodelist uses every listed node (Slurm's -w).
  const int listed = static_cast<int>(job.constraints.nodelist.size());
  if (job.nodes >= 1) {
    if (listed > 0 && job.nodes != listed) return {};
    return {Layout{job.nodes, job.gpus_per_node}};
  }
  Layouts layouts;
  for (int k = 1; k <= job.total_gpus && k <= max_nodes; ++k) {
    if (listed > 0 && k != listed) continue;
    if (job.total_gpus % k == 0) layouts.push_back({k, job.total_gpus / k});
  }
  return layouts;
}

std::optional<std::string> MalformedReason(const JobRequest& job,
                                           const SchedulerConfig& config) {
  switch (job.kind) {
    case JobKind::kExperiment:
      if (job.gpu_memory_bytes < 0) {
        return absl::StrFormat(
            "asks for %d bytes of GPU memory; the amount must be positive",
            job.gpu_memory_bytes);
      }
      if (job.gpu_memory_bytes == 0 &&
          !(job.gpu_fraction > 0.0 && job.gpu_fraction <= 1.0)) {
        return absl::StrFormat(
            "asks for a GPU fraction of %g; it must be above 0 and at most 1",
            job.gpu_fraction);
      }
      if (config.max_tasks_per_gpu < 1) {
        return absl::StrFormat(
            "cannot run: the scheduler allows %d tasks per GPU "
            "(max_tasks_per_gpu)",
            config.max_tasks_per_gpu);
      }
      return std::nullopt;
    case JobKind::kGang:
      if (job.nodes < 0) {
        return absl::StrFormat("asks for %d nodes; a gang needs at least 1",
                               job.nodes);
      }
      if (job.nodes >= 1 && job.gpus_per_node < 1) {
        return absl::StrFormat(
            "asks for %d GPUs per node; a gang needs at least 1",
            job.gpus_per_node);
      }
      if (job.nodes == 0 && job.total_gpus < 1) {
        return absl::StrFormat("asks for %d GPUs; a gang needs at least 1",
                               job.total_gpus);
      }
      return std::nullopt;
  }
  return std::string("has an unknown job kind");
}

std::optional<std::string> InfeasibleReason(const JobRequest& job,
                                            const ClusterShape& shape) {
  if (job.constraints.needs_container_runtime &&
      shape.container_runtime_nodes == 0) {
    return std::string(
        "runs in a container image but no node has a container runtime "
        "(podman or Apptainer)");
  }
  if (job.constraints.needs_cgroup_limits && shape.cgroup_nodes == 0) {
    return std::string(
        "limits its tasks' CPUs or memory (--cpus, --mem) but no node gives "
        "tasks cgroups (cgroup v2, agent --cgroups)");
  }
  const int listed = static_cast<int>(job.constraints.nodelist.size());
  if (job.kind == JobKind::kGang && listed > 0) {
    if (job.nodes >= 1 && job.nodes != listed) {
      return absl::StrFormat(
          "asks for %d nodes but --nodelist names %d; a gang uses every "
          "listed node",
          job.nodes, listed);
    }
    if (job.nodes == 0 && job.total_gpus % listed != 0) {
      return absl::StrFormat(
          "asks for %s but --nodelist names %d nodes; a gang uses every "
          "listed node, with the same number of GPUs on each",
          Gpus(job.total_gpus), listed);
    }
  }
  if (job.kind == JobKind::kExperiment) {
    // A fractional reservation never exceeds its GPU; only bytes can.
    if (job.gpu_memory_bytes > shape.max_gpu_memory_bytes) {
      return absl::StrFormat(
          "needs %s of GPU memory but the largest GPU has %s",
          GiB(job.gpu_memory_bytes), GiB(shape.max_gpu_memory_bytes));
    }
    return std::nullopt;
  }
  const int64_t needed =
      job.nodes >= 1 ? int64_t{job.nodes} * job.gpus_per_node : job.total_gpus;
  if (needed > shape.gpu_count) {
    return absl::StrFormat("needs %s but the cluster has %d", Gpus(needed),
                           shape.gpu_count);
  }
  if (job.nodes >= 1) {
    const Layout layout{job.nodes, job.gpus_per_node};
    if (layout.per_node > shape.max_gpus_on_node) {
      return absl::StrFormat("needs %s but the largest node has %d",
                             DescribeLayout(layout, /*free=*/false),
                             shape.max_gpus_on_node);
    }
    const int big_enough = shape.NodesWithAtLeast(layout.per_node);
    if (big_enough < layout.nodes) {
      return absl::StrFormat("needs %s but only %d %s %d or more GPUs",
                             DescribeLayout(layout, /*free=*/false), big_enough,
                             big_enough == 1 ? "node has" : "nodes have",
                             layout.per_node);
    }
    return std::nullopt;
  }
  // total_gpus: some K (K divides total_gpus) must have K nodes big enough.
  std::vector<std::string> tried;
  for (const Layout& layout : GangLayouts(job, shape.node_count)) {
    if (shape.CouldEverHold(layout)) return std::nullopt;
    tried.push_back(DescribeLayout(layout, /*free=*/false));
  }
  return absl::StrFormat(
      "needs %s split evenly across nodes, but no such layout fits this "
      "cluster of %d nodes whose largest has %s (tried %s)",
      Gpus(job.total_gpus), shape.node_count, Gpus(shape.max_gpus_on_node),
      JoinList(tried, "or"));
}

namespace {

// The job's node selection in its flags' words, with `gpu_types` the type
// set tried: "--gpu-type h100 --constraint ib", "GPUs of one type (a100)".
std::string DescribeSelection(const JobRequest& job,
                              const std::vector<std::string>& gpu_types) {
  const JobRequest::NodeConstraints& c = job.constraints;
  std::vector<std::string> parts;
  if (!c.gpu_types.empty()) {
    parts.push_back(absl::StrCat(
        "--gpu-type ",
        absl::StrJoin(gpu_types.empty() ? c.gpu_types : gpu_types, ",")));
  } else if (!gpu_types.empty()) {
    parts.push_back(absl::StrCat("GPUs of one type (",
                                 absl::StrJoin(gpu_types, ","), ")"));
  }
  if (!c.features.empty()) {
    parts.push_back(absl::StrCat("--constraint ", c.features.ToString()));
  }
  if (!c.nodelist.empty()) {
    parts.push_back(absl::StrCat("--nodelist ", absl::StrJoin(c.nodelist, ",")));
  }
  if (!c.exclude.empty()) {
    parts.push_back(absl::StrCat("--exclude ", absl::StrJoin(c.exclude, ",")));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace

std::optional<std::string> SelectionInfeasibleOn(
    const std::vector<NodeState>& nodes, const JobRequest& job,
    const std::vector<std::string>& gpu_types) {
  const JobRequest::NodeConstraints& c = job.constraints;
  std::vector<std::string> unknown;
  for (const std::string& name : c.nodelist) {
    if (std::none_of(nodes.begin(), nodes.end(),
                     [&](const NodeState& n) { return n.name == name; })) {
      unknown.push_back(name);
    }
  }
  if (!unknown.empty()) {
    return absl::StrFormat("--nodelist names %s, which %s not registered",
                           JoinList(unknown, "and"),
                           unknown.size() == 1 ? "is" : "are");
  }
  const std::string selection = DescribeSelection(job, gpu_types);
  const bool auto_types = c.gpu_types.empty() && !gpu_types.empty();
  const std::string mix_hint =
      auto_types ? "; --allow-mixed-gpu-types lets a gang mix GPU types" : "";
  ClusterSnapshot view;
  for (const NodeState& node : nodes) {
    if (SelectionRulesOut(node, job)) continue;
    NodeState& copy = view.nodes.emplace_back(node);
    if (gpu_types.empty()) continue;
    for (GpuState& gpu : copy.gpus) {
      if (std::find(gpu_types.begin(), gpu_types.end(), gpu.gpu_type) ==
          gpu_types.end()) {
        gpu.memory_total_bytes = 0;
      }
    }
  }
  const ClusterShape shape(view);
  if (view.nodes.empty() || shape.gpu_count == 0) {
    return absl::StrFormat("no node satisfies %s (the cluster has %s)",
                           selection, DescribeGpuTypes(nodes));
  }
  if (std::optional<std::string> reason = InfeasibleReason(job, shape)) {
    return absl::StrFormat("with %s: %s%s", selection, *reason, mix_hint);
  }
  return std::nullopt;
}

}  // namespace trainctl::sched::internal
