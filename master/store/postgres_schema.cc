// PostgresStore: the schema and its migrations.
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "master/store/postgres_internal.h"
#include "master/store/postgres_store.h"
#include "master/store/schema_version.h"

namespace det::master {
namespace {

using postgres_internal::Result;
using postgres_internal::Transaction;

// Schema migrations, applied in order; schema_version holds how many are applied.
// Migration N is sqlite_schema.cc's migration N (read its comment for what it is for) in
// PostgreSQL's dialect: BIGINT for INTEGER, BYTEA for BLOB (and for log lines, which need
// not be UTF-8), ids assigned from id_sequences (see ReserveIds) instead of AUTOINCREMENT.
// Append only: never edit a migration that has shipped.
const char* const kMigrations[] = {
    // 1: initial schema. Allocations load in order of first insertion: `seq` (SQLite's
    // rowid).
    R"sql(
CREATE TABLE id_sequences (name TEXT PRIMARY KEY, last BIGINT NOT NULL);
CREATE TABLE cluster (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE experiments (
  id BIGINT PRIMARY KEY,
  name TEXT NOT NULL,
  state BIGINT NOT NULL,
  start_ms BIGINT NOT NULL,
  config_yaml TEXT NOT NULL,
  context BYTEA,
  data BYTEA NOT NULL);
CREATE TABLE trials (
  id BIGINT PRIMARY KEY,
  experiment_id BIGINT NOT NULL REFERENCES experiments(id),
  state BIGINT NOT NULL,
  data BYTEA NOT NULL);
CREATE INDEX trials_by_experiment ON trials(experiment_id);
CREATE TABLE allocations (
  id TEXT PRIMARY KEY,
  seq BIGSERIAL NOT NULL,
  trial_id BIGINT NOT NULL REFERENCES trials(id),
  state BIGINT NOT NULL,
  token TEXT NOT NULL,
  data BYTEA NOT NULL);
CREATE INDEX allocations_by_trial ON allocations(trial_id);
CREATE TABLE agents (id TEXT PRIMARY KEY, data BYTEA NOT NULL);
CREATE TABLE metrics (
  id BIGINT PRIMARY KEY,
  trial_id BIGINT NOT NULL,
  run_id BIGINT NOT NULL,
  grp TEXT NOT NULL,
  total_batches BIGINT NOT NULL,
  time_ms BIGINT NOT NULL,
  vals TEXT NOT NULL);
CREATE INDEX metrics_by_trial ON metrics(trial_id, grp, id);
CREATE TABLE logs (
  id BIGINT PRIMARY KEY,
  trial_id BIGINT NOT NULL,
  allocation_id TEXT NOT NULL,
  agent_id TEXT NOT NULL,
  rank BIGINT NOT NULL,
  stream TEXT NOT NULL,
  time_ms BIGINT NOT NULL,
  message BYTEA NOT NULL);
CREATE INDEX logs_by_trial ON logs(trial_id, id);
CREATE TABLE checkpoints (
  uuid TEXT PRIMARY KEY,
  trial_id BIGINT NOT NULL,
  total_batches BIGINT NOT NULL,
  time_ms BIGINT NOT NULL,
  data BYTEA NOT NULL);
CREATE INDEX checkpoints_by_trial ON checkpoints(trial_id);
)sql",
    // 2
    R"sql(
CREATE TABLE templates (
  name TEXT PRIMARY KEY,
  config_yaml TEXT NOT NULL,
  create_ms BIGINT NOT NULL,
  update_ms BIGINT NOT NULL);
)sql",
    // 3
    R"sql(
CREATE TABLE system_metrics (
  id BIGINT PRIMARY KEY,
  agent_id TEXT NOT NULL,
  time_ms BIGINT NOT NULL,
  data BYTEA NOT NULL);
CREATE INDEX system_metrics_by_agent ON system_metrics(agent_id, time_ms);
CREATE INDEX system_metrics_by_time ON system_metrics(time_ms);
)sql",
    // 4
    R"sql(
CREATE TABLE users (
  id BIGINT PRIMARY KEY,
  username TEXT NOT NULL UNIQUE,
  password_hash TEXT NOT NULL,
  admin BIGINT NOT NULL,
  created_ms BIGINT NOT NULL);
CREATE TABLE sessions (
  token_hash TEXT PRIMARY KEY,
  user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  created_ms BIGINT NOT NULL,
  expires_ms BIGINT NOT NULL);
CREATE INDEX sessions_by_user ON sessions(user_id);
)sql",
    // 5
    R"sql(
CREATE TABLE checkpoint_gc_tasks (
  id BIGINT PRIMARY KEY,
  experiment_id BIGINT NOT NULL REFERENCES experiments(id),
  state BIGINT NOT NULL,
  data BYTEA NOT NULL);
CREATE INDEX checkpoint_gc_tasks_by_experiment ON checkpoint_gc_tasks(experiment_id);
)sql",
    // 6
    R"sql(
