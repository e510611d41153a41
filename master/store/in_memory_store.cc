#include "master/store/in_memory_store.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/rpc/context_sha256.h"
#include "master/metrics/downsample.h"
#include "master/store/metric_summary.h"

namespace det::master {
namespace {

absl::Status ForeignKeyError(const char* column, int64_t id) {
  return absl::InternalError(
      absl::StrCat("store: FOREIGN KEY constraint failed: ", column, " ", id, " names no row"));
}

absl::Status UniqueError(const char* column, const std::string& key) {
  return absl::AlreadyExistsError(
      absl::StrCat("store: UNIQUE constraint failed: ", column, " '", key, "'"));
}

// What SqliteStore keeps of a metric row: its columns and every value (NaN and
// infinities included).
v1::Metrics StoredMetrics(const v1::Metrics& m) {
  v1::Metrics row;
  row.set_trial_id(m.trial_id());
  row.set_run_id(m.run_id());
  row.set_group(m.group());
  row.set_total_batches(m.total_batches());
  row.set_report_time_ms(m.report_time_ms());
  *row.mutable_values() = m.values();
  return row;
}

bool IsEnded(v1::State state) {
  return state == v1::STATE_COMPLETED || state == v1::STATE_CANCELED || state == v1::STATE_ERROR;
}

std::string RandomClusterId() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    absl::StrAppend(&id, absl::Hex(static_cast<uint32_t>(random()), absl::kZeroPad8));
  }
  return id;
}

}  // namespace

absl::StatusOr<StoreSnapshot> InMemoryStore::Load() {
  absl::MutexLock lock(&mu_);
  if (cluster_id_.empty()) cluster_id_ = RandomClusterId();
  StoreSnapshot snap;
  snap.cluster_id = cluster_id_;
  for (const auto& [id, row] : experiments_) snap.experiments.push_back(row.experiment);
  for (const auto& [id, trial] : trials_) snap.trials.push_back(trial);
  std::vector<const AllocationRow*> open;
  for (const auto& [id, row] : allocations_) {
    if (!IsEnded(row.allocation.state())) open.push_back(&row);
  }
  std::sort(open.begin(), open.end(),
            [](const AllocationRow* a, const AllocationRow* b) { return a->seq < b->seq; });
  for (const AllocationRow* row : open)
    snap.open_allocations.emplace_back(row->allocation, row->token);
  for (const auto& [id, agent] : agents_) snap.agents.push_back(agent);
  snap.agent_credential_hashes = agent_credential_hashes_;
  for (const auto& [id, task] : gc_tasks_) snap.checkpoint_gc_tasks.push_back(task);
  for (const auto& [id, model] : models_) snap.models.push_back(model);
  for (const auto& [id, version] : model_versions_) snap.model_versions.push_back(version);
  return snap;
}

absl::StatusOr<int64_t> InMemoryStore::InsertExperiment(const v1::Experiment& experiment,
                                                        const std::string& context,
                                                        std::vector<v1::Trial>* trials) {
  absl::MutexLock lock(&mu_);
  int64_t id = ++last_experiment_id_;
  ExperimentRow& row = experiments_[id];
  row.experiment = experiment;
  row.experiment.set_id(id);
  row.context = context;
  row.context_sha256 = rpc::ContextSha256(context);
  for (v1::Trial& t : *trials) {
    t.set_experiment_id(id);
    t.set_id(InsertTrialRow(t));
  }
  return id;
}

