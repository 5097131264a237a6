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
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
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

// One generic record (StateStore::PutRecord / ReadRecords).
struct StoredRecord {
  std::string key;
  std::string value;
};

// Which records ReadRecords returns.
struct RecordQuery {
  // Only keys >= this (byte order); empty: from the first.
  std::string from_key;
  // At most this many; 0: all.
  int64_t limit = 0;
  // Largest keys first (with `limit`: the last `limit` keys).
  bool newest_first = false;
};

class StateStore;

// Deletes the oldest records of `kind` whose key is below `before_key`, at
// most `max_records` (>= 1) of them, in one StateStore::DeleteRecordsBefore
// (the (max_records + 1)-th oldest key caps it), so retention goes in short
// transactions; returns how many went. Errors: those of ReadRecords and
// DeleteRecordsBefore (nothing deleted).
absl::StatusOr<int64_t> DeleteOldestRecordsBefore(StateStore& store, const std::string& kind,
                                                  std::string before_key, int64_t max_records);

// Checks a record's kind and key as PutRecord does. Errors: INVALID_ARGUMENT
// naming "kind" or "key" and the rule.
absl::Status CheckRecordKey(const std::string& kind, const std::string& key);

// A write's place in a store's commit order (1, 2, 3, ... per store); 0 means
// "nothing to wait for". Writes are applied in ticket order, and a store makes
// them durable in that order, so a durable ticket t implies every ticket < t is
// durable (or failed).
using WriteTicket = uint64_t;

// Implementations are thread-safe.
//
// Two ways to write. The synchronous Put*/AppendMetrics return once the write
// is durable. The queued pair Enqueue* + WhenDurable/WaitDurable lets a caller
// put writes in order under its own lock (cheap, no I/O) and wait for their
// durability after releasing it; that is how the coordinator keeps its lock
// free of fsync waits (group commit, SqliteStateStore). The default Enqueue*
// writes synchronously (so a failure shows at once) and returns ticket 0.
class StateStore {
 public:
  virtual ~StateStore() = default;

  // Queues `job` (inserts or replaces job `job.id()`); returns its ticket.
  // Durable once WhenDurable/WaitDurable(ticket) reports OK. A later write of
  // the same job supersedes an earlier one still queued (both then commit
  // together). Errors: INVALID_ARGUMENT for id <= 0; UNAVAILABLE / INTERNAL
  // when the write was refused at once (the default, synchronous path).
  virtual absl::StatusOr<WriteTicket> EnqueuePutJob(const v1::Job& job);

  // As EnqueuePutJob, for a write that nobody waits for and whose loss in a
  // crash the coordinator repairs by itself (a task's RUNNING: the agent's
  // next registration lists the task again). It starts no commit of its own:
  // it goes with the next commit of another write, at once when someone
  // waits for its ticket (WhenDurable, WaitDurable, a read), and at the
  // latest kLazyFlush after it was queued. The default is EnqueuePutJob.
  static constexpr absl::Duration kLazyFlush = absl::Seconds(1);
  virtual absl::StatusOr<WriteTicket> EnqueuePutJobLazily(const v1::Job& job) {
    return EnqueuePutJob(job);
  }

  // As EnqueuePutJob, for node `node.name()`. Errors: INVALID_ARGUMENT for an
  // empty name; UNAVAILABLE / INTERNAL as above.
  virtual absl::StatusOr<WriteTicket> EnqueuePutNode(const v1::Node& node);

  // Calls `done` once every write up to `ticket` is durable: OK, or the error
  // of the commit that carried `ticket` (UNAVAILABLE / INTERNAL). Runs `done`
  // inline when it already is (so never call it holding a lock `done` takes),
  // otherwise on the store's commit thread, in ticket order. The default runs
  // `done(OK)` inline (its Enqueue* are synchronous).
  virtual void WhenDurable(WriteTicket ticket,
                           absl::AnyInvocable<void(absl::Status) &&> done);

  // Blocks until WhenDurable(ticket) would call back; returns its status.
  absl::Status WaitDurable(WriteTicket ticket);

  // Holds back commits until the matching ReleaseCommits(), so that every
  // write queued in between goes into one transaction (one fsync): the
  // coordinator holds across one event (a submit and the placement it
  // causes; a task exit and the next job started on the GPUs it freed).
  // Nestable; never wait for a ticket while holding. Defaults do nothing.
  virtual void HoldCommits() {}
  virtual void ReleaseCommits() {}

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

