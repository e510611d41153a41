#include "master/store/sqlite_store.h"

#include <sqlite3.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "master/store/metric_summary.h"
#include "nlohmann/json.hpp"

namespace det::master {
namespace {

// Schema migrations, applied in order; PRAGMA user_version counts those applied.
// Append only: never edit a migration that has shipped.
const char* const kMigrations[] = {
    // 1: initial schema. Rows keep a few columns for queries and the full message in `data`.
    R"sql(
CREATE TABLE cluster (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE experiments (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL,
  state INTEGER NOT NULL,
  start_ms INTEGER NOT NULL,
  config_yaml TEXT NOT NULL,
  context BLOB,
  data BLOB NOT NULL);
CREATE TABLE trials (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  state INTEGER NOT NULL,
  data BLOB NOT NULL);
CREATE INDEX trials_by_experiment ON trials(experiment_id);
CREATE TABLE allocations (
  id TEXT PRIMARY KEY,
  trial_id INTEGER NOT NULL REFERENCES trials(id),
  state INTEGER NOT NULL,
  token TEXT NOT NULL,
  data BLOB NOT NULL);
CREATE INDEX allocations_by_trial ON allocations(trial_id);
CREATE TABLE agents (id TEXT PRIMARY KEY, data BLOB NOT NULL);
CREATE TABLE metrics (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  trial_id INTEGER NOT NULL,
  run_id INTEGER NOT NULL,
  grp TEXT NOT NULL,
  total_batches INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  vals TEXT NOT NULL);
CREATE INDEX metrics_by_trial ON metrics(trial_id, grp, id);
CREATE TABLE logs (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  trial_id INTEGER NOT NULL,
  allocation_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  rank INTEGER NOT NULL,
  stream TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  message TEXT NOT NULL);
CREATE INDEX logs_by_trial ON logs(trial_id, id);
CREATE TABLE checkpoints (
  uuid TEXT PRIMARY KEY,
  trial_id INTEGER NOT NULL,
  total_batches INTEGER NOT NULL,
  time_ms INTEGER NOT NULL,
  data BLOB NOT NULL);
CREATE INDEX checkpoints_by_trial ON checkpoints(trial_id);
)sql",
    // 2: config templates (det template ...).
    R"sql(
CREATE TABLE templates (
  name TEXT PRIMARY KEY,
  config_yaml TEXT NOT NULL,
  create_ms INTEGER NOT NULL,
  update_ms INTEGER NOT NULL);
)sql",
    // 3: agents' host metrics (SystemMetrics in `data`), kept for a bounded time.
    R"sql(
CREATE TABLE system_metrics (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  agent_id TEXT NOT NULL,
  time_ms INTEGER NOT NULL,
  data BLOB NOT NULL);
CREATE INDEX system_metrics_by_agent ON system_metrics(agent_id, time_ms);
CREATE INDEX system_metrics_by_time ON system_metrics(time_ms);
)sql",
    // 4: users (argon2id password hashes) and their sessions (SHA-256 of the token).
    R"sql(
CREATE TABLE users (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  username TEXT NOT NULL UNIQUE,
  password_hash TEXT NOT NULL,
  admin INTEGER NOT NULL,
  created_ms INTEGER NOT NULL);
CREATE TABLE sessions (
  token_hash TEXT PRIMARY KEY,
  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  created_ms INTEGER NOT NULL,
  expires_ms INTEGER NOT NULL);
CREATE INDEX sessions_by_user ON sessions(user_id);
)sql",
    // 5: checkpoint garbage-collection tasks (zero-slot tasks run on an agent); the
    // CheckpointGcTask in `data`.
    R"sql(
CREATE TABLE checkpoint_gc_tasks (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  experiment_id INTEGER NOT NULL REFERENCES experiments(id),
  state INTEGER NOT NULL,
  data BLOB NOT NULL);
CREATE INDEX checkpoint_gc_tasks_by_experiment ON checkpoint_gc_tasks(experiment_id);
)sql",
};

