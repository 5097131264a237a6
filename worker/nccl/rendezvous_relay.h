#ifndef TRAINCTL_WORKER_NCCL_RENDEZVOUS_RELAY_H_
#define TRAINCTL_WORKER_NCCL_RENDEZVOUS_RELAY_H_

// A node's rendezvous relay (docs/design.md §5): the agent serves the
// `Rendezvous` service on a local unix socket (TRAINCTL_RENDEZVOUS_SOCKET in
// the launch environment) and asks the coordinator once per (job, attempt)
// for all the ranks of its node, so the coordinator's work grows with nodes,
// not ranks.
//
//   rank ──Fetch──▶ relay ─┐  first local fetch: one upstream FetchUniqueId
//   rank ──Fetch──▶ relay ─┤  naming the ranks that asked (relayed_ranks);
//   rank ──Fetch──▶ relay ─┘  the answer goes to every local waiter and is
//                             kept for later ones until the attempt's last
//                             local rank exits.
//   rank 0 ──Publish──▶ relay ──Publish──▶ coordinator (and answers local
//                                          waiters at once)
//
// One group per (job, attempt, token), states:
//
//   (none) ──first Fetch──▶ FETCHING ──ids──▶ HELD (answers at once)
//                              │  └──error──▶ (none): waiters get the error,
//                              │               the next Fetch asks again
//                              └── ranks arriving while FETCHING are reported
//                                  upstream (arrivals_only) once the fetch has
//                                  waited arrival_report_delay, so the
//                                  coordinator's DEADLINE_EXCEEDED names only
//                                  ranks that never arrived anywhere
//
// Authentication: the agent registers each rank it starts with its
// attempt's TRAINCTL_TOKEN (AddRank); a call for a registered attempt with
// another token is refused here (PERMISSION_DENIED) and never reaches the
// coordinator. A call for an attempt the agent does not know (an agent
// restarted under running tasks) is relayed under its own token, which the
// coordinator checks: callers with different tokens never share a group.
//
// No gRPC: the coordinator sits behind RendezvousUpstream;
// rendezvous_relay_server.h binds both ends to gRPC.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "trainctl/v1/service.pb.h"

namespace trainctl::worker {

// All ids of a job attempt, in index order (one for ncclCommInitRank, K for
// ncclCommInitRankScalable).
using UniqueIdsDone =
    absl::AnyInvocable<void(absl::StatusOr<std::vector<std::string>>)>;

// The coordinator's Rendezvous service as the relay sees it. Implementations
// are thread-safe and call `done` exactly once, on any thread, never inside
// the call itself while holding a lock of theirs.
class RendezvousUpstream {
 public:
  virtual ~RendezvousUpstream() = default;
  // FetchUniqueId; `done` gets the ids (empty for an arrivals_only report
  // before all are published) or the coordinator's error.
  virtual void FetchAsync(const v1::FetchUniqueIdRequest& request,
                          UniqueIdsDone done) = 0;
  // PublishUniqueId; `done` gets the coordinator's status.
  virtual void PublishAsync(const v1::PublishUniqueIdRequest& request,
                            absl::AnyInvocable<void(absl::Status)> done) = 0;
};

// Tuning of RendezvousRelay; plain values with their defaults.
struct RendezvousRelayOptions {
  // Ranks that reach the relay after its fetch went out are reported
  // upstream (one arrivals_only call per group at a time) only once that
  // fetch has waited this long: when rank 0 publishes in time (the usual
  // case) the node costs the coordinator one call, and when it does not the
  // coordinator's timeout message is at most this stale.
  absl::Duration arrival_report_delay = absl::Seconds(1);
};

// Counters of a relay, for logs, tests and the bench.
struct RendezvousRelayStats {
  int64_t local_fetches = 0;    // FetchUniqueId calls from local ranks
  int64_t local_publishes = 0;  // PublishUniqueId calls from local ranks
  int64_t upstream_fetches = 0;  // waiting fetches sent to the coordinator
  int64_t upstream_reports = 0;  // arrivals_only reports sent
  int64_t refused = 0;           // local calls refused here (wrong token)
};

// Thread-safe (one mutex); `done` callbacks and upstream calls run outside
// it, on the calling thread or the upstream's.
// A rank as the relay registers it (AddRank), from its launch environment.
struct RelayRank {
  int64_t job_id = 0;
  int attempt = 0;
  int rank = 0;
  // TRAINCTL_PREFLIGHT: a probe's run; 0 when unset.
  int probe_run = 0;
  std::string token;
};
// The registration of a task started with `env`: TRAINCTL_JOB_ID,
// TRAINCTL_ATTEMPT, RANK, TRAINCTL_TOKEN and TRAINCTL_PREFLIGHT. nullopt when
// one of the first four is missing or one is not a number (then the task
// fetches from the coordinator directly).
std::optional<RelayRank> RelayRankFromEnv(
    const google::protobuf::Map<std::string, std::string>& env);

class RendezvousRelay {
 public:
  // `upstream` is not owned and must outlive the relay.
  RendezvousRelay(RendezvousUpstream* upstream, RendezvousRelayOptions options = {});
  ~RendezvousRelay();
  RendezvousRelay(const RendezvousRelay&) = delete;
  RendezvousRelay& operator=(const RendezvousRelay&) = delete;

