// Scheduler: what a job could ever get, ignoring what is in use: a gang's
// layouts, and why a job is malformed or can never fit this cluster
// (kInfeasible, judged against ClusterShape in scheduler_internal.h).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  if (job.nodes >= 1) return {Layout{job.nodes, job.gpus_per_node}};
  Layouts layouts;
  for (int k = 1; k <= job.total_gpus && k <= max_nodes; ++k) {
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

}  // namespace trainctl::sched::internal