  // Generic keyed records: small parts outside the core (the token store,
  // the audit trail) keep their protobuf records here, each kind its own
  // key space, so they survive a restart and an etcd failover like jobs do.
  //
  // Inserts or replaces record (`kind`, `key`) with `value` (any bytes);
  // durable when it returns OK. Errors: INVALID_ARGUMENT when `kind` is not
  // 1-64 of [a-z0-9_] or `key` is not 1-256 bytes without '/' or control
  // characters (the message names which); UNAVAILABLE / INTERNAL when the
  // write failed (nothing stored). The default returns UNIMPLEMENTED.
  virtual absl::Status PutRecord(const std::string& kind, const std::string& key,
                                 const std::string& value);

  // As PutRecord, queued like EnqueuePutJob: durable once WhenDurable(ticket)
  // reports OK. Never blocks on I/O in SqliteStateStore, so it may be called
  // from a WhenDurable callback (the commit thread), where PutRecord would
  // wait for itself. The default writes synchronously (PutRecord) and
  // returns ticket 0. Errors: as PutRecord's, when refused at once.
  virtual absl::StatusOr<WriteTicket> EnqueuePutRecord(const std::string& kind,
                                                       const std::string& key,
                                                       const std::string& value);

  // The records of `kind` whose key is >= `query.from_key`, in byte order of
  // their keys (newest_first: the reverse), at most `query.limit` of them
  // (0: all). An unknown kind has none. Errors: INVALID_ARGUMENT for a bad
  // kind or a negative limit; DATA_LOSS / INTERNAL / UNAVAILABLE when the
  // read failed. The default returns UNIMPLEMENTED.
  virtual absl::StatusOr<std::vector<StoredRecord>> ReadRecords(
      const std::string& kind, const RecordQuery& query);

  // Deletes the records of `kind` whose key is below `before_key` (byte
  // order; empty: none), durable when it returns, after every write queued
  // before it; returns how many went. For retention on time-ordered keys
  // (AuditLog::Prune). Errors: INVALID_ARGUMENT for a bad kind;
  // UNAVAILABLE / INTERNAL when the delete failed (nothing deleted). The
  // default returns UNIMPLEMENTED.
  virtual absl::StatusOr<int64_t> DeleteRecordsBefore(const std::string& kind,
                                                      const std::string& before_key);

  // The cluster's id (RegisterAck.cluster_id): made (NewClusterId()) and
  // stored the first time it is asked of a new store, the same on every later
  // call and after reopening the same store; a new store has another. Agents
  // namespace their task files by it, so job ids restarting at 1 in a new
  // cluster never reach an older cluster's logs.
  // Errors: UNAVAILABLE when it cannot be read or stored.
  virtual absl::StatusOr<std::string> ClusterId() = 0;
};
// Holds `store`'s commits for one scope (HoldCommits/ReleaseCommits): the
// writes of one coordinator event go in one transaction. Declared after the
// coordinator's MutexLock, so it ends before the lock is released.
class CommitHold {
 public:
  explicit CommitHold(StateStore* store) : store_(store) { store_->HoldCommits(); }
  ~CommitHold() { store_->ReleaseCommits(); }
  CommitHold(const CommitHold&) = delete;
  CommitHold& operator=(const CommitHold&) = delete;

 private:
  StateStore* const store_;
};

// A fresh cluster id: 128 random bits as 32 lower-case hex digits.
std::string NewClusterId();

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
  absl::Status PutRecord(const std::string& kind, const std::string& key,
                         const std::string& value) override;
  absl::StatusOr<std::vector<StoredRecord>> ReadRecords(
      const std::string& kind, const RecordQuery& query) override;
  absl::StatusOr<int64_t> DeleteRecordsBefore(const std::string& kind,
                                              const std::string& before_key) override;
  void SetFailing(bool failing);
  // Made at the first call; the same for the store's life. Errors:
  // UNAVAILABLE while failing.
  absl::StatusOr<std::string> ClusterId() override;

 private:
  absl::Mutex mu_;
  bool failing_ ABSL_GUARDED_BY(mu_) = false;
  std::string cluster_id_ ABSL_GUARDED_BY(mu_);
  // job id -> key -> points in append order.
  absl::btree_map<int64_t, absl::btree_map<std::string, std::vector<v1::MetricPoint>>>
      metrics_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<int64_t, std::string> jobs_ ABSL_GUARDED_BY(mu_);
  absl::btree_map<std::string, std::string> nodes_ ABSL_GUARDED_BY(mu_);
  // kind -> key -> value.
  absl::btree_map<std::string, absl::btree_map<std::string, std::string>> records_
      ABSL_GUARDED_BY(mu_);
};

