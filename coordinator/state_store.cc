#include "coordinator/state_store.h"

#include <sqlite3.h>

#include <utility>

#include "absl/strings/str_cat.h"

namespace trainctl::coord {

// ------------------------------------------------------------ memory store

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
  return state;
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
  ~Db() {
    sqlite3_finalize(put_job);
    sqlite3_finalize(put_node);
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
)sql";

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
  if (sqlite3_prepare_v2(db->handle,
                         "INSERT OR REPLACE INTO jobs (id, record) VALUES (?, ?)",
                         -1, &db->put_job, nullptr) != SQLITE_OK ||
      sqlite3_prepare_v2(db->handle,
                         "INSERT OR REPLACE INTO nodes (name, record) VALUES (?, ?)",
                         -1, &db->put_node, nullptr) != SQLITE_OK) {
    return db->Error("prepare");
  }
  return std::unique_ptr<SqliteStateStore>(new SqliteStateStore(std::move(db)));
}

SqliteStateStore::SqliteStateStore(std::unique_ptr<Db> db) : db_(std::move(db)) {}
SqliteStateStore::~SqliteStateStore() = default;

absl::Status SqliteStateStore::PutJob(const v1::Job& job) {
  if (job.id() <= 0) return absl::InvalidArgumentError("job.id must be > 0");
  std::string blob = job.SerializeAsString();
  absl::MutexLock lock(&mu_);
  sqlite3_bind_int64(db_->put_job, 1, job.id());
  return StepPut(db_->handle, db_->put_job, blob);
}

absl::Status SqliteStateStore::PutNode(const v1::Node& node) {
  if (node.name().empty()) return absl::InvalidArgumentError("node.name is empty");
  std::string blob = node.SerializeAsString();
  absl::MutexLock lock(&mu_);
  sqlite3_bind_text(db_->put_node, 1, node.name().data(),
                    static_cast<int>(node.name().size()), SQLITE_TRANSIENT);
  return StepPut(db_->handle, db_->put_node, blob);
}

absl::StatusOr<StoredState> SqliteStateStore::Load() {
  absl::MutexLock lock(&mu_);
  StoredState state;
  for (const char* table : {"jobs", "nodes"}) {
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
  return state;
}

}  // namespace trainctl::coord
