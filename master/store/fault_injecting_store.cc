#include "master/store/fault_injecting_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"

namespace det::master {

FaultInjectingStore::FaultInjectingStore(std::unique_ptr<Store> store)
    : owned_(std::move(store)), store_(*owned_) {}

FaultInjectingStore::FaultInjectingStore(Store& store) : store_(store) {}

void FaultInjectingStore::FailNthWrite(int64_t n, absl::string_view method) {
  absl::MutexLock lock(&mu_);
  nth_countdown_ = n > 0 ? n - 1 : -1;
  nth_method_ = std::string(method);
}

void FaultInjectingStore::FailWrites(bool fail, absl::string_view method) {
  absl::MutexLock lock(&mu_);
  fail_writes_ = fail;
  fail_writes_method_ = std::string(method);
}

void FaultInjectingStore::FailReads(bool fail) {
  absl::MutexLock lock(&mu_);
  fail_reads_ = fail;
}

void FaultInjectingStore::SetFaultCode(absl::StatusCode code) {
  absl::MutexLock lock(&mu_);
  code_ = code;
}

int64_t FaultInjectingStore::writes_seen() const {
  absl::MutexLock lock(&mu_);
  return writes_seen_;
}

int64_t FaultInjectingStore::writes_failed() const {
  absl::MutexLock lock(&mu_);
  return writes_failed_;
}

int64_t FaultInjectingStore::reads_failed() const {
  absl::MutexLock lock(&mu_);
  return reads_failed_;
}

absl::Status FaultInjectingStore::Fault(absl::string_view method) const {
  return absl::Status(code_, absl::StrCat("injected fault: ", method));
}

absl::Status FaultInjectingStore::BeforeWrite(absl::string_view method) {
  absl::MutexLock lock(&mu_);
  ++writes_seen_;
  bool fail = fail_writes_ && (fail_writes_method_.empty() || fail_writes_method_ == method);
  if (nth_countdown_ >= 0 && (nth_method_.empty() || nth_method_ == method)) {
    if (nth_countdown_ == 0) fail = true;
    --nth_countdown_;  // Past 0: -1, no pending fault.
  }
  if (!fail) return absl::OkStatus();
  ++writes_failed_;
  return Fault(method);
}

absl::Status FaultInjectingStore::BeforeRead(absl::string_view method) {
  absl::MutexLock lock(&mu_);
  if (!fail_reads_) return absl::OkStatus();
  ++reads_failed_;
  return Fault(method);
}

absl::StatusOr<StoreSnapshot> FaultInjectingStore::Load() {
  RETURN_IF_ERROR(BeforeRead("Load"));
  return store_.Load();
}

absl::StatusOr<int64_t> FaultInjectingStore::InsertExperiment(const v1::Experiment& experiment,
                                                              const std::string& context,
                                                              std::vector<v1::Trial>* trials) {
  RETURN_IF_ERROR(BeforeWrite("InsertExperiment"));
  return store_.InsertExperiment(experiment, context, trials);
}

absl::Status FaultInjectingStore::UpdateExperiment(const v1::Experiment& experiment) {
  RETURN_IF_ERROR(BeforeWrite("UpdateExperiment"));
  return store_.UpdateExperiment(experiment);
}

absl::StatusOr<std::string> FaultInjectingStore::GetExperimentContext(int64_t experiment_id) {
  RETURN_IF_ERROR(BeforeRead("GetExperimentContext"));
  return store_.GetExperimentContext(experiment_id);
}

absl::StatusOr<std::string> FaultInjectingStore::GetExperimentContextSha256(int64_t experiment_id) {
  RETURN_IF_ERROR(BeforeRead("GetExperimentContextSha256"));
  return store_.GetExperimentContextSha256(experiment_id);
}

absl::StatusOr<int64_t> FaultInjectingStore::InsertTrial(const v1::Trial& trial) {
  RETURN_IF_ERROR(BeforeWrite("InsertTrial"));
  return store_.InsertTrial(trial);
}

absl::Status FaultInjectingStore::UpdateTrial(const v1::Trial& trial) {
  RETURN_IF_ERROR(BeforeWrite("UpdateTrial"));
  return store_.UpdateTrial(trial);
}

absl::Status FaultInjectingStore::UpsertAllocation(const v1::Allocation& allocation,
                                                   const std::string& token) {
  RETURN_IF_ERROR(BeforeWrite("UpsertAllocation"));
  return store_.UpsertAllocation(allocation, token);
}

absl::Status FaultInjectingStore::UpsertAgent(const v1::Agent& agent) {
  RETURN_IF_ERROR(BeforeWrite("UpsertAgent"));
  return store_.UpsertAgent(agent);
}

absl::Status FaultInjectingStore::SetAgentCredential(const v1::Agent& agent,
                                                     const std::string& credential_hash) {
  RETURN_IF_ERROR(BeforeWrite("SetAgentCredential"));
  return store_.SetAgentCredential(agent, credential_hash);
}

absl::Status FaultInjectingStore::AddMetrics(const std::vector<v1::Trial>& trials,
                                             const std::vector<v1::Metrics>& metrics) {
  RETURN_IF_ERROR(BeforeWrite("AddMetrics"));
  return store_.AddMetrics(trials, metrics);
}

absl::StatusOr<std::vector<v1::Metrics>> FaultInjectingStore::GetMetrics(int64_t trial_id,
                                                                         const std::string& group) {
  RETURN_IF_ERROR(BeforeRead("GetMetrics"));
  return store_.GetMetrics(trial_id, group);
}

class FaultInjectingStore::Reader : public MetricsReader {
 public:
  Reader(FaultInjectingStore& faults, std::unique_ptr<MetricsReader> reader)
      : faults_(faults), reader_(std::move(reader)) {}
  absl::StatusOr<std::vector<v1::Metrics>> GetMetrics(int64_t trial_id,
                                                      const std::string& group) override {
    RETURN_IF_ERROR(faults_.BeforeRead("GetMetrics"));
    return reader_->GetMetrics(trial_id, group);
  }
  absl::StatusOr<std::vector<v1::Metrics>> GetTrialMetrics(int64_t trial_id,
                                                           const std::string& group,
                                                           int max_points) override {
    RETURN_IF_ERROR(faults_.BeforeRead("GetTrialMetrics"));
    return reader_->GetTrialMetrics(trial_id, group, max_points);
  }
  absl::StatusOr<std::vector<v1::LogLine>> GetLogs(int64_t trial_id, int64_t after_id, int limit,
                                                   std::optional<int> rank) override {
    RETURN_IF_ERROR(faults_.BeforeRead("GetLogs"));
    return reader_->GetLogs(trial_id, after_id, limit, rank);
  }
  absl::StatusOr<std::vector<v1::Checkpoint>> GetCheckpoints(int64_t trial_id) override {
    RETURN_IF_ERROR(faults_.BeforeRead("GetCheckpoints"));
    return reader_->GetCheckpoints(trial_id);
  }
  absl::StatusOr<std::vector<int64_t>> GetTrialIds(int64_t experiment_id) override {
    RETURN_IF_ERROR(faults_.BeforeRead("GetTrialIds"));
    return reader_->GetTrialIds(experiment_id);
  }
  absl::StatusOr<v1::Checkpoint> GetCheckpoint(const std::string& uuid) override {
    RETURN_IF_ERROR(faults_.BeforeRead("GetCheckpoint"));
    return reader_->GetCheckpoint(uuid);
  }
  absl::StatusOr<std::string> GetExperimentContext(int64_t experiment_id) override {
    RETURN_IF_ERROR(faults_.BeforeRead("GetExperimentContext"));
    return reader_->GetExperimentContext(experiment_id);
  }

