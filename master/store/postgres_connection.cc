// PostgresStore's connection: prepared statements, binary results, errors as Status,
// reconnection.
#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status/status_macros.h"
#include "master/store/postgres_internal.h"

namespace det::master::postgres_internal {
namespace {

// Type OIDs (catalog/pg_type_d.h, a server header).
constexpr Oid kBoolOid = 16;
constexpr Oid kInt8Oid = 20;
constexpr Oid kInt2Oid = 21;
constexpr Oid kInt4Oid = 23;
constexpr Oid kByteaOid = 17;
constexpr Oid kTextOid = 25;

void AppendInt32(uint32_t v, std::string* out) {
  v = htonl(v);
  out->append(reinterpret_cast<const char*>(&v), 4);
}

// The header of a one-dimensional array of `n` elements of type `element` (array_recv's
// format: dimensions, a has-nulls flag, the element type, each dimension's size and lower
// bound), then each element as its length and bytes.
std::string ArrayHeader(Oid element, size_t n) {
  std::string out;
  AppendInt32(n == 0 ? 0 : 1, &out);  // an empty array has no dimensions
  AppendInt32(0, &out);
  AppendInt32(element, &out);
  if (n > 0) {
    AppendInt32(static_cast<uint32_t>(n), &out);
    AppendInt32(1, &out);
  }
  return out;
}

// Sets up a new (or reset) connection: notices (e.g. "relation already exists, skipping")
// are not errors, so they stay off stderr; the socket's send buffer is made large enough
// for a metric flush's statement (about 350 KB for 5,000 rows) to be written at once, so
// the master does not wait for the server to read part of it before writing the rest (the
// kernel caps it at net.core.wmem_max; best effort).
void ConfigureConnection(PGconn* conn) {
  PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  const int fd = PQsocket(conn);
  const int bytes = 1 << 20;
  if (fd >= 0) (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes));
}

Param BinaryParam(std::string bytes) {
  Param p("");
  p.value = std::move(bytes);
  p.binary = true;
  return p;
}

Param StringArray(Oid element, const std::vector<std::string_view>& values) {
  size_t size = 0;
  for (std::string_view v : values) size += 4 + v.size();
  std::string out = ArrayHeader(element, values.size());
  out.reserve(out.size() + size);
  for (std::string_view v : values) {
    // Text is cut at a NUL, as a text parameter of its own would be.
    if (element == kTextOid) v = v.substr(0, v.find('\0'));
    AppendInt32(static_cast<uint32_t>(v.size()), &out);
    out.append(v.data(), v.size());
  }
  return BinaryParam(std::move(out));
}

// The status for SQLSTATE `state` (and a connection that may be lost): the codes
// SqliteStore gives for the same failures, so the master handles both alike.
absl::Status StatusFor(const std::string& state, bool connection_lost, const std::string& msg) {
  if (connection_lost || absl::StartsWith(state, "08") || state == "57P01" || state == "57P02" ||
      state == "57P03") {
    return absl::UnavailableError(absl::StrCat(msg, " (database unreachable)"));
  }
  if (state == "23505") return absl::AlreadyExistsError(msg);
  if (state == "53100") return absl::ResourceExhaustedError(absl::StrCat(msg, " (disk full)"));
  if (absl::StartsWith(state, "53")) return absl::ResourceExhaustedError(msg);
  if (state == "42501" || state == "25006") return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

std::string Trimmed(const char* s) {
  std::string out = s ? s : "";
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

}  // namespace

Param Int64Array(const std::vector<int64_t>& values) {
  std::string out = ArrayHeader(kInt8Oid, values.size());
  out.reserve(out.size() + values.size() * 12);
  for (int64_t v : values) {
    AppendInt32(8, &out);
    AppendInt32(static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32), &out);
    AppendInt32(static_cast<uint32_t>(v), &out);
  }
  return BinaryParam(std::move(out));
}

Param TextArray(const std::vector<std::string_view>& values) {
  return StringArray(kTextOid, values);
}

Param ByteaArray(const std::vector<std::string_view>& values) {
  return StringArray(kByteaOid, values);
}

Param::Param(int64_t v) : value(absl::StrCat(v)) {}
Param::Param(int v) : value(absl::StrCat(v)) {}
Param::Param(uint32_t v) : value(absl::StrCat(v)) {}

int64_t Result::changed() const {
  const char* n = PQcmdTuples(res_.get());
  return n && *n ? std::strtoll(n, nullptr, 10) : 0;
}

int64_t Result::Int(int row, int col) const {
  if (PQgetisnull(res_.get(), row, col)) return 0;
  const char* p = PQgetvalue(res_.get(), row, col);
  switch (PQftype(res_.get(), col)) {
    case kInt8Oid: {
      uint32_t hi, lo;
      std::memcpy(&hi, p, 4);
      std::memcpy(&lo, p + 4, 4);
      return static_cast<int64_t>((static_cast<uint64_t>(ntohl(hi)) << 32) | ntohl(lo));
    }
    case kInt4Oid: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return static_cast<int32_t>(ntohl(v));
    }
    case kInt2Oid: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return static_cast<int16_t>(ntohs(v));
    }
    case kBoolOid:
      return *p != 0;
    default:
      return 0;  // Not an integer column: a bug in this store's SQL.
  }
}

