#ifndef TRAINCTL_COORDINATOR_ACCOUNTING_H_
#define TRAINCTL_COORDINATOR_ACCOUNTING_H_

// Accounting (docs/design.md, "Accounting"): GPU-hours by user, project,
// queue, GPU type and node, allocated and used, like Slurm's sreport(1) but
// with the GPU activity trainctl samples next to the allocation; and a
// per-attempt history like Slurm's sacct(1).
//
// One durable record per ended attempt (v1::UsageRecord, StateStore records
// of kind "acct", key "<end ms>-<job id>-<attempt>", zero-padded, so a time
// range is one key-range read), written when the Coordinator hands the
// attempt in (Record). Records outlive the jobs: a finished job leaves the
// Coordinator's memory (JobTable retires it), its records stay.
//
// Usage queries answer from rollups in memory, rebuilt from the records at
// Open and kept up by Record: per hour (and per day), per (user, project,
// queue, GPU type, node) key, the allocated and used GPU-ms in that hour and
// the counts of attempts that ended in it; plus, per hour, the slices that
// start or end inside it. A window's whole days and hours are summed from
// the rollups; its partial
// hours at the edges are computed exactly from those slices and the rate of
// the slices that span the hour, so edges are exact to the millisecond, not
// hour-granular. An attempt that straddles an edge counts its overlap:
// allocated = GPUs x overlap; used = the attempt's used x overlap / its
// duration (the same fraction: samples are not kept per instant).
//
// Memory: one rollup cell (about 65 bytes) per (hour, key) an attempt
// touches, one per (day, key), two edge slices (40 bytes each) per slice,
// and the interned keys. bench/accounting_bench.cc's 1 M attempts, almost
// each its own (user, project, queue, GPU type, node) key, 6 h long on
// average, take about 1.1 GB; fewer distinct keys take less. Retention
// (Prune) bounds it: the hours and days before the horizon leave memory and
// the records of attempts that ended before it leave the store.
//
// No clock inside: "now" comes in as an argument. Thread-safe: `mu_` guards
// the rollups (queries take it shared); store writes and the history's
// reads run without it. Lock order: the Coordinator's lock is never held
// while calling in (the Coordinator calls Record from its deferred work).

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/state_store.h"
#include "coordinator/usage_record.h"
#include "trainctl/v1/accounting.pb.h"

namespace trainctl::coord {

// What GetUsage groups by.
enum class UsageBy { kUser, kProject, kQueue, kGpuType, kNode };

// "user" (and ""), "project", "queue", "gpu-type" (or "gpu_type") or "node".
// Errors: INVALID_ARGUMENT naming "by" and the accepted values.
absl::StatusOr<UsageBy> ParseUsageBy(absl::string_view by);

// The canonical name of `by` ("gpu-type" for kGpuType).
std::string UsageByName(UsageBy by);

// A usage query over [since_ms, until_ms) (Unix ms).
struct UsageQuery {
  UsageBy by = UsageBy::kUser;
  int64_t since_ms = 0;
  int64_t until_ms = 0;
  // Only this user's attempts; empty: every user's.
  std::string only_user;
};

// A history query: the attempts that overlap [since_ms, until_ms) (an
// attempt of zero length counts when its end is inside).
struct HistoryQuery {
  int64_t since_ms = 0;
  int64_t until_ms = 0;
  // Only this user's; empty: all.
  std::string user;
  // Only this outcome (ParseHistoryState); empty: all.
  std::string state;
  // Records per page handed to `emit` (1..kMaxPageSize).
  int page_size = 1000;
};

class Accounting {
 public:
  // The StateStore record kind of the attempts.
  static constexpr char kRecordKind[] = "acct";
  // ListHistory's largest page.
  static constexpr int kMaxPageSize = 10000;
  // Rollup granularity: one hour, ms.
  static constexpr int64_t kBucketMs = 3600 * 1000;

  // Rebuilds the rollups from every record kept in `store` (not owned; must
  // outlive this), reading it in pages. Errors: DATA_LOSS for a record that
  // does not parse; those of StateStore::ReadRecords.
  static absl::StatusOr<std::unique_ptr<Accounting>> Open(StateStore* store);

  // The record key of an attempt: "<end ms, 20 digits>-<job id, 20 digits>-
  // <attempt, 10 digits>".
  static std::string Key(int64_t end_time_ms, int64_t job_id, int attempt);

