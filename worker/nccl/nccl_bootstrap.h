#ifndef TRAINCTL_WORKER_NCCL_NCCL_BOOTSTRAP_H_
#define TRAINCTL_WORKER_NCCL_NCCL_BOOTSTRAP_H_

// NCCL communicator set-up from trainctl's launch environment (docs/design.md
// §4 and §5). Built only where NCCL and the CUDA runtime are found.
//
// Per rank:
//   RankEnvFromEnv ─▶ cudaSetDevice(LOCAL_RANK) ─▶ ExchangeUniqueId
//     (rank 0: ncclGetUniqueId + Publish; others: Fetch) ─▶ ncclCommInitRank
//
// Facts from NCCL (src/init.cc, src/bootstrap.cc): ncclGetUniqueId starts the
// bootstrap root in the calling process, so rank 0's process must live until
// every rank has called ncclCommInitRank. It does here, because rank 0 also
// calls ncclCommInitRank, which returns only once all nranks have joined.
// An id serves one communicator; a restarted job gets a new attempt and so a
// new id.

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nccl.h"

namespace trainctl::worker {

// Creates this rank's NCCL communicator for its trainctl job attempt: reads the
// launch environment, selects CUDA device LOCAL_RANK (CUDA_VISIBLE_DEVICES lists
// all the job's GPUs on this node in local-rank order), exchanges the
// ncclUniqueId through the rendezvous (the node's relay at
// TRAINCTL_RENDEZVOUS_SOCKET, else the coordinator; waiting at most `timeout`
// for rank 0 to publish it) and calls ncclCommInitRank, which blocks until all
// WORLD_SIZE ranks have joined. With TRAINCTL_NCCL_UNIQUE_IDS=K > 1 and
// NcclHasScalableInit(), the K root ranks (common/nccl_roots.h) each publish
// an id and every rank calls ncclCommInitRankScalable with all K; without
// scalable init, K is ignored (one id, ncclCommInitRank). The caller owns the communicator (release it
// with ncclCommDestroy).
// Errors: FAILED_PRECONDITION for a missing or bad launch variable, or when
// device LOCAL_RANK cannot be selected; those of ExchangeUniqueId
// (DEADLINE_EXCEEDED when rank 0 never published, PERMISSION_DENIED,
// UNAVAILABLE); INTERNAL when ncclGetUniqueId or ncclCommInitRank fails. Every
// message names the rank and, for NCCL, ncclGetErrorString and
// ncclGetLastError.
absl::StatusOr<ncclComm_t> InitNcclCommFromEnv(
    absl::Duration timeout = absl::Seconds(120));

// The exchange alone, for programs that create the communicator themselves
// (the C ABI's trainctl_exchange_unique_id): on rank 0 publishes
// `rank0_id()`, elsewhere fetches; returns the 128-byte id on every rank.
// Errors: as InitNcclCommFromEnv, without the CUDA and ncclCommInitRank parts.
absl::StatusOr<std::string> ExchangeUniqueIdFromEnv(
    absl::FunctionRef<absl::StatusOr<std::string>()> rank0_id,
    absl::Duration timeout = absl::Seconds(120));

// Whether the communicator can be created from several ids: nccl.h was
// 2.23 or newer at build time (NCCL_VERSION_CODE) and the loaded NCCL is too
// (ncclGetVersion).
bool NcclHasScalableInit();

// ncclGetUniqueId as the `make_id` of ExchangeUniqueId: the 128 id bytes.
// Errors: INTERNAL with NCCL's error string.
absl::StatusOr<std::string> NcclGetUniqueIdBytes();

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_NCCL_NCCL_BOOTSTRAP_H_
