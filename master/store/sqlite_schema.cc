// SqliteStore: the schema and its migrations.
#include "master/store/sqlite_store.h"

#include <sqlite3.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "master/store/schema_version.h"
#include "master/store/sqlite_internal.h"

namespace det::master {
namespace {

using sqlite_internal::ParseRow;
using sqlite_internal::SqlError;
using sqlite_internal::Stmt;
using sqlite_internal::Transaction;

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
    // 6: a template's owner (only the owner or an admin may replace or remove it); ""
    // for templates made before (admins only).
    R"sql(
ALTER TABLE templates ADD COLUMN owner TEXT NOT NULL DEFAULT '';
)sql",
    // 7: the OS user a user's workers run as (det user link-with-agent-user); '' and 0:
    // not linked.
    R"sql(
ALTER TABLE users ADD COLUMN agent_user TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN agent_uid INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN agent_group TEXT NOT NULL DEFAULT '';
ALTER TABLE users ADD COLUMN agent_gid INTEGER NOT NULL DEFAULT 0;
)sql",
    // 8: the SHA-256 of an experiment's model context, which agents cache contexts by; ''
    // for experiments stored before (unknown: agents fetch without caching).
    R"sql(
ALTER TABLE experiments ADD COLUMN context_sha256 TEXT NOT NULL DEFAULT '';
)sql",
    // 9: the SHA-256 (hex) of each agent's credential; '' for agents stored before, or
    // reset by an admin (their next registration enrolls them anew).
    R"sql(
ALTER TABLE agents ADD COLUMN credential_hash TEXT NOT NULL DEFAULT '';
)sql",
    // 10: the model registry (det model ...): models by unique name and their versions,
    // each naming a checkpoint (not a foreign key: the checkpoint's experiment may not be
    // deleted while a version names it, which the master checks); the message in `data`.
    R"sql(
CREATE TABLE models (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  name TEXT NOT NULL UNIQUE,
  data BLOB NOT NULL);
CREATE TABLE model_versions (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  model_id INTEGER NOT NULL REFERENCES models(id),
  version INTEGER NOT NULL,
  checkpoint_uuid TEXT NOT NULL,
  data BLOB NOT NULL,
  UNIQUE (model_id, version));
CREATE INDEX model_versions_by_checkpoint ON model_versions(checkpoint_uuid);
)sql",
    // 11: metric rows as records (metric_records.h): the rows of one trial and group that
    // one AddMetrics stored one after another are one SQL row, `rows` a JSON array of
    // [run_id, total_batches, time_ms, values]; n counts them, min_run_id and max_batches
    // bound them (for SupersedeMetrics). Each row of the old table becomes a record of its
    // own, in the old table's order. The view `metrics` shows the records as the old
    // table's rows (ids record_id * 4096 + index: kMetricRecordRowsMax), for people and
    // tools reading the database with sqlite3.
    R"sql(
CREATE TABLE metric_records (
  id INTEGER PRIMARY KEY,
  trial_id INTEGER NOT NULL,
  grp TEXT NOT NULL,
  n INTEGER NOT NULL,
  min_run_id INTEGER NOT NULL,
  max_batches INTEGER NOT NULL,
  rows TEXT NOT NULL);
CREATE INDEX metric_records_by_trial ON metric_records(trial_id, grp, id);
INSERT INTO metric_records (id, trial_id, grp, n, min_run_id, max_batches, rows)
  SELECT id, trial_id, grp, 1, run_id, total_batches,
         '[[' || run_id || ',' || total_batches || ',' || time_ms || ',' || vals || ']]'
  FROM metrics ORDER BY id;
DROP TABLE metrics;
CREATE VIEW metrics (id, trial_id, run_id, grp, total_batches, time_ms, vals) AS
  SELECT r.id * 4096 + e.key, r.trial_id, json_extract(e.value, '$[0]'), r.grp,
         json_extract(e.value, '$[1]'), json_extract(e.value, '$[2]'),
         json_extract(e.value, '$[3]')
  FROM metric_records r, json_each(r.rows) e;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kStoreSchemaVersion,
              "a migration is added to every backend (postgres_schema.cc too)");

}  // namespace

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

}  // namespace det::master