// SQLite in WAL mode, one file, with group commit.
//
// Writes (Put*, Enqueue*, AppendMetrics) go into a queue; one commit thread
// takes everything queued, writes it in ONE transaction and commits it with
// synchronous=FULL (one WAL fsync), then wakes every caller whose ticket that
// commit covered. While it waits for the fsync, new writes pile up and go in
// the next transaction together: under load the cost of one fsync is shared
// by every write that arrived during the previous one (the classic group
// commit of database logs: Gawlick & Kinkade, IMS Fast Path, 1985; MySQL's
// binlog group commit). A caller still gets OK only after ITS write is
// durable, so `--sync full` keeps its meaning: every ack survives a process
// kill and a power loss; NORMAL would survive only a process kill
// (https://www.sqlite.org/pragma.html#pragma_synchronous). Two queued writes
// of the same job or node coalesce into the later one (one row write).
// Committing on a dedicated thread rather than on the first waiter's
// (leader/follower) means a write nobody waits for (the coordinator does not
// wait for a task exit's write, for instance) still commits promptly.
// Metric points go to their own table, one row each, indexed by (job, key).
class SqliteStateStore : public StateStore {
 public:
  // How far a committed write is durable (SQLite's `PRAGMA synchronous`,
  // WAL mode; https://www.sqlite.org/pragma.html#pragma_synchronous).
  enum class Sync {
    // fsync of the WAL at every commit: survives a power loss or OS crash.
    // Costs one fsync per commit (about 5 ms on the shared CI disk); group
    // commit shares it among every write queued meanwhile, so throughput
    // grows with concurrency (bench/results/durability_sigkill*.json,
    // submit.json BM_SubmitJobConcurrent).
    kFull,
    // The WAL is fsynced only at checkpoints: every commit survives a crash
    // or `kill -9` of the coordinator (the write is in the OS before the
    // ack), but an OS crash or power loss can lose the last commits.
    kNormal,
  };

  // Opens or creates `path` (its directory must exist), mode 0600: the
  // state holds jobs' environments and attempt tokens.
  // Errors: UNAVAILABLE when the file cannot be opened, set to 0600 or set up.
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
  absl::StatusOr<WriteTicket> EnqueuePutJob(const v1::Job& job) override;
  absl::StatusOr<WriteTicket> EnqueuePutJobLazily(const v1::Job& job) override;
  absl::StatusOr<WriteTicket> EnqueuePutNode(const v1::Node& node) override;
  void WhenDurable(WriteTicket ticket,
                   absl::AnyInvocable<void(absl::Status) &&> done) override;
  // Records live in the `records` table (kind, key, value), written through
  // the commit queue like jobs.
  absl::Status PutRecord(const std::string& kind, const std::string& key,
                         const std::string& value) override;
  absl::StatusOr<WriteTicket> EnqueuePutRecord(const std::string& kind,
                                               const std::string& key,
                                               const std::string& value) override;
  absl::StatusOr<std::vector<StoredRecord>> ReadRecords(
      const std::string& kind, const RecordQuery& query) override;
  // One DELETE, after the queued writes are committed.
  absl::StatusOr<int64_t> DeleteRecordsBefore(const std::string& kind,
                                              const std::string& before_key) override;
  void HoldCommits() override;
  void ReleaseCommits() override;

  // How long a lazy write may wait for another commit (default kLazyFlush);
  // tests use other values.
  void SetLazyFlush(absl::Duration after) ABSL_LOCKS_EXCLUDED(queue_mu_);

  // Commits made so far (transactions, i.e. fsyncs with kFull) and the writes
  // they carried after coalescing; for benchmarks and tests.
  struct CommitStats {
    int64_t commits = 0;
    int64_t writes = 0;
  };
  CommitStats commit_stats();
  // Summaries come from the jobs table's columns (retired, state, user,
  // sweep_id, request_id, placement_seq), which PutJob fills; a file written
  // before they existed is given them (one pass parsing every record) by
  // Open().
  absl::StatusOr<StoredState> LoadSummarized() override;
  absl::StatusOr<std::vector<v1::Job>> ReadJobs(
      const std::vector<int64_t>& ids) override;
  // Kept in the `meta` table (key 'cluster_id'), made by Open() when the
  // file has none. No errors after a successful Open().
  absl::StatusOr<std::string> ClusterId() override;

