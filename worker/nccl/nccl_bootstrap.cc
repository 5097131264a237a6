#include "worker/nccl/nccl_bootstrap.h"

#include <cstring>
#include <future>
#include <memory>
#include <vector>

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

// Through the node's relay when the agent passed one (RendezvousAddress),
// else the coordinator.
absl::StatusOr<std::string> ExchangeWithEnv(
    const RankEnv& env,
    absl::FunctionRef<absl::StatusOr<std::string>()> make_id,
    absl::Duration timeout) {
  TC_ASSIGN_OR_RETURN(std::unique_ptr<GrpcRendezvousClient> client,
                      GrpcRendezvousClient::Create(RendezvousAddress(env)));
  return ExchangeUniqueId(env, *client, make_id, timeout);
}

absl::StatusOr<std::vector<std::string>> ExchangeAllWithEnv(
    const RankEnv& env,
    absl::FunctionRef<absl::StatusOr<std::string>()> make_id,
    absl::Duration timeout) {
  TC_ASSIGN_OR_RETURN(std::unique_ptr<GrpcRendezvousClient> client,
                      GrpcRendezvousClient::Create(RendezvousAddress(env)));
  return ExchangeUniqueIds(env, *client, make_id, timeout);
}

// ncclCommInitRankScalable is in nccl.h from NCCL 2.23 on.
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 23, 0)
#define TRAINCTL_NCCL_HAS_SCALABLE_INIT 1
#else
#define TRAINCTL_NCCL_HAS_SCALABLE_INIT 0
#endif

// The NCCL this process runs with (ncclGetVersion: the loaded libnccl.so.2,
// which may be older than the nccl.h built against); 0 when unknown.
int RuntimeNcclVersion() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 0;
  return version;
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
  env.nccl_unique_ids = 1;  // the caller creates the communicator from one id
  return ExchangeWithEnv(env, rank0_id, timeout);
}

bool NcclHasScalableInit() {
#if TRAINCTL_NCCL_HAS_SCALABLE_INIT
  return RuntimeNcclVersion() >= NCCL_VERSION(2, 23, 0);
#else
  return false;
#endif
}

absl::StatusOr<ncclComm_t> InitNcclCommFromEnv(absl::Duration timeout) {
  TC_ASSIGN_OR_RETURN(RankEnv env, RankEnvFromEnv());
  // Several ids only where NCCL can take them; otherwise one, from rank 0,
  // whatever TRAINCTL_NCCL_UNIQUE_IDS says (every rank decides the same,
  // all running the same NCCL).
  if (env.nccl_unique_ids > 1 && !NcclHasScalableInit()) env.nccl_unique_ids = 1;

  // The id exchange (gRPC set-up, rank 0's ncclGetUniqueId, the long-poll)
  // runs while this thread creates the CUDA context, which takes hundreds of
  // ms (cudaSetDevice initializes the primary context since CUDA 12); neither
  // needs the other. The future is always joined before returning.
  std::future<absl::StatusOr<std::vector<std::string>>> exchange =
      std::async(std::launch::async, [&env, timeout] {
        return ExchangeAllWithEnv(env, NcclGetUniqueIdBytes, timeout);
      });
  cudaError_t cuda = cudaSetDevice(env.local_rank);
  absl::StatusOr<std::vector<std::string>> id_bytes = exchange.get();
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

  std::vector<ncclUniqueId> ids(id_bytes->size());
  for (size_t i = 0; i < ids.size(); ++i) {
    std::memcpy(ids[i].internal, (*id_bytes)[i].data(), sizeof(ids[i].internal));
  }

  ncclComm_t comm = nullptr;
  ncclResult_t result = ncclSuccess;
  const char* call = "ncclCommInitRank";
#if TRAINCTL_NCCL_HAS_SCALABLE_INIT
  if (ids.size() > 1) {
    // NCCL's rule for the ids (nccl.h, "ncclCommInitRankScalable"): nId
    // ids, id i made by the root of block i (common/nccl_roots.h), passed in
    // index order on every rank; a null config takes NCCL's defaults.
    call = "ncclCommInitRankScalable";
    result = ncclCommInitRankScalable(&comm, env.world_size, env.rank,
                                      static_cast<int>(ids.size()), ids.data(),
                                      nullptr);
  } else {
    result = ncclCommInitRank(&comm, env.world_size, ids[0], env.rank);
  }
#else
  result = ncclCommInitRank(&comm, env.world_size, ids[0], env.rank);
#endif
  if (result != ncclSuccess) {
    return absl::InternalError(absl::StrFormat(
        "rank %d of %d (job %d attempt %d, local rank %d): %s (%d ids) "
        "failed: %s (see this rank's log with NCCL_DEBUG=INFO, and whether "
        "every rank of the job started)",
        env.rank, env.world_size, env.job_id, env.attempt, env.local_rank, call,
        ids.size(), NcclErrorText(result)));
  }
  return comm;
}

}  // namespace trainctl::worker
