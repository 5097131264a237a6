#ifndef TRAINCTL_TESTS_SIM_COMMIT_QUEUE_STORE_H_
#define TRAINCTL_TESTS_SIM_COMMIT_QUEUE_STORE_H_

// A state store for the cluster simulation whose writes wait in a queue until
// committed, as SqliteStateStore's do behind its group commit, and whose
// Crash() drops that queue, as `kill -9` of the coordinator does: what was
// committed survives in the durable MemoryStateStore, the rest is lost and
// no callback of it ever runs. Single-threaded (the simulation is): commits
// happen when someone waits for a write (WhenDurable, WaitDurable, a
// synchronous Put*, a read) and at CommitThreadTurn(), which the simulation
// calls between events in place of SqliteStateStore's commit thread.

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/state_store.h"

namespace trainctl::sim {

class CommitQueueStore : public coord::StateStore {
 public:
  // `durable` holds what is committed and outlives this store (a restarted
  // coordinator gets a new CommitQueueStore over the same one); `clock`
  // times lazy writes (StateStore::kLazyFlush).
  CommitQueueStore(coord::MemoryStateStore* durable, const Clock* clock);

  // Queue a write; ticket 1, 2, ... Errors: as MemoryStateStore's Put*, at
  // once (INVALID_ARGUMENT for an id <= 0 or an empty node name);
  // UNAVAILABLE after Crash().
  absl::StatusOr<coord::WriteTicket> EnqueuePutJob(const v1::Job& job) override;
  // Queued as a lazy write: committed by the next commit of another write, a
  // wait for it, or CommitThreadTurn() once it is kLazyFlush old.
  absl::StatusOr<coord::WriteTicket> EnqueuePutJobLazily(const v1::Job& job) override;
  absl::StatusOr<coord::WriteTicket> EnqueuePutNode(const v1::Node& node) override;
  // Commits every write up to `ticket`, then calls `done` inline: OK, or
  // UNAVAILABLE after Crash() for a ticket that was not committed.
  void WhenDurable(coord::WriteTicket ticket,
                   absl::AnyInvocable<void(absl::Status) &&> done) override;

  // Commit what is queued first, then act on the durable store.
  absl::Status PutJob(const v1::Job& job) override;
  absl::Status PutNode(const v1::Node& node) override;
  absl::StatusOr<coord::StoredState> Load() override;
  absl::StatusOr<std::vector<v1::Job>> ReadJobs(const std::vector<int64_t>& ids) override;
  absl::Status AppendMetrics(int64_t job_id,
                             const std::vector<v1::MetricPoint>& points) override;
  absl::StatusOr<std::vector<v1::MetricPoint>> ReadMetrics(int64_t job_id,
                                                           const std::string& key) override;
  absl::StatusOr<std::string> ClusterId() override;

  // What SqliteStateStore's commit thread would have committed by now: every
  // queued write up to the last one that is not lazy, or lazy for
  // kLazyFlush already. Errors: those of MemoryStateStore's Put*.
  absl::Status CommitThreadTurn();
  // The process is killed: the queue is dropped (its writes are lost, their
  // callbacks never run) and every later call fails. Returns the number of
  // writes lost.
  int64_t Crash();

 private:
  struct Write {
    coord::WriteTicket ticket = 0;
    bool is_job = true;
    v1::Job job;
    v1::Node node;
    bool lazy = false;
    absl::Time queued_at;
  };
  absl::StatusOr<coord::WriteTicket> Enqueue(Write w);
  // Commits the queued writes with tickets <= `ticket`, in order.
  absl::Status CommitThrough(coord::WriteTicket ticket);
  absl::Status CommitAll();

  coord::MemoryStateStore* const durable_;
  const Clock* const clock_;
  std::deque<Write> queue_;
  coord::WriteTicket next_ticket_ = 1;
  coord::WriteTicket committed_ = 0;
  bool crashed_ = false;
};

}  // namespace trainctl::sim

#endif  // TRAINCTL_TESTS_SIM_COMMIT_QUEUE_STORE_H_
