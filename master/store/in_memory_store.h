// Store kept in process memory, held to the same contract as SqliteStore (the conformance
// suite in in_memory_store_test.cc runs the same cases against both): ids count from 1 per
// kind and are never reused; orderings, filters, retention and errors are SqliteStore's,
// including its integrity checks: a row naming a missing parent (a trial of no experiment,
// an allocation of no trial, a GC task of no experiment, a session of no user) fails with
// Internal "FOREIGN KEY constraint failed", a second checkpoint or session with the same key
// with Internal "UNIQUE constraint failed: <table>.<column>". A call that fails changes
// nothing. What is stored is what SqliteStore keeps: trials without their allocation,
// metric rows with their finite values only.
//
// Nothing survives the object. To simulate a master restart, keep the InMemoryStore and hand
// each master a FaultInjectingStore(Store&) over it (or any other non-owning wrapper).
//
// Thread-safe: every call is atomic (one mutex), as calls on SqliteStore's connection are.
#ifndef DET_MASTER_STORE_IN_MEMORY_STORE_H_
#define DET_MASTER_STORE_IN_MEMORY_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "master/store/store.h"

namespace det::master {

class InMemoryStore : public Store {
 public:
  InMemoryStore() = default;
  InMemoryStore(const InMemoryStore&) = delete;
  InMemoryStore& operator=(const InMemoryStore&) = delete;

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
  // Reads through this store (its mutex makes every call atomic).
  // The reads of MetricsReader (its reader forwards to them).
  absl::StatusOr<std::vector<v1::Metrics>> GetTrialMetrics(int64_t trial_id,
                                                           const std::string& group,
                                                           int max_points);
  absl::StatusOr<std::vector<int64_t>> GetTrialIds(int64_t experiment_id);
  absl::StatusOr<v1::Checkpoint> GetCheckpoint(const std::string& uuid);
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
  struct ExperimentRow {
    v1::Experiment experiment;
    std::string context;
    std::string context_sha256;
  };
  struct AllocationRow {
    int64_t seq = 0;  // Order of first insertion (SqliteStore's rowid).
    v1::Allocation allocation;
    std::string token;  // Kept from the first insertion, as SqliteStore's upsert does.
  };
  struct CheckpointRow {
    int64_t seq = 0;
    v1::Checkpoint checkpoint;
  };
  struct SystemMetricsRow {
    int64_t id = 0;
    v1::SystemMetrics sample;
  };

  // NotFound "trial N not in the database" unless stored.
  absl::Status CheckTrialStored(int64_t trial_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `field` of experiment `experiment_id`'s row; NotFound "experiment N not found".
  absl::StatusOr<std::string> ExperimentField(int64_t experiment_id,
                                              std::string ExperimentRow::*field);
  // Stores `trial` (a stored trial's row replaced) without its allocation.
  void WriteTrial(const v1::Trial& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts `trial` under a new id and returns it. REQUIRES: its experiment is stored.
  int64_t InsertTrialRow(const v1::Trial& trial) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<v1::Metrics> MetricsOf(int64_t trial_id, const std::string& group) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::string cluster_id_ ABSL_GUARDED_BY(mu_);
  // The last id handed out per kind (SQLite's AUTOINCREMENT sequences).
  int64_t last_experiment_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_trial_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_log_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_gc_task_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_user_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_system_metrics_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;

  std::map<int64_t, ExperimentRow> experiments_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, v1::Trial> trials_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, AllocationRow> allocations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::Agent> agents_ ABSL_GUARDED_BY(mu_);
  // Agent id -> credential hash; absent: none.
  std::map<std::string, std::string> agent_credential_hashes_ ABSL_GUARDED_BY(mu_);
  // Per trial, in report order.
  std::map<int64_t, std::vector<v1::Metrics>> metrics_ ABSL_GUARDED_BY(mu_);
  // Per trial, by id.
  std::map<int64_t, std::vector<v1::LogLine>> logs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, CheckpointRow> checkpoints_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, v1::CheckpointGcTask> gc_tasks_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, v1::Template> templates_ ABSL_GUARDED_BY(mu_);
  int64_t last_model_id_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_model_version_id_ ABSL_GUARDED_BY(mu_) = 0;
  // By id.
  std::map<int64_t, v1::Model> models_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, v1::ModelVersion> model_versions_ ABSL_GUARDED_BY(mu_);
  // By id.
  std::vector<SystemMetricsRow> system_metrics_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, UserRow> users_ ABSL_GUARDED_BY(mu_);
  // In insertion order.
  std::vector<SessionRow> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace det::master

#endif  // DET_MASTER_STORE_IN_MEMORY_STORE_H_
