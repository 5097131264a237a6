#include "worker/nccl/nccl_bootstrap.h"

#include <cstring>
#include <future>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "cuda_runtime_api.h"
#include "worker/nccl/rank_env.h"
#include "worker/nccl/rendezvous_client.h"

namespace trainctl::worker {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclUniqueIdBytes,
              "kNcclUniqueIdBytes must match NCCL_UNIQUE_ID_BYTES");

// "unhandled system error (run with NCCL_DEBUG=INFO for details); last NCCL
// error: ...".
std::string NcclErrorText(ncclResult_t result) {
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') {
    return absl::StrFormat("%s; last NCCL error: %s",
                           ncclGetErrorString(result), last);
  }
  return ncclGetErrorString(result);
}

absl::StatusOr<std::string> ExchangeWithEnv(
    const RankEnv& env,
    absl::FunctionRef<absl::StatusOr<std::string>()> make_id,
    absl::Duration timeout) {
  TC_ASSIGN_OR_RETURN(std::unique_ptr<GrpcRendezvousClient> client,
                      GrpcRendezvousClient::Create(env.coordinator));
  return ExchangeUniqueId(env, *client, make_id, timeout);
}

}  // namespace

absl::StatusOr<std::string> NcclGetUniqueIdBytes() {
  ncclUniqueId id;
  ncclResult_t result = ncclGetUniqueId(&id);
  if (result != ncclSuccess) {
    return absl::InternalError(absl::StrFormat(
        "ncclGetUniqueId failed: %s (the bootstrap root could not open its "
        "listening socket; see NCCL_SOCKET_IFNAME and NCCL_DEBUG=INFO)",
        NcclErrorText(result)));
  }
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::string> ExchangeUniqueIdFromEnv(
    absl::FunctionRef<absl::StatusOr<std::string>()> rank0_id,
    absl::Duration timeout) {
  TC_ASSIGN_OR_RETURN(RankEnv env, RankEnvFromEnv());
  return ExchangeWithEnv(env, rank0_id, timeout);
}

absl::StatusOr<ncclComm_t> InitNcclCommFromEnv(absl::Duration timeout) {
  TC_ASSIGN_OR_RETURN(RankEnv env, RankEnvFromEnv());

  // The id exchange (gRPC set-up, rank 0's ncclGetUniqueId, the long-poll)
  // runs while this thread creates the CUDA context, which takes hundreds of
  // ms (cudaSetDevice initializes the primary context since CUDA 12); neither
  // needs the other. The future is always joined before returning.
  std::future<absl::StatusOr<std::string>> exchange =
      std::async(std::launch::async, [&env, timeout] {
        return ExchangeWithEnv(env, NcclGetUniqueIdBytes, timeout);
      });
  cudaError_t cuda = cudaSetDevice(env.local_rank);
  absl::StatusOr<std::string> id_bytes = exchange.get();
  if (cuda != cudaSuccess) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
    const char* visible = ::getenv("CUDA_VISIBLE_DEVICES");
    return absl::FailedPreconditionError(absl::StrFormat(
        "rank %d of job %d: cudaSetDevice(LOCAL_RANK=%d) failed: %s (%d CUDA "
        "devices visible, CUDA_VISIBLE_DEVICES='%s'; the agent should list all "
        "of the job's GPUs on this node)",
        env.rank, env.job_id, env.local_rank, cudaGetErrorString(cuda), count,
        visible == nullptr ? "" : visible));
  }
  if (!id_bytes.ok()) return id_bytes.status();

  ncclUniqueId id;
  std::memcpy(id.internal, id_bytes->data(), sizeof(id.internal));

  ncclComm_t comm = nullptr;
  ncclResult_t result =
      ncclCommInitRank(&comm, env.world_size, id, env.rank);
  if (result != ncclSuccess) {
    return absl::InternalError(absl::StrFormat(
        "rank %d of %d (job %d attempt %d, local rank %d): ncclCommInitRank "
        "failed: %s (see this rank's log with NCCL_DEBUG=INFO, and whether "
        "every rank of the job started)",
        env.rank, env.world_size, env.job_id, env.attempt, env.local_rank,
        NcclErrorText(result)));
  }
  return comm;
}

}  // namespace trainctl::worker