absl::Status SqlError(sqlite3* db, const std::string& what) {
  int code = sqlite3_errcode(db);
  std::string msg = absl::StrCat("database: ", what, ": ", sqlite3_errmsg(db));
  if (code == SQLITE_FULL) return absl::ResourceExhaustedError(msg + " (disk full)");
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

// BEGIN IMMEDIATE ... COMMIT, rolled back unless committed.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {
    status_ = sqlite3_exec(db, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK
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

std::string ValuesJson(const v1::Metrics& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : m.values()) j[k] = v;
  return j.dump();
}

}  // namespace

SqliteStore::SqliteStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}

SqliteStore::~SqliteStore() { sqlite3_close(db_); }

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path,
                                                               int64_t max_size_mb) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open database '", path, "': ", msg));
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path));
  sqlite3_busy_timeout(db, 5000);
  for (const char* pragma : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=FULL",
                             "PRAGMA foreign_keys=ON"}) {
    absl::Status st = store->Exec(pragma);
    if (!st.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot use database '", path, "': ", st.message()));
    }
  }
  RETURN_IF_ERROR(store->Migrate());
  if (max_size_mb > 0) {
    Stmt page(db, "PRAGMA page_size");
    int64_t page_size = page.Step() ? page.Int(0) : 4096;
    RETURN_IF_ERROR(store->Exec(
        absl::StrCat("PRAGMA max_page_count=", std::max<int64_t>(1, (max_size_mb << 20) / page_size))));
  }
  return store;
}

absl::Status SqliteStore::Exec(const std::string& sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status st = SqlError(db_, err ? err : "exec");
    sqlite3_free(err);
    return st;
  }
  return absl::OkStatus();
}

int SqliteStore::SchemaVersion() {
  Stmt s(db_, "PRAGMA user_version");
  return s.Step() ? static_cast<int>(s.Int(0)) : -1;
}

