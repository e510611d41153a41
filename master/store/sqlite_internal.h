// Internal to the SQLite store (sqlite_store.cc, sqlite_schema.cc, sqlite_accounts.cc):
// SQLite errors as Status, a prepared statement, a transaction, row parsing.
#ifndef DET_MASTER_STORE_SQLITE_INTERNAL_H_
#define DET_MASTER_STORE_SQLITE_INTERNAL_H_

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace det::master::sqlite_internal {

inline absl::Status SqlError(sqlite3* db, const std::string& what) {
  int code = sqlite3_errcode(db);
  std::string msg = absl::StrCat("database: ", what, ": ", sqlite3_errmsg(db));
  if (code == SQLITE_FULL) return absl::ResourceExhaustedError(msg + " (disk full)");
  const int extended = sqlite3_extended_errcode(db);
  if (extended == SQLITE_CONSTRAINT_UNIQUE || extended == SQLITE_CONSTRAINT_PRIMARYKEY) {
    return absl::AlreadyExistsError(msg);
  }
  if (code == SQLITE_READONLY || code == SQLITE_CANTOPEN || code == SQLITE_PERM) {
    return absl::PermissionDeniedError(msg);
  }
  return absl::InternalError(msg);
}

// One prepared statement; binds by position (1-based), steps, reads columns.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    if (sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr) != SQLITE_OK) {
      status_ = SqlError(db, absl::StrCat("prepare \"", sql, "\""));
    }
  }
  ~Stmt() { sqlite3_finalize(stmt_); }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  Stmt& Bind(int i, int64_t v) {
    if (stmt_) sqlite3_bind_int64(stmt_, i, v);
    return *this;
  }
  Stmt& Bind(int i, const std::string& v) {
    if (stmt_) sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  Stmt& BindBlob(int i, const std::string& v) {
    if (stmt_) sqlite3_bind_blob(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  // Next row: true with a row, false when done; errors in status().
  bool Step() {
    if (!status_.ok()) return false;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) status_ = SqlError(db_, "step");
    return false;
  }
  absl::Status Run() {
    Step();
    return status_;
  }
  void Reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  int ColumnCount() { return sqlite3_column_count(stmt_); }
  const char* ColumnName(int col) { return sqlite3_column_name(stmt_, col); }
  bool ColumnIsInteger(int col) { return sqlite3_column_type(stmt_, col) == SQLITE_INTEGER; }
  std::string Text(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }
  const absl::Status& status() const { return status_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status status_;
};

// BEGIN IMMEDIATE ... COMMIT, rolled back unless committed. A read's statements see one
// snapshot inside `begin` "BEGIN" (deferred: takes no write lock), ended by the rollback.
class Transaction {
 public:
  explicit Transaction(sqlite3* db, const char* begin = "BEGIN IMMEDIATE") : db_(db) {
    status_ = sqlite3_exec(db, begin, nullptr, nullptr, nullptr) == SQLITE_OK
                  ? absl::OkStatus()
                  : SqlError(db, "begin");
  }
  ~Transaction() {
    if (!done_ && status_.ok()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  const absl::Status& status() const { return status_; }
  absl::Status Commit() {
    done_ = true;
    if (sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) {
      absl::Status st = SqlError(db_, "commit");
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      return st;
    }
    return absl::OkStatus();
  }

 private:
  sqlite3* db_;
  absl::Status status_;
  bool done_ = false;
};

template <typename M>
absl::Status ParseRow(const std::string& bytes, M* out, const char* table) {
  if (!out->ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("database: corrupt row in table ", table));
  }
  return absl::OkStatus();
}

}  // namespace det::master::sqlite_internal

#endif  // DET_MASTER_STORE_SQLITE_INTERNAL_H_
