// A Store that forwards every call to another Store and fails calls on demand, for tests of
// what the master does when its store refuses a write (persist before acknowledge) or a
// read.
//
// Writes are the calls that change stored state: InsertExperiment, UpdateExperiment,
// InsertTrial, UpdateTrial, UpsertAllocation, UpsertAgent, SetAgentCredential, AddMetrics, SupersedeMetrics,
// AddLogs, AddCheckpoint, InsertCheckpointGcTask, UpdateCheckpointGcTask, DeleteExperiment, PutTemplate,
// DeleteTemplate, InsertModel, UpdateModel, DeleteModel, InsertModelVersion,
// DeleteModelVersion, AddSystemMetrics, InsertUser, SetUserPassword, SetUserAgentUserGroup,
// InsertSession, DeleteSession, DeleteUserSessions. Every other call is a read (Load and
// LoadSessions included, although the stores may tidy up inside them), and so is every
// call of a reader it opened (OpenReader wraps the wrapped store's reader).
//
// An injected failure is not forwarded: the wrapped store is unchanged, out-parameters
// (ids of log lines and trials, the trial of SupersedeMetrics) are untouched, and the call
// returns Status(fault code, "injected fault: <Method>"), e.g. "injected fault: AddLogs".
//
// Thread-safe: the fault settings and counters are behind a mutex (not held while the
// wrapped store runs); calls are forwarded as they come.
#ifndef DET_MASTER_STORE_FAULT_INJECTING_STORE_H_
#define DET_MASTER_STORE_FAULT_INJECTING_STORE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "master/store/store.h"

namespace det::master {

class FaultInjectingStore : public Store {
 public:
  // Owns `store`. REQUIRES: `store` is not null.
  explicit FaultInjectingStore(std::unique_ptr<Store> store);
  // Wraps `store` without owning it (a test keeps the store across master restarts).
  // REQUIRES: `store` outlives this.
  explicit FaultInjectingStore(Store& store);
  FaultInjectingStore(const FaultInjectingStore&) = delete;
  FaultInjectingStore& operator=(const FaultInjectingStore&) = delete;

  // The `n`th write from now fails (1: the next one) and the writes before and after it
  // pass; with `method` (e.g. "AddMetrics"), only that method's writes count. n <= 0
  // cancels. One pending fault at a time: a later call replaces an earlier one.
  void FailNthWrite(int64_t n, absl::string_view method = "");
  // While `fail` is true, every write fails; with `method`, every write of that method.
  // Default: false.
  void FailWrites(bool fail, absl::string_view method = "");
  // While `fail` is true, every read fails. Default: false.
  void FailReads(bool fail);
  // The code of injected failures. Default: kUnavailable (kResourceExhausted mimics a full
  // disk, as SqliteStore answers one).
  void SetFaultCode(absl::StatusCode code);

  // Writes called so far, failed ones included.
  int64_t writes_seen() const;
  // Writes and reads failed by injection so far.
  int64_t writes_failed() const;
  int64_t reads_failed() const;

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
  // The wrapped store's reader, failing reads as this store does.
  class Reader;

  // Counts a write by `method`; its injected failure, or OK to forward it.
  absl::Status BeforeWrite(absl::string_view method);
  // An injected failure of a read by `method`, or OK to forward it.
  absl::Status BeforeRead(absl::string_view method);
  absl::Status Fault(absl::string_view method) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unique_ptr<Store> owned_;
  Store& store_;

  mutable absl::Mutex mu_;
  absl::StatusCode code_ ABSL_GUARDED_BY(mu_) = absl::StatusCode::kUnavailable;
  // Writes (of nth_method_ when set) to let pass before the one that fails; -1: none.
  int64_t nth_countdown_ ABSL_GUARDED_BY(mu_) = -1;
  std::string nth_method_ ABSL_GUARDED_BY(mu_);
  bool fail_writes_ ABSL_GUARDED_BY(mu_) = false;
  std::string fail_writes_method_ ABSL_GUARDED_BY(mu_);
  bool fail_reads_ ABSL_GUARDED_BY(mu_) = false;
  int64_t writes_seen_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t writes_failed_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t reads_failed_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace det::master

#endif  // DET_MASTER_STORE_FAULT_INJECTING_STORE_H_
