// ExperimentManager: what a user edits on an experiment besides its run: archived,
// name, description, labels, checkpoint GC policy, max_slots; and its deletion.
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config/limits.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/experiments/experiment_manager.h"
#include "master/loop/on_loop.h"
#include "master/views/views.h"

namespace det::master {
namespace {

constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxLabelBytes = 128;
constexpr int kMaxLabels = 64;

absl::Status CheckText(const std::string& field, const std::string& value, size_t max_bytes,
                       bool may_be_empty) {
  if (!may_be_empty && value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": must not be empty"));
  }
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": at most ", max_bytes,
                                                   " bytes, got ", value.size()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExperimentState*> ExperimentManager::Find(int64_t id) {
  auto it = experiments_.find(id);
  if (it == experiments_.end()) {
    return absl::NotFoundError(absl::StrCat("experiment ", id, " not found"));
  }
  return &it->second;
}

absl::StatusOr<config::ParsedExperiment> ExperimentManager::Reparse(
    const ExperimentState& es, std::vector<std::string> overrides) {
  config::ConfigInput input;
  input.config_yaml = es.experiment.config_yaml();
  input.config_path = absl::StrCat("experiment ", es.experiment.id());
  input.overrides = std::move(overrides);
  auto no_template = [](const std::string& name) -> absl::StatusOr<std::string> {
    return absl::NotFoundError(absl::StrCat("template ", name, " not found"));
  };
  return config::ParseExperimentConfig(input, no_template,
                                       static_cast<uint32_t>(es.experiment.experiment_seed()));
}

absl::Status ExperimentManager::SetArchived(int64_t id, bool archived) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(ExperimentState * es, Find(id));
  if (archived && !views::Terminal(es->experiment.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "experiment ", id, " is ", StateName(es->experiment.state()),
        ": only an ended experiment (COMPLETED, CANCELED or ERROR) can be archived"));
  }
  if (es->experiment.archived() == archived) return absl::OkStatus();
  v1::Experiment updated = es->experiment;
  updated.set_archived(archived);
  RETURN_IF_ERROR(PersistExperiment(store_, *es, std::move(updated)));
  Logger("master")->info("experiment {} {}", id, archived ? "archived" : "unarchived");
  return absl::OkStatus();
}

