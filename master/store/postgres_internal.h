// Internal to the PostgreSQL store (postgres_*.cc): one libpq connection with its prepared
// statements, PostgreSQL errors as Status, a transaction, result rows.
#ifndef DET_MASTER_STORE_POSTGRES_INTERNAL_H_
#define DET_MASTER_STORE_POSTGRES_INTERNAL_H_

#include <postgresql/libpq-fe.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace det::master::postgres_internal {

// Bytes bound as BYTEA (binary): serialized messages, model contexts, log lines.
struct Bytes {
  const std::string& bytes;
};

// One statement parameter: text (integers, TEXT columns) or binary (BYTEA).
struct Param {
  Param(int64_t v);  // NOLINT(runtime/explicit): parameters are written as a list.
  Param(int v);      // NOLINT(runtime/explicit)
  Param(uint32_t v);  // NOLINT(runtime/explicit)
  Param(const std::string& v) : value(v) {}  // NOLINT(runtime/explicit)
  Param(const char* v) : value(v) {}         // NOLINT(runtime/explicit)
  Param(Bytes v) : value(v.bytes), binary(true) {}  // NOLINT(runtime/explicit)
  std::string value;
  bool binary = false;
};

// One-dimensional arrays bound as one parameter in binary format (no quoting, nothing for
// the server to parse): the statement names the type, `$n::bigint[]`, `$n::text[]` (the
// elements UTF-8, each cut at its first NUL byte) or `$n::bytea[]`.
Param Int64Array(const std::vector<int64_t>& values);
Param TextArray(const std::vector<std::string_view>& values);
Param ByteaArray(const std::vector<std::string_view>& values);

// The rows of a statement, every column in binary format.
class Result {
 public:
  explicit Result(PGresult* res) : res_(res, &PQclear) {}
  int rows() const { return PQntuples(res_.get()); }
  // Rows an INSERT, UPDATE or DELETE changed.
  int64_t changed() const;
  // An integer column (BIGINT, INTEGER, SMALLINT or BOOLEAN); 0 for NULL.
  int64_t Int(int row, int col) const;
  // A TEXT or BYTEA column's bytes; "" for NULL.
  std::string Text(int row, int col) const;

 private:
  std::unique_ptr<PGresult, void (*)(PGresult*)> res_;
};

// A connection to the database at a libpq conninfo (URI or key=value). Reconnects by itself:
// a call on a lost connection first tries to connect again, and fails with Unavailable
// while the server cannot be reached. Not thread-safe.
class Connection {
 public:
  // Connects; Unavailable when the server cannot be reached, FailedPrecondition for a
  // refused login or a bad conninfo.
  // `password`, unless empty, overrides any in `conninfo`.
  static absl::StatusOr<std::unique_ptr<Connection>> Open(const std::string& conninfo,
                                                          const std::string& password = "");
  ~Connection();

  // Runs `sql` ($1.. placeholders) as a statement prepared once per connection.
  absl::StatusOr<Result> Exec(const std::string& sql, const std::vector<Param>& params = {});
  // Runs `sql` (no parameters; may hold several statements) unprepared.
  absl::Status ExecScript(const std::string& sql);
  // False once the connection is lost (until a call reconnects it).
  bool connected() const;

 private:
  friend class Transaction;
  explicit Connection(PGconn* conn);
  // Reconnects a lost connection (its prepared statements with it); Unavailable when
  // the server is still unreachable.
  absl::Status EnsureConnected();
  absl::Status ErrorOf(PGresult* res, const std::string& what);

  PGconn* conn_;
  // Statement names by SQL, prepared on conn_.
  std::map<std::string, std::string> prepared_;
  // Inside a Transaction: a lost connection is not reconnected until it ends (the rest of
  // the transaction would run outside one).
  bool in_transaction_ = false;
};

// BEGIN ... COMMIT, rolled back unless committed.
class Transaction {
 public:
  // `begin`: the statement that starts it, e.g. "BEGIN ISOLATION LEVEL REPEATABLE READ".
  explicit Transaction(Connection* conn, const char* begin = "BEGIN");
  ~Transaction();
  const absl::Status& status() const { return status_; }
  absl::Status Commit();

 private:
  absl::Status End(const char* sql);

  Connection* conn_;
  absl::Status status_;
  bool done_ = false;
};

// Reserves `n` ids of `sequence` (a name: "trials", "logs", ...) inside the caller's
// transaction and returns the first. Ids start at 1, are never reused, and a rolled-back
// transaction takes none (as SQLite's AUTOINCREMENT; a PostgreSQL sequence would leak them).
absl::StatusOr<int64_t> ReserveIds(Connection* conn, const char* sequence, int64_t n = 1);

template <typename M>
absl::Status ParseRow(const std::string& bytes, M* out, const char* table) {
  if (!out->ParseFromString(bytes)) {
    return absl::DataLossError(std::string("database: corrupt row in table ") + table);
  }
  return absl::OkStatus();
}

}  // namespace det::master::postgres_internal

#endif  // DET_MASTER_STORE_POSTGRES_INTERNAL_H_
