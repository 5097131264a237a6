#include "coordinator/etcd/etcd_state_store.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace trainctl::coord {
EtcdStateStore::EtcdStateStore(EtcdConnection* conn, std::string prefix,
                               std::optional<LeaderFence> fence, int64_t page_size)
    : conn_(conn),
      prefix_(std::move(prefix)),
      fence_(std::move(fence)),
      page_size_(page_size) {}

etcdserverpb::TxnRequest EtcdStateStore::FencedTxn() const {
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* cmp = txn.add_compare();
  cmp->set_result(etcdserverpb::Compare::EQUAL);
  cmp->set_target(etcdserverpb::Compare::CREATE);
  cmp->set_key(fence_->key);
  cmp->set_create_revision(fence_->create_revision);
  return txn;
}

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
  etcdserverpb::TxnRequest txn = FencedTxn();
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

absl::StatusOr<std::string> EtcdStateStore::ClusterId() {
  const std::string key = absl::StrCat(prefix_, "meta/cluster_id");
  grpc::ClientContext ctx;
  SetEtcdDeadline(&ctx);
  etcdserverpb::TxnRequest txn;
  etcdserverpb::Compare* absent = txn.add_compare();
  absent->set_result(etcdserverpb::Compare::EQUAL);
  absent->set_target(etcdserverpb::Compare::CREATE);
  absent->set_key(key);
  absent->set_create_revision(0);
  const std::string fresh = NewClusterId();
  etcdserverpb::PutRequest* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(fresh);
  txn.add_failure()->mutable_request_range()->set_key(key);
  etcdserverpb::TxnResponse resp;
  grpc::Status s = conn_->kv->Txn(&ctx, txn, &resp);
  if (!s.ok()) return EtcdError(s, absl::StrCat("read or create ", key));
  if (resp.succeeded()) return fresh;
  if (resp.responses_size() != 1 || resp.responses(0).response_range().kvs_size() != 1) {
    return absl::UnavailableError(absl::StrCat("etcd: ", key, " vanished while read"));
  }
  return resp.responses(0).response_range().kvs(0).value();
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
  return ForRange(prefix, PrefixRangeEnd(prefix), revision, on_value);
}

absl::Status EtcdStateStore::ForRange(
    const std::string& begin, const std::string& end, int64_t* revision,
    const std::function<absl::Status(const std::string&)>& on_value) {
  std::string from = begin;
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
    if (!s.ok()) return EtcdError(s, absl::StrCat("read ", begin));
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
  // Metric points per job, from the keys alone (keys_only ranges).
  const std::string mprefix = prefix_ + "metrics/";
  const std::string end = PrefixRangeEnd(mprefix);
  std::string from = mprefix;
  while (true) {
    etcdserverpb::RangeRequest req;
    req.set_key(from);
    req.set_range_end(end);
    req.set_limit(page_size_);
    req.set_revision(revision);
    req.set_keys_only(true);
    req.set_sort_order(etcdserverpb::RangeRequest::ASCEND);
    req.set_sort_target(etcdserverpb::RangeRequest::KEY);
    etcdserverpb::RangeResponse resp;
    grpc::ClientContext ctx;
    SetEtcdDeadline(&ctx);
    grpc::Status st = conn_->kv->Range(&ctx, req, &resp);
    if (!st.ok()) return EtcdError(st, absl::StrCat("read ", mprefix));
    for (const mvccpb::KeyValue& kv : resp.kvs()) {
      // <job>/<seq>/<points>
      std::vector<std::string> parts =
          absl::StrSplit(kv.key().substr(mprefix.size()), '/');
      int64_t job = 0, n = 0;
      if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &job) ||
          !absl::SimpleAtoi(parts[2], &n)) {
        return absl::DataLossError(absl::StrCat(kv.key(), ": not a metrics key"));
      }
      state.metric_points[job] += n;
    }
    if (!resp.more() || resp.kvs().empty()) break;
    from = resp.kvs(resp.kvs_size() - 1).key() + std::string(1, '\0');
  }
  return state;
}

absl::StatusOr<std::vector<v1::Job>> EtcdStateStore::ReadJobs(
    const std::vector<int64_t>& ids) {
  // Ids close together (a listing's page is mostly consecutive) are read as
  // one key range, so 1,000 jobs cost a few Range calls rather than 1,000.
  constexpr int64_t kMaxGap = 16;
  std::vector<int64_t> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  absl::flat_hash_set<int64_t> wanted(sorted.begin(), sorted.end());
  absl::flat_hash_map<int64_t, v1::Job> found;
  int64_t revision = 0;  // One snapshot for all the ranges.
  for (size_t i = 0; i < sorted.size();) {
    size_t j = i;
    while (j + 1 < sorted.size() && sorted[j + 1] - sorted[j] <= kMaxGap) ++j;
    absl::Status s = ForRange(
        absl::StrFormat("%sjobs/%020d", prefix_, sorted[i]),
        absl::StrFormat("%sjobs/%020d", prefix_, sorted[j] + 1), &revision,
        [&](const std::string& v) {
          v1::Job job;
          if (!job.ParseFromString(v)) return absl::DataLossError("job record does not parse");
          if (wanted.contains(job.id())) found[job.id()] = std::move(job);
          return absl::OkStatus();
        });
    if (!s.ok()) return s;
    i = j + 1;
  }
  std::vector<v1::Job> out;
  for (int64_t id : ids) {
    auto it = found.find(id);
    if (it != found.end()) out.push_back(it->second);
  }
  return out;
}