absl::Status ExperimentManager::Patch(const v1::PatchExperimentRequest& req,
                                      v1::PatchExperimentResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(ExperimentState * es, Find(req.id()));
  v1::Experiment updated = es->experiment;
  if (req.has_name()) {
    RETURN_IF_ERROR(CheckText("name", req.name(), kMaxNameBytes, /*may_be_empty=*/false));
    updated.set_name(req.name());
  }
  if (req.has_description()) {
    RETURN_IF_ERROR(CheckText("description", req.description(),
                              static_cast<size_t>(config::kMaxStringBytes), true));
    updated.set_description(req.description());
  }
  std::set<std::string> labels(updated.labels().begin(), updated.labels().end());
  for (int i = 0; i < req.add_labels_size(); ++i) {
    RETURN_IF_ERROR(CheckText(absl::StrCat("add_labels[", i, "]"), req.add_labels(i),
                              kMaxLabelBytes, /*may_be_empty=*/false));
    labels.insert(req.add_labels(i));
  }
  for (const std::string& label : req.remove_labels()) labels.erase(label);
  if (static_cast<int>(labels.size()) > kMaxLabels) {
    return absl::InvalidArgumentError(absl::StrCat("labels: at most ", kMaxLabels,
                                                   " per experiment, would be ", labels.size()));
  }
  updated.clear_labels();
  for (const std::string& label : labels) updated.add_labels(label);
  // The GC policy: checkpoint_storage.save_* overrides on the stored config.
  std::vector<std::string> overrides;
  const std::pair<const char*, std::optional<int32_t>> policy[] = {
      {"save_experiment_best",
       req.has_save_experiment_best() ? std::optional<int32_t>(req.save_experiment_best())
                                      : std::nullopt},
      {"save_trial_best",
       req.has_save_trial_best() ? std::optional<int32_t>(req.save_trial_best()) : std::nullopt},
      {"save_trial_latest", req.has_save_trial_latest()
                                ? std::optional<int32_t>(req.save_trial_latest())
                                : std::nullopt}};
  for (const auto& [key, value] : policy) {
    if (!value) continue;
    if (*value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": expected an integer >= 0, got ", *value));
    }
    overrides.push_back(absl::StrCat("checkpoint_storage.", key, "=", *value));
  }
  if (req.has_max_slots()) {
    if (req.max_slots() < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "max_slots: expected an integer >= 0 (0: unlimited), got ", req.max_slots()));
    }
    RETURN_IF_ERROR(RefuseEnded(*es));
  }
  std::optional<config::ParsedExperiment> parsed;
  const bool policy_changed = !overrides.empty();
  if (policy_changed && !es->config.checkpoint_storage) {
    return absl::FailedPreconditionError(absl::StrCat(
        "experiment ", req.id(), " keeps no checkpoints (its config has no checkpoint_storage)"));
  }
  if (req.has_max_slots())
    overrides.push_back(absl::StrCat("resources.max_slots=", req.max_slots()));
  if (!overrides.empty()) {
    ASSIGN_OR_RETURN(parsed, Reparse(*es, std::move(overrides)));
    updated.set_config_yaml(parsed->effective_yaml);
  }
  RETURN_IF_ERROR(PersistExperiment(store_, *es, std::move(updated)));
  if (parsed) {
    es->config = parsed->config;
    if (req.has_max_slots()) {
      Logger("master")->info("experiment {}: max_slots = {}", req.id(), req.max_slots());
    }
    if (policy_changed) {
      Logger("master")->info("experiment {}: checkpoint GC policy changed", req.id());
      // Ended trials' checkpoints the new policy no longer keeps are collected now.
      for (int64_t tid : es->trial_ids) {
        if (views::Terminal(trials_.at(tid).trial.state())) checkpoints_.Collect(*es, tid);
      }
    }
    turns_.RequestSchedule();
  }
  *resp->mutable_experiment() = es->experiment;
  return absl::OkStatus();
}

absl::Status ExperimentManager::Delete(const v1::DeleteExperimentRequest& req,
                                       v1::DeleteExperimentResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(ExperimentState * es, Find(req.id()));
  if (!views::Terminal(es->experiment.state())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "experiment ", req.id(), " is ", StateName(es->experiment.state()),
        ": only an ended experiment (COMPLETED, CANCELED or ERROR) can be deleted; kill it first"));
  }
  ASSIGN_OR_RETURN(std::optional<v1::CheckpointGcTask> task,
                   checkpoints_.QueueExperimentDeletion(*es));
  if (!task) return FinishDelete(req.id());
  resp->set_checkpoints(task->checkpoints_size());
  resp->set_gc_task(views::GcAllocationId(*task));
  Logger("master")->info("experiment {}: deleting; {} checkpoint(s) to delete first ({})", req.id(),
                         task->checkpoints_size(), resp->gc_task());
  return absl::OkStatus();
}

absl::Status ExperimentManager::FinishDelete(int64_t id) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(ExperimentState * es, Find(id));
  if (absl::Status st = store_.DeleteExperiment(id); !st.ok()) {
    Logger("master")->error("experiment {}: cannot delete its rows: {}", id, st.ToString());
    return st;
  }
  const std::vector<int64_t> trial_ids = es->trial_ids;
  logs_.ForgetTrials(trial_ids);
  for (int64_t tid : trial_ids) trial_manager_.Forget(tid);
  experiments_.erase(id);
  checkpoints_.ForgetExperiment(id);
  Logger("master")->info("experiment {} deleted ({} trial(s))", id, trial_ids.size());
  return absl::OkStatus();
}

absl::Status ExperimentManager::RenameOwner(const std::string& from, const std::string& to) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& [id, es] : experiments_) {
    if (es.experiment.owner() != from) continue;
    v1::Experiment updated = es.experiment;
    updated.set_owner(to);
    RETURN_IF_ERROR(store_.UpdateExperiment(updated));
    es.experiment = std::move(updated);
  }
  return absl::OkStatus();
}

}  // namespace det::master
