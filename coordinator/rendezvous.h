#ifndef TRAINCTL_COORDINATOR_RENDEZVOUS_H_
#define TRAINCTL_COORDINATOR_RENDEZVOUS_H_

// The NCCL bootstrap's out-of-band channel (docs/design.md §5): rank 0 of a
// job attempt publishes its 128-byte ncclUniqueId; the other ranks long-poll
// for it. With ncclCommInitRankScalable an attempt uses K ids (id_count), the
// id of index i published by its root rank (common/nccl_roots.h); a fetch
// returns once all K are published. A node's rendezvous relay (the agent,
// worker/nccl/rendezvous_relay.h) fetches once for all ranks of its node and
// names them (relayed_ranks), so they count as arrived. `ncclGetUniqueId` binds the bootstrap root in rank 0's process and
// an id serves one communicator (NCCL src/bootstrap.cc), so each (job,
// attempt) has its own group and the id is readable only with the attempt's
// token.
//
// One group's states:
//
//   Open() ──▶ WAITING ──Publish (rank 0; with K ids, the K-th root)──▶ PUBLISHED
//                 │                              │
//                 └──────────Close()─────────────┴──▶ (removed; waiters get
//                                                      ABORTED)
//
// A waiting Fetch ends with the id as soon as it is published, or with
// DEADLINE_EXCEEDED at its deadline (checked by Expire(now)) naming the ranks
// that never arrived.

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::coord {

// Size of ncclUniqueId (NCCL_UNIQUE_ID_BYTES in nccl.h).
inline constexpr size_t kNcclUniqueIdBytes = 128;

// Which rendezvous group of a job: its attempt's (probe_run 0), or the
// group of pre-flight run `probe_run` (>= 1) of that attempt, whose probes
// publish and fetch with TRAINCTL_PREFLIGHT set (TaskRef.probe_run). Made
// implicitly from an attempt number.
struct GroupRef {
  GroupRef(int attempt, int probe_run = 0)  // NOLINT: an attempt is a group
      : attempt(attempt), probe_run(probe_run) {}
  int attempt;
  int probe_run;
  // "attempt 2" or "attempt 2 pre-flight 1", for messages.
  std::string ToString() const;
  friend bool operator==(const GroupRef& a, const GroupRef& b) {
    return a.attempt == b.attempt && a.probe_run == b.probe_run;
  }
  template <typename H>
  friend H AbslHashValue(H h, const GroupRef& g) {
    return H::combine(std::move(h), g.attempt, g.probe_run);
  }
};

// Thread-safe; callbacks run outside its lock, on the calling thread (and,
// when Publish answers many waiters, on helper threads it starts and joins).
class RendezvousTable {
 public:
  using FetchDone = absl::AnyInvocable<void(absl::StatusOr<std::string>)>;
  // All id_count ids, in index order.
  using FetchIdsDone =
      absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>)>;

  // What a fetch may say besides (job, attempt, rank, token).
  struct FetchOptions {
    // Ranks a node relay asks for (FetchUniqueIdRequest.relayed_ranks); they
    // count as arrived.
    std::vector<int> relayed_ranks;
    // Ids the attempt uses; 0 means 1.
    int id_count = 0;
    // Only mark relayed_ranks arrived and answer at once: the ids when all
    // are published, else an empty list.
    bool arrivals_only = false;
  };

  // Publish answers at least this many waiters per thread before it adds a
  // thread: one answer through gRPC costs ~40-70 us of CPU (serializing,
  // HTTP/2 framing, a sendmsg), a thread start ~20-50 us. Measured with
  // bench/rendezvous (4,096 ranks on a 32-core host, 3 runs each): 1
  // thread 204-221 ms, 4 threads 89-115 ms, 16 threads 74-175 ms; 4 is the
  // default for being both fast and steady.
  static constexpr int kWaitersPerFanoutThread = 128;

  // `fanout_threads`: at most this many threads (the calling one included)
  // answer the waiters of one Publish; 0 means kDefaultFanoutThreads, or
  // the host's hardware threads where fewer. 1 answers every waiter on the
  // publishing thread.
  static constexpr int kDefaultFanoutThreads = 4;
  explicit RendezvousTable(int fanout_threads = 0);

  // Starts the group of (job, attempt). `rank_hosts[r]` names the node of
  // rank r (for messages). Replaces an older group of the same key.
  // `opened_at`: when set, TakeTimeToPublish measures from it.
  void Open(int64_t job_id, GroupRef ref, std::string token,
            std::vector<std::string> rank_hosts,
            std::optional<absl::Time> opened_at = std::nullopt);

  // For a group opened with `opened_at`, once: the time from then to `now`
  // (called right after its first successful Publish: the group's time to
  // its ncclUniqueId). nullopt for a group not timed, already taken, or
  // closed.
  std::optional<absl::Duration> TakeTimeToPublish(int64_t job_id, GroupRef ref,
                                                  absl::Time now);

  // Fetches since start, for metrics (CoordinatorCounters): direct ones (a
  // rank asking for itself), relayed ones (a node relay asking for its
  // ranks), and the ranks relayed. Counted by CountFetch; atomics, no lock.
  struct FetchCounts {
    int64_t direct = 0;
    int64_t relayed = 0;
    int64_t ranks_relayed = 0;
  };
  // Counts a fetch with `options` (an arrivals_only one is no fetch of ids,
  // but its relayed ranks count).
  void CountFetch(const FetchOptions& options);
  FetchCounts fetch_counts() const;

  // Ends the group; its waiting fetches get ABORTED with `why`.
  void Close(int64_t job_id, GroupRef ref, absl::string_view why);

  // Rank 0 publishes the id (with `id_count` K > 1 ids: the root rank of
  // `id_index` publishes that id) and, once all K are published, answers
  // every waiting fetch before it returns, split over up to
  // `fanout_threads` threads when there are more than
  // kWaitersPerFanoutThread waiters (each answer is a separate gRPC reply on
  // its own connection, so they can go out in parallel). Publishing the same
  // id again is OK. `id_count` 0 means 1.
  // Errors: NOT_FOUND when the group is not open; PERMISSION_DENIED for a
  // wrong token; INVALID_ARGUMENT for a negative probe_run, when rank is
  // not the root of id_index (rank 0 for one id), id_index is outside [0, K), K is outside [1, ranks]
  // or differs from the K of earlier calls of the attempt, or the id is not
  // 128 bytes; ALREADY_EXISTS when a different id was published.
  absl::Status Publish(int64_t job_id, GroupRef ref, int rank,
                       absl::string_view token, std::string unique_id,
                       int id_index = 0, int id_count = 0);

  // Calls `done` with the id once published (at once if it is), or with an
  // error: NOT_FOUND / PERMISSION_DENIED / INVALID_ARGUMENT (rank out of
  // range) at once; DEADLINE_EXCEEDED from Expire() once `timeout` has passed
  // since `now`; ABORTED from Close().
  void FetchAsync(int64_t job_id, GroupRef ref, int rank, absl::string_view token,
                  absl::Time now, absl::Duration timeout, FetchDone done);

  // As FetchAsync, with the options above; `done` gets all K ids. Also
  // INVALID_ARGUMENT at once for a relayed rank out of range or an id_count
  // that differs from the attempt's.
  void FetchIdsAsync(int64_t job_id, GroupRef ref, int rank, absl::string_view token,
                     absl::Time now, absl::Duration timeout,
                     const FetchOptions& options, FetchIdsDone done);

  // Fails the fetches whose deadline is <= now.
  void Expire(absl::Time now);

  // The RPCs' entry points (PublishUniqueId, FetchUniqueId), at `now`.
  // PublishRequest: Publish of req's group (attempt, probe_run), then
  // `on_published` with the group's time to its id the first time it is
  // published (TakeTimeToPublish). FetchRequest: FetchIdsAsync with
  // req.timeout_ms (0: 120 s, at most 3600 s) and req's relayed_ranks,
  // id_count and arrivals_only, counted by CountFetch. Errors: those of
  // Publish and FetchIdsAsync; INVALID_ARGUMENT for a negative timeout_ms.
  absl::Status PublishRequest(const v1::PublishUniqueIdRequest& req, absl::Time now,
                              const std::function<void(absl::Duration)>& on_published);
  void FetchRequest(const v1::FetchUniqueIdRequest& req, absl::Time now, FetchIdsDone done);

  // Number of open groups (for tests and metrics).
  int OpenGroups() const;

 private:
  struct Waiter {
    int rank;
    absl::Duration timeout;
    absl::Time deadline;
    FetchIdsDone done;
  };
  struct Group {
    std::string token;
    std::vector<std::string> rank_hosts;
    absl::flat_hash_set<int> arrived;
    // Fixed by the first call that reaches the group (0: none yet).
    int id_count = 0;
    // id_count entries once fixed; "" for an id not yet published.
    std::vector<std::string> ids;
    int published_ids = 0;
    bool published() const { return id_count > 0 && published_ids == id_count; }
    std::vector<Waiter> waiters;
    // Open's `opened_at`, until TakeTimeToPublish.
    std::optional<absl::Time> opened_at;
  };
  using Key = std::pair<int64_t, GroupRef>;

  // Checks token and rank of a call on (job, attempt).
  absl::StatusOr<Group*> FindLocked(int64_t job_id, GroupRef ref, int rank,
                                    absl::string_view token)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The DEADLINE_EXCEEDED message for `group`.
  static std::string MissingRanksMessage(int64_t job_id, GroupRef ref,
                                         const Group& group, absl::Duration waited);

  // Fixes the group's id count at `requested` (0 means 1), or checks it
  // against the one fixed. Errors: INVALID_ARGUMENT naming id_count.
  static absl::Status CheckIdCountLocked(Group& group, int requested);

  // Calls each waiter's `done` with `ids`, over up to fanout_threads_
  // threads.
  void AnswerAll(std::vector<Waiter>& ready,
                 const std::vector<std::string>& ids) const;

  const int fanout_threads_;
  std::atomic<int64_t> fetches_direct_{0};
  std::atomic<int64_t> fetches_relayed_{0};
  std::atomic<int64_t> ranks_relayed_{0};
  mutable absl::Mutex mu_;
  absl::flat_hash_map<Key, Group> groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_RENDEZVOUS_H_