 private:
  struct Db;
  // One queued write: a job or node record, a metric report or a generic
  // record.
  struct Write {
    enum class Kind { kJob, kNode, kMetrics, kRecord } kind = Kind::kJob;
    int64_t job_id = 0;
    std::string node_name;
    // kRecord: its kind and key (the value is `blob`).
    std::string record_kind;
    std::string record_key;
    std::string blob;
    // kJob: the summary columns (LoadSummarized).
    JobSummary summary;
    bool retired = false;
    std::vector<v1::MetricPoint> points;
  };
  // A failed commit: tickets in (after, upto] got `status`.
  struct Failed {
    WriteTicket after;
    WriteTicket upto;
    absl::Status status;
  };
  explicit SqliteStateStore(std::unique_ptr<Db> db);
  // Waits until every write queued so far has been committed (or failed),
  // so a read sees them.
  void Drain() ABSL_LOCKS_EXCLUDED(queue_mu_);
  // Load(), or without the jobs table when !with_jobs.
  absl::StatusOr<StoredState> LoadTables(bool with_jobs);

  // Queues `w`; a `lazy` write starts no commit by itself (see
  // EnqueuePutJobLazily).
  WriteTicket EnqueueLocked(Write w, bool lazy = false)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // EnqueuePutJob (or, when `lazy`, EnqueuePutJobLazily): serializes `job`
  // outside the lock and queues it. Errors: INVALID_ARGUMENT for id <= 0.
  absl::StatusOr<WriteTicket> EnqueueJob(const v1::Job& job, bool lazy)
      ABSL_LOCKS_EXCLUDED(queue_mu_);
  absl::Status StatusOfLocked(WriteTicket ticket) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // Whether the commit thread should commit now: stopping, or not held and
  // a write is queued that is not lazy, waited for (a callback or a Drain)
  // or lazy for lazy_flush_ already.
  bool HasWorkLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(queue_mu_);
  // The commit thread's loop; runs until `stopping_` and the queue is empty.
  void CommitLoop();
  // Writes `batch` in one transaction. Needs no queue_mu_.
  absl::Status CommitBatch(const std::vector<Write>& batch);

  // Lock order: queue_mu_ is never held while taking mu_.
  absl::Mutex queue_mu_;
  std::vector<Write> queue_ ABSL_GUARDED_BY(queue_mu_);
  // Where job ids / node names sit in queue_, for coalescing.
  absl::flat_hash_map<int64_t, size_t> queued_jobs_ ABSL_GUARDED_BY(queue_mu_);
  absl::flat_hash_map<std::string, size_t> queued_nodes_ ABSL_GUARDED_BY(queue_mu_);
  WriteTicket last_ticket_ ABSL_GUARDED_BY(queue_mu_) = 0;
  WriteTicket durable_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // The last ticket of a write that is not lazy.
  WriteTicket last_eager_ ABSL_GUARDED_BY(queue_mu_) = 0;
  // When the oldest lazy write now queued was queued; InfiniteFuture() when
  // none is.
  absl::Time oldest_lazy_ ABSL_GUARDED_BY(queue_mu_) = absl::InfiniteFuture();
  // Drain() calls waiting for a commit.
  int draining_ ABSL_GUARDED_BY(queue_mu_) = 0;
  absl::Duration lazy_flush_ ABSL_GUARDED_BY(queue_mu_) = kLazyFlush;
  // Callbacks waiting for a ticket, run in ticket order, then registration.
  absl::btree_multimap<WriteTicket, absl::AnyInvocable<void(absl::Status) &&>>
      callbacks_ ABSL_GUARDED_BY(queue_mu_);
  // The most recent failed commits (rare; kept bounded).
  std::vector<Failed> failed_ ABSL_GUARDED_BY(queue_mu_);
  CommitStats stats_ ABSL_GUARDED_BY(queue_mu_);
  bool stopping_ ABSL_GUARDED_BY(queue_mu_) = false;
  int holds_ ABSL_GUARDED_BY(queue_mu_) = 0;

  absl::Mutex mu_;
  std::unique_ptr<Db> db_ ABSL_GUARDED_BY(mu_);
  // Started last in Open, joined first in the destructor.
  std::thread committer_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_STATE_STORE_H_
