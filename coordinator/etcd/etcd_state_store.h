#ifndef TRAINCTL_COORDINATOR_ETCD_ETCD_STATE_STORE_H_
#define TRAINCTL_COORDINATOR_ETCD_ETCD_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
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

 private:
  absl::Status Put(const std::string& key, const std::string& value);
  // Calls `on_value(value)` for every key under `prefix`, at `revision`
  // (0: the latest; set to the revision read).
  absl::Status ForEach(const std::string& prefix, int64_t* revision,
                       const std::function<absl::Status(const std::string&)>& on_value);

  EtcdConnection* conn_;
  std::string prefix_;
  std::optional<LeaderFence> fence_;
  int64_t page_size_;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_ETCD_ETCD_STATE_STORE_H_
