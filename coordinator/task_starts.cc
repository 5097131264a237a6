#include "coordinator/task_starts.h"

#include <algorithm>
#include <utility>

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

}  // namespace trainctl::coord
