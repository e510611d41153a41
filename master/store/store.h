// Durable state of the master. Every state change is written here before the master
// acknowledges it; on start the master rebuilds its memory from Load().
#ifndef DET_MASTER_STORE_STORE_H_
#define DET_MASTER_STORE_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/types.pb.h"

namespace det::master {

// What the master needs to rebuild its memory after a restart.
struct StoreSnapshot {
  std::vector<v1::Experiment> experiments;
  std::vector<v1::Trial> trials;
  // Allocations not yet ended, with their worker tokens.
  std::vector<std::pair<v1::Allocation, std::string>> open_allocations;
  std::vector<v1::Agent> agents;
  // Each enrolled agent's credential as its SHA-256 (hex), by agent id; an agent absent
  // here has none (never enrolled, stored before credentials were kept, or reset by an
  // admin).
  std::map<std::string, std::string> agent_credential_hashes;
  std::string cluster_id;
  // Every checkpoint garbage-collection task, ended ones included, by id.
  std::vector<v1::CheckpointGcTask> checkpoint_gc_tasks;
  // The model registry: every model and every model version, by id (as stored: no
  // num_versions, model_name or checkpoint).
  std::vector<v1::Model> models;
  std::vector<v1::ModelVersion> model_versions;
};

// A user account (det user ...); the password only as its argon2id hash string.
struct UserRow {
  int64_t id = 0;
  std::string username;
  std::string password_hash;
  bool admin = false;
  int64_t created_ms = 0;
  // The OS user agents run this user's workers as (det user link-with-agent-user); an
  // empty agent_user: none (the agents' default task user).
  v1::AgentUserGroup agent_user_group;
};

// A login session; the token only as its SHA-256 hash (hex).
struct SessionRow {
  std::string token_hash;
  int64_t user_id = 0;
  int64_t created_ms = 0;
  int64_t expires_ms = 0;
};

// The reads that leave the master's loop: a trial's metric rows (GetTrialMetrics), logs
// (GetTrialLogs) and checkpoints (ListCheckpoints, GetCheckpoint), and an experiment's
// model context (GetModelContext). One reader is one read connection (master/reads:
// StoreReads keeps a pool of them).
// Thread-safe: may be called from any thread while the loop writes through the Store. A
// call sees committed writes only, and every write the Store had returned OK for before the
// call began. The defaults fail with Unimplemented (a reader of metric rows only).
class MetricsReader {
 public:
  virtual ~MetricsReader() = default;
  // As Store::GetMetrics.
  virtual absl::StatusOr<std::vector<v1::Metrics>> GetMetrics(int64_t trial_id,
                                                              const std::string& group) = 0;
  // Rows of `trial_id` (of `group` unless empty), in report order, with at most
  // `max_points` rows of each group when max_points > 0, chosen by the query itself
  // (not every row loaded): the rows DownsampleMetrics (master/metrics/downsample.h)
  // keeps, i.e. of a group of n > max_points rows, the one at index
  // round(j * (n - 1) / (max_points - 1)) for each j < max_points (first and last
  // included), or its last row alone for max_points 1. NotFound "trial N not found" when
  // the trial is not stored (checked by the same read).
  virtual absl::StatusOr<std::vector<v1::Metrics>> GetTrialMetrics(int64_t trial_id,
                                                                   const std::string& group,
                                                                   int max_points) {
    return Unread("metric series");
  }
  // As Store::GetLogs.
  virtual absl::StatusOr<std::vector<v1::LogLine>> GetLogs(int64_t trial_id, int64_t after_id,
                                                           int limit, std::optional<int> rank) {
    return Unread("logs");
  }
  // As Store::GetCheckpoints.
  virtual absl::StatusOr<std::vector<v1::Checkpoint>> GetCheckpoints(int64_t trial_id) {
    return Unread("checkpoints");
  }
  // The ids of experiment `experiment_id`'s trials, ascending; NotFound "experiment N not
  // found" when it is not stored.
  virtual absl::StatusOr<std::vector<int64_t>> GetTrialIds(int64_t experiment_id) {
    return Unread("trials");
  }
  // Checkpoint `uuid` as stored, with experiment_id set (its trial's); NotFound
  // "checkpoint UUID not found".
  virtual absl::StatusOr<v1::Checkpoint> GetCheckpoint(const std::string& uuid) {
    return Unread("checkpoints");
  }
  // As Store::GetExperimentContext (the model context an agent fetches, up to 64 MiB).
  virtual absl::StatusOr<std::string> GetExperimentContext(int64_t experiment_id) {
    return Unread("model contexts");
  }

