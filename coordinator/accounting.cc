#include "coordinator/accounting.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"

namespace trainctl::coord {
namespace {

constexpr uint8_t kFirstSlice = 1;
constexpr uint8_t kFirstOfType = 2;
constexpr uint8_t kEverySlice = 4;

// Floor division for possibly negative times.
int64_t HourOf(int64_t ms) {
  int64_t h = ms / Accounting::kBucketMs;
  if (ms % Accounting::kBucketMs < 0) --h;
  return h;
}

// The day of an hour index.
int64_t DayOf(int64_t hour) {
  int64_t d = hour / 24;
  if (hour % 24 < 0) --d;
  return d;
}

bool Finite(double v) { return std::isfinite(v) && v >= 0; }

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool JobEnded(v1::AttemptOutcome o) {
  return o == v1::ATTEMPT_OUTCOME_SUCCEEDED || o == v1::ATTEMPT_OUTCOME_FAILED ||
         o == v1::ATTEMPT_OUTCOME_CANCELLED || o == v1::ATTEMPT_OUTCOME_STOPPED_EARLY;
}

absl::Status CheckWindow(int64_t since_ms, int64_t until_ms) {
  if (since_ms < 0) return Invalid("since_ms", absl::StrCat("must not be negative, got ", since_ms));
  if (until_ms <= since_ms) {
    return Invalid("until_ms", absl::StrCat("must be after since_ms (", since_ms, "), got ",
                                            until_ms));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<UsageBy> ParseUsageBy(absl::string_view by) {
  const std::string b = absl::AsciiStrToLower(by);
  if (b.empty() || b == "user") return UsageBy::kUser;
  if (b == "project") return UsageBy::kProject;
  if (b == "queue") return UsageBy::kQueue;
  if (b == "gpu-type" || b == "gpu_type") return UsageBy::kGpuType;
  if (b == "node") return UsageBy::kNode;
  return Invalid("by", absl::StrCat("\"", by, "\" is not one of user, project, queue, gpu-type, node"));
}

std::string UsageByName(UsageBy by) {
  switch (by) {
    case UsageBy::kUser:
      return "user";
    case UsageBy::kProject:
      return "project";
    case UsageBy::kQueue:
      return "queue";
    case UsageBy::kGpuType:
      return "gpu-type";
    case UsageBy::kNode:
      return "node";
  }
  return "user";
}

std::string Accounting::Key(int64_t end_time_ms, int64_t job_id, int attempt) {
  return absl::StrFormat("%020d-%020d-%010d", end_time_ms, job_id, attempt);
}

absl::StatusOr<std::unique_ptr<Accounting>> Accounting::Open(StateStore* store) {
  std::unique_ptr<Accounting> a(new Accounting(store));
  RecordQuery q;
  q.limit = 10000;
  absl::MutexLock lock(&a->mu_);
  while (true) {
    absl::StatusOr<std::vector<StoredRecord>> page = store->ReadRecords(kRecordKind, q);
    if (!page.ok()) return page.status();
    v1::UsageRecord r;
    for (const StoredRecord& s : *page) {
      if (!r.ParseFromString(s.value)) {
        return absl::DataLossError(absl::StrCat("accounting record ", s.key, " does not parse"));
      }
      a->AddLocked(r);
    }
    if (static_cast<int64_t>(page->size()) < q.limit) break;
    // Keys have one length: the last key with a byte appended sorts before
    // every later key.
    q.from_key = page->back().key + "0";
  }
  return a;
}

absl::Status Accounting::Record(const v1::UsageRecord& r, std::function<void(absl::Status)> done) {
  if (r.job_id() <= 0) return Invalid("job_id", absl::StrCat("must be positive, got ", r.job_id()));
  if (r.attempt() < 0) return Invalid("attempt", absl::StrCat("must not be negative, got ", r.attempt()));
  if (r.start_time_ms() < 0) {
    return Invalid("start_time_ms", absl::StrCat("must not be negative, got ", r.start_time_ms()));
  }
  if (r.end_time_ms() < r.start_time_ms()) {
    return Invalid("end_time_ms", absl::StrCat("must not be before start_time_ms (",
                                               r.start_time_ms(), "), got ", r.end_time_ms()));
  }
  if (!Finite(r.gpus())) return Invalid("gpus", "must be finite and not negative");
  if (!Finite(r.gpu_seconds_allocated())) {
    return Invalid("gpu_seconds_allocated", "must be finite and not negative");
  }
  if (!Finite(r.gpu_seconds_used())) return Invalid("gpu_seconds_used", "must be finite and not negative");
  for (int i = 0; i < r.slices_size(); ++i) {
    if (!Finite(r.slices(i).gpus()) || !Finite(r.slices(i).gpu_seconds_used())) {
      return Invalid(absl::StrCat("slices[", i, "]"), "gpus and GPU-seconds must be finite and not negative");
    }
  }
  absl::StatusOr<WriteTicket> ticket = store_->EnqueuePutRecord(
      kRecordKind, Key(r.end_time_ms(), r.job_id(), r.attempt()), r.SerializeAsString());
  if (!ticket.ok()) return ticket.status();
  {
    absl::MutexLock lock(&mu_);
    AddLocked(r);
  }
  if (done) store_->WhenDurable(*ticket, [done = std::move(done)](absl::Status s) { done(s); });
  return absl::OkStatus();
}

int64_t Accounting::records() const {
  absl::ReaderMutexLock lock(&mu_);
  return records_;
}

uint32_t Accounting::InternLocked(KeyInfo info) {
  std::string k = absl::StrCat(info.user, "\x1f", info.project, "\x1f", info.queue, "\x1f",
                               info.gpu_type, "\x1f", info.node, "\x1f", info.mask);
  auto [it, added] = key_ids_.try_emplace(std::move(k), static_cast<uint32_t>(keys_.size()));
  if (added) keys_.push_back(std::move(info));
  return it->second;
}

void Accounting::AddLocked(const v1::UsageRecord& r) {
  ++records_;
  const int64_t s = r.start_time_ms();
  const int64_t e = std::max(s, r.end_time_ms());
  max_duration_ms_ = std::max(max_duration_ms_, e - s);
  // The slices: a record without any (no node known) is one of its gpus.
  std::vector<v1::UsageSlice> slices(r.slices().begin(), r.slices().end());
  if (slices.empty()) {
    v1::UsageSlice& only = slices.emplace_back();
    only.set_gpus(r.gpus());
    only.set_gpu_seconds_used(r.gpu_seconds_used());
  }
  double slice_gpus = 0;
  for (const v1::UsageSlice& sl : slices) slice_gpus += sl.gpus();
  const double dur = static_cast<double>(e - s);
  std::vector<std::string> types_seen;
  for (size_t i = 0; i < slices.size(); ++i) {
    const v1::UsageSlice& sl = slices[i];
    KeyInfo info{r.user(), r.project(), r.queue(), sl.gpu_type(), sl.node(), kEverySlice};
    if (i == 0) info.mask |= kFirstSlice;
    if (std::find(types_seen.begin(), types_seen.end(), sl.gpu_type()) == types_seen.end()) {
      types_seen.push_back(sl.gpu_type());
      info.mask |= kFirstOfType;
    }
    Slice x;
    x.start_ms = s;
    x.end_ms = e;
    // The record's gpus are the allocation (AttemptRecord.gpus); slices
    // split it by node.
    x.alloc_rate = slice_gpus > 0 ? r.gpus() * sl.gpus() / slice_gpus
                                  : r.gpus() / static_cast<double>(slices.size());
    x.used_rate = dur > 0 ? sl.gpu_seconds_used() * 1000.0 / dur : 0;
    x.key = InternLocked(std::move(info));
    x.job_ended = JobEnded(r.outcome()) ? 1 : 0;
    x.failed = r.outcome() == v1::ATTEMPT_OUTCOME_FAILED ? 1 : 0;
    x.preempted = r.preempted() ? 1 : 0;
    // Allocation per hour it overlaps.
    const int64_t last = HourOf(e);
    if (e > s) {
      for (int64_t h = HourOf(s); h * kBucketMs < e; ++h) {
        const int64_t lo = h * kBucketMs, hi = lo + kBucketMs;
        Hour& hour = hours_[h];
        Cell& c = hour.cells[x.key];
        const double ov = static_cast<double>(std::min(e, hi) - std::max(s, lo));
        c.alloc_ms += x.alloc_rate * ov;
        c.used_ms += x.used_rate * ov;
        DayCell& d = days_[DayOf(h)][x.key];
        d.alloc_ms += x.alloc_rate * ov;
        d.used_ms += x.used_rate * ov;
        if (s <= lo && e >= hi) {
          c.span_alloc += x.alloc_rate;
          c.span_used += x.used_rate;
        } else {
          hour.edges.push_back(x);
        }
      }
    }
    // Counts in the hour of the end; the slice is an edge there unless the
    // loop above already listed it (an end inside the hour).
    Hour& end_hour = hours_[last];
    Cell& ec = end_hour.cells[x.key];
    ec.attempts += 1;
    ec.jobs += x.job_ended;
    ec.failed += x.failed;
    ec.preempted += x.preempted;
    DayCell& ed = days_[DayOf(last)][x.key];
    ed.attempts += 1;
    ed.jobs += x.job_ended;
    ed.failed += x.failed;
    ed.preempted += x.preempted;
    const bool listed = e > s && e > last * kBucketMs;
    if (!listed) end_hour.edges.push_back(x);
  }
}

void Accounting::AddPartial(const Hour& hour, int64_t a, int64_t b, std::vector<Sum>& sums) {
  const double width = static_cast<double>(b - a);
  for (const auto& [key, c] : hour.cells) {
    sums[key].alloc_ms += c.span_alloc * width;
    sums[key].used_ms += c.span_used * width;
  }
  for (const Slice& x : hour.edges) {
    const int64_t ov = std::min(x.end_ms, b) - std::max(x.start_ms, a);
    Sum& sum = sums[x.key];
    if (ov > 0) {
      sum.alloc_ms += x.alloc_rate * static_cast<double>(ov);
      sum.used_ms += x.used_rate * static_cast<double>(ov);
    }
    if (x.end_ms >= a && x.end_ms < b) {
      sum.attempts += 1;
      sum.jobs += x.job_ended;
      sum.failed += x.failed;
      sum.preempted += x.preempted;
    }
  }
}

absl::StatusOr<v1::GetUsageResponse> Accounting::Usage(const UsageQuery& q) const {
  if (absl::Status s = CheckWindow(q.since_ms, q.until_ms); !s.ok()) return s;
  absl::ReaderMutexLock lock(&mu_);
  if (absl::Status s = CheckKeptLocked(q.since_ms); !s.ok()) return s;
  std::vector<Sum> sums(keys_.size());
  const int64_t first_full = HourOf(q.since_ms) + (q.since_ms % kBucketMs == 0 ? 0 : 1);
  const int64_t end_full = HourOf(q.until_ms);  // hours [first_full, end_full) are whole
  auto partial = [&](int64_t a, int64_t b) {
    auto it = hours_.find(HourOf(a));
    if (it != hours_.end()) AddPartial(it->second, a, b, sums);
  };
  if (first_full > end_full) {
    partial(q.since_ms, q.until_ms);  // inside one hour
  } else {
    if (q.since_ms < first_full * kBucketMs) partial(q.since_ms, first_full * kBucketMs);
    auto add = [&sums](uint32_t key, const auto& c) {
      Sum& s = sums[key];
      s.alloc_ms += c.alloc_ms;
      s.used_ms += c.used_ms;
      s.attempts += c.attempts;
      s.jobs += c.jobs;
      s.failed += c.failed;
      s.preempted += c.preempted;
    };
    auto add_hours = [&](int64_t h0, int64_t h1) {
      for (auto it = hours_.lower_bound(h0); it != hours_.end() && it->first < h1; ++it) {
        for (const auto& [key, c] : it->second.cells) add(key, c);
      }
    };
    // Whole days from the day cells, the hours around them from the hours.
    const int64_t d0 = DayOf(first_full + 23), d1 = DayOf(end_full);
    if (d0 < d1) {
      add_hours(first_full, d0 * 24);
      for (auto it = days_.lower_bound(d0); it != days_.end() && it->first < d1; ++it) {
        for (const auto& [key, c] : it->second) add(key, c);
      }
      add_hours(d1 * 24, end_full);
    } else {
      add_hours(first_full, end_full);
    }
    if (q.until_ms > end_full * kBucketMs) partial(end_full * kBucketMs, q.until_ms);
  }
  // Fold keys into groups.
  const uint8_t count_bit = q.by == UsageBy::kGpuType ? kFirstOfType
                            : q.by == UsageBy::kNode  ? kEverySlice
                                                      : kFirstSlice;
  absl::flat_hash_map<std::string, Sum> groups;
  Sum total;
  constexpr double kMsPerHour = 3600.0 * 1000.0;
  for (size_t k = 0; k < sums.size(); ++k) {
    const Sum& s = sums[k];
    if (s.alloc_ms == 0 && s.used_ms == 0 && s.attempts == 0) continue;
    const KeyInfo& info = keys_[k];
    if (!q.only_user.empty() && info.user != q.only_user) continue;
    const std::string& value = q.by == UsageBy::kUser      ? info.user
                               : q.by == UsageBy::kProject ? info.project
                               : q.by == UsageBy::kQueue   ? info.queue
                               : q.by == UsageBy::kGpuType ? info.gpu_type
                                                           : info.node;
    Sum& g = groups[value];
    g.alloc_ms += s.alloc_ms;
    g.used_ms += s.used_ms;
    total.alloc_ms += s.alloc_ms;
    total.used_ms += s.used_ms;
    if (info.mask & count_bit) {
      g.attempts += s.attempts;
      g.jobs += s.jobs;
      g.failed += s.failed;
      g.preempted += s.preempted;
    }
    if (info.mask & kFirstSlice) {
      total.attempts += s.attempts;
      total.jobs += s.jobs;
      total.failed += s.failed;
      total.preempted += s.preempted;
    }
  }
  auto fill = [&](v1::UsageRow& row, const std::string& key, const Sum& s) {
    row.set_key(key);
    row.set_allocated_gpu_hours(s.alloc_ms / kMsPerHour);
    row.set_used_gpu_hours(s.used_ms / kMsPerHour);
    row.set_efficiency(s.alloc_ms > 0 ? s.used_ms / s.alloc_ms : 0);
    row.set_jobs(s.jobs);
    row.set_attempts(s.attempts);
    row.set_failed(s.failed);
    row.set_preempted(s.preempted);
  };
  v1::GetUsageResponse resp;
  resp.set_by(UsageByName(q.by));
  resp.set_since_ms(q.since_ms);
  resp.set_until_ms(q.until_ms);
  resp.set_only_user(q.only_user);
  std::vector<std::pair<std::string, Sum>> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& x, const auto& y) {
    if (x.second.alloc_ms != y.second.alloc_ms) return x.second.alloc_ms > y.second.alloc_ms;
    return x.first < y.first;
  });
  for (const auto& [key, s] : sorted) fill(*resp.add_rows(), key, s);
  fill(*resp.mutable_total(), "total", total);
  return resp;
}

absl::Status Accounting::CheckHistory(const HistoryQuery& q) {
  if (absl::Status s = CheckWindow(q.since_ms, q.until_ms); !s.ok()) return s;
  if (q.page_size < 1 || q.page_size > kMaxPageSize) {
    return Invalid("page_size", absl::StrCat("must be 1 to ", kMaxPageSize, ", got ", q.page_size));
  }
  v1::UsageRecord probe;
  if (absl::StatusOr<bool> ok = MatchesHistoryState(probe, q.state); !ok.ok()) return ok.status();
  return absl::OkStatus();
}

absl::StatusOr<v1::ListHistoryResponse> Accounting::HistoryPage(const HistoryQuery& q,
                                                               HistoryCursor& cursor) const {
  v1::ListHistoryResponse page;
  if (cursor.done) return page;
  if (absl::Status s = CheckHistory(q); !s.ok()) return s;
  if (!cursor.started) {
    absl::ReaderMutexLock lock(&mu_);
    if (absl::Status s = CheckKeptLocked(q.since_ms); !s.ok()) return s;
    // By end time: an attempt that overlaps the window ends at or after
    // since, and before until + the longest attempt.
    cursor.stop_end_ms = q.until_ms + max_duration_ms_;
    cursor.from_key = Key(q.since_ms, 0, 0);
    cursor.started = true;
  }
  RecordQuery rq;
  rq.from_key = cursor.from_key;
  rq.limit = q.page_size;
  absl::StatusOr<std::vector<StoredRecord>> read = store_->ReadRecords(kRecordKind, rq);
  if (!read.ok()) return read.status();
  v1::UsageRecord r;
  for (const StoredRecord& s : *read) {
    if (!r.ParseFromString(s.value)) {
      return absl::DataLossError(absl::StrCat("accounting record ", s.key, " does not parse"));
    }
    if (r.end_time_ms() > cursor.stop_end_ms) {
      cursor.done = true;
      return page;
    }
    const int64_t s0 = r.start_time_ms(), e0 = r.end_time_ms();
    const bool overlaps = s0 == e0 ? (e0 >= q.since_ms && e0 < q.until_ms)
                                   : (s0 < q.until_ms && e0 > q.since_ms);
    if (!overlaps) continue;
    if (!q.user.empty() && r.user() != q.user) continue;
    if (!*MatchesHistoryState(r, q.state)) continue;
    *page.add_records() = r;
  }
  if (static_cast<int64_t>(read->size()) < rq.limit) {
    cursor.done = true;
  } else {
    cursor.from_key = read->back().key + "0";
  }
  return page;
}

absl::Status Accounting::CheckKeptLocked(int64_t since_ms) const {
  if (since_ms >= kept_since_ms_) return absl::OkStatus();
  return absl::OutOfRangeError(absl::StrCat(
      "since_ms: what ended before ",
      absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(kept_since_ms_),
                       absl::UTCTimeZone()),
      " is no longer kept (trainctl-coordinator --accounting-retention); ask from then on"));
}

absl::StatusOr<int64_t> Accounting::Prune(int64_t before_ms, int64_t max_records) {
  if (before_ms < 0) return Invalid("before_ms", absl::StrCat("must not be negative, got ", before_ms));
  if (max_records < 1) {
    return Invalid("max_records", absl::StrCat("must be at least 1, got ", max_records));
  }
  {
    absl::MutexLock lock(&mu_);
    kept_since_ms_ = std::max(kept_since_ms_, before_ms);
    const int64_t hour = HourOf(kept_since_ms_);
    hours_.erase(hours_.begin(), hours_.lower_bound(hour));
    days_.erase(days_.begin(), days_.lower_bound(DayOf(hour)));
  }
  absl::StatusOr<int64_t> deleted =
      DeleteOldestRecordsBefore(*store_, kRecordKind, Key(before_ms, 0, 0), max_records);
  if (!deleted.ok()) return deleted.status();
  absl::MutexLock lock(&mu_);
  records_ -= *deleted;
  return *deleted;
}

int64_t Accounting::kept_since_ms() const {
  absl::ReaderMutexLock lock(&mu_);
  return kept_since_ms_;
}

absl::Status Accounting::History(const HistoryQuery& q,
                                 absl::FunctionRef<bool(const v1::ListHistoryResponse&)> emit) const {
  if (absl::Status s = CheckHistory(q); !s.ok()) return s;
  HistoryCursor cursor;
  while (!cursor.done) {
    absl::StatusOr<v1::ListHistoryResponse> page = HistoryPage(q, cursor);
    if (!page.ok()) return page.status();
    if (page->records_size() > 0 && !emit(*page)) return absl::OkStatus();
  }
  return absl::OkStatus();
}

}  // namespace trainctl::coord
