#ifndef TRAINCTL_COORDINATOR_TASK_STARTS_H_
#define TRAINCTL_COORDINATOR_TASK_STARTS_H_

// The StartTask message the coordinator sends an agent for one task of a
// job's attempt (or of its pre-flight probe): the task's identity (TaskRef
// with the attempt's token-bearing key), the command, the working and
// checkpoint directories, the launch environment (launch_env.h: ranks, world
// size, MASTER_ADDR/PORT, CUDA_VISIBLE_DEVICES, the rendezvous address), the
// account to run as, the container image, cgroup limits, and for an
// experiment sharing its GPU the memory it may use there.
//
// Not thread-safe: called under the coordinator's lock, which guards it.
// Build is a pure function of its arguments and the configuration.

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "coordinator/sched/scheduler.h"

#include "coordinator/job_facts.h"
#include "trainctl/v1/service.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

class TaskStarts {
 public:
  using Env = google::protobuf::Map<std::string, std::string>;
  struct Config {
    // Address:port tasks reach the coordinator at (TRAINCTL_COORDINATOR).
    std::string coordinator_address;
    // Tasks run as JobSpec.user (StartTask.run_as_user), and may run as root
    // only when allowed (CoordinatorConfig.run_jobs_as_user,
    // allow_root_jobs).
    bool run_as_user = false;
    bool allow_root = false;
    // PackerConfig.initial_reservation_fraction: an auto-packed trial's first
    // reservation is this share of its GPU, the packer's bookkeeping rather
    // than a size, so it sets no memory limit.
    double initial_reservation_fraction = 0.05;
    // Every job's tasks get Slurm's srun variables (CoordinatorConfig.
    // slurm_env, --slurm-env), as JobSpec.slurm_env gives one job's.
    bool slurm_env = false;
  };
  explicit TaskStarts(Config config) : config_(std::move(config)) {}

  // Tasks started from now on reach the coordinator at `address` (the
  // server knows its port only once bound).
  void set_coordinator_address(std::string address) {
    config_.coordinator_address = std::move(address);
  }

  // The StartTask of task `t` of `job` (its current attempt, or its
  // pre-flight probe while one runs), on `node` (null when unknown: no CPU
  // count, no shared-GPU limit). `exported_env`: the environment the job
  // exports (its own, or the one it shares; null: none). `agent_store`:
  // rank 0's agent hosts the gang's PyTorch store.
  v1::CoordinatorMessage Build(const v1::Job& job, const v1::Task& t, const v1::Node* node,
                               const Env* exported_env, bool agent_store) const;

  // The ranks of an attempt of `spec` placed at `placement` (state not yet
  // set), in rank order: per node of the placement (node rank), its tasks
  // (TasksPerNode: one per GPU, or one for all), their local ranks, GPUs
  // (indexes and UUIDs from `node_of(name)`, null when unknown) and
  // reservation: whole GPUs at their node's GPU size, else the placement's
  // bytes per GPU.
  static std::vector<v1::Task> PlaceRanks(
      const v1::JobSpec& spec, const sched::Placement& placement,
      absl::FunctionRef<const v1::Node*(const std::string&)> node_of);

 private:
  Config config_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_TASK_STARTS_H_