ALTER TABLE templates ADD COLUMN owner TEXT NOT NULL DEFAULT '';
)sql",
    // 7
    R"sql(
ALTER TABLE users ADD COLUMN agent_user TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN agent_uid BIGINT NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN agent_group TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN agent_gid BIGINT NOT NULL DEFAULT 0;
)sql",
    // 8
    R"sql(
ALTER TABLE experiments ADD COLUMN context_sha256 TEXT NOT NULL DEFAULT '';
)sql",
    // 9
    R"sql(
ALTER TABLE agents ADD COLUMN credential_hash TEXT NOT NULL DEFAULT '';
)sql",
    // 10
    R"sql(
CREATE TABLE models (
  id BIGINT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  data BYTEA NOT NULL);
CREATE TABLE model_versions (
  id BIGINT PRIMARY KEY,
  model_id BIGINT NOT NULL REFERENCES models(id),
  version BIGINT NOT NULL,
  checkpoint_uuid TEXT NOT NULL,
  data BYTEA NOT NULL,
  UNIQUE (model_id, version));
CREATE INDEX model_versions_by_checkpoint ON model_versions(checkpoint_uuid);
)sql",
    // 11: metric rows as records (metric_records.h), as sqlite_schema.cc's 11: each row of
    // the old table becomes a record of its own with the row's id, in the old order, and
    // record ids go on from the old rows' (the id sequence is renamed). The view `metrics`
    // shows the records as the old table's rows (ids record_id * 4096 + index), for people
    // and tools reading the database with psql.
    R"sql(
CREATE TABLE metric_records (
  id BIGINT PRIMARY KEY,
  trial_id BIGINT NOT NULL,
  grp TEXT NOT NULL,
  n BIGINT NOT NULL,
  min_run_id BIGINT NOT NULL,
  max_batches BIGINT NOT NULL,
  rows TEXT NOT NULL);
INSERT INTO metric_records (id, trial_id, grp, n, min_run_id, max_batches, rows)
  SELECT id, trial_id, grp, 1, run_id, total_batches,
         '[[' || run_id || ',' || total_batches || ',' || time_ms || ',' || vals || ']]'
  FROM metrics ORDER BY id;
CREATE INDEX metric_records_by_trial ON metric_records(trial_id, grp, id);
UPDATE id_sequences SET name = 'metric_records' WHERE name = 'metrics';
DROP TABLE metrics;
CREATE VIEW metrics (id, trial_id, run_id, grp, total_batches, time_ms, vals) AS
  SELECT r.id * 4096 + e.k - 1, r.trial_id, (e.value->>0)::bigint, r.grp,
         (e.value->>1)::bigint, (e.value->>2)::bigint, e.value->>3
  FROM metric_records r, json_array_elements(r.rows::json) WITH ORDINALITY AS e(value, k);
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kStoreSchemaVersion,
              "a migration is added to every backend (sqlite_schema.cc too)");

// Any key: masters sharing a database migrate it one at a time.
constexpr int64_t kMigrationLock = 0x64657400;  // "det\0"

}  // namespace

int PostgresStore::SchemaVersion() {
  auto r = conn_->Exec("SELECT version FROM schema_version");
  if (!r.ok() || r->rows() != 1) return -1;
  return static_cast<int>(r->Int(0, 0));
}

absl::Status PostgresStore::Migrate() {
  const int want = kStoreSchemaVersion;
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  RETURN_IF_ERROR(conn_->Exec("SELECT pg_advisory_xact_lock($1)", {kMigrationLock}).status());
  RETURN_IF_ERROR(conn_->ExecScript(
      "CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)"));
  ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT version FROM schema_version"));
  int have = 0;
  if (r.rows() == 0) {
    RETURN_IF_ERROR(conn_->Exec("INSERT INTO schema_version (version) VALUES (0)").status());
  } else {
    have = static_cast<int>(r.Int(0, 0));
  }
  if (have > want) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database has schema version ", have, ", newer than this master's ", want,
        ": run a newer det-master"));
  }
  // All in one transaction: PostgreSQL's DDL is transactional.
  for (int v = have; v < want; ++v) {
    RETURN_IF_ERROR(conn_->ExecScript(kMigrations[v]));
    RETURN_IF_ERROR(conn_->Exec("UPDATE schema_version SET version = $1", {v + 1}).status());
  }
  // A database that builds before migration 11 converted rows left at version 11 with the
  // metrics table of one row each (their 11 was a no-op) is converted now.
  if (have >= 11) {
    ASSIGN_OR_RETURN(Result records,
                     conn_->Exec("SELECT to_regclass('metric_records') IS NULL"));
    if (records.Int(0, 0) != 0) RETURN_IF_ERROR(conn_->ExecScript(kMigrations[10]));
  }
  return tx.Commit();
}

}  // namespace det::master
