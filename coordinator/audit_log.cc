#include "coordinator/audit_log.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "google/protobuf/util/json_util.h"

namespace trainctl::coord {

std::string AuditKey(int64_t time_ms, int64_t seq) {
  return absl::StrFormat("%020d-%020d", time_ms, seq);
}

std::string AuditJson(const v1::AuditEvent& event) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.always_print_primitive_fields = true;
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(event, &json, options).ok()) {
    return event.ShortDebugString();  // unreachable for this message
  }
  return json;
}

namespace {

// Logs `event` once its write ended with `status`.
void LogEvent(const v1::AuditEvent& event, const absl::Status& status) {
  if (status.ok()) {
    TC_LOG_INFO("audit {}", AuditJson(event));
  } else {
    TC_LOG_ERROR("audit {} (not stored: {})", AuditJson(event), status.ToString());
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(StateStore* store) {
  RecordQuery newest;
  newest.limit = 1;
  newest.newest_first = true;
  absl::StatusOr<std::vector<StoredRecord>> last = store->ReadRecords(kRecordKind, newest);
  if (!last.ok()) return last.status();
  auto log = std::unique_ptr<AuditLog>(new AuditLog(store));
  if (!last->empty()) {
    v1::AuditEvent event;
    if (!event.ParseFromString(last->front().value)) {
      return absl::DataLossError(
          absl::StrCat("audit log: record ", last->front().key, " does not parse"));
    }
    absl::MutexLock lock(&log->mu_);
    log->last_seq_ = event.seq();
    log->last_time_ms_ = event.time_ms();
  }
  return log;
}

v1::AuditEvent AuditLog::Next(absl::string_view who, absl::string_view action,
                              absl::string_view target, absl::string_view detail,
                              absl::Time now) {
  v1::AuditEvent event;
  {
    absl::MutexLock lock(&mu_);
    last_time_ms_ = std::max(last_time_ms_, absl::ToUnixMillis(now));
    event.set_seq(++last_seq_);
    event.set_time_ms(last_time_ms_);
  }
  event.set_who(std::string(who));
  event.set_action(std::string(action));
  event.set_target(std::string(target));
  event.set_detail(std::string(detail));
  return event;
}

absl::StatusOr<v1::AuditEvent> AuditLog::Record(absl::string_view who,
                                                absl::string_view action,
                                                absl::string_view target,
                                                absl::string_view detail, absl::Time now) {
  if (action.empty()) return absl::InvalidArgumentError("action: empty");
  v1::AuditEvent event = Next(who, action, target, detail, now);
  absl::Status s = store_->PutRecord(kRecordKind, AuditKey(event.time_ms(), event.seq()),
                                     event.SerializeAsString());
  LogEvent(event, s);
  if (!s.ok()) return s;
  return event;
}

void AuditLog::RecordAsync(absl::string_view who, absl::string_view action,
                           absl::string_view target, absl::string_view detail,
                           absl::Time now,
                           absl::AnyInvocable<void(absl::StatusOr<v1::AuditEvent>) &&> done) {
  if (action.empty()) {
    std::move(done)(absl::InvalidArgumentError("action: empty"));
    return;
  }
  v1::AuditEvent event = Next(who, action, target, detail, now);
  absl::StatusOr<WriteTicket> ticket = store_->EnqueuePutRecord(
      kRecordKind, AuditKey(event.time_ms(), event.seq()), event.SerializeAsString());
  if (!ticket.ok()) {
    LogEvent(event, ticket.status());
    std::move(done)(ticket.status());
    return;
  }
  store_->WhenDurable(*ticket, [event = std::move(event),
                                done = std::move(done)](absl::Status s) mutable {
    LogEvent(event, s);
    if (s.ok()) {
      std::move(done)(std::move(event));
    } else {
      std::move(done)(std::move(s));
    }
  });
}

absl::StatusOr<int64_t> AuditLog::Prune(absl::Time before, int64_t max_events) const {
  if (max_events < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_events: must be at least 1, got ", max_events));
  }
  RecordQuery newest;
  newest.limit = 1;
  newest.newest_first = true;
  absl::StatusOr<std::vector<StoredRecord>> last = store_->ReadRecords(kRecordKind, newest);
  if (!last.ok()) return last.status();
  if (last->empty()) return 0;
  return DeleteOldestRecordsBefore(
      *store_, kRecordKind,
      std::min(AuditKey(std::max<int64_t>(0, absl::ToUnixMillis(before)), 0), last->front().key),
      max_events);
}

absl::StatusOr<std::vector<v1::AuditEvent>> AuditLog::List(absl::Time since,
                                                           int limit) const {
  if (limit < 0 || limit > kMaxLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "limit: must be 0 (", kDefaultLimit, ") to ", kMaxLimit, ", got ", limit));
  }
  RecordQuery query;
  query.newest_first = true;
  query.limit = limit == 0 ? kDefaultLimit : limit;
  if (since != absl::InfinitePast()) {
    query.from_key = AuditKey(std::max<int64_t>(0, absl::ToUnixMillis(since)), 0);
  }
  absl::StatusOr<std::vector<StoredRecord>> records =
      store_->ReadRecords(kRecordKind, query);
  if (!records.ok()) return records.status();
  std::vector<v1::AuditEvent> events;
  events.reserve(records->size());
  for (auto r = records->rbegin(); r != records->rend(); ++r) {
    if (!events.emplace_back().ParseFromString(r->value)) {
      return absl::DataLossError(absl::StrCat("audit log: record ", r->key, " does not parse"));
    }
  }
  return events;
}

}  // namespace trainctl::coord
