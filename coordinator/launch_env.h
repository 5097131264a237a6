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
  // CPU cores of this task's node (SLURM_CPUS_ON_NODE). OMP_NUM_THREADS no
  // longer derives from it: see BuildLaunchEnv.
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
  // Also export Slurm's srun variables (JobSpec.slurm_env, or the
  // coordinator's --slurm-env for every job).
  bool slurm_env = false;
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
//
// OMP_NUM_THREADS follows torchrun's rule (torch/distributed/run.py,
// config_from_args): 1 when the node runs more than one process of the job,
// unset for one process, and never over a value the job sets itself (--env
// or --export). Chosen by measurement: with the node's CPUs per process (16
// on a 32-core host, the old rule) steady-state DDP steps/s was below
// torchrun's; bench/README.md, "Steady-state training speed".
//
// JAX: JAX_COORDINATOR_ADDRESS is rank 0's host and job.jax_port (a port
// reserved like MASTER_PORT) when the job has one (more than one process);
// JAX_LOCAL_DEVICE_IDS lists the indices, within CUDA_VISIBLE_DEVICES, of the
// GPUs this process drives: its local rank when the node runs one process
// per GPU (ctx.local_world_size == its GPUs), else all of them.
//
// With ctx.slurm_env, the variables a task started by Slurm's srun sees,
// with their meanings there (Slurm's srun(1) man page, "OUTPUT ENVIRONMENT
// VARIABLES"): SLURM_JOB_ID/SLURM_JOBID (job id), SLURM_JOB_NAME (the job's
// name, else its program's base name), SLURM_PROCID (RANK), SLURM_LOCALID
// (LOCAL_RANK), SLURM_NODEID (node rank), SLURM_NTASKS/SLURM_NPROCS
// (WORLD_SIZE), SLURM_NNODES/SLURM_JOB_NUM_NODES, SLURM_STEP_NUM_TASKS,
// SLURM_STEP_NUM_NODES, SLURM_TASKS_PER_NODE/SLURM_STEP_TASKS_PER_NODE
// (Slurm's "2(x3),1" form), SLURM_NTASKS_PER_NODE (only when every node runs
// as many), SLURM_JOB_NODELIST/SLURM_NODELIST/SLURM_STEP_NODELIST (the nodes'
// names in node-rank order, comma-separated: a valid Slurm hostlist),
// SLURMD_NODENAME (this node), SLURM_STEP_ID/SLURM_STEPID (0),
// SLURM_CPUS_ON_NODE, SLURM_GPUS_ON_NODE, SLURM_RESTART_COUNT (the attempt:
// Slurm's requeue count), SLURM_JOB_USER when the job has a user; and no
// TORCHELASTIC_RUN_ID, as under srun (torch.distributed's
// is_torchelastic_launched() is then false, so Lightning, which prefers
// torchelastic, picks SLURMEnvironment).
std::map<std::string, std::string> BuildLaunchEnv(const v1::Job& job,
                                                  const v1::Task& task,
                                                  const LaunchContext& ctx);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_LAUNCH_ENV_H_
