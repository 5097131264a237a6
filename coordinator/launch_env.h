#ifndef TRAINCTL_COORDINATOR_LAUNCH_ENV_H_
#define TRAINCTL_COORDINATOR_LAUNCH_ENV_H_

// The launch contract (docs/design.md §4): the environment every task
// process gets, so that unmodified PyTorch programs (env:// rendezvous) and
// the NCCL bootstrap library find their rank, peers and coordinator.

#include <map>
#include <string>

#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

struct LaunchContext {
  // Address:port tasks use to reach the coordinator's rendezvous.
  std::string coordinator_address;
  // Nodes in the job attempt (GROUP_WORLD_SIZE).
  int num_nodes = 1;
  // Processes on this task's node (LOCAL_WORLD_SIZE).
  int local_world_size = 1;
  // CPU cores of this task's node; OMP_NUM_THREADS = max(1, cores / local
  // world size), as torchrun does.
  int node_cpu_count = 1;
  // Rank 0's node hosts the job's PyTorch TCPStore (Node.torch_store): every
  // rank gets TORCHELASTIC_USE_AGENT_STORE=True and connects to it as a
  // client, as under torchrun (torch/distributed/rendezvous.py), instead of
  // rank 0 creating it late. Only for gangs (WORLD_SIZE > 1), never for
  // pre-flight probes.
  bool agent_store = false;
  // The job's exported environment when its record holds none of its own
  // (Job.exported_env_job_id: stored once with another job); null: the
  // job's spec.exported_env.
  const google::protobuf::Map<std::string, std::string>* exported_env = nullptr;
};

// The variables trainctl sets for `task` of `job`'s current attempt, merged
// over the user's spec.env (trainctl's win; validation forbids the clash).
// CUDA_VISIBLE_DEVICES lists task.gpu_uuids in local-rank order, the same list
// for every local rank of a node (NVIDIA/nccl#129: per-rank lists hide peers
// from CUDA IPC and push NCCL off NVLink).
// TRAINCTL_CHECKPOINT_DIR is job.checkpoint_dir (the same for every attempt,
// so a restarted or preempted attempt resumes from it), set only when the
// coordinator has a --checkpoint-root. A job array's task (spec.array) gets
// TRAINCTL_ARRAY_TASK_ID, TRAINCTL_ARRAY_JOB_ID, TRAINCTL_ARRAY_TASK_COUNT
// and the same values as SLURM_ARRAY_TASK_ID, SLURM_ARRAY_JOB_ID,
// SLURM_ARRAY_TASK_COUNT (Slurm's sbatch --array names).
std::map<std::string, std::string> BuildLaunchEnv(const v1::Job& job,
                                                  const v1::Task& task,
                                                  const LaunchContext& ctx);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_LAUNCH_ENV_H_