absl::Status SqliteStore::Migrate() {
  int have = SchemaVersion();
  int want = static_cast<int>(sizeof(kMigrations) / sizeof(kMigrations[0]));
  if (have > want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database '", path_, "' has schema version ", have, ", newer than this master's ", want,
        ": run a newer det-master"));
  }
  for (int v = have; v < want; ++v) {
    Transaction tx(db_);
    RETURN_IF_ERROR(tx.status());
    RETURN_IF_ERROR(Exec(kMigrations[v]));
    RETURN_IF_ERROR(Exec(absl::StrCat("PRAGMA user_version=", v + 1)));
    RETURN_IF_ERROR(tx.Commit());
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::CheckIntegrity() {
  Stmt s(db_, "PRAGMA integrity_check");
  if (!s.Step()) return s.status().ok() ? absl::InternalError("integrity_check: no answer") : s.status();
  std::string answer = s.Text(0);
  if (answer != "ok") return absl::DataLossError(absl::StrCat("integrity_check: ", answer));
  return absl::OkStatus();
}

absl::StatusOr<StoreSnapshot> SqliteStore::Load() {
  StoreSnapshot snap;
  {
    Stmt s(db_, "SELECT value FROM cluster WHERE key = 'cluster_id'");
    if (s.Step()) snap.cluster_id = s.Text(0);
    RETURN_IF_ERROR(s.status());
  }
  if (snap.cluster_id.empty()) {
    unsigned char raw[16];
    sqlite3_randomness(sizeof(raw), raw);
    for (unsigned char c : raw) absl::StrAppend(&snap.cluster_id, absl::Hex(c, absl::kZeroPad2));
    Stmt s(db_, "INSERT INTO cluster (key, value) VALUES ('cluster_id', ?)");
    RETURN_IF_ERROR(s.Bind(1, snap.cluster_id).Run());
  }
  {
    Stmt s(db_, "SELECT data FROM experiments ORDER BY id");
    while (s.Step()) RETURN_IF_ERROR(ParseRow(s.Text(0), &snap.experiments.emplace_back(), "experiments"));
    RETURN_IF_ERROR(s.status());
  }
  {
    Stmt s(db_, "SELECT data FROM trials ORDER BY id");
    while (s.Step()) RETURN_IF_ERROR(ParseRow(s.Text(0), &snap.trials.emplace_back(), "trials"));
    RETURN_IF_ERROR(s.status());
  }
  {
    Stmt s(db_, "SELECT data, token FROM allocations WHERE state NOT IN (?, ?, ?) ORDER BY rowid");
    s.Bind(1, v1::STATE_COMPLETED).Bind(2, v1::STATE_CANCELED).Bind(3, v1::STATE_ERROR);
    while (s.Step()) {
      auto& entry = snap.open_allocations.emplace_back();
      RETURN_IF_ERROR(ParseRow(s.Text(0), &entry.first, "allocations"));
      entry.second = s.Text(1);
    }
    RETURN_IF_ERROR(s.status());
  }
  {
    Stmt s(db_, "SELECT data FROM agents ORDER BY id");
    while (s.Step()) RETURN_IF_ERROR(ParseRow(s.Text(0), &snap.agents.emplace_back(), "agents"));
    RETURN_IF_ERROR(s.status());
  }
  {
    Stmt s(db_, "SELECT data FROM checkpoint_gc_tasks ORDER BY id");
    while (s.Step()) {
      RETURN_IF_ERROR(ParseRow(s.Text(0), &snap.checkpoint_gc_tasks.emplace_back(), "checkpoint_gc_tasks"));
    }
    RETURN_IF_ERROR(s.status());
  }
  return snap;
}

absl::StatusOr<int64_t> SqliteStore::InsertExperiment(const v1::Experiment& experiment,
                                                      const std::string& context,
                                                      std::vector<v1::Trial>* trials) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_,
         "INSERT INTO experiments (name, state, start_ms, config_yaml, context, data) "
         "VALUES (?, ?, ?, ?, ?, '')");
  s.Bind(1, experiment.name()).Bind(2, experiment.state()).Bind(3, experiment.start_time_ms());
  s.Bind(4, experiment.config_yaml()).BindBlob(5, context);
  RETURN_IF_ERROR(s.Run());
  int64_t id = sqlite3_last_insert_rowid(db_);
  v1::Experiment stored = experiment;
  stored.set_id(id);
  Stmt u(db_, "UPDATE experiments SET data = ? WHERE id = ?");
  RETURN_IF_ERROR(u.BindBlob(1, stored.SerializeAsString()).Bind(2, id).Run());
  for (auto& t : *trials) {
    t.set_experiment_id(id);
    ASSIGN_OR_RETURN(int64_t tid, InsertTrialRow(t));
    t.set_id(tid);
  }
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status SqliteStore::UpdateExperiment(const v1::Experiment& experiment) {
  Stmt s(db_, "UPDATE experiments SET name = ?, state = ?, data = ? WHERE id = ?");
  s.Bind(1, experiment.name()).Bind(2, experiment.state());
  s.BindBlob(3, experiment.SerializeAsString()).Bind(4, experiment.id());
  RETURN_IF_ERROR(s.Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("experiment ", experiment.id(), " not in the database"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> SqliteStore::GetExperimentContext(int64_t experiment_id) {
  Stmt s(db_, "SELECT context FROM experiments WHERE id = ?");
  s.Bind(1, experiment_id);
  if (!s.Step()) {
    RETURN_IF_ERROR(s.status());
    return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not found"));
  }
  return s.Text(0);
}

absl::StatusOr<int64_t> SqliteStore::InsertTrialRow(const v1::Trial& trial) {
  Stmt s(db_, "INSERT INTO trials (experiment_id, state, data) VALUES (?, ?, '')");
  RETURN_IF_ERROR(s.Bind(1, trial.experiment_id()).Bind(2, trial.state()).Run());
  int64_t id = sqlite3_last_insert_rowid(db_);
  v1::Trial stored = trial;
  stored.set_id(id);
  RETURN_IF_ERROR(WriteTrial(stored));
  return id;
}

absl::StatusOr<int64_t> SqliteStore::InsertTrial(const v1::Trial& trial) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(int64_t id, InsertTrialRow(trial));
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status SqliteStore::WriteTrial(const v1::Trial& trial) {
  v1::Trial row = trial;
  row.clear_allocation();  // Allocations have their own table.
  Stmt s(db_, "UPDATE trials SET state = ?, data = ? WHERE id = ?");
  s.Bind(1, row.state()).BindBlob(2, row.SerializeAsString()).Bind(3, row.id());
  RETURN_IF_ERROR(s.Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("trial ", trial.id(), " not in the database"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::UpdateTrial(const v1::Trial& trial) { return WriteTrial(trial); }

absl::Status SqliteStore::UpsertAllocation(const v1::Allocation& allocation,
                                           const std::string& token) {
  Stmt s(db_,
         "INSERT INTO allocations (id, trial_id, state, token, data) VALUES (?, ?, ?, ?, ?) "
         "ON CONFLICT(id) DO UPDATE SET state = excluded.state, data = excluded.data");
  s.Bind(1, allocation.id()).Bind(2, allocation.trial_id()).Bind(3, allocation.state());
  s.Bind(4, token).BindBlob(5, allocation.SerializeAsString());
  return s.Run();
}

absl::Status SqliteStore::UpsertAgent(const v1::Agent& agent) {
  Stmt s(db_,
         "INSERT INTO agents (id, data) VALUES (?, ?) "
         "ON CONFLICT(id) DO UPDATE SET data = excluded.data");
  return s.Bind(1, agent.id()).BindBlob(2, agent.SerializeAsString()).Run();
}

absl::Status SqliteStore::AddMetrics(const std::vector<v1::Trial>& trials,
                                     const std::vector<v1::Metrics>& metrics) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_,
         "INSERT INTO metrics (trial_id, run_id, grp, total_batches, time_ms, vals) "
         "VALUES (?, ?, ?, ?, ?, ?)");
  for (const auto& m : metrics) {
    s.Bind(1, m.trial_id()).Bind(2, m.run_id()).Bind(3, m.group());
    s.Bind(4, m.total_batches()).Bind(5, m.report_time_ms()).Bind(6, ValuesJson(m));
    RETURN_IF_ERROR(s.Run());
    s.Reset();
  }
  for (const auto& t : trials) RETURN_IF_ERROR(WriteTrial(t));
  return tx.Commit();
}

absl::StatusOr<std::vector<v1::Metrics>> SqliteStore::GetMetrics(int64_t trial_id,
                                                                 const std::string& group) {
  Stmt s(db_,
         "SELECT run_id, grp, total_batches, time_ms, vals FROM metrics "
         "WHERE trial_id = ? AND (? = '' OR grp = ?) ORDER BY id");
  s.Bind(1, trial_id).Bind(2, group).Bind(3, group);
  std::vector<v1::Metrics> out;
  while (s.Step()) {
    v1::Metrics& m = out.emplace_back();
    m.set_trial_id(trial_id);
    m.set_run_id(static_cast<int32_t>(s.Int(0)));
    m.set_group(s.Text(1));
    m.set_total_batches(s.Int(2));
    m.set_report_time_ms(s.Int(3));
    auto j = nlohmann::json::parse(s.Text(4), nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return absl::DataLossError("database: corrupt metrics row");
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it->is_number()) (*m.mutable_values())[it.key()] = it->get<double>();
    }
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::StatusOr<int64_t> SqliteStore::SupersedeMetrics(v1::Trial* trial, int32_t run_id,
                                                      int64_t after_batches) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt del(db_, "DELETE FROM metrics WHERE trial_id = ? AND run_id < ? AND total_batches > ?");
  RETURN_IF_ERROR(del.Bind(1, trial->id()).Bind(2, run_id).Bind(3, after_batches).Run());
  int64_t deleted = sqlite3_changes(db_);
  if (deleted > 0) {
    ASSIGN_OR_RETURN(std::vector<v1::Metrics> rows, GetMetrics(trial->id(), ""));
    trial->clear_training_summary();
    trial->clear_validation_summary();
    trial->clear_timings_summary();
    trial->set_total_batches(0);
    for (const auto& m : rows) ApplyToSummaries(m, trial);
    RETURN_IF_ERROR(WriteTrial(*trial));
  }
  RETURN_IF_ERROR(tx.Commit());
  return deleted;
}

absl::Status SqliteStore::AddLogs(std::vector<v1::LogLine>* lines) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_,
         "INSERT INTO logs (trial_id, allocation_id, agent_id, rank, stream, time_ms, message) "
         "VALUES (?, ?, ?, ?, ?, ?, ?)");
  for (auto& l : *lines) {
    s.Bind(1, l.trial_id()).Bind(2, l.allocation_id()).Bind(3, l.agent_id()).Bind(4, l.rank());
    s.Bind(5, l.stream()).Bind(6, l.time_ms()).Bind(7, l.message());
    RETURN_IF_ERROR(s.Run());
    s.Reset();
    l.set_id(sqlite3_last_insert_rowid(db_));
  }
  return tx.Commit();
}

absl::StatusOr<std::vector<v1::LogLine>> SqliteStore::GetLogs(int64_t trial_id, int64_t after_id,
                                                              int limit, std::optional<int> rank) {
  Stmt s(db_,
         "SELECT id, allocation_id, agent_id, rank, stream, time_ms, message FROM logs "
         "WHERE trial_id = ? AND id > ? AND (? OR rank = ?) ORDER BY id LIMIT ?");
  s.Bind(1, trial_id).Bind(2, after_id).Bind(3, rank.has_value() ? 0 : 1);
  s.Bind(4, rank.value_or(0)).Bind(5, limit > 0 ? limit : 1000);
  std::vector<v1::LogLine> out;
  while (s.Step()) {
    v1::LogLine& l = out.emplace_back();
    l.set_id(s.Int(0));
    l.set_trial_id(trial_id);
    l.set_allocation_id(s.Text(1));
    l.set_agent_id(s.Text(2));
    l.set_rank(static_cast<int32_t>(s.Int(3)));
    l.set_stream(s.Text(4));
    l.set_time_ms(s.Int(5));
    l.set_message(s.Text(6));
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::Status SqliteStore::AddCheckpoint(const v1::Checkpoint& checkpoint) {
  Stmt s(db_,
         "INSERT INTO checkpoints (uuid, trial_id, total_batches, time_ms, data) "
         "VALUES (?, ?, ?, ?, ?)");
  s.Bind(1, checkpoint.uuid()).Bind(2, checkpoint.trial_id()).Bind(3, checkpoint.total_batches());
  s.Bind(4, checkpoint.report_time_ms()).BindBlob(5, checkpoint.SerializeAsString());
  return s.Run();
}

absl::StatusOr<int64_t> SqliteStore::InsertCheckpointGcTask(const v1::CheckpointGcTask& task) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_, "INSERT INTO checkpoint_gc_tasks (experiment_id, state, data) VALUES (?, ?, '')");
  RETURN_IF_ERROR(s.Bind(1, task.experiment_id()).Bind(2, task.state()).Run());
  v1::CheckpointGcTask stored = task;
  stored.set_id(sqlite3_last_insert_rowid(db_));
  RETURN_IF_ERROR(WriteCheckpointGcTask(stored));
  RETURN_IF_ERROR(tx.Commit());
  return stored.id();
}

absl::Status SqliteStore::WriteCheckpointGcTask(const v1::CheckpointGcTask& task) {
  Stmt s(db_, "UPDATE checkpoint_gc_tasks SET state = ?, data = ? WHERE id = ?");
  s.Bind(1, task.state()).BindBlob(2, task.SerializeAsString()).Bind(3, task.id());
  RETURN_IF_ERROR(s.Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("checkpoint GC task ", task.id(), " not in the database"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::UpdateCheckpointGcTask(const v1::CheckpointGcTask& task) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  RETURN_IF_ERROR(WriteCheckpointGcTask(task));
  if (task.state() == v1::STATE_COMPLETED) {
    Stmt get(db_, "SELECT data FROM checkpoints WHERE uuid = ?");
    Stmt put(db_, "UPDATE checkpoints SET data = ? WHERE uuid = ?");
    for (const v1::Checkpoint& c : task.checkpoints()) {
      get.Bind(1, c.uuid());
      bool found = get.Step();
      RETURN_IF_ERROR(get.status());
      v1::Checkpoint stored;
      if (found) RETURN_IF_ERROR(ParseRow(get.Text(0), &stored, "checkpoints"));
      get.Reset();
      if (!found) continue;
      stored.set_state(v1::STATE_DELETED);
      RETURN_IF_ERROR(put.BindBlob(1, stored.SerializeAsString()).Bind(2, c.uuid()).Run());
      put.Reset();
    }
  }
  return tx.Commit();
}

absl::StatusOr<std::vector<v1::Checkpoint>> SqliteStore::GetCheckpoints(int64_t trial_id) {
  Stmt s(db_, "SELECT data FROM checkpoints WHERE trial_id = ? ORDER BY total_batches, time_ms");
  s.Bind(1, trial_id);
  std::vector<v1::Checkpoint> out;
  while (s.Step()) RETURN_IF_ERROR(ParseRow(s.Text(0), &out.emplace_back(), "checkpoints"));
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::StatusOr<v1::Template> SqliteStore::PutTemplate(const std::string& name,
                                                      const std::string& config_yaml,
                                                      int64_t now_ms, bool* created) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  v1::Template t;
  t.set_name(name);
  t.set_config_yaml(config_yaml);
  t.set_create_time_ms(now_ms);
  t.set_update_time_ms(now_ms);
  {
    Stmt s(db_, "SELECT create_ms FROM templates WHERE name = ?");
    s.Bind(1, name);
    *created = !s.Step();
    RETURN_IF_ERROR(s.status());
    if (!*created) t.set_create_time_ms(s.Int(0));
  }
  Stmt s(db_,
         "INSERT INTO templates (name, config_yaml, create_ms, update_ms) VALUES (?, ?, ?, ?) "
         "ON CONFLICT(name) DO UPDATE SET config_yaml = excluded.config_yaml, "
         "update_ms = excluded.update_ms");
  s.Bind(1, name).Bind(2, config_yaml).Bind(3, t.create_time_ms()).Bind(4, now_ms);
  RETURN_IF_ERROR(s.Run());
  RETURN_IF_ERROR(tx.Commit());
  return t;
}

absl::StatusOr<v1::Template> SqliteStore::GetTemplate(const std::string& name) {
  Stmt s(db_, "SELECT config_yaml, create_ms, update_ms FROM templates WHERE name = ?");
  s.Bind(1, name);
  if (!s.Step()) {
    RETURN_IF_ERROR(s.status());
    return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
  }
  v1::Template t;
  t.set_name(name);
  t.set_config_yaml(s.Text(0));
  t.set_create_time_ms(s.Int(1));
  t.set_update_time_ms(s.Int(2));
  return t;
}

absl::StatusOr<std::vector<v1::Template>> SqliteStore::ListTemplates() {
  Stmt s(db_, "SELECT name, config_yaml, create_ms, update_ms FROM templates ORDER BY name");
  std::vector<v1::Template> out;
  while (s.Step()) {
    v1::Template& t = out.emplace_back();
    t.set_name(s.Text(0));
    t.set_config_yaml(s.Text(1));
    t.set_create_time_ms(s.Int(2));
    t.set_update_time_ms(s.Int(3));
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::Status SqliteStore::DeleteTemplate(const std::string& name) {
  Stmt s(db_, "DELETE FROM templates WHERE name = ?");
  RETURN_IF_ERROR(s.Bind(1, name).Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::AddSystemMetrics(const std::vector<v1::SystemMetrics>& samples,
                                           int64_t keep_after_ms) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_, "INSERT INTO system_metrics (agent_id, time_ms, data) VALUES (?, ?, ?)");
  for (const auto& m : samples) {
    RETURN_IF_ERROR(s.Bind(1, m.agent_id()).Bind(2, m.time_ms()).BindBlob(3, m.SerializeAsString()).Run());
    s.Reset();
  }
  Stmt old(db_, "DELETE FROM system_metrics WHERE time_ms < ?");
  RETURN_IF_ERROR(old.Bind(1, keep_after_ms).Run());
  return tx.Commit();
}

absl::StatusOr<std::vector<v1::SystemMetrics>> SqliteStore::GetSystemMetrics(
    const std::string& agent_id, int limit) {
  Stmt s(db_,
         "SELECT data FROM (SELECT id, data FROM system_metrics WHERE agent_id = ? "
         "ORDER BY time_ms DESC, id DESC LIMIT ?) ORDER BY id");
  s.Bind(1, agent_id).Bind(2, limit);
  std::vector<v1::SystemMetrics> out;
  while (s.Step()) RETURN_IF_ERROR(ParseRow(s.Text(0), &out.emplace_back(), "system_metrics"));
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::StatusOr<std::vector<UserRow>> SqliteStore::ListUsers() {
  Stmt s(db_, "SELECT id, username, password_hash, admin, created_ms FROM users ORDER BY id");
  std::vector<UserRow> out;
  while (s.Step()) {
    UserRow& u = out.emplace_back();
    u.id = s.Int(0);
    u.username = s.Text(1);
    u.password_hash = s.Text(2);
    u.admin = s.Int(3) != 0;
    u.created_ms = s.Int(4);
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::StatusOr<int64_t> SqliteStore::InsertUser(const UserRow& user) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  {
    Stmt exists(db_, "SELECT 1 FROM users WHERE username = ?");
    if (exists.Bind(1, user.username).Step()) {
      return absl::AlreadyExistsError(absl::StrCat("user '", user.username, "' already exists"));
    }
    RETURN_IF_ERROR(exists.status());
  }
  Stmt s(db_,
         "INSERT INTO users (username, password_hash, admin, created_ms) VALUES (?, ?, ?, ?)");
  s.Bind(1, user.username).Bind(2, user.password_hash).Bind(3, int64_t{user.admin ? 1 : 0});
  RETURN_IF_ERROR(s.Bind(4, user.created_ms).Run());
  int64_t id = sqlite3_last_insert_rowid(db_);
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status SqliteStore::SetUserPassword(int64_t user_id, const std::string& password_hash) {
  Stmt s(db_, "UPDATE users SET password_hash = ? WHERE id = ?");
  RETURN_IF_ERROR(s.Bind(1, password_hash).Bind(2, user_id).Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SessionRow>> SqliteStore::LoadSessions(int64_t now_ms) {
  Stmt expired(db_, "DELETE FROM sessions WHERE expires_ms <= ?");
  RETURN_IF_ERROR(expired.Bind(1, now_ms).Run());
  Stmt s(db_, "SELECT token_hash, user_id, created_ms, expires_ms FROM sessions");
  std::vector<SessionRow> out;
  while (s.Step()) {
    SessionRow& r = out.emplace_back();
    r.token_hash = s.Text(0);
    r.user_id = s.Int(1);
    r.created_ms = s.Int(2);
    r.expires_ms = s.Int(3);
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::Status SqliteStore::InsertSession(const SessionRow& session) {
  Stmt s(db_,
         "INSERT INTO sessions (token_hash, user_id, created_ms, expires_ms) VALUES (?, ?, ?, ?)");
  return s.Bind(1, session.token_hash)
      .Bind(2, session.user_id)
      .Bind(3, session.created_ms)
      .Bind(4, session.expires_ms)
      .Run();
}

absl::Status SqliteStore::DeleteSession(const std::string& token_hash) {
  Stmt s(db_, "DELETE FROM sessions WHERE token_hash = ?");
  return s.Bind(1, token_hash).Run();
}

absl::Status SqliteStore::DeleteUserSessions(int64_t user_id, const std::string& keep_token_hash) {
  Stmt s(db_, "DELETE FROM sessions WHERE user_id = ? AND token_hash != ?");
  return s.Bind(1, user_id).Bind(2, keep_token_hash).Run();
}

}  // namespace det::master
