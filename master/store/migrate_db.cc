#include "master/store/migrate_db.h"

#include <sqlite3.h>

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "master/store/postgres_internal.h"
#include "master/store/postgres_store.h"
#include "master/store/sqlite_internal.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

using postgres_internal::Connection;
using postgres_internal::Param;
using postgres_internal::Result;
using postgres_internal::Transaction;

// Parents before children (foreign keys); allocations in insertion order (their `seq`).
constexpr const char* kTables[] = {
    "cluster",        "experiments", "trials",      "allocations", "agents",
    "metric_records", "logs",        "checkpoints", "templates",   "system_metrics",
    "users",          "sessions",    "checkpoint_gc_tasks", "models", "model_versions",
};

// Copies `table`'s rows from `db` to `pg` (inside the caller's transaction); adds the count
// to `*rows`.
absl::Status CopyTable(sqlite3* db, Connection* pg, const char* table, int64_t* rows) {
  const std::string select = absl::StrCat("SELECT * FROM ", table, " ORDER BY rowid");
  sqlite_internal::Stmt s(db, select.c_str());
  std::string insert;
  while (s.Step()) {
    const int n = s.ColumnCount();
    if (insert.empty()) {
      std::vector<std::string> names, params;
      for (int i = 0; i < n; ++i) {
        names.push_back(s.ColumnName(i));
        params.push_back(absl::StrCat("$", i + 1));
      }
      insert = absl::StrCat("INSERT INTO ", table, " (", absl::StrJoin(names, ", "), ") VALUES (",
                            absl::StrJoin(params, ", "), ")");
    }
    std::vector<Param> values;
    std::vector<std::string> bytes(n);
    for (int i = 0; i < n; ++i) {
      if (s.ColumnIsInteger(i)) {
        values.emplace_back(s.Int(i));
      } else {
        // Text and blobs alike in binary format: for TEXT the bytes themselves (checked as
        // UTF-8 by the server), for BYTEA the bytes.
        bytes[i] = s.Text(i);
        values.emplace_back(postgres_internal::Bytes{bytes[i]});
      }
    }
    RETURN_IF_ERROR(pg->Exec(insert, values).status());
    ++*rows;
  }
  return s.status();
}

}  // namespace

absl::StatusOr<int64_t> CopySqliteToPostgres(const std::string& sqlite_path,
                                             const std::string& postgres_url,
                                             const std::string& password) {
  // Both at the latest schema: then their tables have the same columns.
  { ASSIGN_OR_RETURN(auto migrated, SqliteStore::Open(sqlite_path)); }
  { ASSIGN_OR_RETURN(auto migrated, PostgresStore::Open(postgres_url, password)); }
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(sqlite_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::FailedPreconditionError(absl::StrCat("cannot open '", sqlite_path, "': ", msg));
  }
  std::unique_ptr<sqlite3, int (*)(sqlite3*)> close(db, &sqlite3_close);
  ASSIGN_OR_RETURN(std::unique_ptr<Connection> pg, Connection::Open(postgres_url, password));
  Transaction tx(pg.get());
  RETURN_IF_ERROR(tx.status());
  for (const char* table : {"experiments", "users", "agents", "templates", "models"}) {
    ASSIGN_OR_RETURN(Result r, pg->Exec(absl::StrCat("SELECT 1 FROM ", table, " LIMIT 1")));
    if (r.rows() > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the PostgreSQL database is not empty (table ", table,
          " has rows): copy into a fresh database, before any master starts on it"));
    }
  }
  // A cluster id the target's check above let a master's Load() store is replaced.
  RETURN_IF_ERROR(pg->Exec("DELETE FROM cluster").status());
  int64_t rows = 0;
  for (const char* table : kTables) RETURN_IF_ERROR(CopyTable(db, pg.get(), table, &rows));
  // Ids go on from SQLite's high-water marks (AUTOINCREMENT's sqlite_sequence).
  sqlite_internal::Stmt seq(db, "SELECT name, seq FROM sqlite_sequence");
  while (seq.Step()) {
    RETURN_IF_ERROR(pg->Exec("INSERT INTO id_sequences (name, last) VALUES ($1, $2) "
                             "ON CONFLICT (name) DO UPDATE SET last = EXCLUDED.last",
                             {seq.Text(0), seq.Int(1)})
                        .status());
  }
  RETURN_IF_ERROR(seq.status());
  // Metric records' ids (an INTEGER PRIMARY KEY in SQLite, without a sqlite_sequence row):
  // PostgreSQL's go on after the largest copied.
  sqlite_internal::Stmt last(db, "SELECT MAX(id) FROM metric_records");
  if (last.Step() && last.ColumnIsInteger(0)) {
    RETURN_IF_ERROR(pg->Exec("INSERT INTO id_sequences (name, last) VALUES ('metric_records', $1) "
                             "ON CONFLICT (name) DO UPDATE SET last = "
                             "GREATEST(id_sequences.last, EXCLUDED.last)",
                             {last.Int(0)})
                        .status());
  }
  RETURN_IF_ERROR(last.status());
  RETURN_IF_ERROR(tx.Commit());
  return rows;
}

}  // namespace det::master
