// SqliteStore: the model registry (tables models and model_versions).
#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "master/store/sqlite_internal.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

using sqlite_internal::Stmt;
using sqlite_internal::Transaction;

absl::Status ModelNotStored(int64_t model_id) {
  return absl::NotFoundError(absl::StrCat("model ", model_id, " not in the database"));
}

// The row of `model` as stored: without what the master computes.
std::string ModelData(const v1::Model& model) {
  v1::Model stored = model;
  stored.clear_num_versions();
  return stored.SerializeAsString();
}

}  // namespace

absl::StatusOr<int64_t> SqliteStore::InsertModel(const v1::Model& model) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_, "INSERT INTO models (name, data) VALUES (?, '')");
  if (absl::Status st = s.Bind(1, model.name()).Run(); !st.ok()) {
    if (absl::IsAlreadyExists(st)) {
      return absl::AlreadyExistsError(absl::StrCat("model '", model.name(), "' already exists"));
    }
    return st;
  }
  v1::Model stored = model;
  stored.set_id(sqlite3_last_insert_rowid(db_));
  RETURN_IF_ERROR(WriteModel(stored));
  RETURN_IF_ERROR(tx.Commit());
  return stored.id();
}

absl::Status SqliteStore::WriteModel(const v1::Model& model) {
  Stmt s(db_, "UPDATE models SET name = ?, data = ? WHERE id = ?");
  s.Bind(1, model.name()).BindBlob(2, ModelData(model)).Bind(3, model.id());
  if (absl::Status st = s.Run(); !st.ok()) {
    if (absl::IsAlreadyExists(st)) {
      return absl::AlreadyExistsError(absl::StrCat("model '", model.name(), "' already exists"));
    }
    return st;
  }
  if (sqlite3_changes(db_) != 1) return ModelNotStored(model.id());
  return absl::OkStatus();
}

absl::Status SqliteStore::UpdateModel(const v1::Model& model) { return WriteModel(model); }

absl::Status SqliteStore::DeleteModel(int64_t model_id) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt v(db_, "DELETE FROM model_versions WHERE model_id = ?");
  RETURN_IF_ERROR(v.Bind(1, model_id).Run());
  Stmt m(db_, "DELETE FROM models WHERE id = ?");
  RETURN_IF_ERROR(m.Bind(1, model_id).Run());
  if (sqlite3_changes(db_) != 1) return ModelNotStored(model_id);
  return tx.Commit();
}

absl::StatusOr<int64_t> SqliteStore::InsertModelVersion(const v1::ModelVersion& version,
                                                        const v1::Model& model) {
  if (version.model_id() != model.id()) return ModelNotStored(version.model_id());
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  RETURN_IF_ERROR(WriteModel(model));  // NotFound for a model not stored.
  Stmt s(db_,
         "INSERT INTO model_versions (model_id, version, checkpoint_uuid, data) "
         "VALUES (?, ?, ?, '')");
  s.Bind(1, version.model_id()).Bind(2, version.version()).Bind(3, version.checkpoint_uuid());
  RETURN_IF_ERROR(s.Run());
  v1::ModelVersion stored = version;
  stored.set_id(sqlite3_last_insert_rowid(db_));
  stored.clear_model_name();
  stored.clear_checkpoint();
  Stmt d(db_, "UPDATE model_versions SET data = ? WHERE id = ?");
  RETURN_IF_ERROR(d.BindBlob(1, stored.SerializeAsString()).Bind(2, stored.id()).Run());
  RETURN_IF_ERROR(tx.Commit());
  return stored.id();
}

absl::Status SqliteStore::DeleteModelVersion(int64_t version_id, const v1::Model& model) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_, "DELETE FROM model_versions WHERE id = ?");
  RETURN_IF_ERROR(s.Bind(1, version_id).Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("model version ", version_id, " not in the database"));
  }
  RETURN_IF_ERROR(WriteModel(model));
  return tx.Commit();
}

absl::Status SqliteStore::UpdateModelVersion(const v1::ModelVersion& version,
                                             const v1::Model& model) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  v1::ModelVersion stored = version;
  stored.clear_model_name();
  stored.clear_checkpoint();
  Stmt s(db_, "UPDATE model_versions SET data = ? WHERE id = ?");
  RETURN_IF_ERROR(s.BindBlob(1, stored.SerializeAsString()).Bind(2, stored.id()).Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("model version ", version.id(), " not in the database"));
  }
  RETURN_IF_ERROR(WriteModel(model));
  return tx.Commit();
}

}  // namespace det::master
