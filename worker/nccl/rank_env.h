#ifndef TRAINCTL_WORKER_NCCL_RANK_ENV_H_
#define TRAINCTL_WORKER_NCCL_RANK_ENV_H_

// The part of the launch environment (docs/design.md §4) a rank needs to
// join its job's NCCL rendezvous.

#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"

namespace trainctl::worker {

// Who this process is within its job attempt, and how to reach the
// coordinator's rendezvous. A plain value.
struct RankEnv {
  // TRAINCTL_COORDINATOR: "host:port" of the coordinator's gRPC endpoint.
  std::string coordinator;
  // TRAINCTL_JOB_ID.
  int64_t job_id = 0;
  // TRAINCTL_ATTEMPT: one try of the job; a restart is a new attempt.
  int attempt = 0;
  // TRAINCTL_PREFLIGHT: set for a pre-flight probe, the run it belongs to
  // (its own rendezvous group); 0 when unset (the job's own ranks).
  int probe_run = 0;
  // TRAINCTL_TOKEN: the rendezvous token of this job attempt.
  std::string token;
  // RANK, WORLD_SIZE: global rank in [0, world_size), number of processes.
  int rank = 0;
  int world_size = 1;
  // LOCAL_RANK, LOCAL_WORLD_SIZE: index on this node (also the CUDA device
  // index, since CUDA_VISIBLE_DEVICES lists all the job's GPUs on the node in
  // local-rank order), processes on this node.
  int local_rank = 0;
  int local_world_size = 1;
  // TRAINCTL_RENDEZVOUS_SOCKET (optional): the unix socket of this node's
  // rendezvous relay (the agent); empty: ask the coordinator directly.
  std::string rendezvous_socket;
  // TRAINCTL_NCCL_UNIQUE_IDS (optional, default 1): how many ncclUniqueIds
  // the communicator is created from (ncclCommInitRankScalable where NCCL
  // has it), in [1, WORLD_SIZE].
  int nccl_unique_ids = 1;
};

// Reads TRAINCTL_COORDINATOR, TRAINCTL_JOB_ID, TRAINCTL_ATTEMPT,
// TRAINCTL_TOKEN, RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE, and the
// optional TRAINCTL_RENDEZVOUS_SOCKET and TRAINCTL_NCCL_UNIQUE_IDS, through
// `getenv` (a parameter so tests can pass a fake).
// Errors: FAILED_PRECONDITION naming the first variable that is missing, empty
// or not a valid number, or when the ranks are inconsistent (RANK outside
// [0, WORLD_SIZE), LOCAL_RANK outside [0, LOCAL_WORLD_SIZE), LOCAL_WORLD_SIZE
// greater than WORLD_SIZE, TRAINCTL_NCCL_UNIQUE_IDS outside [1, WORLD_SIZE]).
absl::StatusOr<RankEnv> RankEnvFromEnv(
    absl::FunctionRef<const char*(const char*)> getenv = ::getenv);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_NCCL_RANK_ENV_H_
