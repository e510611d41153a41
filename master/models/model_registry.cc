#include "master/models/model_registry.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/loop/on_loop.h"
#include "master/templates/templates.h"
#include "nlohmann/json.hpp"

namespace det::master {
namespace {

// InvalidArgument unless `json` is empty or a JSON object.
absl::Status CheckMetadata(const std::string& field, const std::string& json) {
  if (json.empty()) return absl::OkStatus();
  nlohmann::json parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": expected a JSON object, got '", json.substr(0, 200), "'"));
  }
  return absl::OkStatus();
}

absl::Status CheckLabels(const google::protobuf::RepeatedPtrField<std::string>& labels,
                         const std::string& field) {
  for (const std::string& l : labels) {
    if (l.empty()) return absl::InvalidArgumentError(absl::StrCat(field, ": a label is empty"));
  }
  return absl::OkStatus();
}

// `labels` in order without repeats (m: a v1::Model or a v1::ModelVersion).
template <typename Message>
void AddLabels(Message& m, const google::protobuf::RepeatedPtrField<std::string>& labels) {
  for (const std::string& l : labels) {
    if (std::find(m.labels().begin(), m.labels().end(), l) == m.labels().end()) m.add_labels(l);
  }
}

template <typename Message>
void RemoveLabels(Message& m, const google::protobuf::RepeatedPtrField<std::string>& labels) {
  const std::set<std::string> remove(labels.begin(), labels.end());
  auto* have = m.mutable_labels();
  have->erase(std::remove_if(have->begin(), have->end(),
                             [&](const std::string& l) { return remove.count(l) > 0; }),
              have->end());
}

}  // namespace

ModelRegistry::ModelRegistry(Clock& clock, EventLoop& loop, Store& store,
                             CheckpointManager& checkpoints)
    : clock_(clock), loop_(loop), store_(store), checkpoints_(checkpoints) {}

void ModelRegistry::Restore(std::vector<v1::Model> models,
                            std::vector<v1::ModelVersion> versions) {
  DET_CHECK_ON_LOOP(loop_);
  models_.clear();
  std::map<int64_t, std::string> names;
  for (v1::Model& m : models) {
    names[m.id()] = m.name();
    models_[m.name()].model = std::move(m);
  }
  for (v1::ModelVersion& v : versions) {
    auto name = names.find(v.model_id());
    if (name == names.end()) continue;  // The store deletes a model with its versions.
    const int32_t number = v.version();
    models_[name->second].versions[number] = std::move(v);
  }
}

absl::StatusOr<ModelRegistry::Entry*> ModelRegistry::Find(const std::string& name) {
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' does not exist"));
  }
  return &it->second;
}

absl::StatusOr<const ModelRegistry::Entry*> ModelRegistry::Find(const std::string& name) const {
  auto it = models_.find(name);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' does not exist"));
  }
  return &it->second;
}

v1::Model ModelRegistry::View(const Entry& e) {
  v1::Model m = e.model;
  m.set_num_versions(static_cast<int32_t>(e.versions.size()));
  return m;
}

v1::ModelVersion ModelRegistry::VersionView(const Entry& e, const v1::ModelVersion& v) {
  v1::ModelVersion out = v;
  out.set_model_name(e.model.name());
  v1::GetCheckpointRequest req;
  req.set_uuid(v.checkpoint_uuid());
  v1::GetCheckpointResponse resp;
  if (checkpoints_.GetCheckpoint(req, &resp).ok()) {
    *out.mutable_checkpoint() = std::move(*resp.mutable_checkpoint());
  } else {
    out.mutable_checkpoint()->set_uuid(v.checkpoint_uuid());
  }
  return out;
}

absl::Status ModelRegistry::Write(Entry& e, v1::Model updated) {
  updated.set_last_updated_time_ms(clock_.NowMs());
  RETURN_IF_ERROR(store_.UpdateModel(updated));
  e.model = std::move(updated);
  return absl::OkStatus();
}