absl::Status InMemoryStore::UpdateExperiment(const v1::Experiment& experiment) {
  absl::MutexLock lock(&mu_);
  auto it = experiments_.find(experiment.id());
  if (it == experiments_.end()) {
    return absl::NotFoundError(
        absl::StrCat("experiment ", experiment.id(), " not in the database"));
  }
  it->second.experiment = experiment;
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::ExperimentField(
    int64_t experiment_id, std::string ExperimentRow::*field) {
  absl::MutexLock lock(&mu_);
  auto it = experiments_.find(experiment_id);
  if (it == experiments_.end()) {
    return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not found"));
  }
  return it->second.*field;
}

absl::StatusOr<std::string> InMemoryStore::GetExperimentContext(int64_t experiment_id) {
  return ExperimentField(experiment_id, &ExperimentRow::context);
}

absl::StatusOr<std::string> InMemoryStore::GetExperimentContextSha256(int64_t experiment_id) {
  return ExperimentField(experiment_id, &ExperimentRow::context_sha256);
}

absl::Status InMemoryStore::CheckTrialStored(int64_t trial_id) const {
  if (trials_.count(trial_id) == 0) {
    return absl::NotFoundError(absl::StrCat("trial ", trial_id, " not in the database"));
  }
  return absl::OkStatus();
}

void InMemoryStore::WriteTrial(const v1::Trial& trial) {
  v1::Trial& row = trials_[trial.id()];
  row = trial;
  row.clear_allocation();  // Allocations are rows of their own.
}

int64_t InMemoryStore::InsertTrialRow(const v1::Trial& trial) {
  v1::Trial row = trial;
  row.set_id(++last_trial_id_);
  WriteTrial(row);
  return row.id();
}

absl::StatusOr<int64_t> InMemoryStore::InsertTrial(const v1::Trial& trial) {
  absl::MutexLock lock(&mu_);
  if (experiments_.count(trial.experiment_id()) == 0) {
    return ForeignKeyError("trials.experiment_id", trial.experiment_id());
  }
  return InsertTrialRow(trial);
}

absl::Status InMemoryStore::UpdateTrial(const v1::Trial& trial) {
  absl::MutexLock lock(&mu_);
  if (absl::Status st = CheckTrialStored(trial.id()); !st.ok()) return st;
  WriteTrial(trial);
  return absl::OkStatus();
}

absl::Status InMemoryStore::UpsertAllocation(const v1::Allocation& allocation,
                                             const std::string& token) {
  absl::MutexLock lock(&mu_);
  auto it = allocations_.find(allocation.id());
  if (it != allocations_.end()) {
    it->second.allocation = allocation;
    return absl::OkStatus();
  }
  if (trials_.count(allocation.trial_id()) == 0) {
    return ForeignKeyError("allocations.trial_id", allocation.trial_id());
  }
  AllocationRow& row = allocations_[allocation.id()];
  row.seq = ++last_seq_;
  row.allocation = allocation;
  row.token = token;
  return absl::OkStatus();
}

absl::Status InMemoryStore::UpsertAgent(const v1::Agent& agent) {
  absl::MutexLock lock(&mu_);
  agents_[agent.id()] = agent;
  return absl::OkStatus();
}

absl::Status InMemoryStore::SetAgentCredential(const v1::Agent& agent,
                                               const std::string& credential_hash) {
  absl::MutexLock lock(&mu_);
  agents_[agent.id()] = agent;
  if (credential_hash.empty()) {
    agent_credential_hashes_.erase(agent.id());
  } else {
    agent_credential_hashes_[agent.id()] = credential_hash;
  }
  return absl::OkStatus();
}

absl::Status InMemoryStore::AddMetrics(const std::vector<v1::Trial>& trials,
                                       const std::vector<v1::Metrics>& metrics) {
  absl::MutexLock lock(&mu_);
  for (const v1::Trial& t : trials) {
    if (absl::Status st = CheckTrialStored(t.id()); !st.ok()) return st;
  }
  for (const v1::Metrics& m : metrics) metrics_[m.trial_id()].push_back(StoredMetrics(m));
  for (const v1::Trial& t : trials) WriteTrial(t);
  return absl::OkStatus();
}

std::vector<v1::Metrics> InMemoryStore::MetricsOf(int64_t trial_id,
                                                  const std::string& group) const {
  std::vector<v1::Metrics> out;
  auto it = metrics_.find(trial_id);
  if (it == metrics_.end()) return out;
  for (const v1::Metrics& m : it->second) {
    if (group.empty() || m.group() == group) out.push_back(m);
  }
  return out;
}

absl::StatusOr<std::vector<v1::Metrics>> InMemoryStore::GetMetrics(int64_t trial_id,
                                                                   const std::string& group) {
  absl::MutexLock lock(&mu_);
  return MetricsOf(trial_id, group);
}

namespace {

// Reads through the store's own (thread-safe) GetMetrics.
class InMemoryMetricsReader : public MetricsReader {
 public:
  explicit InMemoryMetricsReader(InMemoryStore& store) : store_(store) {}
  absl::StatusOr<std::vector<v1::Metrics>> GetMetrics(int64_t trial_id,
                                                      const std::string& group) override {
    return store_.GetMetrics(trial_id, group);
  }
  absl::StatusOr<std::vector<v1::Metrics>> GetTrialMetrics(int64_t trial_id,
                                                           const std::string& group,
                                                           int max_points) override {
    return store_.GetTrialMetrics(trial_id, group, max_points);
  }
  absl::StatusOr<std::vector<v1::LogLine>> GetLogs(int64_t trial_id, int64_t after_id, int limit,
                                                   std::optional<int> rank) override {
    return store_.GetLogs(trial_id, after_id, limit, rank);
  }
  absl::StatusOr<std::vector<v1::Checkpoint>> GetCheckpoints(int64_t trial_id) override {
    return store_.GetCheckpoints(trial_id);
  }
  absl::StatusOr<std::vector<int64_t>> GetTrialIds(int64_t experiment_id) override {
    return store_.GetTrialIds(experiment_id);
  }
  absl::StatusOr<v1::Checkpoint> GetCheckpoint(const std::string& uuid) override {
    return store_.GetCheckpoint(uuid);
  }
  absl::StatusOr<std::string> GetExperimentContext(int64_t experiment_id) override {
    return store_.GetExperimentContext(experiment_id);
  }

 private:
  InMemoryStore& store_;
};

}  // namespace

absl::StatusOr<std::vector<v1::Metrics>> InMemoryStore::GetTrialMetrics(
    int64_t trial_id, const std::string& group, int max_points) {
  absl::MutexLock lock(&mu_);
  if (trials_.count(trial_id) == 0) {
    return absl::NotFoundError(absl::StrCat("trial ", trial_id, " not found"));
  }
  return DownsampleMetrics(MetricsOf(trial_id, group), max_points);
}

absl::StatusOr<std::vector<int64_t>> InMemoryStore::GetTrialIds(int64_t experiment_id) {
  absl::MutexLock lock(&mu_);
  if (experiments_.count(experiment_id) == 0) {
    return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not found"));
  }
  std::vector<int64_t> out;
  for (const auto& [id, trial] : trials_) {
    if (trial.experiment_id() == experiment_id) out.push_back(id);
  }
  return out;
}

absl::StatusOr<v1::Checkpoint> InMemoryStore::GetCheckpoint(const std::string& uuid) {
  absl::MutexLock lock(&mu_);
  auto it = checkpoints_.find(uuid);
  auto trial = it == checkpoints_.end() ? trials_.end() : trials_.find(it->second.checkpoint.trial_id());
  if (trial == trials_.end()) return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, " not found"));
  v1::Checkpoint c = it->second.checkpoint;
  c.set_experiment_id(trial->second.experiment_id());
  return c;
}