 private:
  static absl::Status Unread(const char* what) {
    return absl::UnimplementedError(std::string("this reader reads no ") + what);
  }
};

// Not thread-safe: the master calls it from its loop thread only (a MetricsReader it opened
// excepted).
class Store {
 public:
  virtual ~Store() = default;

  virtual absl::StatusOr<StoreSnapshot> Load() = 0;

  // Inserts the experiment and its first trials in one transaction. Assigns and returns
  // the experiment id; sets each trial's id and experiment_id. `context` is the serialized
  // model context.
  virtual absl::StatusOr<int64_t> InsertExperiment(const v1::Experiment& experiment,
                                                   const std::string& context,
                                                   std::vector<v1::Trial>* trials) = 0;
  virtual absl::Status UpdateExperiment(const v1::Experiment& experiment) = 0;
  virtual absl::StatusOr<std::string> GetExperimentContext(int64_t experiment_id) = 0;
  // ContextSha256 of the experiment's stored context, computed when it was inserted; ""
  // for an experiment stored before the master kept it (unknown).
  virtual absl::StatusOr<std::string> GetExperimentContextSha256(int64_t experiment_id) = 0;

  // Assigns and returns the trial id.
  virtual absl::StatusOr<int64_t> InsertTrial(const v1::Trial& trial) = 0;
  // Writes the trial row (state, counters, summaries; not the allocation).
  virtual absl::Status UpdateTrial(const v1::Trial& trial) = 0;

  virtual absl::Status UpsertAllocation(const v1::Allocation& allocation,
                                        const std::string& token) = 0;
  // Writes the agent's row; its credential hash, if any, is kept.
  virtual absl::Status UpsertAgent(const v1::Agent& agent) = 0;
  // Writes the agent's row (as UpsertAgent) and sets its credential hash (SHA-256 of the
  // credential, hex) in one statement: both or neither. "" clears it (the agent's next
  // registration enrolls it anew).
  virtual absl::Status SetAgentCredential(const v1::Agent& agent,
                                          const std::string& credential_hash) = 0;

  // Appends metric rows and writes `trials` (with their updated summaries) in one
  // transaction.
  virtual absl::Status AddMetrics(const std::vector<v1::Trial>& trials,
                                  const std::vector<v1::Metrics>& metrics) = 0;
  // Rows of `trial_id` (of `group` unless empty), in report order.
  virtual absl::StatusOr<std::vector<v1::Metrics>> GetMetrics(int64_t trial_id,
                                                              const std::string& group) = 0;
  // A reader of metric rows for other threads (SqliteStore: a read-only connection of its
  // own). REQUIRES: this store outlives the reader.
  virtual absl::StatusOr<std::unique_ptr<MetricsReader>> OpenReader() = 0;
  // Deletes the rows that runs before `run_id` reported past batch `after_batches` (a
  // rerun from a checkpoint at that batch reports them again), recomputes `trial`'s
  // summaries and total_batches from the rows left, and writes it, in one transaction.
  // Returns the number of rows deleted.
  virtual absl::StatusOr<int64_t> SupersedeMetrics(v1::Trial* trial, int32_t run_id,
                                                   int64_t after_batches) = 0;

  // Appends log lines; assigns their ids (in place).
  virtual absl::Status AddLogs(std::vector<v1::LogLine>* lines) = 0;
  virtual absl::StatusOr<std::vector<v1::LogLine>> GetLogs(int64_t trial_id, int64_t after_id,
                                                           int limit, std::optional<int> rank) = 0;

  // Inserts the checkpoint row and writes `trial` (the reporting trial, its
  // latest_checkpoint pointing at it) in one transaction: both or neither. NotFound when
  // the trial is not stored; an error ("UNIQUE constraint failed") for a uuid stored before.
  virtual absl::Status AddCheckpoint(const v1::Checkpoint& checkpoint, const v1::Trial& trial) = 0;
  virtual absl::StatusOr<std::vector<v1::Checkpoint>> GetCheckpoints(int64_t trial_id) = 0;
  // Checkpoint garbage-collection tasks (v1::CheckpointGcTask). Insert assigns and returns
  // the task's id.
  virtual absl::StatusOr<int64_t> InsertCheckpointGcTask(const v1::CheckpointGcTask& task) = 0;
  // Writes the task row; when `task` is STATE_COMPLETED, also marks each of its checkpoints
  // STATE_DELETED, in the same transaction. NotFound for an unknown task; a checkpoint no
  // longer stored is skipped.
  virtual absl::Status UpdateCheckpointGcTask(const v1::CheckpointGcTask& task) = 0;

  // Deletes experiment `experiment_id` with everything of it: its trials, their
  // allocations, metrics, logs and checkpoints, and its checkpoint GC tasks, in one
  // transaction (all or nothing). NotFound "experiment N not in the database".
  virtual absl::Status DeleteExperiment(int64_t experiment_id) = 0;