absl::Status EtcdStateStore::AppendMetrics(
    int64_t job_id, const std::vector<v1::MetricPoint>& points) {
  if (job_id <= 0) return absl::InvalidArgumentError("job_id must be > 0");
  for (const v1::MetricPoint& p : points) {
    if (p.key().empty()) return absl::InvalidArgumentError("metric key is empty");
  }
  if (points.empty()) return absl::OkStatus();
  int64_t seq;
  {
    absl::MutexLock lock(&seq_mu_);
    last_seq_ = std::max(last_seq_ + 1, absl::GetCurrentTimeNanos());
    seq = last_seq_;
  }
  v1::MetricBatch batch;
  batch.set_job_id(job_id);
  for (const v1::MetricPoint& p : points) *batch.add_points() = p;
  return Put(absl::StrFormat("%smetrics/%020d/%020d/%d", prefix_, job_id, seq,
                             points.size()),
             batch.SerializeAsString());
}

absl::StatusOr<std::vector<v1::MetricPoint>> EtcdStateStore::ReadMetrics(
    int64_t job_id, const std::string& key) {
  std::vector<v1::MetricPoint> out;
  int64_t revision = 0;
  absl::Status s = ForEach(absl::StrFormat("%smetrics/%020d/", prefix_, job_id),
                           &revision, [&](const std::string& v) {
                             v1::MetricBatch batch;
                             if (!batch.ParseFromString(v)) {
                               return absl::DataLossError("metric batch does not parse");
                             }
                             for (v1::MetricPoint& p : *batch.mutable_points()) {
                               if (key.empty() || p.key() == key) out.push_back(std::move(p));
                             }
                             return absl::OkStatus();
                           });
  if (!s.ok()) return s;
  // By key, then in append order (the keys' order).
  std::stable_sort(out.begin(), out.end(),
                   [](const v1::MetricPoint& a, const v1::MetricPoint& b) {
                     return a.key() < b.key();
                   });
  return out;
}

absl::Status EtcdStateStore::PutRecord(const std::string& kind, const std::string& key,
                                       const std::string& value) {
  if (absl::Status s = CheckRecordKey(kind, key); !s.ok()) return s;
  return Put(absl::StrCat(prefix_, "records/", kind, "/", key), value);
}

absl::StatusOr<int64_t> EtcdStateStore::DeleteRecordsBefore(const std::string& kind,
                                                            const std::string& before_key) {
  if (absl::Status s = CheckRecordKey(kind, "x"); !s.ok()) return s;
  if (before_key.empty()) return 0;
  const std::string base = absl::StrCat(prefix_, "records/", kind, "/");
  etcdserverpb::DeleteRangeRequest del;
  del.set_key(base);
  del.set_range_end(base + before_key);
  const std::string what = absl::StrCat("delete ", base, " before ", before_key);
  grpc::ClientContext ctx;
  SetEtcdDeadline(&ctx);
  if (!fence_.has_value()) {
    etcdserverpb::DeleteRangeResponse resp;
    grpc::Status s = conn_->kv->DeleteRange(&ctx, del, &resp);
    if (!s.ok()) return EtcdError(s, what);
    return resp.deleted();
  }
  etcdserverpb::TxnRequest txn = FencedTxn();
  *txn.add_success()->mutable_request_delete_range() = std::move(del);
  etcdserverpb::TxnResponse resp;
  grpc::Status s = conn_->kv->Txn(&ctx, txn, &resp);
  if (!s.ok()) return EtcdError(s, what);
  if (!resp.succeeded()) {
    return absl::UnavailableError(absl::StrCat(
        what, ": this coordinator is no longer the leader (its election key ", fence_->key,
        " is gone); nothing was deleted"));
  }
  return resp.responses(0).response_delete_range().deleted();
}

absl::StatusOr<std::vector<StoredRecord>> EtcdStateStore::ReadRecords(
    const std::string& kind, const RecordQuery& query) {
  if (absl::Status s = CheckRecordKey(kind, "x"); !s.ok()) return s;
  if (query.limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit: must not be negative, got ", query.limit));
  }
  const std::string base = absl::StrCat(prefix_, "records/", kind, "/");
  const std::string end = PrefixRangeEnd(base);
  std::vector<StoredRecord> out;
  int64_t revision = 0;
  std::string from = base + query.from_key;
  std::string to = end;
  // Ascending pages (newest_first: descending ones, each below the last key
  // read) until the limit or the end of the range.
  while (true) {
    etcdserverpb::RangeRequest req;
    req.set_key(from);
    req.set_range_end(to);
    int64_t page = page_size_;
    if (query.limit > 0) {
      page = std::min<int64_t>(page, query.limit - static_cast<int64_t>(out.size()));
    }
    req.set_limit(page);
    req.set_revision(revision);
    req.set_sort_order(query.newest_first ? etcdserverpb::RangeRequest::DESCEND
                                          : etcdserverpb::RangeRequest::ASCEND);
    req.set_sort_target(etcdserverpb::RangeRequest::KEY);
    etcdserverpb::RangeResponse resp;
    grpc::ClientContext ctx;
    SetEtcdDeadline(&ctx);
    grpc::Status s = conn_->kv->Range(&ctx, req, &resp);
    if (!s.ok()) return EtcdError(s, absl::StrCat("read ", base));
    if (revision == 0) revision = resp.header().revision();
    for (const mvccpb::KeyValue& kv : resp.kvs()) {
      out.push_back({kv.key().substr(base.size()), kv.value()});
    }
    if (!resp.more() || resp.kvs().empty()) break;
    if (query.limit > 0 && static_cast<int64_t>(out.size()) >= query.limit) break;
    const std::string& last = resp.kvs(resp.kvs_size() - 1).key();
    if (query.newest_first) {
      to = last;  // [from, last): below what was read
    } else {
      from = last + std::string(1, '\0');
    }
  }
  return out;
}

}  // namespace trainctl::coord
