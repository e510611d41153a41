// Store on an SQLite file: WAL journal, synchronous=FULL (a committed transaction survives
// a crash of the process or the machine), schema migrations applied on open.
#ifndef DET_MASTER_STORE_SQLITE_STORE_H_
#define DET_MASTER_STORE_SQLITE_STORE_H_

#include <memory>
#include <string>

#include "master/store/store.h"

struct sqlite3;

namespace det::master {

class SqliteStore : public Store {
 public:
  // Opens (creating if needed) the database at `path` and migrates it to the latest
  // schema. ":memory:" gives a private in-memory database (tests).
  // `max_size_mb` > 0 caps the database file; writes beyond it fail with
  // ResourceExhausted, as on a full disk, and change nothing.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path,
                                                           int64_t max_size_mb = 0);
  ~SqliteStore() override;

  // The schema version the database is at.
  int SchemaVersion();
  // Runs PRAGMA integrity_check; OK when it answers "ok".
  absl::Status CheckIntegrity();

  absl::StatusOr<StoreSnapshot> Load() override;
  absl::StatusOr<int64_t> InsertExperiment(const v1::Experiment& experiment,
                                           const std::string& context,
                                           std::vector<v1::Trial>* trials) override;
  absl::Status UpdateExperiment(const v1::Experiment& experiment) override;
  absl::StatusOr<std::string> GetExperimentContext(int64_t experiment_id) override;
  absl::StatusOr<std::string> GetExperimentContextSha256(int64_t experiment_id) override;
  absl::StatusOr<int64_t> InsertTrial(const v1::Trial& trial) override;
  absl::Status UpdateTrial(const v1::Trial& trial) override;
  absl::Status UpsertAllocation(const v1::Allocation& allocation,
                                const std::string& token) override;
  absl::Status UpsertAgent(const v1::Agent& agent) override;
  absl::Status SetAgentCredential(const v1::Agent& agent,
                                  const std::string& credential_hash) override;
  absl::Status AddMetrics(const std::vector<v1::Trial>& trials,
                          const std::vector<v1::Metrics>& metrics) override;
  absl::StatusOr<std::vector<v1::Metrics>> GetMetrics(int64_t trial_id,
                                                      const std::string& group) override;
  // A read-only connection of its own on the same file (5 s busy timeout); WAL lets it
  // read while this connection writes. FailedPrecondition for ":memory:" (a private
  // database no second connection can open).
  absl::StatusOr<std::unique_ptr<MetricsReader>> OpenReader() override;
  absl::StatusOr<int64_t> SupersedeMetrics(v1::Trial* trial, int32_t run_id,
                                           int64_t after_batches) override;
  absl::Status AddLogs(std::vector<v1::LogLine>* lines) override;
  absl::StatusOr<std::vector<v1::LogLine>> GetLogs(int64_t trial_id, int64_t after_id, int limit,
                                                   std::optional<int> rank) override;
  absl::Status AddCheckpoint(const v1::Checkpoint& checkpoint, const v1::Trial& trial) override;
  absl::StatusOr<std::vector<v1::Checkpoint>> GetCheckpoints(int64_t trial_id) override;
  absl::StatusOr<int64_t> InsertCheckpointGcTask(const v1::CheckpointGcTask& task) override;
  absl::Status UpdateCheckpointGcTask(const v1::CheckpointGcTask& task) override;
  absl::Status DeleteExperiment(int64_t experiment_id) override;
  absl::StatusOr<v1::Template> PutTemplate(const std::string& name, const std::string& config_yaml,
                                           const std::string& owner,
                                           int64_t now_ms, bool* created) override;
  absl::StatusOr<v1::Template> GetTemplate(const std::string& name) override;
  absl::StatusOr<std::vector<v1::Template>> ListTemplates() override;
  absl::Status DeleteTemplate(const std::string& name) override;
  absl::StatusOr<int64_t> InsertModel(const v1::Model& model) override;
  absl::Status UpdateModel(const v1::Model& model) override;
  absl::Status DeleteModel(int64_t model_id) override;
  absl::StatusOr<int64_t> InsertModelVersion(const v1::ModelVersion& version,
                                             const v1::Model& model) override;
  absl::Status DeleteModelVersion(int64_t version_id, const v1::Model& model) override;
  absl::Status UpdateModelVersion(const v1::ModelVersion& version, const v1::Model& model) override;
  absl::Status AddSystemMetrics(const std::vector<v1::SystemMetrics>& samples,
                                int64_t keep_after_ms) override;
  absl::StatusOr<std::vector<v1::SystemMetrics>> GetSystemMetrics(const std::string& agent_id,
                                                                  int limit) override;
  absl::StatusOr<std::vector<UserRow>> ListUsers() override;
  absl::StatusOr<int64_t> InsertUser(const UserRow& user) override;
  absl::Status SetUserPassword(int64_t user_id, const std::string& password_hash) override;
  absl::Status SetUserAgentUserGroup(int64_t user_id, const v1::AgentUserGroup& link) override;
  absl::Status SetUsername(int64_t user_id, const std::string& username) override;
  absl::StatusOr<std::vector<SessionRow>> LoadSessions(int64_t now_ms) override;
  absl::Status InsertSession(const SessionRow& session) override;
  absl::Status DeleteSession(const std::string& token_hash) override;
  absl::Status DeleteUserSessions(int64_t user_id, const std::string& keep_token_hash) override;

 private:
  SqliteStore(sqlite3* db, std::string path);
  absl::Status Exec(const std::string& sql);
  absl::Status Migrate();
  absl::Status WriteTrial(const v1::Trial& trial);
  absl::Status WriteCheckpointGcTask(const v1::CheckpointGcTask& task);
  // Inserts `trial` (inside the caller's transaction) and returns its id.
  absl::StatusOr<int64_t> InsertTrialRow(const v1::Trial& trial);
  // Writes `model`'s row (by id; inside the caller's transaction, if any).
  absl::Status WriteModel(const v1::Model& model);

  sqlite3* db_;
  std::string path_;
};

}  // namespace det::master

#endif  // DET_MASTER_STORE_SQLITE_STORE_H_