  // Config templates, by unique name. PutTemplate creates or replaces `name`'s row with
  // `config_yaml` at `now_ms`, keeping the creation time and owner of a replaced one
  // (`owner` is that of a new one), and returns the row with `*created` telling which
  // happened.
  virtual absl::StatusOr<v1::Template> PutTemplate(const std::string& name,
                                                   const std::string& config_yaml,
                                                   const std::string& owner, int64_t now_ms,
                                                   bool* created) = 0;
  // NotFound "template 'NAME' does not exist" when absent.
  virtual absl::StatusOr<v1::Template> GetTemplate(const std::string& name) = 0;
  // Every template, by name.
  virtual absl::StatusOr<std::vector<v1::Template>> ListTemplates() = 0;
  // NotFound as GetTemplate when absent.
  virtual absl::Status DeleteTemplate(const std::string& name) = 0;

  // The model registry (loaded with the snapshot). InsertModel assigns and returns the
  // model's id; AlreadyExists "model 'NAME' already exists" for a name taken.
  virtual absl::StatusOr<int64_t> InsertModel(const v1::Model& model) = 0;
  // Writes the model's row (by id). NotFound "model N not in the database".
  virtual absl::Status UpdateModel(const v1::Model& model) = 0;
  // Deletes the model and its versions in one transaction. NotFound as UpdateModel.
  virtual absl::Status DeleteModel(int64_t model_id) = 0;
  // Inserts `version` (of `model`, its model_id and version number set) and writes `model`
  // (its last_updated_time_ms) in one transaction; assigns and returns the version's id.
  // AlreadyExists for a version number the model has; NotFound as UpdateModel.
  virtual absl::StatusOr<int64_t> InsertModelVersion(const v1::ModelVersion& version,
                                                     const v1::Model& model) = 0;
  // Deletes the version of id `version_id` and writes `model` in one transaction. NotFound
  // "model version N not in the database".
  virtual absl::Status DeleteModelVersion(int64_t version_id, const v1::Model& model) = 0;
  // Writes `version` (by id) and `model` in one transaction. NotFound as DeleteModelVersion.
  virtual absl::Status UpdateModelVersion(const v1::ModelVersion& version,
                                          const v1::Model& model) = 0;

  // Agents' host metrics. AddSystemMetrics appends `samples` and deletes every sample
  // older than `keep_after_ms` (bounded retention) in one transaction.
  virtual absl::Status AddSystemMetrics(const std::vector<v1::SystemMetrics>& samples,
                                        int64_t keep_after_ms) = 0;
  // The latest `limit` samples of `agent_id`, oldest first.
  virtual absl::StatusOr<std::vector<v1::SystemMetrics>> GetSystemMetrics(
      const std::string& agent_id, int limit) = 0;

  // Users and sessions. The defaults fail with Unimplemented (a store without users).
  // Every user, by id.
  virtual absl::StatusOr<std::vector<UserRow>> ListUsers() { return NoUsers(); }
  // Assigns and returns the user's id; AlreadyExists "user 'NAME' already exists".
  virtual absl::StatusOr<int64_t> InsertUser(const UserRow& user) { return NoUsers(); }
  // NotFound when there is no such user.
  virtual absl::Status SetUserPassword(int64_t user_id, const std::string& password_hash) {
    return NoUsers();
  }
  // Stores `link` as the user's agent_user_group (an empty agent_user unlinks). NotFound
  // when there is no such user.
  virtual absl::Status SetUserAgentUserGroup(int64_t user_id, const v1::AgentUserGroup& link) {
    return NoUsers();
  }
  // Renames the user; the templates they own (owner, a name) follow, in one transaction.
  // AlreadyExists "user 'NAME' already exists" when another user has `username`.
  virtual absl::Status SetUsername(int64_t user_id, const std::string& username) {
    return NoUsers();
  }
  // The sessions with expires_ms > now_ms; deletes the others.
  virtual absl::StatusOr<std::vector<SessionRow>> LoadSessions(int64_t now_ms) {
    return NoUsers();
  }
  virtual absl::Status InsertSession(const SessionRow& session) { return NoUsers(); }
  // Deleting an absent session is not an error.
  virtual absl::Status DeleteSession(const std::string& token_hash) { return NoUsers(); }
  // Deletes every session of `user_id` but the one hashed `keep_token_hash`.
  virtual absl::Status DeleteUserSessions(int64_t user_id, const std::string& keep_token_hash) {
    return NoUsers();
  }

 private:
  static absl::Status NoUsers() { return absl::UnimplementedError("this store keeps no users"); }
};

}  // namespace det::master

#endif  // DET_MASTER_STORE_STORE_H_
