#ifndef TRAINCTL_COORDINATOR_AUDIT_LOG_H_
#define TRAINCTL_COORDINATOR_AUDIT_LOG_H_

// The audit trail of admin actions (docs/design.md §6): who did what to
// what, when. Each event is a durable record (StateStore records of kind
// "audit") and one structured log line, `audit {...}` with the event as
// protobuf JSON, so it reaches both `trainctl audit` and the log shipper.
//
// Events are numbered 1, 2, 3... (AuditEvent.seq) in the order Record was
// called; a failed write leaves a gap. Their record key is the event's time
// then its seq, both zero-padded, so "the newest N since T" is one key-range
// read. An event's time never goes back (a clock stepped back reads as the
// last event's time), so time order is seq order.
//
// No clock inside: Record takes `now`. Thread-safe: `mu_` guards the
// numbering; the store write is done without it, so concurrent events share
// SQLite's group commit.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/state_store.h"
#include "trainctl/v1/auth.pb.h"

namespace trainctl::coord {

class AuditLog {
 public:
  // The StateStore record kind of the events.
  static constexpr char kRecordKind[] = "audit";
  // ListAudit's limit when none is given, and the most it returns.
  static constexpr int kDefaultLimit = 1000;
  static constexpr int kMaxLimit = 100000;

  // Continues the numbering of the events kept in `store` (not owned; must
  // outlive the log). Errors: DATA_LOSS when the newest record does not
  // parse; those of StateStore::ReadRecords.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(StateStore* store);

  // Records that `who` ("" without authentication) did `action` (e.g.
  // "token.revoke", "node.drain") to `target` (a token id, node names, a job
  // id) at `now`, with `detail` in words; returns the event once durable,
  // after logging its line. Blocks until the write is durable: never call it
  // from a StateStore WhenDurable callback (use RecordAsync there).
  // Errors: INVALID_ARGUMENT when `action` is empty; UNAVAILABLE / INTERNAL
  // when the write failed (the line is then logged as an error, with the
  // event, so it is not lost from the log).
  absl::StatusOr<v1::AuditEvent> Record(absl::string_view who, absl::string_view action,
                                        absl::string_view target, absl::string_view detail,
                                        absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // As Record, without blocking: queues the write (StateStore::
  // EnqueuePutRecord) and calls `done` with the event or the error once it
  // is durable (inline, or from the store's commit thread). Safe from a
  // WhenDurable callback.
  void RecordAsync(absl::string_view who, absl::string_view action,
                   absl::string_view target, absl::string_view detail, absl::Time now,
                   absl::AnyInvocable<void(absl::StatusOr<v1::AuditEvent>) &&> done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The events at or after `since` (InfinitePast(): all), oldest first; at
  // most `limit` of them, the newest (0: kDefaultLimit).
  // Errors: INVALID_ARGUMENT for a negative limit or one over kMaxLimit;
  // those of StateStore::ReadRecords; DATA_LOSS for a record that does not
  // parse.
  absl::StatusOr<std::vector<v1::AuditEvent>> List(absl::Time since, int limit) const;

  // Retention (trainctl-coordinator --audit-retention): deletes the oldest
  // events older than `before`, at most `max_events` of them in one store
  // delete (StateStore::DeleteRecordsBefore), so a long trail goes in short
  // transactions that hold other writes back only briefly. The newest event
  // always stays, so a restart continues the numbering from it. Returns how
  // many went (max_events: call again for more). Errors: INVALID_ARGUMENT
  // for max_events < 1; those of ReadRecords and DeleteRecordsBefore (then
  // nothing was deleted).
  absl::StatusOr<int64_t> Prune(absl::Time before, int64_t max_events) const;

 private:
  explicit AuditLog(StateStore* store) : store_(store) {}
  // The next event (seq, time) of `now`.
  v1::AuditEvent Next(absl::string_view who, absl::string_view action,
                      absl::string_view target, absl::string_view detail, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  StateStore* const store_;
  absl::Mutex mu_;
  int64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_time_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

// The record key of an event: "<time_ms, 20 digits>-<seq, 20 digits>".
std::string AuditKey(int64_t time_ms, int64_t seq);

// `event` as one line of protobuf JSON (proto field names, no whitespace).
std::string AuditJson(const v1::AuditEvent& event);

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_AUDIT_LOG_H_