absl::StatusOr<v1::Model> ModelRegistry::Create(const v1::CreateModelRequest& req,
                                                const std::string& username) {
  DET_CHECK_ON_LOOP(loop_);
  RETURN_IF_ERROR(ValidateStoredName("model", req.name()));
  RETURN_IF_ERROR(CheckLabels(req.labels(), "labels"));
  RETURN_IF_ERROR(CheckMetadata("metadata", req.metadata_json()));
  if (models_.count(req.name())) {
    return absl::AlreadyExistsError(absl::StrCat("model '", req.name(), "' already exists"));
  }
  v1::Model m;
  m.set_name(req.name());
  m.set_description(req.description());
  AddLabels(m, req.labels());
  m.set_metadata_json(req.metadata_json());
  m.set_creation_time_ms(clock_.NowMs());
  m.set_last_updated_time_ms(m.creation_time_ms());
  m.set_username(username);
  ASSIGN_OR_RETURN(int64_t id, store_.InsertModel(m));
  m.set_id(id);
  Entry& e = models_[m.name()];
  e.model = std::move(m);
  Logger("master")->info("model {} created (id {})", req.name(), id);
  return View(e);
}

std::vector<v1::Model> ModelRegistry::List(const v1::ListModelsRequest& req) const {
  DET_CHECK_ON_LOOP(loop_);
  std::vector<v1::Model> out;
  for (const auto& [name, e] : models_) {
    if (!req.user().empty() && e.model.username() != req.user()) continue;
    const auto& have = e.model.labels();
    bool all = std::all_of(req.labels().begin(), req.labels().end(), [&](const std::string& l) {
      return std::find(have.begin(), have.end(), l) != have.end();
    });
    if (all) out.push_back(View(e));
  }
  std::sort(out.begin(), out.end(),
            [](const v1::Model& a, const v1::Model& b) { return a.id() < b.id(); });
  return out;
}

absl::StatusOr<v1::Model> ModelRegistry::Get(const std::string& name) const {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(const Entry* e, Find(name));
  return View(*e);
}

absl::StatusOr<v1::Model> ModelRegistry::Patch(const v1::PatchModelRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(Entry * e, Find(req.name()));
  RETURN_IF_ERROR(CheckLabels(req.add_labels(), "add_labels"));
  if (req.has_metadata_json()) RETURN_IF_ERROR(CheckMetadata("metadata", req.metadata_json()));
  v1::Model m = e->model;
  if (req.has_description()) m.set_description(req.description());
  AddLabels(m, req.add_labels());
  RemoveLabels(m, req.remove_labels());
  if (req.has_metadata_json()) m.set_metadata_json(req.metadata_json());
  RETURN_IF_ERROR(Write(*e, std::move(m)));
  return View(*e);
}

absl::Status ModelRegistry::Delete(const std::string& name) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(Entry * e, Find(name));
  RETURN_IF_ERROR(store_.DeleteModel(e->model.id()));
  Logger("master")->info("model {} deleted with {} version(s)", name, e->versions.size());
  models_.erase(name);
  return absl::OkStatus();
}

absl::StatusOr<v1::ModelVersion> ModelRegistry::RegisterVersion(
    const v1::RegisterModelVersionRequest& req, const std::string& username) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(Entry * e, Find(req.model_name()));
  RETURN_IF_ERROR(CheckMetadata("metadata", req.metadata_json()));
  if (req.checkpoint_uuid().empty()) {
    return absl::InvalidArgumentError("checkpoint_uuid: must not be empty");
  }
  v1::GetCheckpointRequest get;
  get.set_uuid(req.checkpoint_uuid());
  v1::GetCheckpointResponse got;
  RETURN_IF_ERROR(checkpoints_.GetCheckpoint(get, &got));  // NotFound "checkpoint U not found"
  if (got.checkpoint().state() == v1::STATE_DELETED) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", req.checkpoint_uuid(), " was deleted: only a stored checkpoint can be "
        "registered"));
  }
  if (const v1::CheckpointGcTask* task = checkpoints_.DeletingTask(req.checkpoint_uuid())) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", req.checkpoint_uuid(), " is being deleted (checkpoint GC task ",
                     task->id(), " of experiment ", task->experiment_id(), ")"));
  }
  v1::ModelVersion v;
  v.set_model_id(e->model.id());
  v.set_version(e->versions.empty() ? 1 : e->versions.rbegin()->first + 1);
  v.set_checkpoint_uuid(req.checkpoint_uuid());
  v.set_name(req.name());
  v.set_comment(req.comment());
  v.set_notes(req.notes());
  v.set_metadata_json(req.metadata_json());
  v.set_creation_time_ms(clock_.NowMs());
  v.set_username(username);
  v1::Model m = e->model;
  m.set_last_updated_time_ms(v.creation_time_ms());
  ASSIGN_OR_RETURN(int64_t id, store_.InsertModelVersion(v, m));
  v.set_id(id);
  e->model = std::move(m);
  const int32_t number = v.version();
  e->versions[number] = v;
  Logger("master")->info("model {} version {}: checkpoint {}", req.model_name(), number,
                         req.checkpoint_uuid());
  v1::ModelVersion out = std::move(v);
  out.set_model_name(e->model.name());
  *out.mutable_checkpoint() = std::move(*got.mutable_checkpoint());
  return out;
}