std::string Result::Text(int row, int col) const {
  if (PQgetisnull(res_.get(), row, col)) return "";
  return std::string(PQgetvalue(res_.get(), row, col), PQgetlength(res_.get(), row, col));
}

absl::StatusOr<std::unique_ptr<Connection>> Connection::Open(const std::string& conninfo,
                                                             const std::string& password) {
  // Later keywords override earlier ones: a connect_timeout in `conninfo` wins over 10 s.
  std::vector<const char*> keys = {"connect_timeout", "dbname"};
  std::vector<const char*> values = {"10", conninfo.c_str()};
  if (!password.empty()) {
    keys.push_back("password");
    values.push_back(password.c_str());
  }
  keys.push_back(nullptr);
  values.push_back(nullptr);
  PGconn* conn = PQconnectdbParams(keys.data(), values.data(), /*expand_dbname=*/1);
  if (conn == nullptr) return absl::ResourceExhaustedError("database: out of memory");
  if (PQstatus(conn) != CONNECTION_OK) {
    std::string msg = Trimmed(PQerrorMessage(conn));
    PQfinish(conn);
    // A server that answers and refuses is a configuration error; one that does not
    // answer may come back.
    if (absl::StrContains(msg, "authentication") || absl::StrContains(msg, "does not exist") ||
        absl::StrContains(msg, "invalid") || absl::StrContains(msg, "password")) {
      return absl::FailedPreconditionError(absl::StrCat("cannot connect to the database: ", msg));
    }
    return absl::UnavailableError(absl::StrCat("cannot connect to the database: ", msg));
  }
  ConfigureConnection(conn);
  return std::unique_ptr<Connection>(new Connection(conn));
}

Connection::Connection(PGconn* conn) : conn_(conn) {}

Connection::~Connection() { PQfinish(conn_); }

bool Connection::connected() const { return PQstatus(conn_) == CONNECTION_OK; }

absl::Status Connection::EnsureConnected() {
  if (PQstatus(conn_) == CONNECTION_OK) return absl::OkStatus();
  prepared_.clear();
  PQreset(conn_);
  if (PQstatus(conn_) != CONNECTION_OK) {
    return absl::UnavailableError(
        absl::StrCat("database: cannot reconnect: ", Trimmed(PQerrorMessage(conn_))));
  }
  ConfigureConnection(conn_);
  return absl::OkStatus();
}

absl::Status Connection::ErrorOf(PGresult* res, const std::string& what) {
  auto field = [res](int code) -> std::string {
    const char* v = res ? PQresultErrorField(res, code) : nullptr;
    return v ? v : "";
  };
  const std::string state = field(PG_DIAG_SQLSTATE);
  // The primary message only: the detail can quote the row's values (token hashes).
  std::string msg = field(PG_DIAG_MESSAGE_PRIMARY);
  if (msg.empty()) msg = Trimmed(PQerrorMessage(conn_));
  if (state == "23505") {
    // SQLite's words, "UNIQUE constraint failed: table.column[, table.column]", from the
    // detail's "Key (a, b)=(...) already exists." (the column names only).
    const std::string table = field(PG_DIAG_TABLE_NAME);
    const std::string detail = field(PG_DIAG_MESSAGE_DETAIL);
    std::string columns;
    if (absl::StartsWith(detail, "Key (")) {
      size_t end = detail.find(")=");
      if (end != std::string::npos) {
        for (absl::string_view c : absl::StrSplit(detail.substr(5, end - 5), ", ")) {
          absl::StrAppend(&columns, columns.empty() ? "" : ", ", table, ".", c);
        }
      }
    }
    msg = absl::StrCat("UNIQUE constraint failed: ", columns.empty() ? table : columns, " (", msg,
                       ")");
  } else if (state == "23503") {
    msg = absl::StrCat("FOREIGN KEY constraint failed (", msg, ")");
  }
  return StatusFor(state, PQstatus(conn_) != CONNECTION_OK,
                   absl::StrCat("database: ", what, ": ", msg));
}

