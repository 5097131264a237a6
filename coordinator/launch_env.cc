#include "coordinator/launch_env.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainctl::coord {

std::map<std::string, std::string> BuildLaunchEnv(const v1::Job& job,
                                                  const v1::Task& task,
                                                  const LaunchContext& ctx) {
  // The submitter's exported environment, then the job's --env, then the
  // launch contract: each wins over the one before (docs/design.md §4).
  const google::protobuf::Map<std::string, std::string>& exported =
      ctx.exported_env != nullptr ? *ctx.exported_env : job.spec().exported_env();
  std::map<std::string, std::string> env(exported.begin(), exported.end());
  for (const auto& [k, v] : job.spec().env()) env[k] = v;
  auto set = [&env](const char* key, auto value) {
    env[key] = absl::StrCat(value);
  };
  set("CUDA_VISIBLE_DEVICES", absl::StrJoin(task.gpu_uuids(), ","));
  set("MASTER_ADDR", job.master_addr());
  set("MASTER_PORT", job.master_port());
  set("RANK", task.rank());
  set("WORLD_SIZE", job.world_size());
  set("LOCAL_RANK", task.local_rank());
  set("LOCAL_WORLD_SIZE", ctx.local_world_size);
  set("GROUP_RANK", task.node_rank());
  set("NODE_RANK", task.node_rank());
  set("GROUP_WORLD_SIZE", ctx.num_nodes);
  set("ROLE_RANK", task.rank());
  set("ROLE_WORLD_SIZE", job.world_size());
  set("ROLE_NAME", "default");
  set("TORCHELASTIC_RUN_ID", job.id());
  set("TORCHELASTIC_RESTART_COUNT", job.attempt());
  set("TORCHELASTIC_MAX_RESTARTS", job.spec().max_restarts());
  set("TORCH_NCCL_ASYNC_ERROR_HANDLING", 1);
  if (ctx.agent_store) set("TORCHELASTIC_USE_AGENT_STORE", "True");
  set("OMP_NUM_THREADS",
      std::max(1, ctx.node_cpu_count / std::max(1, ctx.local_world_size)));
  set("TRAINCTL_COORDINATOR", ctx.coordinator_address);
  set("TRAINCTL_JOB_ID", job.id());
  set("TRAINCTL_ATTEMPT", job.attempt());
  set("TRAINCTL_TOKEN", job.attempt_token());
  // A sweep trial's hyper-parameters, for scripts that read them from the
  // environment rather than from their command line: lr -> TRAINCTL_PARAM_LR.
  for (const auto& [name, value] : job.spec().params()) {
    env[absl::StrCat("TRAINCTL_PARAM_", absl::AsciiStrToUpper(name))] = value;
  }
  if (job.spec().has_array()) {
    // A job array's task: its index and the array, under trainctl's names
    // and Slurm's (sbatch --array), for scripts written for either.
    const v1::JobArray& a = job.spec().array();
    set("TRAINCTL_ARRAY_TASK_ID", a.task_id());
    set("TRAINCTL_ARRAY_JOB_ID", a.array_job_id());
    set("TRAINCTL_ARRAY_TASK_COUNT", a.task_count());
    set("SLURM_ARRAY_TASK_ID", a.task_id());
    set("SLURM_ARRAY_JOB_ID", a.array_job_id());
    set("SLURM_ARRAY_TASK_COUNT", a.task_count());
  }
  if (!job.checkpoint_dir().empty()) {
    set("TRAINCTL_CHECKPOINT_DIR", job.checkpoint_dir());
  }
  return env;
}

}  // namespace trainctl::coord