  // Stores `record` (an ended attempt) and adds it to the rollups. Queued
  // (StateStore::EnqueuePutRecord): never blocks on I/O, so the Coordinator
  // may call it from its deferred work; `done` (when set) gets the write's
  // outcome once durable. Recording the same attempt again replaces the
  // store's record but counts twice in memory until the next Open: callers
  // hand each attempt in once.
  // Errors (nothing stored or counted): INVALID_ARGUMENT naming the field
  // for job_id <= 0, a negative attempt or start, end before start, a
  // negative or non-finite gpus / GPU-seconds; those of EnqueuePutRecord.
  absl::Status Record(const v1::UsageRecord& record,
                      std::function<void(absl::Status)> done = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // GPU-hours allocated and used per group over the window, largest
  // allocation first, with the window's total (v1::GetUsageResponse).
  // Cost: O(keys active per hour x hours in the window + slices starting or
  // ending in the two edge hours).
  // Errors: INVALID_ARGUMENT naming since_ms / until_ms when since_ms is
  // negative or until_ms <= since_ms; OUT_OF_RANGE naming since_ms when it
  // is before kept_since_ms() (retention deleted what it would sum).
  absl::StatusOr<v1::GetUsageResponse> Usage(const UsageQuery& query) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Where a history listing has got to (HistoryPage); start with {}.
  struct HistoryCursor {
    bool started = false;
    // No more pages.
    bool done = false;
    std::string from_key;
    int64_t stop_end_ms = 0;
  };

  // OK when `query` is a valid history query. Errors: INVALID_ARGUMENT
  // naming since_ms / until_ms (bad window), state, or page_size (not
  // 1..kMaxPageSize).
  static absl::Status CheckHistory(const HistoryQuery& query);

  // The next page of the history: reads at most query.page_size records
  // from the store at `cursor` and returns those that match (oldest end
  // first; possibly none while cursor.done is false), advancing `cursor`.
  // Memory is bounded by one page, whatever the range.
  // Errors: those of CheckHistory; OUT_OF_RANGE as Usage's; DATA_LOSS for a
  // record that does not parse; those of StateStore::ReadRecords.
  absl::StatusOr<v1::ListHistoryResponse> HistoryPage(const HistoryQuery& query,
                                                     HistoryCursor& cursor) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Calls `emit` with each non-empty page (HistoryPage) in turn. Stops
  // early, OK, when `emit` returns false (the client went away).
  // Errors: those of HistoryPage.
  absl::Status History(const HistoryQuery& query,
                       absl::FunctionRef<bool(const v1::ListHistoryResponse&)> emit) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Attempts counted in the rollups.
  int64_t records() const ABSL_LOCKS_EXCLUDED(mu_);

  // Retention (trainctl-coordinator --accounting-retention): from now on
  // Usage and History refuse windows that start before `before_ms` (Unix
  // ms), whose sums would miss what goes; the rollups' hours and days wholly
  // before it leave memory; and the records of attempts that ended before
  // it are deleted from the store, the oldest first, at most `max_records`
  // in one delete (StateStore::DeleteRecordsBefore), so a long history goes
  // in short transactions. An attempt that ended after `before_ms` stays
  // whole, however early it started. Returns how many records went
  // (max_records: call again for more). Errors: INVALID_ARGUMENT for a
  // negative before_ms or max_records < 1; those of ReadRecords and
  // DeleteRecordsBefore (nothing deleted).
  absl::StatusOr<int64_t> Prune(int64_t before_ms, int64_t max_records)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The start of what is kept, Unix ms: the latest Prune's before_ms (0:
  // everything since the first record).
  int64_t kept_since_ms() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What a rollup key is: the grouping values and which counts it carries.
  struct KeyInfo {
    std::string user, project, queue, gpu_type, node;
    // Bit 0: the attempt's first slice (counts for user/project/queue and
    // the total); bit 1: the first slice of its GPU type; bit 2: always
    // (one slice per node).
    uint8_t mask = 0;
  };
  // One node's part of an attempt, as the edge hours need it.
  struct Slice {
    int64_t start_ms = 0;
    int64_t end_ms = 0;
    // GPUs, and used GPU-ms per ms of the attempt.
    double alloc_rate = 0;
    double used_rate = 0;
    uint32_t key = 0;
    // Counts this slice carries when its end is in the window.
    uint8_t job_ended = 0, failed = 0, preempted = 0;
  };
  // One (hour, key) cell.
  struct Cell {
    // GPU-ms in this hour.
    double alloc_ms = 0;
    double used_ms = 0;
    // Rates of the slices that span the whole hour (GPUs, used per ms).
    double span_alloc = 0;
    double span_used = 0;
    // Slices that ended in this hour.
    int32_t attempts = 0, jobs = 0, failed = 0, preempted = 0;
  };
  // One (day, key) cell: the sums of its 24 hours' cells.
  struct DayCell {
    double alloc_ms = 0;
    double used_ms = 0;
    int32_t attempts = 0, jobs = 0, failed = 0, preempted = 0;
  };
  struct Hour {
    absl::flat_hash_map<uint32_t, Cell> cells;
    // Slices that start or end inside this hour (or end at its start).
    std::vector<Slice> edges;
  };
  // Per-key sums of a query.
  struct Sum {
    double alloc_ms = 0, used_ms = 0;
    int64_t attempts = 0, jobs = 0, failed = 0, preempted = 0;
  };

  explicit Accounting(StateStore* store) : store_(store) {}
  void AddLocked(const v1::UsageRecord& record) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t InternLocked(KeyInfo info) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OUT_OF_RANGE naming since_ms when `since_ms` is before kept_since_ms_.
  absl::Status CheckKeptLocked(int64_t since_ms) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Adds [a, b) (inside one hour) of `hour` to `sums`.
  static void AddPartial(const Hour& hour, int64_t a, int64_t b, std::vector<Sum>& sums);

  StateStore* const store_;
  mutable absl::Mutex mu_;
  std::vector<KeyInfo> keys_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, uint32_t> key_ids_ ABSL_GUARDED_BY(mu_);
  // Hour index (ms / kBucketMs) -> its cells and edge slices.
  absl::btree_map<int64_t, Hour> hours_ ABSL_GUARDED_BY(mu_);
  // Day index (hour index / 24) -> its cells: a window's whole days are
  // summed from these, its other whole hours from hours_.
  absl::btree_map<int64_t, absl::flat_hash_map<uint32_t, DayCell>> days_ ABSL_GUARDED_BY(mu_);
  // The longest attempt seen, ms: History scans by end time up to
  // until + this.
  int64_t max_duration_ms_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t records_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t kept_since_ms_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace trainctl::coord

#endif  // TRAINCTL_COORDINATOR_ACCOUNTING_H_
