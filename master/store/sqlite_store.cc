#include "master/store/sqlite_store.h"

#include <sqlite3.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/status/status_macros.h"
#include "common/rpc/context_sha256.h"
#include "master/store/sqlite_internal.h"
#include "master/store/metric_records.h"
#include "master/store/metric_summary.h"
#include "master/store/metric_values_json.h"

namespace det::master {
namespace {

using sqlite_internal::ParseRow;
using sqlite_internal::SqlError;
using sqlite_internal::Stmt;
using sqlite_internal::Transaction;

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
    Stmt s(db_, "SELECT data, credential_hash FROM agents ORDER BY id");
    while (s.Step()) {
      RETURN_IF_ERROR(ParseRow(s.Text(0), &snap.agents.emplace_back(), "agents"));
      std::string hash = s.Text(1);
      if (!hash.empty()) snap.agent_credential_hashes[snap.agents.back().id()] = std::move(hash);
    }
    RETURN_IF_ERROR(s.status());
  }
  {
    Stmt s(db_, "SELECT data FROM checkpoint_gc_tasks ORDER BY id");
    while (s.Step()) {
      RETURN_IF_ERROR(ParseRow(s.Text(0), &snap.checkpoint_gc_tasks.emplace_back(), "checkpoint_gc_tasks"));
    }
    RETURN_IF_ERROR(s.status());
  }
  {
    Stmt s(db_, "SELECT data FROM models ORDER BY id");
    while (s.Step()) RETURN_IF_ERROR(ParseRow(s.Text(0), &snap.models.emplace_back(), "models"));
    RETURN_IF_ERROR(s.status());
  }
  {
    Stmt s(db_, "SELECT data FROM model_versions ORDER BY id");
    while (s.Step()) {
      RETURN_IF_ERROR(ParseRow(s.Text(0), &snap.model_versions.emplace_back(), "model_versions"));
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
         "INSERT INTO experiments (name, state, start_ms, config_yaml, context, context_sha256, "
         "data) VALUES (?, ?, ?, ?, ?, ?, '')");
  s.Bind(1, experiment.name()).Bind(2, experiment.state()).Bind(3, experiment.start_time_ms());
  s.Bind(4, experiment.config_yaml()).BindBlob(5, context).Bind(6, rpc::ContextSha256(context));
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

namespace {

// One column of experiment `experiment_id`'s row.
absl::StatusOr<std::string> ReadExperimentColumn(sqlite3* db, const char* column,
                                                 int64_t experiment_id) {
  const std::string sql = absl::StrCat("SELECT ", column, " FROM experiments WHERE id = ?");
  Stmt s(db, sql.c_str());
  s.Bind(1, experiment_id);
  if (!s.Step()) {
    RETURN_IF_ERROR(s.status());
    return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not found"));
  }
  return s.Text(0);
}

}  // namespace

absl::StatusOr<std::string> SqliteStore::GetExperimentContext(int64_t experiment_id) {
  return ReadExperimentColumn(db_, "context", experiment_id);
}

absl::StatusOr<std::string> SqliteStore::GetExperimentContextSha256(int64_t experiment_id) {
  return ReadExperimentColumn(db_, "context_sha256", experiment_id);
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

absl::Status SqliteStore::SetAgentCredential(const v1::Agent& agent,
                                             const std::string& credential_hash) {
  Stmt s(db_,
         "INSERT INTO agents (id, data, credential_hash) VALUES (?, ?, ?) "
         "ON CONFLICT(id) DO UPDATE SET data = excluded.data, "
         "credential_hash = excluded.credential_hash");
  return s.Bind(1, agent.id()).BindBlob(2, agent.SerializeAsString()).Bind(3, credential_hash).Run();
}

absl::Status SqliteStore::AddMetrics(const std::vector<v1::Trial>& trials,
                                     const std::vector<v1::Metrics>& metrics) {
  const std::vector<MetricRecordBuilder> records = BuildMetricRecords(metrics);
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_,
         "INSERT INTO metric_records (trial_id, grp, n, min_run_id, max_batches, rows) "
         "VALUES (?, ?, ?, ?, ?, ?)");
  for (const auto& r : records) {
    s.Bind(1, r.trial_id()).Bind(2, r.group()).Bind(3, r.count()).Bind(4, r.min_run_id());
    s.Bind(5, r.max_batches()).Bind(6, r.Finish());
    RETURN_IF_ERROR(s.Run());
    s.Reset();
  }
  for (const auto& t : trials) RETURN_IF_ERROR(WriteTrial(t));
  return tx.Commit();
}

namespace {

// Rows of `trial_id` (of `group` unless empty) on connection `db`, in report order.
absl::StatusOr<std::vector<v1::Metrics>> ReadMetrics(sqlite3* db, int64_t trial_id,
                                                     const std::string& group) {
  Stmt s(db,
         "SELECT grp, rows FROM metric_records "
         "WHERE trial_id = ? AND (? = '' OR grp = ?) ORDER BY id");
  s.Bind(1, trial_id).Bind(2, group).Bind(3, group);
  std::vector<v1::Metrics> out;
  while (s.Step()) {
    RETURN_IF_ERROR(AppendMetricRecordRows(s.Text(1), trial_id, s.Text(0), nullptr, &out));
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

// OK when `table` has the row of id `id`; NotFound "<what> ID not found" when not.
absl::Status CheckStored(sqlite3* db, const char* table, const char* what, int64_t id) {
  const std::string sql = absl::StrCat("SELECT 1 FROM ", table, " WHERE id = ?");
  Stmt s(db, sql.c_str());
  if (s.Bind(1, id).Step()) return absl::OkStatus();
  RETURN_IF_ERROR(s.status());
  return absl::NotFoundError(absl::StrCat(what, " ", id, " not found"));
}

// MetricsReader::GetTrialMetrics on connection `db`, in one read transaction: each group's
// rows are counted from its records' counts (the records stepped through on the index
// metric_records_by_trial alone), and only the records holding a row at the positions
// DownsamplePositions chooses are then read whole (and only those rows parsed).
absl::StatusOr<std::vector<v1::Metrics>> ReadTrialMetrics(sqlite3* db, int64_t trial_id,
                                                          const std::string& group,
                                                          int max_points) {
  Transaction tx(db, "BEGIN");
  RETURN_IF_ERROR(tx.status());
  RETURN_IF_ERROR(CheckStored(db, "trials", "trial", trial_id));
  if (max_points <= 0) return ReadMetrics(db, trial_id, group);
  // The records' counts in each group's order, then the records holding the chosen rows.
  std::vector<MetricRecordExtent> extents;
  {
    Stmt scan(db,
              "SELECT grp, id, n FROM metric_records WHERE trial_id = ? AND (? = '' OR grp = ?) "
              "ORDER BY grp, id");
    scan.Bind(1, trial_id).Bind(2, group).Bind(3, group);
    while (scan.Step()) extents.push_back({scan.Text(0), scan.Int(1), scan.Int(2)});
    RETURN_IF_ERROR(scan.status());
  }
  // record id -> indexes of its rows
  std::map<int64_t, std::vector<int64_t>> picks = PickDownsampledRows(extents, max_points);
  std::string ids = "[";
  for (const auto& [id, unused] : picks) absl::StrAppend(&ids, ids.size() > 1 ? "," : "", id);
  ids += "]";
  Stmt s(db,
         "SELECT id, grp, rows FROM metric_records "
         "WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id");
  s.Bind(1, ids);
  std::vector<v1::Metrics> out;
  while (s.Step()) {
    auto it = picks.find(s.Int(0));
    if (it == picks.end()) continue;
    RETURN_IF_ERROR(AppendMetricRecordRows(s.Text(2), trial_id, s.Text(1), &it->second, &out));
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

// Store::GetLogs on connection `db`.
absl::StatusOr<std::vector<v1::LogLine>> ReadLogs(sqlite3* db, int64_t trial_id, int64_t after_id,
                                                  int limit, std::optional<int> rank) {
  Stmt s(db,
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

// Store::GetCheckpoints on connection `db`.
absl::StatusOr<std::vector<v1::Checkpoint>> ReadCheckpoints(sqlite3* db, int64_t trial_id) {
  Stmt s(db, "SELECT data FROM checkpoints WHERE trial_id = ? ORDER BY total_batches, time_ms");
  s.Bind(1, trial_id);
  std::vector<v1::Checkpoint> out;
  while (s.Step()) RETURN_IF_ERROR(ParseRow(s.Text(0), &out.emplace_back(), "checkpoints"));
  RETURN_IF_ERROR(s.status());
  return out;
}

// A read-only connection of its own; one query at a time.
class SqliteMetricsReader : public MetricsReader {
 public:
  explicit SqliteMetricsReader(sqlite3* db) : db_(db) {}
  ~SqliteMetricsReader() override { sqlite3_close(db_); }

  absl::StatusOr<std::vector<v1::Metrics>> GetMetrics(int64_t trial_id,
                                                      const std::string& group) override {
    absl::MutexLock l(&mu_);
    return ReadMetrics(db_, trial_id, group);
  }
  absl::StatusOr<std::vector<v1::Metrics>> GetTrialMetrics(int64_t trial_id,
                                                           const std::string& group,
                                                           int max_points) override {
    absl::MutexLock l(&mu_);
    return ReadTrialMetrics(db_, trial_id, group, max_points);
  }
  absl::StatusOr<std::vector<v1::LogLine>> GetLogs(int64_t trial_id, int64_t after_id, int limit,
                                                   std::optional<int> rank) override {
    absl::MutexLock l(&mu_);
    return ReadLogs(db_, trial_id, after_id, limit, rank);
  }
  absl::StatusOr<std::vector<v1::Checkpoint>> GetCheckpoints(int64_t trial_id) override {
    absl::MutexLock l(&mu_);
    return ReadCheckpoints(db_, trial_id);
  }
  absl::StatusOr<std::vector<int64_t>> GetTrialIds(int64_t experiment_id) override {
    absl::MutexLock l(&mu_);
    Transaction tx(db_, "BEGIN");
    RETURN_IF_ERROR(tx.status());
    RETURN_IF_ERROR(CheckStored(db_, "experiments", "experiment", experiment_id));
    Stmt s(db_, "SELECT id FROM trials WHERE experiment_id = ? ORDER BY id");
    s.Bind(1, experiment_id);
    std::vector<int64_t> out;
    while (s.Step()) out.push_back(s.Int(0));
    RETURN_IF_ERROR(s.status());
    return out;
  }
  absl::StatusOr<v1::Checkpoint> GetCheckpoint(const std::string& uuid) override {
    absl::MutexLock l(&mu_);
    Stmt s(db_,
           "SELECT c.data, t.experiment_id FROM checkpoints c JOIN trials t ON t.id = c.trial_id "
           "WHERE c.uuid = ?");
    if (!s.Bind(1, uuid).Step()) {
      RETURN_IF_ERROR(s.status());
      return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, " not found"));
    }
    v1::Checkpoint c;
    RETURN_IF_ERROR(ParseRow(s.Text(0), &c, "checkpoints"));
    c.set_experiment_id(s.Int(1));
    return c;
  }
  absl::StatusOr<std::string> GetExperimentContext(int64_t experiment_id) override {
    absl::MutexLock l(&mu_);
    return ReadExperimentColumn(db_, "context", experiment_id);
  }

 private:
  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::vector<v1::Metrics>> SqliteStore::GetMetrics(int64_t trial_id,
                                                                 const std::string& group) {
  return ReadMetrics(db_, trial_id, group);
}

absl::StatusOr<std::unique_ptr<MetricsReader>> SqliteStore::OpenReader() {
  if (path_.empty() || path_ == ":memory:") {
    return absl::FailedPreconditionError(absl::StrCat(
        "database '", path_, "' is private to its connection: no reader can open it"));
  }
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path_.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open database '", path_, "' to read: ", msg));
  }
  sqlite3_busy_timeout(db, 5000);
  return std::unique_ptr<MetricsReader>(new SqliteMetricsReader(db));
}

absl::StatusOr<int64_t> SqliteStore::SupersedeMetrics(v1::Trial* trial, int32_t run_id,
                                                      int64_t after_batches) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  // Only records that may hold such a row are read; each is rewritten without them (in
  // place, keeping its id and so its rows' order) or deleted when none is left.
  int64_t deleted = 0;
  {
    Stmt s(db_,
           "SELECT id, grp, rows FROM metric_records "
           "WHERE trial_id = ? AND min_run_id < ? AND max_batches > ?");
    s.Bind(1, trial->id()).Bind(2, run_id).Bind(3, after_batches);
    Stmt del(db_, "DELETE FROM metric_records WHERE id = ?");
    Stmt put(db_,
             "UPDATE metric_records SET n = ?, min_run_id = ?, max_batches = ?, rows = ? "
             "WHERE id = ?");
    std::vector<std::pair<int64_t, std::vector<v1::Metrics>>> touched;
    while (s.Step()) {
      std::vector<v1::Metrics> rows;
      RETURN_IF_ERROR(AppendMetricRecordRows(s.Text(2), trial->id(), s.Text(1), nullptr, &rows));
      touched.emplace_back(s.Int(0), std::move(rows));
    }
    RETURN_IF_ERROR(s.status());
    for (auto& [id, rows] : touched) {
      MetricRecordBuilder kept(trial->id(), "");
      const int64_t dropped = KeepUnsupersededRows(rows, run_id, after_batches, &kept);
      if (dropped == 0) continue;
      deleted += dropped;
      if (kept.count() == 0) {
        RETURN_IF_ERROR(del.Bind(1, id).Run());
        del.Reset();
        continue;
      }
      put.Bind(1, kept.count()).Bind(2, kept.min_run_id()).Bind(3, kept.max_batches());
      RETURN_IF_ERROR(put.Bind(4, kept.Finish()).Bind(5, id).Run());
      put.Reset();
    }
  }
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
  return ReadLogs(db_, trial_id, after_id, limit, rank);
}

absl::Status SqliteStore::AddCheckpoint(const v1::Checkpoint& checkpoint, const v1::Trial& trial) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_,
         "INSERT INTO checkpoints (uuid, trial_id, total_batches, time_ms, data) "
         "VALUES (?, ?, ?, ?, ?)");
  s.Bind(1, checkpoint.uuid()).Bind(2, checkpoint.trial_id()).Bind(3, checkpoint.total_batches());
  s.Bind(4, checkpoint.report_time_ms()).BindBlob(5, checkpoint.SerializeAsString());
  RETURN_IF_ERROR(s.Run());
  RETURN_IF_ERROR(WriteTrial(trial));
  return tx.Commit();
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

absl::Status SqliteStore::DeleteExperiment(int64_t experiment_id) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  // Children before parents (foreign keys).
  for (const char* sql : {
           "DELETE FROM metric_records WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = "
           "?)",
           "DELETE FROM logs WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = ?)",
           "DELETE FROM checkpoints WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = "
           "?)",
           "DELETE FROM allocations WHERE trial_id IN (SELECT id FROM trials WHERE experiment_id = "
           "?)",
           "DELETE FROM checkpoint_gc_tasks WHERE experiment_id = ?",
           "DELETE FROM trials WHERE experiment_id = ?",
       }) {
    Stmt s(db_, sql);
    RETURN_IF_ERROR(s.Bind(1, experiment_id).Run());
  }
  Stmt e(db_, "DELETE FROM experiments WHERE id = ?");
  RETURN_IF_ERROR(e.Bind(1, experiment_id).Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not in the database"));
  }
  return tx.Commit();
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
  return ReadCheckpoints(db_, trial_id);
}

}  // namespace det::master
