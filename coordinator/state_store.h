#ifndef TRAINCTL_COORDINATOR_STATE_STORE_H_
#define TRAINCTL_COORDINATOR_STATE_STORE_H_

// Durable cluster state: jobs (with their tasks), nodes, and the metric
// points training processes report (ReportMetrics). The coordinator
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
#include "trainctl/v1/metrics.pb.h"
#include "trainctl/v1/types.pb.h"

namespace trainctl::coord {

// A retired job in brief (StateStore::LoadSummarized): what listing, its
// filters, sweeps and idempotent submit need, without the full record.
struct JobSummary {
  int64_t id = 0;
  v1::JobState state = v1::JOB_STATE_UNSPECIFIED;
  // Job.spec.user, Job.spec.sweep_id, Job.request_id, Job.placement_seq.
  std::string user;
  std::string sweep_id;
  std::string request_id;
  int64_t placement_seq = 0;
};

// True when `job` can never change again: its state is final (SUCCEEDED,
// FAILED, CANCELLED) and none of its tasks is live (STARTING, RUNNING,
// STOPPING). The coordinator keeps only a JobSummary of such a job in memory
// and reads its record from the store on demand.
bool IsRetired(const v1::Job& job);

// Everything a coordinator needs to resume.
struct StoredState {
  // Ordered by id. From Load(): every job. From LoadSummarized(): every job
  // that is not retired, and every sweep trial (JobSpec.sweep_id set; the
  // coordinator rebuilds ASHA rungs from them).
  std::vector<v1::Job> jobs;
  // Only from LoadSummarized(): the other jobs (retired, not sweep trials),
  // ordered by id.
  std::vector<JobSummary> retired;
  std::vector<v1::Node> nodes;
  // Metric points stored per job id (jobs without points are absent), so the
  // coordinator can enforce its per-job cap after a restart.
  absl::btree_map<int64_t, int64_t> metric_points;
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

  // Like Load(), but retired jobs outside sweeps come back only as
  // JobSummary entries in `retired` (StoredState says which go where), so a
  // long finished history is not parsed at start. SQLite reads the summary
  // from columns written by PutJob (no protobuf parsing); the default (etcd,
  // memory) is Load() then a split, a full scan.
  // Errors: as Load().
  virtual absl::StatusOr<StoredState> LoadSummarized();

  // The stored records of the jobs `ids`, in the order of `ids`; ids that
  // are not stored are left out. Cost: one keyed read per id (SQLite, etcd,
  // memory); the default is a full Load(), for a backend without keyed reads.
  // Errors: DATA_LOSS when a record cannot be parsed; INTERNAL / UNAVAILABLE
  // when the read failed.
  virtual absl::StatusOr<std::vector<v1::Job>> ReadJobs(
      const std::vector<int64_t>& ids);

  // Appends `points` (MetricPoint with key, value, step, time_ms, attempt,
  // rank set) to job `job_id`'s metric history, all or none: one transaction,
  // durable when it returns OK. Batching is the caller's: one call per
  // report, however many points it carries, costs one commit (one fsync).
  // Errors: INVALID_ARGUMENT for job_id <= 0 or an empty key; UNAVAILABLE /
  // INTERNAL when the write failed (then none of the points is stored).
  // The default returns UNIMPLEMENTED (a backend without metrics).
  virtual absl::Status AppendMetrics(int64_t job_id,
                                     const std::vector<v1::MetricPoint>& points);

  // The metric points of job `job_id` (only those of `key` when it is not
  // empty), ordered by key, then in append order. An unknown job has none.
  // Errors: DATA_LOSS / INTERNAL on read failure; the default returns
  // UNIMPLEMENTED.
  virtual absl::StatusOr<std::vector<v1::MetricPoint>> ReadMetrics(
      int64_t job_id, const std::string& key);
};

// Keeps state in memory; for tests. `SetFailing(true)` makes every write
// return UNAVAILABLE (failure injection).
class MemoryStateStore : public StateStore {
 public:
  absl::Status PutJob(const v1::Job& job) override;
  absl::Status PutNode(const v1::Node& node) override;
  absl::StatusOr<StoredState> Load() override;
  absl::Status AppendMetrics(int64_t job_id,
                             const std::vector<v1::MetricPoint>& points) override;
  absl::StatusOr<std::vector<v1::MetricPoint>> ReadMetrics(
      int64_t job_id, const std::string& key) override;
  absl::StatusOr<std::vector<v1::Job>> ReadJobs(
      const std::vector<int64_t>& ids) override;
  void SetFailing(bool failing);

 private:
  absl::Mutex mu_;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  // job id -> key -> points in append order.
  absl::btree_map<int64_t, absl::btree_map<std::string, std::vector<v1::MetricPoint>>>
      metrics_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<int64_t, std::string> jobs_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<std::string, std::string> nodes_ ABSL_GUARDED_BY(mu_);
};

// SQLite in WAL mode, one file. Every Put is its own transaction committed
// with synchronous=FULL: in WAL mode FULL syncs the WAL on each commit, so an
// acknowledged write survives a process kill and a power loss; NORMAL would
// survive only a process kill (https://www.sqlite.org/pragma.html#pragma_synchronous).
// Metric points go to their own table, one row each, indexed by (job, key);
// AppendMetrics writes a whole report in one transaction, so its cost is one
// WAL fsync per report, not per point.
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
  absl::Status AppendMetrics(int64_t job_id,
                             const std::vector<v1::MetricPoint>& points) override;
  absl::StatusOr<std::vector<v1::MetricPoint>> ReadMetrics(
      int64_t job_id, const std::string& key) override;
  // Summaries come from the jobs table's columns (retired, state, user,
  // sweep_id, request_id, placement_seq), which PutJob fills; a file written
  // before they existed is given them (one pass parsing every record) by
  // Open().
  absl::StatusOr<StoredState> LoadSummarized() override;
  absl::StatusOr<std::vector<v1::Job>> ReadJobs(
      const std::vector<int64_t>& ids) override;

 private:
  struct Db;
  explicit SqliteStateStore(std::unique_ptr<Db> db);
  // Load(), or without the jobs table when !with_jobs.
  absl::StatusOr<StoredState> LoadTables(bool with_jobs);

  absl::Mutex mu_;
  std::unique_ptr<Db> db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_STATE_STORE_H_
