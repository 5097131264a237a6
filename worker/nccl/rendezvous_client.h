#ifndef TRAINCTL_WORKER_NCCL_RENDEZVOUS_CLIENT_H_
#define TRAINCTL_WORKER_NCCL_RENDEZVOUS_CLIENT_H_

// The rank side of the NCCL bootstrap (docs/design.md §5): rank 0 publishes
// its ncclUniqueId for (job, attempt) on the coordinator, every other rank
// fetches it with a long-poll.
//
// Why an out-of-band exchange at all: ncclGetUniqueId (NCCL src/init.cc ->
// bootstrapGetUniqueId in src/bootstrap.cc) opens the bootstrap root's
// listening socket in the calling process and encodes its address plus a random
// magic into the 128-byte id; NCCL leaves it to the caller to hand those bytes
// to the other nranks - 1 ranks before they call ncclCommInitRank.
//
//   rank 0:  make_id() ──Publish──▶ coordinator ◀──Fetch (long-poll)── rank k>0
//                                        └──────── same 128 bytes ───────▶

#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/nccl/rank_env.h"

namespace grpc {
class Status;
}  // namespace grpc

namespace trainctl::worker {

// Size of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES in nccl.h); repeated here so
// this library builds without NCCL.
inline constexpr size_t kNcclUniqueIdBytes = 128;

// Moves one job attempt's ncclUniqueId from rank 0 to the other ranks.
// Implementations are thread-safe.
class UniqueIdExchange {
 public:
  virtual ~UniqueIdExchange() = default;

  // Rank 0 publishes `id` (opaque bytes) for (env.job_id, env.attempt).
  // Errors: those of the coordinator, e.g. PERMISSION_DENIED (wrong token),
  // FAILED_PRECONDITION (attempt no longer current), UNAVAILABLE (coordinator
  // unreachable for longer than the implementation retries).
  virtual absl::Status Publish(const RankEnv& env, absl::string_view id) = 0;

  // Returns the id of (env.job_id, env.attempt) as soon as rank 0 has
  // published it, waiting at most about `timeout`.
  // Errors: DEADLINE_EXCEEDED when it is not published in time (the
  // coordinator's message names the missing ranks); PERMISSION_DENIED (wrong
  // token); UNAVAILABLE when the coordinator stays unreachable until the
  // deadline; other coordinator errors as they come.
  virtual absl::StatusOr<std::string> Fetch(const RankEnv& env,
                                            absl::Duration timeout) = 0;

  // All env.nccl_unique_ids ids of the attempt, in index order, once every
  // root rank has published its own (ncclCommInitRankScalable). The default
  // serves one id through Fetch.
  // Errors: as Fetch.
  virtual absl::StatusOr<std::vector<std::string>> FetchAll(const RankEnv& env,
                                                            absl::Duration timeout) {
    absl::StatusOr<std::string> id = Fetch(env, timeout);
    if (!id.ok()) return id.status();
    return std::vector<std::string>{*std::move(id)};
  }
};

// Tuning of GrpcRendezvousClient. Plain values with their defaults.
struct GrpcRendezvousOptions {
  // Backoff between retries of an UNAVAILABLE call: starts here, doubles up to
  // max_backoff, each wait jittered by +-20% so that thousands of ranks do not
  // retry in lockstep.
  absl::Duration initial_backoff = absl::Milliseconds(100);
  absl::Duration max_backoff = absl::Seconds(2);
  // How long Publish keeps retrying UNAVAILABLE.
  absl::Duration publish_timeout = absl::Seconds(60);
  // Extra time the client's gRPC deadline gets over the long-poll's timeout_ms,
  // so that the coordinator's own DEADLINE_EXCEEDED (naming the missing ranks)
  // arrives before the client gives up on its own.
  absl::Duration deadline_grace = absl::Seconds(5);
  // PEM CA certificate to verify a TLS coordinator with. Empty: the file
  // named by $TRAINCTL_TLS_CA (the agent sets it for its tasks when it runs
  // with --tls-ca); neither: a plaintext channel (insecure mode).
  std::string tls_ca_file;
};

// UniqueIdExchange over the coordinator's `Rendezvous` gRPC service
// (proto/trainctl/v1/service.proto), over server TLS when a CA is given
// (GrpcRendezvousOptions::tls_ca_file), else plaintext; either way the
// per-attempt TRAINCTL_TOKEN authorizes the calls.
// Thread-safe: gRPC stubs are.
class GrpcRendezvousClient : public UniqueIdExchange {
 public:
  // Creates a client of the coordinator at `address` ("host:port"), or of a
  // node's relay at "unix:<path>" (always plaintext: a local socket). Does
  // not connect yet: gRPC connects on the first call.
  // Errors: INVALID_ARGUMENT when `address` is empty; NOT_FOUND when the
  // TLS CA file cannot be read.
  static absl::StatusOr<std::unique_ptr<GrpcRendezvousClient>> Create(
      const std::string& address, GrpcRendezvousOptions options = {});