  // The agent started `rank` of (job, attempt) here with `token`
  // (TRAINCTL_TOKEN); `probe_run` n >= 1 for the probe of pre-flight run n
  // of that attempt (TRAINCTL_PREFLIGHT), a group of its own. A later token
  // for the same group replaces the earlier one (the coordinator issues one
  // per attempt and one per pre-flight run).
  void AddRank(int64_t job_id, int attempt, const std::string& token, int rank,
               int probe_run = 0);

  // `rank` of (job, attempt, probe_run) ended here. After its last local
  // rank, its groups are dropped; their waiters get ABORTED.
  void RemoveRank(int64_t job_id, int attempt, int rank, int probe_run = 0);

  // A local rank's FetchUniqueId (`request` as the rank sent it). `done`
  // gets the ids at once when held, else when the one upstream fetch of the
  // group answers. Errors: PERMISSION_DENIED (wrong token for an attempt
  // started here), INVALID_ARGUMENT (negative timeout_ms, id_count outside
  // [0, kMaxNcclUniqueIds]), and
  // the coordinator's (DEADLINE_EXCEEDED naming the ranks that never
  // arrived, NOT_FOUND, ...) as they come.
  void FetchAsync(const v1::FetchUniqueIdRequest& request, absl::Time now,
                  UniqueIdsDone done);

  // A local root rank's PublishUniqueId, relayed to the coordinator; on
  // success the id is also held here, and local waiters are answered once
  // all the attempt's ids are. Errors: PERMISSION_DENIED as FetchAsync;
  // the coordinator's.
  void PublishAsync(const v1::PublishUniqueIdRequest& request,
                    absl::AnyInvocable<void(absl::Status)> done);

  // Sends the arrival reports that are due at `now` (see
  // RendezvousRelayOptions::arrival_report_delay). Call it periodically
  // (the server does, every 100 ms).
  void Tick(absl::Time now);

  // Ends every waiting local call with ABORTED (`why`) and forgets every
  // group (the server calls it before shutting down).
  void AbortAll(absl::string_view why);

  RendezvousRelayStats Stats() const;
  // Groups held (for tests): fetching or holding ids.
  int Groups() const;

 private:
  using AttemptKey = std::tuple<int64_t, int, int>;  // job, attempt, probe_run
  // job, attempt, probe_run, token
  using GroupKey = std::tuple<int64_t, int, int, std::string>;
  struct Registration {
    std::string token;
    absl::btree_set<int> ranks;
  };
  struct Group {
    int id_count = 0;             // 0: not known yet
    std::vector<std::string> ids;  // id_count entries once known; "" = missing
    bool held = false;            // all ids known: answer at once
    bool fetching = false;        // the upstream fetch is out
    absl::Time fetch_sent;
    int64_t timeout_ms = 0;
    absl::btree_set<int> reported;    // ranks the coordinator was told of
    absl::btree_set<int> unreported;  // ranks that arrived since
    bool reporting = false;           // an arrivals_only report is out
    std::vector<UniqueIdsDone> waiters;
  };

  // PERMISSION_DENIED when (job, attempt, probe_run) is registered with
  // another token.
  absl::Status CheckTokenLocked(int64_t job_id, int attempt, int probe_run,
                                const std::string& token) ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The upstream fetch of `key` answered.
  void OnUpstreamFetch(const GroupKey& key,
                       absl::StatusOr<std::vector<std::string>> ids);
  // An id published through this relay: held, and the waiters answered
  // when all are.
  void OnPublished(const GroupKey& key, int id_count, int index, std::string id);
  // Answers `group`'s waiters when it holds every id; returns them to call
  // outside the lock.
  static std::vector<UniqueIdsDone> TakeIfHeldLocked(Group& group);

  RendezvousUpstream* const upstream_;
  const RendezvousRelayOptions options_;
  mutable absl::Mutex mu_;
  std::map<AttemptKey, Registration> registered_ ABSL_GUARDED_BY(mu_);
  std::map<GroupKey, Group> groups_ ABSL_GUARDED_BY(mu_);
  RendezvousRelayStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::worker

#endif  // TRAINCTL_WORKER_NCCL_RENDEZVOUS_RELAY_H_
