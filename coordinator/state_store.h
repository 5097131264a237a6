#ifndef TRAINCTL_COORDINATOR_STATE_STORE_H_
#define TRAINCTL_COORDINATOR_STATE_STORE_H_

// Durable cluster state: jobs (with their tasks) and nodes. The coordinator
// writes through a StateStore before it acknowledges any mutation, and loads
// from it on start. Backends: SqliteStateStore (default), MemoryStateStore
// (tests, with failure injection). One conformance suite runs against each
// (state_store_conformance_test.cc).

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// Everything a coordinator needs to resume.
struct StoredState {
  // Ordered by id.
  std::vector<v1::Job> jobs;
  std::vector<v1::Node> nodes;
};

// Implementations are thread-safe.
class StateStore {
 public:
  virtual ~StateStore() = default;

  // Inserts or replaces the job with `job.id()`; durable when it returns OK.
  // Errors: INVALID_ARGUMENT for id <= 0; UNAVAILABLE / INTERNAL when the
  // write failed (nothing is then acknowledged to the user).
  virtual absl::Status PutJob(const v1::Job& job) = 0;

  // Inserts or replaces the node with `node.name()`; durable when it returns.
  // Errors: INVALID_ARGUMENT for an empty name; UNAVAILABLE / INTERNAL on a
  // failed write.
  virtual absl::Status PutNode(const v1::Node& node) = 0;

  // Reads everything back.
  // Errors: DATA_LOSS when a stored record cannot be parsed; INTERNAL on read
  // failure.
  virtual absl::StatusOr<StoredState> Load() = 0;
};

// Keeps state in memory; for tests. `SetFailing(true)` makes every write
// return UNAVAILABLE (failure injection).
class MemoryStateStore : public StateStore {
 public:
  absl::Status PutJob(const v1::Job& job) override;
  absl::Status PutNode(const v1::Node& node) override;
  absl::StatusOr<StoredState> Load() override;
  void SetFailing(bool failing);

 private:
  absl::Mutex mu_;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  absl::btree_map<int64_t, std::string> jobs_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<std::string, std::string> nodes_ ABSL_GUARDED_BY(mu_);
};

// SQLite in WAL mode, one file. Every Put is its own transaction committed
// with synchronous=FULL: in WAL mode FULL syncs the WAL on each commit, so an
// acknowledged write survives a process kill and a power loss; NORMAL would
// survive only a process kill (https://www.sqlite.org/pragma.html#pragma_synchronous).
class SqliteStateStore : public StateStore {
 public:
  // How far a committed write is durable (SQLite's `PRAGMA synchronous`,
  // WAL mode; https://www.sqlite.org/pragma.html#pragma_synchronous).
  enum class Sync {
    // fsync of the WAL at every commit: survives a power loss or OS crash.
    // Costs one fsync per write (about 5 ms each on the shared CI disk, so
    // about 200 writes/s; bench/results/durability_sigkill*.json).
    kFull,
    // The WAL is fsynced only at checkpoints: every commit survives a crash
    // or `kill -9` of the coordinator (the write is in the OS before the
    // ack), but an OS crash or power loss can lose the last commits.
    kNormal,
  };

  // Opens or creates `path` (its directory must exist).
  // Errors: UNAVAILABLE when the file cannot be opened or set up.
  static absl::StatusOr<std::unique_ptr<SqliteStateStore>> Open(
      const std::string& path, Sync sync = Sync::kFull);
  ~SqliteStateStore() override;

  absl::Status PutJob(const v1::Job& job) override;
  absl::Status PutNode(const v1::Node& node) override;
  absl::StatusOr<StoredState> Load() override;

 private:
  struct Db;
  explicit SqliteStateStore(std::unique_ptr<Db> db);

  absl::Mutex mu_;
  std::unique_ptr<Db> db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_STATE_STORE_H_
