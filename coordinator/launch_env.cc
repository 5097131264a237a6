#include "coordinator/launch_env.h"

#include <algorithm>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace trainctl::coord {
namespace {

// JAX_LOCAL_DEVICE_IDS: indices into CUDA_VISIBLE_DEVICES (task.gpu_uuids).
// With one process per GPU (local_world_size == GPUs) the task owns
// gpu_uuids[local_rank]; otherwise it owns them all (v1::Task's rule).
std::string LocalDeviceIds(const v1::Task& task, int local_world_size) {
  const int gpus = task.gpu_uuids_size();
  if (gpus == 0) return "";
  if (local_world_size == gpus) return absl::StrCat(task.local_rank());
  std::vector<int> ids(gpus);
  for (int i = 0; i < gpus; ++i) ids[i] = i;
  return absl::StrJoin(ids, ",");
}

// Slurm's compressed per-node task counts: "2(x3),1" for 2,2,2,1 (srun(1),
// SLURM_TASKS_PER_NODE).
std::string SlurmTasksPerNode(const std::vector<int>& counts) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < counts.size();) {
    size_t j = i;
    while (j < counts.size() && counts[j] == counts[i]) ++j;
    parts.push_back(j - i > 1 ? absl::StrCat(counts[i], "(x", j - i, ")")
                              : absl::StrCat(counts[i]));
    i = j;
  }
  return absl::StrJoin(parts, ",");
}

// The variables srun gives a task (launch_env.h lists them and their source).
void SetSlurmEnv(const v1::Job& job, const v1::Task& task, const LaunchContext& ctx,
                 std::map<std::string, std::string>& env) {
  auto set = [&env](const char* key, auto value) { env[key] = absl::StrCat(value); };
  // Node names and task counts in node-rank order, from the attempt's tasks.
  std::vector<std::string> nodes;
  std::vector<int> counts;
  for (const v1::Task& t : job.tasks()) {
    const size_t n = static_cast<size_t>(std::max(0, t.node_rank()));
    if (nodes.size() <= n) {
      nodes.resize(n + 1);
      counts.resize(n + 1, 0);
    }
    nodes[n] = t.node();
    ++counts[n];
  }
  if (nodes.empty()) {  // a task outside the job's list (a pre-flight probe)
    nodes.push_back(task.node());
    counts.push_back(std::max(1, ctx.local_world_size));
  }
  std::string name = job.spec().name();
  if (name.empty() && !job.spec().command().empty()) {
    const std::string& prog = job.spec().command(0);
    name = prog.substr(prog.find_last_of('/') + 1);
  }
  const std::string nodelist = absl::StrJoin(nodes, ",");
  const std::string per_node = SlurmTasksPerNode(counts);
  set("SLURM_JOB_ID", job.id());
  set("SLURM_JOBID", job.id());
  set("SLURM_JOB_NAME", name);
  set("SLURM_PROCID", task.rank());
  set("SLURM_LOCALID", task.local_rank());
  set("SLURM_NODEID", task.node_rank());
  set("SLURM_NTASKS", job.world_size());
  set("SLURM_NPROCS", job.world_size());
  set("SLURM_STEP_NUM_TASKS", job.world_size());
  set("SLURM_NNODES", nodes.size());
  set("SLURM_JOB_NUM_NODES", nodes.size());
  set("SLURM_STEP_NUM_NODES", nodes.size());
  set("SLURM_TASKS_PER_NODE", per_node);
  set("SLURM_STEP_TASKS_PER_NODE", per_node);
  if (std::all_of(counts.begin(), counts.end(), [&](int c) { return c == counts[0]; })) {
    set("SLURM_NTASKS_PER_NODE", counts[0]);
  }
  set("SLURM_JOB_NODELIST", nodelist);
  set("SLURM_NODELIST", nodelist);
  set("SLURM_STEP_NODELIST", nodelist);
  set("SLURMD_NODENAME", task.node());
  set("SLURM_STEP_ID", 0);
  set("SLURM_STEPID", 0);
  set("SLURM_CPUS_ON_NODE", ctx.node_cpu_count);
  set("SLURM_GPUS_ON_NODE", task.gpu_uuids_size());
  set("SLURM_RESTART_COUNT", job.attempt());
  if (!job.spec().user().empty()) set("SLURM_JOB_USER", job.spec().user());
  // Started as by srun, not by torchrun: torch.distributed's
  // is_torchelastic_launched() reads TORCHELASTIC_RUN_ID, and Lightning,
  // which prefers a torchelastic launch to Slurm, would otherwise never pick
  // its SLURMEnvironment (measured: bench/results/frameworks_proof.json).
  // The other TORCHELASTIC_* stay: the agent's store needs them.
  env.erase("TORCHELASTIC_RUN_ID");
}

}  // namespace

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
  // torchrun's rule (see the header): measured, not assumed.
  if (ctx.local_world_size > 1 && env.count("OMP_NUM_THREADS") == 0) {
    set("OMP_NUM_THREADS", 1);
  }
  if (job.jax_port() > 0) {
    set("JAX_COORDINATOR_ADDRESS", absl::StrCat(job.master_addr(), ":", job.jax_port()));
  }
  if (std::string ids = LocalDeviceIds(task, ctx.local_world_size); !ids.empty()) {
    set("JAX_LOCAL_DEVICE_IDS", ids);
  }
  if (ctx.slurm_env) SetSlurmEnv(job, task, ctx, env);
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
