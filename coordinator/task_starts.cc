#include "coordinator/task_starts.h"

#include <algorithm>
#include <utility>

#include "coordinator/job_spec.h"
#include "coordinator/launch_env.h"

namespace trainctl::coord {

v1::CoordinatorMessage TaskStarts::Build(const v1::Job& job, const v1::Task& t,
                                         const v1::Node* node,
                                         const Env* exported_env,
                                         bool agent_store) const {
  int num_nodes = 0;
  for (const v1::Task& o : job.tasks()) num_nodes = std::max(num_nodes, o.node_rank() + 1);
  LaunchContext ctx;
  ctx.coordinator_address = config_.coordinator_address;
  ctx.num_nodes = num_nodes;
  ctx.local_world_size = t.local_world_size();
  ctx.node_cpu_count = node != nullptr ? node->cpu_count() : 0;
  ctx.agent_store = agent_store;
  ctx.exported_env = exported_env;
  ctx.slurm_env = config_.slurm_env || job.spec().slurm_env();
  v1::CoordinatorMessage msg;
  v1::StartTask* start = msg.mutable_start_task();
  *start->mutable_task() = RefOf(job, t);
  start->mutable_argv()->CopyFrom(job.spec().command());
  for (auto& [k, v] : BuildLaunchEnv(job, t, ctx)) (*start->mutable_env())[k] = std::move(v);
  start->set_workdir(job.spec().workdir());
  start->set_checkpoint_dir(job.checkpoint_dir());
  if (config_.run_as_user) start->set_run_as_user(job.spec().user());
  start->set_allow_root(config_.allow_root);
  start->set_image(job.spec().image());
  start->set_cpus(job.spec().cpus());
  start->set_memory_bytes(job.spec().memory_bytes());
  start->set_discard_output(job.spec().discard_output());
  // An experiment sharing its GPU, and the memory it may use there
  // (StartTask.shared_gpu_memory_limit_bytes).
  if (t.gpu_indices_size() == 1 && !t.whole_gpus() && t.reserved_bytes_per_gpu() > 0 &&
      node != nullptr) {
    for (const v1::Gpu& g : node->gpus()) {
      if (g.index() != t.gpu_indices(0) ||
          t.reserved_bytes_per_gpu() >= g.memory_total_bytes()) {
        continue;
      }
      start->set_shared_gpu(true);
      start->set_shared_gpu_index(g.index());
      // An auto-packed trial's first reservation is the packer's
      // bookkeeping share (PackerConfig.initial_reservation_fraction), not a
      // size: no limit then.
      const int64_t initial = static_cast<int64_t>(
          config_.initial_reservation_fraction * g.memory_total_bytes());
      const bool sized = !job.spec().auto_pack() || job.auto_pack_memory_bytes() > 0 ||
                         job.spec().gpu_memory_bytes() > 0 ||
                         t.reserved_bytes_per_gpu() > initial;
      if (sized) start->set_shared_gpu_memory_limit_bytes(t.reserved_bytes_per_gpu());
    }
  }
  return msg;
}

std::vector<v1::Task> TaskStarts::PlaceRanks(
    const v1::JobSpec& spec, const sched::Placement& placement,
    absl::FunctionRef<const v1::Node*(const std::string&)> node_of) {
  std::vector<v1::Task> ranks;
  for (size_t node_rank = 0; node_rank < placement.nodes.size(); ++node_rank) {
    const sched::NodeAssignment& na = placement.nodes[node_rank];
    const v1::Node* node = node_of(na.node);
    const int tasks = TasksPerNode(spec, static_cast<int>(na.gpu_indices.size()));
    for (int local = 0; local < tasks; ++local) {
      v1::Task& t = ranks.emplace_back();
      t.set_rank(static_cast<int>(ranks.size()) - 1);
      t.set_local_rank(local);
      t.set_local_world_size(tasks);
      t.set_node_rank(static_cast<int>(node_rank));
      t.set_node(na.node);
      int64_t node_gpu_bytes = 0;
      for (int idx : na.gpu_indices) {
        t.add_gpu_indices(idx);
        if (node == nullptr) continue;
        for (const v1::Gpu& g : node->gpus()) {
          if (g.index() != idx) continue;
          t.add_gpu_uuids(g.uuid());
          node_gpu_bytes = std::max(node_gpu_bytes, g.memory_total_bytes());
        }
      }
      // Whole GPUs: each is held whole (TaskBytesOnGpu); the bytes shown
      // are this node's GPU size, not the gang's smallest.
      t.set_whole_gpus(placement.whole_gpus);
      t.set_reserved_bytes_per_gpu(placement.whole_gpus ? node_gpu_bytes
                                                        : placement.reserved_bytes_per_gpu);
    }
  }
  return ranks;
}

}  // namespace trainctl::coord
