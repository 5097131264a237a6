#include "coordinator/etcd/etcd_state_store.h"

#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainctl::coord {
EtcdStateStore::EtcdStateStore(EtcdConnection* conn, std::string prefix,
                               std::optional<LeaderFence> fence, int64_t page_size)
    : conn_(conn),
      prefix_(std::move(prefix)),
      fence_(std::move(fence)),
      page_size_(page_size) {}

absl::Status EtcdStateStore::Put(const std::string& key, const std::string& value) {
  grpc::ClientContext ctx;
  SetEtcdDeadline(&ctx);
  if (!fence_.has_value()) {
    etcdserverpb::PutRequest req;
    req.set_key(key);
    req.set_value(value);
    etcdserverpb::PutResponse resp;
    grpc::Status s = conn_->kv->Put(&ctx, req, &resp);
    return s.ok() ? absl::OkStatus() : EtcdError(s, absl::StrCat("put ", key));
  }
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* cmp = txn.add_compare();
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_key(fence_->key);
  cmp->set_create_revision(fence_->create_revision);
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  etcdserverpb::TxnResponse resp;
  grpc::Status s = conn_->kv->Txn(&ctx, txn, &resp);
  if (!s.ok()) return EtcdError(s, absl::StrCat("put ", key));
  if (!resp.succeeded()) {
    return absl::UnavailableError(absl::StrCat(
        "put ", key, ": this coordinator is no longer the leader (its election key ",
        fence_->key, " is gone); nothing was written"));
  }
  return absl::OkStatus();
}

absl::Status EtcdStateStore::PutJob(const v1::Job& job) {
  if (job.id() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("job id must be > 0, got ", job.id()));
  }
  return Put(absl::StrFormat("%sjobs/%020d", prefix_, job.id()), job.SerializeAsString());
}

absl::Status EtcdStateStore::PutNode(const v1::Node& node) {
  if (node.name().empty()) return absl::InvalidArgumentError("node name is empty");
  return Put(absl::StrCat(prefix_, "nodes/", node.name()), node.SerializeAsString());
}

absl::Status EtcdStateStore::ForEach(
    const std::string& prefix, int64_t* revision,
    const std::function<absl::Status(const std::string&)>& on_value) {
  const std::string end = PrefixRangeEnd(prefix);
  std::string from = prefix;
  while (true) {
    etcdserverpb::RangeRequest req;
    req.set_key(from);
    req.set_range_end(end);
    req.set_limit(page_size_);
    req.set_revision(*revision);
    req.set_sort_order(etcdserverpb::RangeRequest::ASCEND);
    req.set_sort_target(etcdserverpb::RangeRequest::KEY);
    etcdserverpb::RangeResponse resp;
    grpc::ClientContext ctx;
    SetEtcdDeadline(&ctx);
    grpc::Status s = conn_->kv->Range(&ctx, req, &resp);
    if (!s.ok()) return EtcdError(s, absl::StrCat("read ", prefix));
    if (*revision == 0) *revision = resp.header().revision();
    for (const mvccpb::KeyValue& kv : resp.kvs()) {
      absl::Status st = on_value(kv.value());
      if (!st.ok()) return absl::DataLossError(absl::StrCat(kv.key(), ": ", st.message()));
    }
    if (!resp.more() || resp.kvs().empty()) return absl::OkStatus();
    from = resp.kvs(resp.kvs_size() - 1).key() + std::string(1, '\0');
  }
}

absl::StatusOr<StoredState> EtcdStateStore::Load() {
  StoredState state;
  int64_t revision = 0;
  absl::Status s = ForEach(prefix_ + "jobs/", &revision, [&](const std::string& v) {
    v1::Job job;
    if (!job.ParseFromString(v)) return absl::DataLossError("job record does not parse");
    state.jobs.push_back(std::move(job));
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  s = ForEach(prefix_ + "nodes/", &revision, [&](const std::string& v) {
    v1::Node node;
    if (!node.ParseFromString(v)) return absl::DataLossError("node record does not parse");
    state.nodes.push_back(std::move(node));
    return absl::OkStatus();
  });
  if (!s.ok()) return s;
  return state;
}

}  // namespace trainctl::coord
