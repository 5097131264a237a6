#ifndef TRAINCTL_COORDINATOR_SCHED_TESTING_PASS_FIXTURES_H_
#define TRAINCTL_COORDINATOR_SCHED_TESTING_PASS_FIXTURES_H_

// For the tests of the scheduler's phase classes (schedule_pass.h): small
// clusters, jobs and running jobs built in one line each. GPUs have 80 GiB.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/sched/scheduler.h"

namespace trainctl::sched::testing {

inline constexpr int64_t kGiB = int64_t{1} << 30;
inline constexpr int64_t kGpuBytes = 80 * kGiB;

// A schedulable node `name` with `count` idle 80 GiB GPUs, indexes 0..count-1.
inline NodeState Node(std::string name, int count,
                      int64_t gpu_bytes = kGpuBytes) {
  NodeState node;
  node.name = std::move(name);
  for (int i = 0; i < count; ++i) {
    GpuState gpu;
    gpu.index = i;
    gpu.uuid = absl::StrCat("GPU-", node.name, "-", i);
    gpu.memory_total_bytes = gpu_bytes;
    node.gpus.push_back(gpu);
  }
  return node;
}

// A gang of `total_gpus` GPUs (the scheduler picks the layout).
inline JobRequest Gang(int64_t id, int total_gpus) {
  JobRequest job;
  job.job_id = id;
  job.submit_seq = id;
  job.kind = JobKind::kGang;
  job.total_gpus = total_gpus;
  return job;
}

// A gang of `per_node` GPUs on each of `nodes` nodes.
inline JobRequest GangOn(int64_t id, int nodes, int per_node) {
  JobRequest job = Gang(id, nodes * per_node);
  job.nodes = nodes;
  job.gpus_per_node = per_node;
  return job;
}

// An experiment asking for `fraction` of one GPU.
inline JobRequest Experiment(int64_t id, double fraction) {
  JobRequest job;
  job.job_id = id;
  job.submit_seq = id;
  job.kind = JobKind::kExperiment;
  job.gpu_fraction = fraction;
  return job;
}

// Adds a running job holding whole GPUs `indices` of node `n` of `cluster`
// (adds their reservation and a task to those GPUs) and returns it for
// further fields.
inline RunningJob& AddRunning(ClusterSnapshot& cluster, int n,
                              std::vector<int> indices, int64_t id) {
  NodeState& node = cluster.nodes[n];
  for (int g : indices) {
    node.gpus[g].reserved_bytes += node.gpus[g].memory_total_bytes;
    node.gpus[g].task_count += 1;
  }
  RunningJob& r = cluster.running.emplace_back();
  r.job_id = id;
  r.submit_seq = id;
  r.placement.nodes.push_back({node.name, std::move(indices)});
  r.placement.reserved_bytes_per_gpu = kGpuBytes;
  r.placement.whole_gpus = true;
  return r;
}

// GPU indexes of `placement`, node by node.
inline std::vector<int> GpuIndices(const Placement& placement) {
  std::vector<int> out;
  for (const NodeAssignment& a : placement.nodes) {
    out.insert(out.end(), a.gpu_indices.begin(), a.gpu_indices.end());
  }
  return out;
}

// Node names of `placement`, in rank order.
inline std::vector<std::string> NodeNames(const Placement& placement) {
  std::vector<std::string> out;
  for (const NodeAssignment& a : placement.nodes) out.push_back(a.node);
  return out;
}

}  // namespace trainctl::sched::testing

#endif  // TRAINCTL_COORDINATOR_SCHED_TESTING_PASS_FIXTURES_H_