 private:
  FaultInjectingStore& faults_;
  std::unique_ptr<MetricsReader> reader_;
};

absl::StatusOr<std::unique_ptr<MetricsReader>> FaultInjectingStore::OpenReader() {
  ASSIGN_OR_RETURN(std::unique_ptr<MetricsReader> reader, store_.OpenReader());
  return std::unique_ptr<MetricsReader>(new Reader(*this, std::move(reader)));
}

absl::StatusOr<int64_t> FaultInjectingStore::SupersedeMetrics(v1::Trial* trial, int32_t run_id,
                                                              int64_t after_batches) {
  RETURN_IF_ERROR(BeforeWrite("SupersedeMetrics"));
  return store_.SupersedeMetrics(trial, run_id, after_batches);
}

absl::Status FaultInjectingStore::AddLogs(std::vector<v1::LogLine>* lines) {
  RETURN_IF_ERROR(BeforeWrite("AddLogs"));
  return store_.AddLogs(lines);
}

absl::StatusOr<std::vector<v1::LogLine>> FaultInjectingStore::GetLogs(int64_t trial_id,
                                                                      int64_t after_id, int limit,
                                                                      std::optional<int> rank) {
  RETURN_IF_ERROR(BeforeRead("GetLogs"));
  return store_.GetLogs(trial_id, after_id, limit, rank);
}

absl::Status FaultInjectingStore::AddCheckpoint(const v1::Checkpoint& checkpoint,
                                               const v1::Trial& trial) {
  RETURN_IF_ERROR(BeforeWrite("AddCheckpoint"));
  return store_.AddCheckpoint(checkpoint, trial);
}

absl::StatusOr<std::vector<v1::Checkpoint>> FaultInjectingStore::GetCheckpoints(int64_t trial_id) {
  RETURN_IF_ERROR(BeforeRead("GetCheckpoints"));
  return store_.GetCheckpoints(trial_id);
}

absl::StatusOr<int64_t> FaultInjectingStore::InsertCheckpointGcTask(
    const v1::CheckpointGcTask& task) {
  RETURN_IF_ERROR(BeforeWrite("InsertCheckpointGcTask"));
  return store_.InsertCheckpointGcTask(task);
}

absl::Status FaultInjectingStore::UpdateCheckpointGcTask(const v1::CheckpointGcTask& task) {
  RETURN_IF_ERROR(BeforeWrite("UpdateCheckpointGcTask"));
  return store_.UpdateCheckpointGcTask(task);
}

absl::Status FaultInjectingStore::DeleteExperiment(int64_t experiment_id) {
  RETURN_IF_ERROR(BeforeWrite("DeleteExperiment"));
  return store_.DeleteExperiment(experiment_id);
}

absl::StatusOr<v1::Template> FaultInjectingStore::PutTemplate(const std::string& name,
                                                              const std::string& config_yaml,
                                                              const std::string& owner,
                                                              int64_t now_ms, bool* created) {
  RETURN_IF_ERROR(BeforeWrite("PutTemplate"));
  return store_.PutTemplate(name, config_yaml, owner, now_ms, created);
}

absl::StatusOr<v1::Template> FaultInjectingStore::GetTemplate(const std::string& name) {
  RETURN_IF_ERROR(BeforeRead("GetTemplate"));
  return store_.GetTemplate(name);
}

absl::StatusOr<std::vector<v1::Template>> FaultInjectingStore::ListTemplates() {
  RETURN_IF_ERROR(BeforeRead("ListTemplates"));
  return store_.ListTemplates();
}

absl::Status FaultInjectingStore::DeleteTemplate(const std::string& name) {
  RETURN_IF_ERROR(BeforeWrite("DeleteTemplate"));
  return store_.DeleteTemplate(name);
}

absl::StatusOr<int64_t> FaultInjectingStore::InsertModel(const v1::Model& model) {
  RETURN_IF_ERROR(BeforeWrite("InsertModel"));
  return store_.InsertModel(model);
}

absl::Status FaultInjectingStore::UpdateModel(const v1::Model& model) {
  RETURN_IF_ERROR(BeforeWrite("UpdateModel"));
  return store_.UpdateModel(model);
}

absl::Status FaultInjectingStore::DeleteModel(int64_t model_id) {
  RETURN_IF_ERROR(BeforeWrite("DeleteModel"));
  return store_.DeleteModel(model_id);
}

absl::StatusOr<int64_t> FaultInjectingStore::InsertModelVersion(const v1::ModelVersion& version,
                                                                const v1::Model& model) {
  RETURN_IF_ERROR(BeforeWrite("InsertModelVersion"));
  return store_.InsertModelVersion(version, model);
}

absl::Status FaultInjectingStore::DeleteModelVersion(int64_t version_id, const v1::Model& model) {
  RETURN_IF_ERROR(BeforeWrite("DeleteModelVersion"));
  return store_.DeleteModelVersion(version_id, model);
}

absl::Status FaultInjectingStore::UpdateModelVersion(const v1::ModelVersion& version,
                                                     const v1::Model& model) {
  RETURN_IF_ERROR(BeforeWrite("UpdateModelVersion"));
  return store_.UpdateModelVersion(version, model);
}

absl::Status FaultInjectingStore::AddSystemMetrics(const std::vector<v1::SystemMetrics>& samples,
                                                   int64_t keep_after_ms) {
  RETURN_IF_ERROR(BeforeWrite("AddSystemMetrics"));
  return store_.AddSystemMetrics(samples, keep_after_ms);
}

absl::StatusOr<std::vector<v1::SystemMetrics>> FaultInjectingStore::GetSystemMetrics(
    const std::string& agent_id, int limit) {
  RETURN_IF_ERROR(BeforeRead("GetSystemMetrics"));
  return store_.GetSystemMetrics(agent_id, limit);
}

absl::StatusOr<std::vector<UserRow>> FaultInjectingStore::ListUsers() {
  RETURN_IF_ERROR(BeforeRead("ListUsers"));
  return store_.ListUsers();
}

absl::StatusOr<int64_t> FaultInjectingStore::InsertUser(const UserRow& user) {
  RETURN_IF_ERROR(BeforeWrite("InsertUser"));
  return store_.InsertUser(user);
}

absl::Status FaultInjectingStore::SetUserPassword(int64_t user_id,
                                                  const std::string& password_hash) {
  RETURN_IF_ERROR(BeforeWrite("SetUserPassword"));
  return store_.SetUserPassword(user_id, password_hash);
}

absl::Status FaultInjectingStore::SetUserAgentUserGroup(int64_t user_id,
                                                        const v1::AgentUserGroup& link) {
  RETURN_IF_ERROR(BeforeWrite("SetUserAgentUserGroup"));
  return store_.SetUserAgentUserGroup(user_id, link);
}

absl::Status FaultInjectingStore::SetUsername(int64_t user_id, const std::string& username) {
  RETURN_IF_ERROR(BeforeWrite("SetUsername"));
  return store_.SetUsername(user_id, username);
}

absl::StatusOr<std::vector<SessionRow>> FaultInjectingStore::LoadSessions(int64_t now_ms) {
  RETURN_IF_ERROR(BeforeRead("LoadSessions"));
  return store_.LoadSessions(now_ms);
}

absl::Status FaultInjectingStore::InsertSession(const SessionRow& session) {
  RETURN_IF_ERROR(BeforeWrite("InsertSession"));
  return store_.InsertSession(session);
}

absl::Status FaultInjectingStore::DeleteSession(const std::string& token_hash) {
  RETURN_IF_ERROR(BeforeWrite("DeleteSession"));
  return store_.DeleteSession(token_hash);
}

absl::Status FaultInjectingStore::DeleteUserSessions(int64_t user_id,
                                                     const std::string& keep_token_hash) {
  RETURN_IF_ERROR(BeforeWrite("DeleteUserSessions"));
  return store_.DeleteUserSessions(user_id, keep_token_hash);
}

}  // namespace det::master