absl::StatusOr<std::unique_ptr<MetricsReader>> InMemoryStore::OpenReader() {
  return std::make_unique<InMemoryMetricsReader>(*this);
}

absl::StatusOr<int64_t> InMemoryStore::SupersedeMetrics(v1::Trial* trial, int32_t run_id,
                                                        int64_t after_batches) {
  absl::MutexLock lock(&mu_);
  auto it = metrics_.find(trial->id());
  if (it == metrics_.end()) return 0;
  auto superseded = [&](const v1::Metrics& m) {
    return m.run_id() < run_id && m.total_batches() > after_batches;
  };
  int64_t deleted = std::count_if(it->second.begin(), it->second.end(), superseded);
  if (deleted == 0) return 0;
  if (absl::Status st = CheckTrialStored(trial->id()); !st.ok()) return st;
  it->second.erase(std::remove_if(it->second.begin(), it->second.end(), superseded),
                   it->second.end());
  trial->clear_training_summary();
  trial->clear_validation_summary();
  trial->clear_timings_summary();
  trial->set_total_batches(0);
  for (const v1::Metrics& m : it->second) ApplyToSummaries(m, trial);
  WriteTrial(*trial);
  return deleted;
}

absl::Status InMemoryStore::AddLogs(std::vector<v1::LogLine>* lines) {
  absl::MutexLock lock(&mu_);
  for (v1::LogLine& line : *lines) {
    line.set_id(++last_log_id_);
    logs_[line.trial_id()].push_back(line);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::LogLine>> InMemoryStore::GetLogs(int64_t trial_id, int64_t after_id,
                                                                int limit,
                                                                std::optional<int> rank) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::LogLine> out;
  auto it = logs_.find(trial_id);
  if (it == logs_.end()) return out;
  const std::vector<v1::LogLine>& lines = it->second;
  size_t max = static_cast<size_t>(limit > 0 ? limit : 1000);
  auto first = std::upper_bound(lines.begin(), lines.end(), after_id,
                                [](int64_t id, const v1::LogLine& l) { return id < l.id(); });
  for (auto l = first; l != lines.end() && out.size() < max; ++l) {
    if (!rank.has_value() || l->rank() == *rank) out.push_back(*l);
  }
  return out;
}

absl::Status InMemoryStore::AddCheckpoint(const v1::Checkpoint& checkpoint,
                                          const v1::Trial& trial) {
  absl::MutexLock lock(&mu_);
  if (checkpoints_.count(checkpoint.uuid()) > 0) {
    return UniqueError("checkpoints.uuid", checkpoint.uuid());
  }
  if (absl::Status st = CheckTrialStored(trial.id()); !st.ok()) return st;
  CheckpointRow& row = checkpoints_[checkpoint.uuid()];
  row.seq = ++last_seq_;
  row.checkpoint = checkpoint;
  WriteTrial(trial);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Checkpoint>> InMemoryStore::GetCheckpoints(int64_t trial_id) {
  absl::MutexLock lock(&mu_);
  std::vector<const CheckpointRow*> rows;
  for (const auto& [uuid, row] : checkpoints_) {
    if (row.checkpoint.trial_id() == trial_id) rows.push_back(&row);
  }
  std::sort(rows.begin(), rows.end(), [](const CheckpointRow* a, const CheckpointRow* b) {
    return std::make_tuple(a->checkpoint.total_batches(), a->checkpoint.report_time_ms(), a->seq) <
           std::make_tuple(b->checkpoint.total_batches(), b->checkpoint.report_time_ms(), b->seq);
  });
  std::vector<v1::Checkpoint> out;
  for (const CheckpointRow* row : rows) out.push_back(row->checkpoint);
  return out;
}

absl::StatusOr<int64_t> InMemoryStore::InsertCheckpointGcTask(const v1::CheckpointGcTask& task) {
  absl::MutexLock lock(&mu_);
  if (experiments_.count(task.experiment_id()) == 0) {
    return ForeignKeyError("checkpoint_gc_tasks.experiment_id", task.experiment_id());
  }
  int64_t id = ++last_gc_task_id_;
  v1::CheckpointGcTask& row = gc_tasks_[id];
  row = task;
  row.set_id(id);
  return id;
}

absl::Status InMemoryStore::DeleteExperiment(int64_t experiment_id) {
  absl::MutexLock lock(&mu_);
  if (experiments_.erase(experiment_id) == 0) {
    return absl::NotFoundError(absl::StrCat("experiment ", experiment_id, " not in the database"));
  }
  // Erases the entries of `m` for which `doomed` holds.
  auto erase_if = [](auto& m, auto doomed) {
    for (auto it = m.begin(); it != m.end();) it = doomed(it->second) ? m.erase(it) : std::next(it);
  };
  for (auto t = trials_.begin(); t != trials_.end();) {
    if (t->second.experiment_id() != experiment_id) {
      ++t;
      continue;
    }
    const int64_t tid = t->first;
    metrics_.erase(tid);
    logs_.erase(tid);
    erase_if(checkpoints_, [tid](const CheckpointRow& c) { return c.checkpoint.trial_id() == tid; });
    erase_if(allocations_, [tid](const AllocationRow& a) { return a.allocation.trial_id() == tid; });
    t = trials_.erase(t);
  }
  erase_if(gc_tasks_, [experiment_id](const v1::CheckpointGcTask& g) {
    return g.experiment_id() == experiment_id;
  });
  return absl::OkStatus();
}

absl::Status InMemoryStore::UpdateCheckpointGcTask(const v1::CheckpointGcTask& task) {
  absl::MutexLock lock(&mu_);
  auto it = gc_tasks_.find(task.id());
  if (it == gc_tasks_.end()) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint GC task ", task.id(), " not in the database"));
  }
  it->second = task;
  if (task.state() == v1::STATE_COMPLETED) {
    for (const v1::Checkpoint& c : task.checkpoints()) {
      auto stored = checkpoints_.find(c.uuid());
      if (stored != checkpoints_.end()) stored->second.checkpoint.set_state(v1::STATE_DELETED);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Template> InMemoryStore::PutTemplate(const std::string& name,
                                                        const std::string& config_yaml,
                                                        const std::string& owner,
                                                        int64_t now_ms, bool* created) {
  absl::MutexLock lock(&mu_);
  auto it = templates_.find(name);
  *created = it == templates_.end();
  v1::Template t;
  t.set_name(name);
  t.set_config_yaml(config_yaml);
  t.set_create_time_ms(*created ? now_ms : it->second.create_time_ms());
  t.set_update_time_ms(now_ms);
  t.set_owner(*created ? owner : it->second.owner());
  templates_[name] = t;
  return t;
}

absl::StatusOr<v1::Template> InMemoryStore::GetTemplate(const std::string& name) {
  absl::MutexLock lock(&mu_);
  auto it = templates_.find(name);
  if (it == templates_.end()) {
    return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
  }
  return it->second;
}

absl::StatusOr<std::vector<v1::Template>> InMemoryStore::ListTemplates() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Template> out;
  for (const auto& [name, t] : templates_) out.push_back(t);
  return out;
}

absl::Status InMemoryStore::DeleteTemplate(const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (templates_.erase(name) != 1) {
    return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
  }
  return absl::OkStatus();
}

namespace {

absl::Status ModelNotStored(int64_t model_id) {
  return absl::NotFoundError(absl::StrCat("model ", model_id, " not in the database"));
}

}  // namespace

absl::StatusOr<int64_t> InMemoryStore::InsertModel(const v1::Model& model) {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, m] : models_) {
    if (m.name() == model.name()) {
      return absl::AlreadyExistsError(absl::StrCat("model '", model.name(), "' already exists"));
    }
  }
  int64_t id = ++last_model_id_;
  v1::Model& row = models_[id];
  row = model;
  row.set_id(id);
  row.clear_num_versions();
  return id;
}

absl::Status InMemoryStore::UpdateModel(const v1::Model& model) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(model.id());
  if (it == models_.end()) return ModelNotStored(model.id());
  for (const auto& [id, m] : models_) {
    if (id != model.id() && m.name() == model.name()) {
      return absl::AlreadyExistsError(absl::StrCat("model '", model.name(), "' already exists"));
    }
  }
  it->second = model;
  it->second.clear_num_versions();
  return absl::OkStatus();
}

