// Store on a PostgreSQL database (libpq): the same tables and migrations as SqliteStore in
// PostgreSQL's dialect, every write committed (synchronous_commit as the server has it,
// "on" by default) before the call returns OK, statements prepared once per connection.
// A lost connection fails calls with Unavailable and is reconnected by the next call; a
// write that failed so may or may not have committed only when the connection broke
// during its COMMIT.
#ifndef DET_MASTER_STORE_POSTGRES_STORE_H_
#define DET_MASTER_STORE_POSTGRES_STORE_H_

#include <memory>
#include <string>

#include "master/store/store.h"

namespace det::master {

namespace postgres_internal {
class Connection;
}  // namespace postgres_internal

class PostgresStore : public Store {
 public:
  // Connects to the database at `conninfo` (a libpq URI "postgresql://user@host/db?..." or
  // "key=value" list; a password is best kept out of it: `password` is used unless empty)
  // and migrates it to the latest schema. Unavailable when the server cannot be reached;
  // FailedPrecondition for a refused login or a schema newer than this master's.
  static absl::StatusOr<std::unique_ptr<PostgresStore>> Open(const std::string& conninfo,
                                                             const std::string& password = "");
  ~PostgresStore() override;

  // The schema version the database is at; -1 when it cannot be read.
  int SchemaVersion();

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
  // A connection of its own to the same database.
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
  PostgresStore(std::unique_ptr<postgres_internal::Connection> conn, std::string conninfo,
                std::string password);
  absl::Status Migrate();
  absl::Status WriteTrial(const v1::Trial& trial);
  absl::Status WriteCheckpointGcTask(const v1::CheckpointGcTask& task);
  // Inserts `trial` (inside the caller's transaction) and returns its id.
  absl::StatusOr<int64_t> InsertTrialRow(const v1::Trial& trial);
  // Writes `model`'s row (by id; inside the caller's transaction, if any).
  absl::Status WriteModel(const v1::Model& model);

  std::unique_ptr<postgres_internal::Connection> conn_;
  const std::string conninfo_;
  const std::string password_;
};

// The database password given by the variable `env` (when not empty) or else the first line
// of the file `file` (when not empty); "" for neither (libpq's ~/.pgpass or PGPASSWORD may
// still give one). FAILED_PRECONDITION naming `env_what` / `file_what` (the key or flag that
// named them) when the variable is unset or the file unreadable.
absl::StatusOr<std::string> ReadDatabasePassword(const std::string& env,
                                                 absl::string_view env_what,
                                                 const std::string& file,
                                                 absl::string_view file_what);

}  // namespace det::master

#endif  // DET_MASTER_STORE_POSTGRES_STORE_H_
