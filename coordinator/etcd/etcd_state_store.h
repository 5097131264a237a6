#ifndef TRAINCTL_COORDINATOR_ETCD_ETCD_STATE_STORE_H_
#define TRAINCTL_COORDINATOR_ETCD_ETCD_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/etcd/etcd_client.h"
#include "coordinator/state_store.h"

namespace trainctl::coord {

// The leader's proof of leadership: the key its Campaign created and that
// key's creation revision (etcd election API). A write fenced by it commits
// only while that very key still exists, so a deposed leader that has not
// noticed yet cannot overwrite its successor's state (Kleppmann's fencing
// token, with the revision as the token).
struct LeaderFence {
  std::string key;
  int64_t create_revision = 0;
};

// StateStore on etcd v3 (the HA backend): one key per record under
// `prefix` — `<prefix>jobs/<id, 20 digits>` and `<prefix>nodes/<name>` —
// holding the serialized protobuf. A Put returns once etcd has committed it
// through Raft on a majority of members (etcd's durability: each member
// fsyncs its WAL before acknowledging), so an acknowledged mutation survives
// the loss of a minority of members and any coordinator crash.
// Metric points: one key per report, `<prefix>metrics/<job id, 20 digits>/
// <sequence, 20 digits>/<points>` holding a MetricBatch, so a report is one
// (fenced) write and Load counts a job's points from the keys alone. The
// sequence is the writer's clock in ns, forced to increase within the
// process; after a leader change the new leader's reports sort after the old
// ones unless its clock is behind.
class EtcdStateStore : public StateStore {
 public:
  // `conn` must outlive the store. With a fence, every write is a
  // transaction conditional on the fence key; without one (tests, single
  // coordinator on etcd) writes are plain puts.
  // `page_size` bounds the keys read per Range call in Load.
  EtcdStateStore(EtcdConnection* conn, std::string prefix,
                 std::optional<LeaderFence> fence, int64_t page_size = 1000);

  // Errors (both): INVALID_ARGUMENT for id <= 0 / empty name; UNAVAILABLE
  // when etcd did not commit the write in time, or when the fence key is gone
  // (this coordinator is no longer the leader: nothing is written).
  absl::Status PutJob(const v1::Job& job) override;
  absl::Status PutNode(const v1::Node& node) override;

  // Reads every job (in id order) and node, in pages of `page_size` keys, all at one
  // etcd revision (a consistent snapshot). Errors: DATA_LOSS for a record
  // that does not parse; UNAVAILABLE when etcd does not answer.
  absl::StatusOr<StoredState> Load() override;

  // Ids at most 16 apart are read as one key range (ids are fixed-width
  // keys, so key order is id order), all ranges at one revision; a page of
  // ListJobs is a few Range calls. LoadSummarized is the
  // default: Load() and a split (etcd keeps no summary columns; an HA
  // coordinator still parses every record at start, but keeps only the
  // summaries of retired jobs in memory afterwards).
  // Errors: UNAVAILABLE when etcd does not answer; DATA_LOSS for a record
  // that does not parse.
  absl::StatusOr<std::vector<v1::Job>> ReadJobs(
      const std::vector<int64_t>& ids) override;

  // Errors: as PutJob; INVALID_ARGUMENT for job_id <= 0 or an empty key.
  absl::Status AppendMetrics(int64_t job_id,
                             const std::vector<v1::MetricPoint>& points) override;
  // Errors: UNAVAILABLE when etcd does not answer; DATA_LOSS for a batch
  // that does not parse.
  absl::StatusOr<std::vector<v1::MetricPoint>> ReadMetrics(
      int64_t job_id, const std::string& key) override;

  // Records: one key per record, `<prefix>records/<kind>/<key>`, a (fenced)
  // put each. ReadRecords reads them at one revision, in pages of
  // `page_size` (newest_first with a limit: one descending range).
  // DeleteRecordsBefore is one (fenced) DeleteRange. Errors: as PutJob's;
  // ReadRecords' as ReadMetrics'.
  absl::Status PutRecord(const std::string& kind, const std::string& key,
                         const std::string& value) override;
  absl::StatusOr<std::vector<StoredRecord>> ReadRecords(
      const std::string& kind, const RecordQuery& query) override;
  absl::StatusOr<int64_t> DeleteRecordsBefore(const std::string& kind,
                                              const std::string& before_key) override;

  // `<prefix>meta/cluster_id`, created by the first coordinator that asks
  // (one transaction: create if absent, else read), so every coordinator of
  // an HA group sends the same id. Errors: UNAVAILABLE when etcd does not
  // answer.
  absl::StatusOr<std::string> ClusterId() override;

 private:
  absl::Status Put(const std::string& key, const std::string& value);
  // A transaction whose success branch runs only while fence_ (set) still
  // holds: its key exists with the creation revision we campaigned with.
  etcdserverpb::TxnRequest FencedTxn() const;
  // Calls `on_value(value)` for every key under `prefix`, at `revision`
  // (0: the latest; set to the revision read).
  absl::Status ForEach(const std::string& prefix, int64_t* revision,
                       const std::function<absl::Status(const std::string&)>& on_value);
  // The same over the keys in [begin, end).
  absl::Status ForRange(const std::string& begin, const std::string& end,
                        int64_t* revision,
                        const std::function<absl::Status(const std::string&)>& on_value);

  EtcdConnection* conn_;
  std::string prefix_;
  std::optional<LeaderFence> fence_;
  int64_t page_size_;
  absl::Mutex seq_mu_;
  int64_t last_seq_ ABSL_GUARDED_BY(seq_mu_) = 0;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_ETCD_ETCD_STATE_STORE_H_