absl::StatusOr<Result> Connection::Exec(const std::string& sql, const std::vector<Param>& params) {
  // Reconnecting inside a transaction would run the rest of it outside one.
  if (PQstatus(conn_) != CONNECTION_OK && in_transaction_) {
    return absl::UnavailableError("database: connection lost in a transaction");
  }
  RETURN_IF_ERROR(EnsureConnected());
  auto it = prepared_.find(sql);
  if (it == prepared_.end()) {
    std::string name = absl::StrCat("s", prepared_.size() + 1);
    PGresult* prep = PQprepare(conn_, name.c_str(), sql.c_str(), 0, nullptr);
    if (prep == nullptr || PQresultStatus(prep) != PGRES_COMMAND_OK) {
      absl::Status error = ErrorOf(prep, absl::StrCat("prepare \"", sql, "\""));
      PQclear(prep);
      return error;
    }
    PQclear(prep);
    it = prepared_.emplace(sql, name).first;
  }
  std::vector<const char*> values;
  std::vector<int> lengths, formats;
  for (const Param& p : params) {
    values.push_back(p.value.data());
    lengths.push_back(static_cast<int>(p.value.size()));
    formats.push_back(p.binary ? 1 : 0);
  }
  PGresult* res = PQexecPrepared(conn_, it->second.c_str(), static_cast<int>(params.size()),
                                 values.data(), lengths.data(), formats.data(), /*resultFormat=*/1);
  ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    absl::Status error = ErrorOf(res, absl::StrCat("\"", sql, "\""));
    PQclear(res);
    return error;
  }
  return Result(res);
}

absl::Status Connection::ExecScript(const std::string& sql) {
  if (PQstatus(conn_) != CONNECTION_OK && in_transaction_) {
    return absl::UnavailableError("database: connection lost in a transaction");
  }
  RETURN_IF_ERROR(EnsureConnected());
  PGresult* res = PQexec(conn_, sql.c_str());
  ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    absl::Status error = ErrorOf(res, sql.size() < 40 ? sql : "script");
    PQclear(res);
    return error;
  }
  PQclear(res);
  return absl::OkStatus();
}

Transaction::Transaction(Connection* conn, const char* begin) : conn_(conn) {
  status_ = conn_->ExecScript(begin);
  conn_->in_transaction_ = status_.ok();
}

Transaction::~Transaction() {
  if (!done_ && status_.ok()) End("ROLLBACK");
}

absl::Status Transaction::End(const char* sql) {
  done_ = true;
  // A lost connection ended the transaction on the server: nothing of it was committed.
  if (!conn_->connected()) {
    conn_->in_transaction_ = false;
    return absl::UnavailableError(absl::StrCat("database: connection lost before ", sql));
  }
  absl::Status st = conn_->ExecScript(sql);
  conn_->in_transaction_ = false;
  if (!st.ok() && conn_->connected()) (void)conn_->ExecScript("ROLLBACK");
  return st;
}

absl::Status Transaction::Commit() { return End("COMMIT"); }

absl::StatusOr<int64_t> ReserveIds(Connection* conn, const char* sequence, int64_t n) {
  ASSIGN_OR_RETURN(Result r, conn->Exec("INSERT INTO id_sequences (name, last) VALUES ($1, $2) "
                                        "ON CONFLICT (name) DO UPDATE SET last = "
                                        "id_sequences.last + EXCLUDED.last RETURNING last",
                                        {sequence, n}));
  return r.Int(0, 0) - n + 1;
}

}  // namespace det::master::postgres_internal