absl::Status InMemoryStore::DeleteModel(int64_t model_id) {
  absl::MutexLock lock(&mu_);
  if (models_.erase(model_id) != 1) return ModelNotStored(model_id);
  for (auto it = model_versions_.begin(); it != model_versions_.end();) {
    it = it->second.model_id() == model_id ? model_versions_.erase(it) : std::next(it);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> InMemoryStore::InsertModelVersion(const v1::ModelVersion& version,
                                                          const v1::Model& model) {
  absl::MutexLock lock(&mu_);
  auto m = models_.find(version.model_id());
  if (m == models_.end() || version.model_id() != model.id()) {
    return ModelNotStored(version.model_id());
  }
  for (const auto& [id, v] : model_versions_) {
    if (v.model_id() == version.model_id() && v.version() == version.version()) {
      return UniqueError("model_versions.model_id, model_versions.version",
                         absl::StrCat(version.model_id(), ", ", version.version()));
    }
  }
  int64_t id = ++last_model_version_id_;
  v1::ModelVersion& row = model_versions_[id];
  row = version;
  row.set_id(id);
  row.clear_model_name();
  row.clear_checkpoint();
  m->second = model;
  m->second.clear_num_versions();
  return id;
}

absl::Status InMemoryStore::DeleteModelVersion(int64_t version_id, const v1::Model& model) {
  absl::MutexLock lock(&mu_);
  auto v = model_versions_.find(version_id);
  if (v == model_versions_.end()) {
    return absl::NotFoundError(absl::StrCat("model version ", version_id, " not in the database"));
  }
  auto m = models_.find(model.id());
  if (m == models_.end()) return ModelNotStored(model.id());
  model_versions_.erase(v);
  m->second = model;
  m->second.clear_num_versions();
  return absl::OkStatus();
}

absl::Status InMemoryStore::UpdateModelVersion(const v1::ModelVersion& version,
                                               const v1::Model& model) {
  absl::MutexLock lock(&mu_);
  auto v = model_versions_.find(version.id());
  if (v == model_versions_.end()) {
    return absl::NotFoundError(absl::StrCat("model version ", version.id(), " not in the database"));
  }
  auto m = models_.find(model.id());
  if (m == models_.end()) return ModelNotStored(model.id());
  v->second = version;
  v->second.clear_model_name();
  v->second.clear_checkpoint();
  m->second = model;
  m->second.clear_num_versions();
  return absl::OkStatus();
}

absl::Status InMemoryStore::AddSystemMetrics(const std::vector<v1::SystemMetrics>& samples,
                                             int64_t keep_after_ms) {
  absl::MutexLock lock(&mu_);
  for (const v1::SystemMetrics& m : samples) {
    system_metrics_.push_back({++last_system_metrics_id_, m});
  }
  system_metrics_.erase(std::remove_if(system_metrics_.begin(), system_metrics_.end(),
                                       [&](const SystemMetricsRow& row) {
                                         return row.sample.time_ms() < keep_after_ms;
                                       }),
                        system_metrics_.end());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::SystemMetrics>> InMemoryStore::GetSystemMetrics(
    const std::string& agent_id, int limit) {
  absl::MutexLock lock(&mu_);
  std::vector<const SystemMetricsRow*> rows;
  for (const SystemMetricsRow& row : system_metrics_) {
    if (row.sample.agent_id() == agent_id) rows.push_back(&row);
  }
  // The latest `limit` (by time, then id; a negative limit is none, as SQL's LIMIT), by id.
  std::sort(rows.begin(), rows.end(), [](const SystemMetricsRow* a, const SystemMetricsRow* b) {
    return std::make_pair(a->sample.time_ms(), a->id) > std::make_pair(b->sample.time_ms(), b->id);
  });
  if (limit >= 0 && rows.size() > static_cast<size_t>(limit)) rows.resize(limit);
  std::sort(rows.begin(), rows.end(),
            [](const SystemMetricsRow* a, const SystemMetricsRow* b) { return a->id < b->id; });
  std::vector<v1::SystemMetrics> out;
  for (const SystemMetricsRow* row : rows) out.push_back(row->sample);
  return out;
}

absl::StatusOr<std::vector<UserRow>> InMemoryStore::ListUsers() {
  absl::MutexLock lock(&mu_);
  std::vector<UserRow> out;
  for (const auto& [id, user] : users_) out.push_back(user);
  return out;
}

absl::StatusOr<int64_t> InMemoryStore::InsertUser(const UserRow& user) {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stored] : users_) {
    if (stored.username == user.username) {
      return absl::AlreadyExistsError(absl::StrCat("user '", user.username, "' already exists"));
    }
  }
  int64_t id = ++last_user_id_;
  UserRow& row = users_[id];
  row = user;
  row.id = id;
  return id;
}

absl::Status InMemoryStore::SetUserPassword(int64_t user_id, const std::string& password_hash) {
  absl::MutexLock lock(&mu_);
  auto it = users_.find(user_id);
  if (it == users_.end()) {
    return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  }
  it->second.password_hash = password_hash;
  return absl::OkStatus();
}

absl::Status InMemoryStore::SetUserAgentUserGroup(int64_t user_id,
                                                  const v1::AgentUserGroup& link) {
  absl::MutexLock lock(&mu_);
  auto it = users_.find(user_id);
  if (it == users_.end()) {
    return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  }
  it->second.agent_user_group = link;
  return absl::OkStatus();
}

absl::Status InMemoryStore::SetUsername(int64_t user_id, const std::string& username) {
  absl::MutexLock lock(&mu_);
  auto it = users_.find(user_id);
  if (it == users_.end()) {
    return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  }
  for (const auto& [id, stored] : users_) {
    if (id != user_id && stored.username == username) {
      return absl::AlreadyExistsError(absl::StrCat("user '", username, "' already exists"));
    }
  }
  // The templates the user owns (by name) follow the new name.
  for (auto& [name, t] : templates_) {
    if (t.owner() == it->second.username) t.set_owner(username);
  }
  it->second.username = username;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<SessionRow>> InMemoryStore::LoadSessions(int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                 [&](const SessionRow& s) { return s.expires_ms <= now_ms; }),
                  sessions_.end());
  return sessions_;
}

absl::Status InMemoryStore::InsertSession(const SessionRow& session) {
  absl::MutexLock lock(&mu_);
  for (const SessionRow& s : sessions_) {
    if (s.token_hash == session.token_hash) {
      return UniqueError("sessions.token_hash", session.token_hash);
    }
  }
  if (users_.count(session.user_id) == 0)
    return ForeignKeyError("sessions.user_id", session.user_id);
  sessions_.push_back(session);
  return absl::OkStatus();
}

absl::Status InMemoryStore::DeleteSession(const std::string& token_hash) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                 [&](const SessionRow& s) { return s.token_hash == token_hash; }),
                  sessions_.end());
  return absl::OkStatus();
}

absl::Status InMemoryStore::DeleteUserSessions(int64_t user_id,
                                               const std::string& keep_token_hash) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                 [&](const SessionRow& s) {
                                   return s.user_id == user_id && s.token_hash != keep_token_hash;
                                 }),
                  sessions_.end());
  return absl::OkStatus();
}

}  // namespace det::master
