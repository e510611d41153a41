// det-master migrate-db: copies an SQLite database's history into an empty PostgreSQL one.
#ifndef DET_MASTER_STORE_MIGRATE_DB_H_
#define DET_MASTER_STORE_MIGRATE_DB_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace det::master {

// Migrates the SQLite file at `sqlite_path` to the latest schema, migrates the PostgreSQL
// database at `postgres_url` (with `password` unless empty) likewise, and copies every row
// of every table, ids, the cluster id and the id high-water marks included, in one
// PostgreSQL transaction: all or nothing. Returns the number of rows copied.
// FailedPrecondition when the PostgreSQL database already holds experiments, users,
// agents, templates or models (a master has run on it: copy into a fresh database).
// REQUIRES: no master runs on either database.
absl::StatusOr<int64_t> CopySqliteToPostgres(const std::string& sqlite_path,
                                             const std::string& postgres_url,
                                             const std::string& password = "");

}  // namespace det::master

#endif  // DET_MASTER_STORE_MIGRATE_DB_H_