  ~GrpcRendezvousClient() override;

  // Publishes; retries UNAVAILABLE with capped exponential backoff for up to
  // options.publish_timeout. Other errors return at once. With
  // env.nccl_unique_ids K > 1 the id is published as the index env.rank is
  // the root of (common/nccl_roots.h); INVALID_ARGUMENT when it is none.
  absl::Status Publish(const RankEnv& env, absl::string_view id) override;

  // Long-polls; retries UNAVAILABLE (coordinator briefly unreachable) with
  // capped exponential backoff until `timeout` has passed in all. Other errors,
  // DEADLINE_EXCEEDED included, return at once. Takes at most `timeout` +
  // options.deadline_grace.
  absl::StatusOr<std::string> Fetch(const RankEnv& env,
                                    absl::Duration timeout) override;
  // As Fetch, all env.nccl_unique_ids ids.
  absl::StatusOr<std::vector<std::string>> FetchAll(const RankEnv& env,
                                                    absl::Duration timeout) override;

 private:
  class Impl;
  explicit GrpcRendezvousClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Where a rank's rendezvous calls go: "unix:<TRAINCTL_RENDEZVOUS_SOCKET>"
// when the agent passed its relay's socket and the socket exists, else the
// coordinator (env.coordinator: older agents, tasks in containers, tests).
std::string RendezvousAddress(const RankEnv& env);

// The exchange for ncclCommInitRankScalable: each root rank of the
// env.nccl_unique_ids ids (common/nccl_roots.h) calls `make_id` and
// publishes it as its index; every rank (roots included) then fetches all of
// them. Returns the ids in index order. With one id it is ExchangeUniqueId.
// Errors: as ExchangeUniqueId.
absl::StatusOr<std::vector<std::string>> ExchangeUniqueIds(
    const RankEnv& env, UniqueIdExchange& exchange,
    absl::FunctionRef<absl::StatusOr<std::string>()> make_id,
    absl::Duration timeout);

// The NCCL bootstrap exchange of one rank: rank 0 calls `make_id` (in the real
// thing, ncclGetUniqueId) and publishes the result; every other rank fetches it,
// waiting at most about `timeout`. Returns the 128-byte id on every rank.
// Errors: INTERNAL when an id is not exactly kNcclUniqueIdBytes long; the
// errors of `make_id` (prefixed with the rank and job), and those of
// UniqueIdExchange::Publish and ::Fetch as they come.
absl::StatusOr<std::string> ExchangeUniqueId(
    const RankEnv& env, UniqueIdExchange& exchange,
    absl::FunctionRef<absl::StatusOr<std::string>()> make_id,
    absl::Duration timeout);

// grpc::Status -> absl::Status, the one place this library converts (the codes
// share their numbering).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_NCCL_RENDEZVOUS_CLIENT_H_
