#include "coordinator/state_store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"

namespace trainctl::coord {
namespace {

absl::Status CheckMetricPoints(int64_t job_id,
                               const std::vector<v1::MetricPoint>& points) {
  if (job_id <= 0) return absl::InvalidArgumentError("job_id must be > 0");
  for (const v1::MetricPoint& p : points) {
    if (p.key().empty()) return absl::InvalidArgumentError("metric key is empty");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WriteTicket> StateStore::EnqueuePutJob(const v1::Job& job) {
  absl::Status s = PutJob(job);
  if (!s.ok()) return s;
  return WriteTicket{0};
}

absl::StatusOr<WriteTicket> StateStore::EnqueuePutNode(const v1::Node& node) {
  absl::Status s = PutNode(node);
  if (!s.ok()) return s;
  return WriteTicket{0};
}

void StateStore::WhenDurable(WriteTicket,
                             absl::AnyInvocable<void(absl::Status) &&> done) {
  std::move(done)(absl::OkStatus());
}

absl::Status StateStore::WaitDurable(WriteTicket ticket) {
  absl::Notification notified;
  absl::Status result;
  WhenDurable(ticket, [&](absl::Status s) {
    result = std::move(s);
    notified.Notify();
  });
  notified.WaitForNotification();
  return result;
}

bool IsRetired(const v1::Job& job) {
  const v1::JobState s = job.state();
  if (s != v1::JOB_STATE_SUCCEEDED && s != v1::JOB_STATE_FAILED &&
      s != v1::JOB_STATE_CANCELLED) {
    return false;
  }
  for (const v1::Task& t : job.tasks()) {
    if (t.state() == v1::TASK_STATE_STARTING || t.state() == v1::TASK_STATE_RUNNING ||
        t.state() == v1::TASK_STATE_STOPPING) {
      return false;
    }
  }
  return true;
}

namespace {

JobSummary SummaryOf(const v1::Job& job) {
  JobSummary s;
  s.id = job.id();
  s.state = job.state();
  s.user = job.spec().user();
  s.sweep_id = job.spec().sweep_id();
  s.request_id = job.request_id();
  s.placement_seq = job.placement_seq();
  return s;
}

}  // namespace

absl::StatusOr<StoredState> StateStore::LoadSummarized() {
  absl::StatusOr<StoredState> state = Load();
  if (!state.ok()) return state.status();
  std::vector<v1::Job> kept;
  for (v1::Job& job : state->jobs) {
    if (IsRetired(job) && job.spec().sweep_id().empty()) {
      state->retired.push_back(SummaryOf(job));
    } else {
      kept.push_back(std::move(job));
    }
  }
  state->jobs = std::move(kept);
  return state;
}

std::string NewClusterId() {
  absl::BitGen gen;
  return absl::StrFormat("%016x%016x", absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

absl::StatusOr<std::vector<v1::Job>> StateStore::ReadJobs(
    const std::vector<int64_t>& ids) {
  absl::StatusOr<StoredState> state = Load();
  if (!state.ok()) return state.status();
  absl::flat_hash_map<int64_t, const v1::Job*> by_id;
  for (const v1::Job& job : state->jobs) by_id[job.id()] = &job;
  std::vector<v1::Job> out;
  for (int64_t id : ids) {
    auto it = by_id.find(id);
    if (it != by_id.end()) out.push_back(*it->second);
  }
  return out;
}

absl::Status StateStore::AppendMetrics(int64_t, const std::vector<v1::MetricPoint>&) {
  return absl::UnimplementedError("this state store keeps no metrics");
}

absl::StatusOr<std::vector<v1::MetricPoint>> StateStore::ReadMetrics(
    int64_t, const std::string&) {
  return absl::UnimplementedError("this state store keeps no metrics");
}

absl::Status CheckRecordKey(const std::string& kind, const std::string& key) {
  if (kind.empty() || kind.size() > 64) {
    return absl::InvalidArgumentError("kind: must be 1 to 64 characters of [a-z0-9_]");
  }
  for (char c : kind) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) {
      return absl::InvalidArgumentError(
          absl::StrCat("kind: must be 1 to 64 characters of [a-z0-9_], got \"",
                       absl::CHexEscape(kind), "\""));
    }
  }
  if (key.empty() || key.size() > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("key: must be 1 to 256 bytes, got ", key.size()));
  }
  for (char c : key) {
    if (c == '/' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "key: must not hold '/' or control characters, got \"", absl::CHexEscape(key), "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status StateStore::PutRecord(const std::string&, const std::string&,
                                   const std::string&) {
  return absl::UnimplementedError("this state store keeps no records");
}

absl::StatusOr<WriteTicket> StateStore::EnqueuePutRecord(const std::string& kind,
                                                         const std::string& key,
                                                         const std::string& value) {
  absl::Status s = PutRecord(kind, key, value);
  if (!s.ok()) return s;
  return WriteTicket{0};
}

absl::StatusOr<std::vector<StoredRecord>> StateStore::ReadRecords(const std::string&,
                                                                  const RecordQuery&) {
  return absl::UnimplementedError("this state store keeps no records");
}

absl::StatusOr<int64_t> DeleteOldestRecordsBefore(StateStore& store, const std::string& kind,
                                                  std::string before_key, int64_t max_records) {
  RecordQuery oldest;
  oldest.limit = max_records + 1;
  absl::StatusOr<std::vector<StoredRecord>> first = store.ReadRecords(kind, oldest);
  if (!first.ok()) return first.status();
  if (static_cast<int64_t>(first->size()) > max_records) {
    before_key = std::min(before_key, first->back().key);
  }
  return store.DeleteRecordsBefore(kind, before_key);
}

absl::StatusOr<int64_t> StateStore::DeleteRecordsBefore(const std::string&,
                                                        const std::string&) {
  return absl::UnimplementedError("this state store keeps no records");
}

namespace {

// The ReadRecords checks every backend makes.
absl::Status CheckRecordQuery(const std::string& kind, const RecordQuery& query) {
  if (absl::Status s = CheckRecordKey(kind, "x"); !s.ok()) return s;
  if (query.limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit: must not be negative, got ", query.limit));
  }
  return absl::OkStatus();
}

}  // namespace

// ------------------------------------------------------------ memory store

absl::Status MemoryStateStore::PutRecord(const std::string& kind, const std::string& key,
                                         const std::string& value) {
  if (absl::Status s = CheckRecordKey(kind, key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (failing_) return absl::UnavailableError("memory store: injected failure");
  records_[kind][key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<StoredRecord>> MemoryStateStore::ReadRecords(
    const std::string& kind, const RecordQuery& query) {
  if (absl::Status s = CheckRecordQuery(kind, query); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  std::vector<StoredRecord> out;
  auto it = records_.find(kind);
  if (it == records_.end()) return out;
  const auto& by_key = it->second;
  auto add = [&](const auto& kv) {
    out.push_back({kv.first, kv.second});
    return query.limit > 0 && static_cast<int64_t>(out.size()) >= query.limit;
  };
  if (query.newest_first) {
    for (auto r = by_key.rbegin(); r != by_key.rend() && r->first >= query.from_key; ++r) {
      if (add(*r)) break;
    }
  } else {
    for (auto f = by_key.lower_bound(query.from_key); f != by_key.end(); ++f) {
      if (add(*f)) break;
    }
  }
  return out;
}

absl::StatusOr<int64_t> MemoryStateStore::DeleteRecordsBefore(const std::string& kind,
                                                              const std::string& before_key) {
  if (absl::Status s = CheckRecordKey(kind, "x"); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (failing_) return absl::UnavailableError("memory store: injected failure");
  auto it = records_.find(kind);
  if (it == records_.end()) return 0;
  auto& by_key = it->second;
  const auto end = by_key.lower_bound(before_key);
  const int64_t n = std::distance(by_key.begin(), end);
  by_key.erase(by_key.begin(), end);
  return n;
}

absl::Status MemoryStateStore::PutJob(const v1::Job& job) {
  if (job.id() <= 0) return absl::InvalidArgumentError("job.id must be > 0");
  absl::MutexLock lock(&mu_);
  if (failing_) return absl::UnavailableError("memory store: injected failure");
  jobs_[job.id()] = job.SerializeAsString();
  return absl::OkStatus();
}

absl::Status MemoryStateStore::PutNode(const v1::Node& node) {
  if (node.name().empty()) return absl::InvalidArgumentError("node.name is empty");
  absl::MutexLock lock(&mu_);
  if (failing_) return absl::UnavailableError("memory store: injected failure");
  nodes_[node.name()] = node.SerializeAsString();
  return absl::OkStatus();
}

absl::StatusOr<StoredState> MemoryStateStore::Load() {
  absl::MutexLock lock(&mu_);
  StoredState state;
  for (const auto& [id, blob] : jobs_) {
    if (!state.jobs.emplace_back().ParseFromString(blob)) {
      return absl::DataLossError(absl::StrCat("job ", id, " is corrupt"));
    }
  }
  for (const auto& [name, blob] : nodes_) {
    if (!state.nodes.emplace_back().ParseFromString(blob)) {
      return absl::DataLossError(absl::StrCat("node ", name, " is corrupt"));
    }
  }
  for (const auto& [id, by_key] : metrics_) {
    int64_t n = 0;
    for (const auto& [key, points] : by_key) n += static_cast<int64_t>(points.size());
    if (n > 0) state.metric_points[id] = n;
  }
  return state;
}

absl::Status MemoryStateStore::AppendMetrics(
    int64_t job_id, const std::vector<v1::MetricPoint>& points) {
  if (absl::Status s = CheckMetricPoints(job_id, points); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (failing_) return absl::UnavailableError("memory store: injected failure");
  auto& by_key = metrics_[job_id];
  for (const v1::MetricPoint& p : points) by_key[p.key()].push_back(p);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::MetricPoint>> MemoryStateStore::ReadMetrics(
    int64_t job_id, const std::string& key) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::MetricPoint> out;
  auto it = metrics_.find(job_id);
  if (it == metrics_.end()) return out;
  for (const auto& [k, points] : it->second) {
    if (!key.empty() && k != key) continue;
    out.insert(out.end(), points.begin(), points.end());
  }
  return out;
}

absl::StatusOr<std::vector<v1::Job>> MemoryStateStore::ReadJobs(
    const std::vector<int64_t>& ids) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> out;
  for (int64_t id : ids) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    if (!out.emplace_back().ParseFromString(it->second)) {
      return absl::DataLossError(absl::StrCat("job ", id, " is corrupt"));
    }
  }
  return out;
}

absl::StatusOr<std::string> MemoryStateStore::ClusterId() {
  absl::MutexLock lock(&mu_);
  if (failing_) return absl::UnavailableError("memory store: failing (injected)");
  if (cluster_id_.empty()) cluster_id_ = NewClusterId();
  return cluster_id_;
}

void MemoryStateStore::SetFailing(bool failing) {
  absl::MutexLock lock(&mu_);
  failing_ = failing;
}

// ------------------------------------------------------------ SQLite store

struct SqliteStateStore::Db {
  sqlite3* handle = nullptr;
  sqlite3_stmt* put_job = nullptr;
  sqlite3_stmt* put_node = nullptr;
  sqlite3_stmt* put_metric = nullptr;
  sqlite3_stmt* read_metrics = nullptr;
  sqlite3_stmt* read_metrics_key = nullptr;
  sqlite3_stmt* read_job = nullptr;
  sqlite3_stmt* put_record = nullptr;
  // The `meta` table's cluster_id, read (or made) at Open().
  std::string cluster_id;
  ~Db() {
    sqlite3_finalize(read_job);
    sqlite3_finalize(put_record);
    sqlite3_finalize(put_job);
    sqlite3_finalize(put_node);
    sqlite3_finalize(put_metric);
    sqlite3_finalize(read_metrics);
    sqlite3_finalize(read_metrics_key);
    sqlite3_close(handle);
  }
  absl::Status Error(absl::string_view what) const {
    return absl::UnavailableError(
        absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(handle)));
  }
};

namespace {

constexpr const char* kSchema = R"sql(
PRAGMA journal_mode = WAL;
PRAGMA synchronous = FULL;
PRAGMA busy_timeout = 5000;
CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (name TEXT PRIMARY KEY, record BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS metrics (
  job_id INTEGER NOT NULL, key TEXT NOT NULL, step INTEGER NOT NULL,
  value REAL NOT NULL, time_ms INTEGER NOT NULL, attempt INTEGER NOT NULL,
  rank INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS metrics_by_job_key ON metrics (job_id, key);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS records (kind TEXT NOT NULL, key BLOB NOT NULL,
  value BLOB NOT NULL, PRIMARY KEY (kind, key));
)sql";

// The summary columns of the jobs table (JobSummary; added to files that
// predate them by AddSummaryColumns).
constexpr const char* kSummaryColumns[][2] = {
    {"retired", "INTEGER"}, {"state", "INTEGER"},   {"user", "TEXT"},
    {"sweep_id", "TEXT"},   {"request_id", "TEXT"}, {"placement_seq", "INTEGER"},
};

// Binds the summary of `job` to parameters 3-8 of the put_job statement.
void BindSummary(sqlite3_stmt* stmt, const v1::Job& job) {
  sqlite3_bind_int(stmt, 3, IsRetired(job) ? 1 : 0);
  sqlite3_bind_int(stmt, 4, job.state());
  auto text = [stmt](int i, const std::string& v) {
    sqlite3_bind_text(stmt, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
  };
  text(5, job.spec().user());
  text(6, job.spec().sweep_id());
  text(7, job.request_id());
  sqlite3_bind_int64(stmt, 8, job.placement_seq());
}

// Gives a jobs table written before the summary columns existed those
// columns, filled from each parsed record (one transaction).
// The cluster id in the `meta` table; a new one is inserted first when the
// file has none (a new state dir). Errors: UNAVAILABLE when SQLite fails.
absl::StatusOr<std::string> LoadOrMakeClusterId(sqlite3* db) {
  sqlite3_stmt* insert = nullptr;
  sqlite3_stmt* select = nullptr;
  auto fail = [&](const char* what) {
    absl::Status s = absl::UnavailableError(
        absl::StrCat("sqlite: cluster id: ", what, ": ", sqlite3_errmsg(db)));
    sqlite3_finalize(insert);
    sqlite3_finalize(select);
    return s;
  };
  const std::string fresh = NewClusterId();
  if (sqlite3_prepare_v2(db,
                         "INSERT OR IGNORE INTO meta (key, value) "
                         "VALUES ('cluster_id', ?)",
                         -1, &insert, nullptr) != SQLITE_OK) {
    return fail("prepare insert");
  }
  sqlite3_bind_text(insert, 1, fresh.data(), static_cast<int>(fresh.size()),
                    SQLITE_TRANSIENT);
  if (sqlite3_step(insert) != SQLITE_DONE) return fail("insert");
  if (sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'cluster_id'", -1,
                         &select, nullptr) != SQLITE_OK) {
    return fail("prepare select");
  }
  if (sqlite3_step(select) != SQLITE_ROW) return fail("select");
  std::string id(reinterpret_cast<const char*>(sqlite3_column_text(select, 0)),
                 sqlite3_column_bytes(select, 0));
  sqlite3_finalize(insert);
  sqlite3_finalize(select);
  return id;
}

absl::Status AddSummaryColumns(sqlite3* db) {
  sqlite3_stmt* info = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA table_info(jobs)", -1, &info, nullptr) !=
      SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat("sqlite: ", sqlite3_errmsg(db)));
  }
  absl::flat_hash_map<std::string, bool> have;
  while (sqlite3_step(info) == SQLITE_ROW) {
    have[reinterpret_cast<const char*>(sqlite3_column_text(info, 1))] = true;
  }
  sqlite3_finalize(info);
  if (have.contains("retired")) return absl::OkStatus();
  auto exec = [db](const std::string& sql) -> absl::Status {
    if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
      return absl::UnavailableError(
          absl::StrCat("sqlite: ", sql, ": ", sqlite3_errmsg(db)));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  absl::Status status;
  for (const auto& [name, type] : kSummaryColumns) {
    if (have.contains(name)) continue;
    status = exec(absl::StrCat("ALTER TABLE jobs ADD COLUMN ", name, " ", type));
    if (!status.ok()) break;
  }
  sqlite3_stmt* read = nullptr;
  sqlite3_stmt* update = nullptr;
  if (status.ok() &&
      (sqlite3_prepare_v2(db, "SELECT id, record FROM jobs", -1, &read, nullptr) !=
           SQLITE_OK ||
       sqlite3_prepare_v2(db,
                          "UPDATE jobs SET retired = ?3, state = ?4, user = ?5, "
                          "sweep_id = ?6, request_id = ?7, placement_seq = ?8 "
                          "WHERE id = ?1",
                          -1, &update, nullptr) != SQLITE_OK)) {
    status = absl::UnavailableError(absl::StrCat("sqlite: ", sqlite3_errmsg(db)));
  }
  while (status.ok() && sqlite3_step(read) == SQLITE_ROW) {
    v1::Job job;
    if (!job.ParseFromArray(sqlite3_column_blob(read, 1),
                            sqlite3_column_bytes(read, 1))) {
      status = absl::DataLossError(absl::StrCat(
          "sqlite: job ", sqlite3_column_int64(read, 0), " is corrupt"));
      break;
    }
    sqlite3_bind_int64(update, 1, sqlite3_column_int64(read, 0));
    BindSummary(update, job);
    if (sqlite3_step(update) != SQLITE_DONE) {
      status = absl::UnavailableError(absl::StrCat("sqlite: ", sqlite3_errmsg(db)));
    }
    sqlite3_reset(update);
  }
  sqlite3_finalize(read);
  sqlite3_finalize(update);
  if (!status.ok()) {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return status;
  }
  return exec("COMMIT");
}

constexpr const char* kReadMetricsColumns =
    "SELECT key, step, value, time_ms, attempt, rank FROM metrics ";

// Binds `blob` to parameter 2 of `stmt`, steps it and resets it.
absl::Status StepPut(sqlite3* db, sqlite3_stmt* stmt, const std::string& blob) {
  sqlite3_bind_blob(stmt, 2, blob.data(), static_cast<int>(blob.size()),
                    SQLITE_TRANSIENT);
  int rc = sqlite3_step(stmt);
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  if (rc != SQLITE_DONE) {
    return absl::UnavailableError(
        absl::StrCat("sqlite: write failed: ", sqlite3_errmsg(db)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(
    const std::string& path, Sync sync) {
  auto db = std::make_unique<Db>();
  // The state holds every job's command, environment and attempt tokens:
  // owner-only (0600), also when an older file was laxer. SQLite gives its
  // -wal and -shm files the database file's mode.
  if (!path.empty() && path[0] != ':') {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0) {
      const int err = errno;
      if (fd >= 0) close(fd);
      return absl::UnavailableError(absl::StrCat("cannot open or create ", path, " (mode 0600): ",
                                                 std::strerror(err)));
    }
    close(fd);
  }
  if (sqlite3_open_v2(path.c_str(), &db->handle,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                          SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    return db->Error(absl::StrCat("cannot open ", path));
  }
  char* err = nullptr;
  if (sqlite3_exec(db->handle, kSchema, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown";
    sqlite3_free(err);
    return absl::UnavailableError(
        absl::StrCat("sqlite: cannot set up ", path, ": ", msg));
  }
  if (sync == Sync::kNormal &&
      sqlite3_exec(db->handle, "PRAGMA synchronous = NORMAL;", nullptr, nullptr,
                   nullptr) != SQLITE_OK) {
    return db->Error("PRAGMA synchronous = NORMAL");
  }
  TC_RETURN_IF_ERROR(AddSummaryColumns(db->handle));
  TC_ASSIGN_OR_RETURN(db->cluster_id, LoadOrMakeClusterId(db->handle));
  if (sqlite3_prepare_v2(db->handle,
                         "INSERT OR REPLACE INTO jobs (id, record, retired, state, "
                         "user, sweep_id, request_id, placement_seq) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                         -1, &db->put_job, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db->handle, "SELECT record FROM jobs WHERE id = ?", -1,
                         &db->read_job, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db->handle,
                         "INSERT OR REPLACE INTO records (kind, key, value) "
                         "VALUES (?, ?, ?)",
                         -1, &db->put_record, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db->handle,
                         "INSERT OR REPLACE INTO nodes (name, record) VALUES (?, ?)",
                         -1, &db->put_node, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db->handle,
                         "INSERT INTO metrics (job_id, key, step, value, time_ms, "
                         "attempt, rank) VALUES (?, ?, ?, ?, ?, ?, ?)",
                         -1, &db->put_metric, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(
          db->handle,
          absl::StrCat(kReadMetricsColumns,
                       "WHERE job_id = ? ORDER BY key, rowid").c_str(),
          -1, &db->read_metrics, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(
          db->handle,
          absl::StrCat(kReadMetricsColumns,
                       "WHERE job_id = ? AND key = ? ORDER BY rowid").c_str(),
          -1, &db->read_metrics_key, nullptr) != SQLITE_OK) {
    return db->Error("prepare");
  }
  return std::unique_ptr<SqliteStateStore>(new SqliteStateStore(std::move(db)));
}

absl::StatusOr<std::string> SqliteStateStore::ClusterId() { return db_->cluster_id; }

SqliteStateStore::SqliteStateStore(std::unique_ptr<Db> db)
    : db_(std::move(db)), committer_([this] { CommitLoop(); }) {}

SqliteStateStore::~SqliteStateStore() {
  {
    absl::MutexLock lock(&queue_mu_);
    stopping_ = true;
  }
  committer_.join();  // It commits what is queued first.
}

WriteTicket SqliteStateStore::EnqueueLocked(Write w, bool lazy) {
  const WriteTicket ticket = ++last_ticket_;
  if (!lazy) {
    last_eager_ = ticket;
  } else if (oldest_lazy_ == absl::InfiniteFuture()) {
    oldest_lazy_ = absl::Now();
  }
  if (w.kind == Write::Kind::kJob) {
    auto [it, fresh] = queued_jobs_.try_emplace(w.job_id, queue_.size());
    if (!fresh) {
      queue_[it->second] = std::move(w);
      return ticket;
    }
  } else if (w.kind == Write::Kind::kNode) {
    auto [it, fresh] = queued_nodes_.try_emplace(w.node_name, queue_.size());
    if (!fresh) {
      queue_[it->second].blob = std::move(w.blob);
      return ticket;
    }
  }
  queue_.push_back(std::move(w));
  return ticket;
}

absl::StatusOr<WriteTicket> SqliteStateStore::EnqueueJob(const v1::Job& job, bool lazy) {
  if (job.id() <= 0) return absl::InvalidArgumentError("job.id must be > 0");
  Write w;
  w.kind = Write::Kind::kJob;
  w.job_id = job.id();
  w.blob = job.SerializeAsString();  // Outside the lock.
  w.summary = SummaryOf(job);
  w.retired = IsRetired(job);
  absl::MutexLock lock(&queue_mu_);
  return EnqueueLocked(std::move(w), lazy);
}

absl::StatusOr<WriteTicket> SqliteStateStore::EnqueuePutJob(const v1::Job& job) {
  return EnqueueJob(job, /*lazy=*/false);
}

absl::StatusOr<WriteTicket> SqliteStateStore::EnqueuePutJobLazily(const v1::Job& job) {
  return EnqueueJob(job, /*lazy=*/true);
}

absl::StatusOr<WriteTicket> SqliteStateStore::EnqueuePutNode(const v1::Node& node) {
  if (node.name().empty()) return absl::InvalidArgumentError("node.name is empty");
  Write w;
  w.kind = Write::Kind::kNode;
  w.node_name = node.name();
  w.blob = node.SerializeAsString();
  absl::MutexLock lock(&queue_mu_);
  return EnqueueLocked(std::move(w));
}

absl::Status SqliteStateStore::PutJob(const v1::Job& job) {
  TC_ASSIGN_OR_RETURN(WriteTicket ticket, EnqueuePutJob(job));
  return WaitDurable(ticket);
}

absl::Status SqliteStateStore::PutNode(const v1::Node& node) {
  TC_ASSIGN_OR_RETURN(WriteTicket ticket, EnqueuePutNode(node));
  return WaitDurable(ticket);
}

absl::Status SqliteStateStore::StatusOfLocked(WriteTicket ticket) const {
  for (const Failed& f : failed_) {
    if (ticket > f.after && ticket <= f.upto) return f.status;
  }
  return absl::OkStatus();
}

void SqliteStateStore::WhenDurable(WriteTicket ticket,
                                   absl::AnyInvocable<void(absl::Status) &&> done) {
  absl::Status now;
  {
    absl::MutexLock lock(&queue_mu_);
    if (ticket > durable_) {
      callbacks_.emplace(ticket, std::move(done));
      return;
    }
    now = StatusOfLocked(ticket);
  }
  std::move(done)(std::move(now));
}

bool SqliteStateStore::HasWorkLocked() const {
  if (stopping_) return true;
  if (holds_ > 0 || last_ticket_ == durable_) return false;
  return last_eager_ > durable_ || !callbacks_.empty() || draining_ > 0 ||
         absl::Now() >= oldest_lazy_ + lazy_flush_;
}

void SqliteStateStore::SetLazyFlush(absl::Duration after) {
  absl::MutexLock lock(&queue_mu_);
  lazy_flush_ = after;
}

void SqliteStateStore::HoldCommits() {
  absl::MutexLock lock(&queue_mu_);
  ++holds_;
}

void SqliteStateStore::ReleaseCommits() {
  absl::MutexLock lock(&queue_mu_);
  --holds_;
}

SqliteStateStore::CommitStats SqliteStateStore::commit_stats() {
  absl::MutexLock lock(&queue_mu_);
  return stats_;
}

void SqliteStateStore::CommitLoop() {
  for (;;) {
    std::vector<Write> batch;
    WriteTicket from, upto;
    {
      absl::MutexLock lock(&queue_mu_);
      const absl::Condition has_work(this, &SqliteStateStore::HasWorkLocked);
      while (!HasWorkLocked()) {
        // Lazy writes alone wake nobody when their time is up: wait until
        // then at most. Past it (commits are held), any change wakes us.
        const absl::Time flush_at = oldest_lazy_ + lazy_flush_;
        if (absl::Now() < flush_at) {
          queue_mu_.AwaitWithDeadline(has_work, flush_at);
        } else {
          queue_mu_.Await(has_work);
        }
      }
      if (last_ticket_ == durable_) return;  // Stopping, nothing queued.
      batch.swap(queue_);
      queued_jobs_.clear();
      queued_nodes_.clear();
      oldest_lazy_ = absl::InfiniteFuture();
      from = durable_;
      upto = last_ticket_;
    }
    // Writes queued from here on go into the next transaction.
    const absl::Status status = CommitBatch(batch);
    std::vector<absl::AnyInvocable<void(absl::Status) &&>> ready;
    {
      absl::MutexLock lock(&queue_mu_);
      durable_ = upto;
      ++stats_.commits;
      stats_.writes += static_cast<int64_t>(batch.size());
      if (!status.ok()) {
        if (failed_.size() >= 64) failed_.erase(failed_.begin());
        failed_.push_back({from, upto, status});
      }
      auto end = callbacks_.upper_bound(upto);
      for (auto it = callbacks_.begin(); it != end; ++it) {
        ready.push_back(std::move(it->second));
      }
      callbacks_.erase(callbacks_.begin(), end);
    }
    for (auto& done : ready) std::move(done)(status);
  }
}

absl::Status SqliteStateStore::CommitBatch(const std::vector<Write>& batch) {
  absl::MutexLock lock(&mu_);
  sqlite3* db = db_->handle;
  if (sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return db_->Error("begin");
  }
  absl::Status s;
  for (const Write& w : batch) {
    switch (w.kind) {
      case Write::Kind::kJob: {
        sqlite3_stmt* stmt = db_->put_job;
        sqlite3_bind_int64(stmt, 1, w.job_id);
        // The summary columns, as BindSummary() binds them.
        sqlite3_bind_int(stmt, 3, w.retired ? 1 : 0);
        sqlite3_bind_int(stmt, 4, w.summary.state);
        auto text = [stmt](int i, const std::string& v) {
          sqlite3_bind_text(stmt, i, v.data(), static_cast<int>(v.size()),
                            SQLITE_TRANSIENT);
        };
        text(5, w.summary.user);
        text(6, w.summary.sweep_id);
        text(7, w.summary.request_id);
        sqlite3_bind_int64(stmt, 8, w.summary.placement_seq);
        s = StepPut(db, stmt, w.blob);
        break;
      }
      case Write::Kind::kNode:
        sqlite3_bind_text(db_->put_node, 1, w.node_name.data(),
                          static_cast<int>(w.node_name.size()), SQLITE_TRANSIENT);
        s = StepPut(db, db_->put_node, w.blob);
        break;
      case Write::Kind::kRecord: {
        sqlite3_stmt* stmt = db_->put_record;
        sqlite3_bind_text(stmt, 1, w.record_kind.data(),
                          static_cast<int>(w.record_kind.size()), SQLITE_TRANSIENT);
        // A blob, so that keys compare as bytes (memcmp), as etcd's do.
        sqlite3_bind_blob(stmt, 2, w.record_key.data(),
                          static_cast<int>(w.record_key.size()), SQLITE_TRANSIENT);
        sqlite3_bind_blob(stmt, 3, w.blob.data(), static_cast<int>(w.blob.size()),
                          SQLITE_TRANSIENT);
        const int rc = sqlite3_step(stmt);
        sqlite3_reset(stmt);
        sqlite3_clear_bindings(stmt);
        if (rc != SQLITE_DONE) s = db_->Error("record write failed");
        break;
      }
      case Write::Kind::kMetrics:
        for (const v1::MetricPoint& p : w.points) {
          sqlite3_stmt* stmt = db_->put_metric;
          sqlite3_bind_int64(stmt, 1, w.job_id);
          sqlite3_bind_text(stmt, 2, p.key().data(), static_cast<int>(p.key().size()),
                            SQLITE_TRANSIENT);
          sqlite3_bind_int64(stmt, 3, p.step());
          sqlite3_bind_double(stmt, 4, p.value());
          sqlite3_bind_int64(stmt, 5, p.time_ms());
          sqlite3_bind_int64(stmt, 6, p.attempt());
          sqlite3_bind_int64(stmt, 7, p.rank());
          const int rc = sqlite3_step(stmt);
          sqlite3_reset(stmt);
          sqlite3_clear_bindings(stmt);
          if (rc != SQLITE_DONE) {
            s = db_->Error("metric insert failed");
            break;
          }
        }
        break;
    }
    if (!s.ok()) {
      sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      return s;
    }
  }
  if (sqlite3_exec(db, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
    absl::Status err = db_->Error("commit failed");
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    return err;
  }
  return absl::OkStatus();
}

absl::StatusOr<StoredState> SqliteStateStore::Load() { return LoadTables(true); }

void SqliteStateStore::Drain() {
  // Waits for the commit itself, not for WhenDurable callbacks (those may
  // need a lock the caller holds).
  absl::MutexLock lock(&queue_mu_);
  struct Arg {
    SqliteStateStore* store;
    WriteTicket upto;
  } arg{this, last_ticket_};
  ++draining_;  // Lazy writes too: commit them now.
  queue_mu_.Await(absl::Condition(
      +[](Arg* a) { return a->store->durable_ >= a->upto; }, &arg));
  --draining_;
}

absl::StatusOr<StoredState> SqliteStateStore::LoadTables(bool with_jobs) {
  Drain();  // Read what was written before: let the queue commit first.
  absl::MutexLock lock(&mu_);
  StoredState state;
  for (const char* table : {"jobs", "nodes"}) {
    if (!with_jobs && table[0] == 'j') continue;
    sqlite3_stmt* stmt = nullptr;
    std::string sql = absl::StrCat("SELECT record FROM ", table,
                                   table[0] == 'j' ? " ORDER BY id" : " ORDER BY name");
    if (sqlite3_prepare_v2(db_->handle, sql.c_str(), -1, &stmt, nullptr) !=
        SQLITE_OK) {
      return absl::InternalError(
          absl::StrCat("sqlite: ", sqlite3_errmsg(db_->handle)));
    }
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      const void* data = sqlite3_column_blob(stmt, 0);
      int size = sqlite3_column_bytes(stmt, 0);
      bool ok = table[0] == 'j'
                    ? state.jobs.emplace_back().ParseFromArray(data, size)
                    : state.nodes.emplace_back().ParseFromArray(data, size);
      if (!ok) {
        sqlite3_finalize(stmt);
        return absl::DataLossError(
            absl::StrCat("sqlite: a record of table ", table, " is corrupt"));
      }
    }
    sqlite3_finalize(stmt);
    if (rc != SQLITE_DONE) {
      return absl::InternalError(
          absl::StrCat("sqlite: read failed: ", sqlite3_errmsg(db_->handle)));
    }
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_->handle,
                         "SELECT job_id, COUNT(*) FROM metrics GROUP BY job_id",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_->handle)));
  }
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    state.metric_points[sqlite3_column_int64(stmt, 0)] = sqlite3_column_int64(stmt, 1);
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("sqlite: read failed: ", sqlite3_errmsg(db_->handle)));
  }
  return state;
}

absl::Status SqliteStateStore::AppendMetrics(
    int64_t job_id, const std::vector<v1::MetricPoint>& points) {
  if (absl::Status s = CheckMetricPoints(job_id, points); !s.ok()) return s;
  if (points.empty()) return absl::OkStatus();
  Write w;
  w.kind = Write::Kind::kMetrics;
  w.job_id = job_id;
  w.points = points;
  WriteTicket ticket;
  {
    absl::MutexLock lock(&queue_mu_);
    ticket = EnqueueLocked(std::move(w));
  }
  // One report is one Write, so all or none of its points commit.
  return WaitDurable(ticket);
}

absl::StatusOr<std::vector<v1::MetricPoint>> SqliteStateStore::ReadMetrics(
    int64_t job_id, const std::string& key) {
  Drain();  // Read your own appends.
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* stmt = key.empty() ? db_->read_metrics : db_->read_metrics_key;
  sqlite3_bind_int64(stmt, 1, job_id);
  if (!key.empty()) {
    sqlite3_bind_text(stmt, 2, key.data(), static_cast<int>(key.size()),
                      SQLITE_TRANSIENT);
  }
  std::vector<v1::MetricPoint> out;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    v1::MetricPoint& p = out.emplace_back();
    p.set_key(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)),
              sqlite3_column_bytes(stmt, 0));
    p.set_step(sqlite3_column_int64(stmt, 1));
    p.set_value(sqlite3_column_double(stmt, 2));
    p.set_time_ms(sqlite3_column_int64(stmt, 3));
    p.set_attempt(static_cast<int32_t>(sqlite3_column_int64(stmt, 4)));
    p.set_rank(static_cast<int32_t>(sqlite3_column_int64(stmt, 5)));
  }
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("sqlite: metric read failed: ", sqlite3_errmsg(db_->handle)));
  }
  return out;
}

absl::StatusOr<StoredState> SqliteStateStore::LoadSummarized() {
  Drain();
  StoredState state;
  {
    absl::MutexLock lock(&mu_);
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(
            db_->handle,
            "SELECT id, retired, state, user, sweep_id, request_id, placement_seq, "
            "CASE WHEN retired = 0 OR sweep_id != '' THEN record END "
            "FROM jobs ORDER BY id",
            -1, &stmt, nullptr) != SQLITE_OK) {
      return absl::InternalError(
          absl::StrCat("sqlite: ", sqlite3_errmsg(db_->handle)));
    }
    auto text = [stmt](int i) {
      const unsigned char* p = sqlite3_column_text(stmt, i);
      return p == nullptr ? std::string()
                          : std::string(reinterpret_cast<const char*>(p),
                                        sqlite3_column_bytes(stmt, i));
    };
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      if (sqlite3_column_type(stmt, 7) != SQLITE_NULL) {
        if (!state.jobs.emplace_back().ParseFromArray(sqlite3_column_blob(stmt, 7),
                                                      sqlite3_column_bytes(stmt, 7))) {
          const int64_t id = sqlite3_column_int64(stmt, 0);
          sqlite3_finalize(stmt);
          return absl::DataLossError(absl::StrCat("sqlite: job ", id, " is corrupt"));
        }
        continue;
      }
      JobSummary& s = state.retired.emplace_back();
      s.id = sqlite3_column_int64(stmt, 0);
      s.state = static_cast<v1::JobState>(sqlite3_column_int(stmt, 2));
      s.user = text(3);
      s.sweep_id = text(4);
      s.request_id = text(5);
      s.placement_seq = sqlite3_column_int64(stmt, 6);
    }
    sqlite3_finalize(stmt);
    if (rc != SQLITE_DONE) {
      return absl::InternalError(
          absl::StrCat("sqlite: read failed: ", sqlite3_errmsg(db_->handle)));
    }
  }
  // Nodes and metric counts as Load() reads them (few rows; no job records).
  absl::StatusOr<StoredState> rest = LoadTables(false);
  if (!rest.ok()) return rest.status();
  state.nodes = std::move(rest->nodes);
  state.metric_points = std::move(rest->metric_points);
  return state;
}

absl::StatusOr<std::vector<v1::Job>> SqliteStateStore::ReadJobs(
    const std::vector<int64_t>& ids) {
  // A job retired from memory may still be queued: its queued record is the
  // newest. This never waits for a commit (the coordinator reads under its
  // lock, maybe while holding commits); a batch being committed holds mu_,
  // so once we hold mu_ it is in the file.
  absl::flat_hash_map<int64_t, std::string> queued;
  {
    absl::MutexLock lock(&queue_mu_);
    for (int64_t id : ids) {
      auto it = queued_jobs_.find(id);
      if (it != queued_jobs_.end()) queued[id] = queue_[it->second].blob;
    }
  }
  absl::MutexLock lock(&mu_);
  std::vector<v1::Job> out;
  sqlite3_stmt* stmt = db_->read_job;
  for (int64_t id : ids) {
    if (auto q = queued.find(id); q != queued.end()) {
      if (!out.emplace_back().ParseFromString(q->second)) {
        return absl::DataLossError(absl::StrCat("sqlite: queued job ", id, " is corrupt"));
      }
      continue;
    }
    sqlite3_bind_int64(stmt, 1, id);
    const int rc = sqlite3_step(stmt);
    bool ok = true;
    if (rc == SQLITE_ROW) {
      ok = out.emplace_back().ParseFromArray(sqlite3_column_blob(stmt, 0),
                                             sqlite3_column_bytes(stmt, 0));
    }
    sqlite3_reset(stmt);
    if (!ok) return absl::DataLossError(absl::StrCat("sqlite: job ", id, " is corrupt"));
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      return absl::InternalError(
          absl::StrCat("sqlite: read failed: ", sqlite3_errmsg(db_->handle)));
    }
  }
  return out;
}

absl::StatusOr<WriteTicket> SqliteStateStore::EnqueuePutRecord(const std::string& kind,
                                                               const std::string& key,
                                                               const std::string& value) {
  if (absl::Status s = CheckRecordKey(kind, key); !s.ok()) return s;
  Write w;
  w.kind = Write::Kind::kRecord;
  w.record_kind = kind;
  w.record_key = key;
  w.blob = value;
  absl::MutexLock lock(&queue_mu_);
  return EnqueueLocked(std::move(w));
}

absl::Status SqliteStateStore::PutRecord(const std::string& kind, const std::string& key,
                                         const std::string& value) {
  TC_ASSIGN_OR_RETURN(WriteTicket ticket, EnqueuePutRecord(kind, key, value));
  return WaitDurable(ticket);
}

absl::StatusOr<std::vector<StoredRecord>> SqliteStateStore::ReadRecords(
    const std::string& kind, const RecordQuery& query) {
  if (absl::Status s = CheckRecordQuery(kind, query); !s.ok()) return s;
  Drain();  // Read your own writes.
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* stmt = nullptr;
  const std::string sql = absl::StrCat(
      "SELECT key, value FROM records WHERE kind = ? AND key >= ? ORDER BY key ",
      query.newest_first ? "DESC" : "ASC", " LIMIT ?");
  if (sqlite3_prepare_v2(db_->handle, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_->handle)));
  }
  sqlite3_bind_text(stmt, 1, kind.data(), static_cast<int>(kind.size()), SQLITE_TRANSIENT);
  sqlite3_bind_blob(stmt, 2, query.from_key.data(), static_cast<int>(query.from_key.size()),
                    SQLITE_TRANSIENT);
  sqlite3_bind_int64(stmt, 3, query.limit > 0 ? query.limit : -1);  // -1: no limit
  std::vector<StoredRecord> out;
  int rc;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    auto column = [stmt](int i) {
      const void* data = sqlite3_column_blob(stmt, i);  // before _bytes
      const int n = sqlite3_column_bytes(stmt, i);
      return n == 0 ? std::string() : std::string(static_cast<const char*>(data), n);
    };
    out.push_back({column(0), column(1)});
  }
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("sqlite: record read failed: ", sqlite3_errmsg(db_->handle)));
  }
  return out;
}

absl::StatusOr<int64_t> SqliteStateStore::DeleteRecordsBefore(const std::string& kind,
                                                              const std::string& before_key) {
  if (absl::Status s = CheckRecordKey(kind, "x"); !s.ok()) return s;
  Drain();  // after what was queued before
  absl::MutexLock lock(&mu_);
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_->handle, "DELETE FROM records WHERE kind = ? AND key < ?", -1,
                         &stmt, nullptr) != SQLITE_OK) {
    return absl::InternalError(absl::StrCat("sqlite: ", sqlite3_errmsg(db_->handle)));
  }
  sqlite3_bind_text(stmt, 1, kind.data(), static_cast<int>(kind.size()), SQLITE_TRANSIENT);
  // A blob, as keys are written: they compare as bytes.
  sqlite3_bind_blob(stmt, 2, before_key.data(), static_cast<int>(before_key.size()),
                    SQLITE_TRANSIENT);
  const int rc = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (rc != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("sqlite: record delete failed: ", sqlite3_errmsg(db_->handle)));
  }
  return static_cast<int64_t>(sqlite3_changes(db_->handle));
}

}  // namespace trainctl::coord
