// ModelRegistry: the model registry (det model ...; docs/models.md): models by unique name,
// each with versions numbered 1, 2, ... that point at checkpoints (v1::Model,
// v1::ModelVersion). Kept in memory and rebuilt from the store on start; every change is
// stored before it is applied and answered. A checkpoint that is a version is protected:
// WhyProtected is what the composition root hands CheckpointManager::SetProtection, so
// garbage collection keeps it and deleting it (or its experiment) is refused.
//
// Who may change what is the caller's check (master/api/permissions.h: the model's
// creator or an admin). Loop thread only: every public method checks it.
#ifndef DET_MASTER_MODELS_MODEL_REGISTRY_H_
#define DET_MASTER_MODELS_MODEL_REGISTRY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/store/store.h"
#include "proto/api.pb.h"

namespace det::master {

class ModelRegistry {
 public:
  // Everything must outlive this.
  ModelRegistry(Clock& clock, EventLoop& loop, Store& store, CheckpointManager& checkpoints);

  // Recovery: the store's models and versions (StoreSnapshot).
  void Restore(std::vector<v1::Model> models, std::vector<v1::ModelVersion> versions);

  // A new model owned by `username`. InvalidArgument for a bad name (ValidateStoredName),
  // an empty label or metadata that is no JSON object; AlreadyExists "model 'NAME' already
  // exists".
  absl::StatusOr<v1::Model> Create(const v1::CreateModelRequest& req, const std::string& username);
  // By id; those with every label of req.labels and, when req.user is set, that user's.
  std::vector<v1::Model> List(const v1::ListModelsRequest& req) const;
  // NotFound "model 'NAME' does not exist".
  absl::StatusOr<v1::Model> Get(const std::string& name) const;
  // Description, labels (added, then removed) and metadata; NotFound as Get.
  absl::StatusOr<v1::Model> Patch(const v1::PatchModelRequest& req);
  // The model and its versions (their checkpoints are no longer protected). NotFound as Get.
  absl::Status Delete(const std::string& name);

  // Registers checkpoint req.checkpoint_uuid as the model's next version (the highest
  // number + 1), registered by `username`. NotFound for an unknown model or checkpoint;
  // FailedPrecondition for a checkpoint that was deleted or that a GC task is deleting.
  absl::StatusOr<v1::ModelVersion> RegisterVersion(const v1::RegisterModelVersionRequest& req,
                                                   const std::string& username);
  // The model's versions, oldest first, each with its checkpoint as the master has it now.
  absl::StatusOr<std::vector<v1::ModelVersion>> Versions(const std::string& model_name);
  // Version `version` (<= 0: the latest). NotFound "model 'NAME' has no version N" / "model
  // 'NAME' has no versions".
  absl::StatusOr<v1::ModelVersion> Version(const std::string& model_name, int32_t version);
  // NotFound as Version.
  absl::Status DeleteVersion(const std::string& model_name, int32_t version);
  // The fields req sets of version req.version (name, comment, notes, metadata; labels
  // added, then removed). NotFound as Version (a version number <= 0 is none);
  // InvalidArgument for an empty label or metadata that is no JSON object.
  absl::StatusOr<v1::ModelVersion> PatchVersion(const v1::PatchModelVersionRequest& req);

  // A user was renamed: the models and versions `from` owns are stored as `to`'s. Stops at
  // the first store error (what was written stays renamed).
  absl::Status RenameOwner(const std::string& from, const std::string& to);

  // "" when no version names checkpoint `uuid`, else the first that does: "version 2 of
  // model 'mnist'".
  std::string WhyProtected(const std::string& uuid) const;

 private:
  struct Entry {
    v1::Model model;  // as stored
    std::map<int32_t, v1::ModelVersion> versions;  // by number, as stored
  };

  absl::StatusOr<Entry*> Find(const std::string& name);
  absl::StatusOr<const Entry*> Find(const std::string& name) const;
  // The model as replies carry it (num_versions set).
  static v1::Model View(const Entry& e);
  // The version as replies carry it: the model's name and the checkpoint (its uuid alone
  // when the master no longer finds it).
  v1::ModelVersion VersionView(const Entry& e, const v1::ModelVersion& v);
  // Stores `updated` (last_updated_time_ms now) as e's model, then keeps it.
  absl::Status Write(Entry& e, v1::Model updated);

  Clock& clock_;
  EventLoop& loop_;
  Store& store_;
  CheckpointManager& checkpoints_;
  std::map<std::string, Entry> models_;  // by name
};

}  // namespace det::master

#endif  // DET_MASTER_MODELS_MODEL_REGISTRY_H_