absl::StatusOr<std::vector<v1::ModelVersion>> ModelRegistry::Versions(
    const std::string& model_name) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(Entry * e, Find(model_name));
  std::vector<v1::ModelVersion> out;
  for (const auto& [number, v] : e->versions) out.push_back(VersionView(*e, v));
  return out;
}

absl::StatusOr<v1::ModelVersion> ModelRegistry::Version(const std::string& model_name,
                                                        int32_t version) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(Entry * e, Find(model_name));
  if (version <= 0) {
    if (e->versions.empty()) {
      return absl::NotFoundError(absl::StrCat("model '", model_name, "' has no versions"));
    }
    return VersionView(*e, e->versions.rbegin()->second);
  }
  auto it = e->versions.find(version);
  if (it == e->versions.end()) {
    return absl::NotFoundError(absl::StrCat("model '", model_name, "' has no version ", version));
  }
  return VersionView(*e, it->second);
}

absl::Status ModelRegistry::DeleteVersion(const std::string& model_name, int32_t version) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(Entry * e, Find(model_name));
  auto it = e->versions.find(version);
  if (it == e->versions.end()) {
    return absl::NotFoundError(absl::StrCat("model '", model_name, "' has no version ", version));
  }
  v1::Model m = e->model;
  m.set_last_updated_time_ms(clock_.NowMs());
  RETURN_IF_ERROR(store_.DeleteModelVersion(it->second.id(), m));
  e->model = std::move(m);
  Logger("master")->info("model {} version {} deleted (checkpoint {})", model_name, version,
                         it->second.checkpoint_uuid());
  e->versions.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<v1::ModelVersion> ModelRegistry::PatchVersion(
    const v1::PatchModelVersionRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(Entry * e, Find(req.model_name()));
  auto it = e->versions.find(req.version());
  if (it == e->versions.end()) {
    return absl::NotFoundError(
        absl::StrCat("model '", req.model_name(), "' has no version ", req.version()));
  }
  RETURN_IF_ERROR(CheckLabels(req.add_labels(), "add_labels"));
  if (req.has_metadata_json()) RETURN_IF_ERROR(CheckMetadata("metadata", req.metadata_json()));
  v1::ModelVersion v = it->second;
  if (req.has_name()) v.set_name(req.name());
  if (req.has_comment()) v.set_comment(req.comment());
  if (req.has_notes()) v.set_notes(req.notes());
  if (req.has_metadata_json()) v.set_metadata_json(req.metadata_json());
  AddLabels(v, req.add_labels());
  RemoveLabels(v, req.remove_labels());
  v1::Model m = e->model;
  m.set_last_updated_time_ms(clock_.NowMs());
  RETURN_IF_ERROR(store_.UpdateModelVersion(v, m));
  e->model = std::move(m);
  it->second = std::move(v);
  Logger("master")->info("model {} version {} changed", req.model_name(), req.version());
  return VersionView(*e, it->second);
}

absl::Status ModelRegistry::RenameOwner(const std::string& from, const std::string& to) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& [name, e] : models_) {
    for (auto& [number, v] : e.versions) {
      if (v.username() != from) continue;
      v1::ModelVersion renamed = v;
      renamed.set_username(to);
      RETURN_IF_ERROR(store_.UpdateModelVersion(renamed, e.model));
      v = std::move(renamed);
    }
    if (e.model.username() != from) continue;
    v1::Model renamed = e.model;
    renamed.set_username(to);
    RETURN_IF_ERROR(store_.UpdateModel(renamed));
    e.model = std::move(renamed);
  }
  return absl::OkStatus();
}

std::string ModelRegistry::WhyProtected(const std::string& uuid) const {
  DET_CHECK_ON_LOOP(loop_);
  for (const auto& [name, e] : models_) {
    for (const auto& [number, v] : e.versions) {
      if (v.checkpoint_uuid() == uuid) {
        return absl::StrCat("version ", number, " of model '", name, "'");
      }
    }
  }
  return "";
}

}  // namespace det::master
