// PostgresStore: templates, agents' host metrics, users and sessions, the model registry.
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "master/store/postgres_internal.h"
#include "master/store/postgres_store.h"

namespace det::master {
namespace {

using postgres_internal::Bytes;
using postgres_internal::ParseRow;
using postgres_internal::ReserveIds;
using postgres_internal::Result;
using postgres_internal::Transaction;

absl::Status ModelNotStored(int64_t model_id) {
  return absl::NotFoundError(absl::StrCat("model ", model_id, " not in the database"));
}

// The row of `model` as stored: without what the master computes.
std::string ModelData(const v1::Model& model) {
  v1::Model stored = model;
  stored.clear_num_versions();
  return stored.SerializeAsString();
}

absl::Status ModelNameTaken(const absl::Status& st, const std::string& name) {
  if (absl::IsAlreadyExists(st)) {
    return absl::AlreadyExistsError(absl::StrCat("model '", name, "' already exists"));
  }
  return st;
}

}  // namespace

absl::StatusOr<v1::Template> PostgresStore::PutTemplate(const std::string& name,
                                                        const std::string& config_yaml,
                                                        const std::string& owner, int64_t now_ms,
                                                        bool* created) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  v1::Template t;
  t.set_name(name);
  t.set_config_yaml(config_yaml);
  t.set_create_time_ms(now_ms);
  t.set_update_time_ms(now_ms);
  t.set_owner(owner);
  ASSIGN_OR_RETURN(Result old, conn_->Exec("SELECT create_ms, owner FROM templates "
                                           "WHERE name = $1 FOR UPDATE",
                                           {name}));
  const bool is_new = old.rows() == 0;
  if (!is_new) {
    t.set_create_time_ms(old.Int(0, 0));
    t.set_owner(old.Text(0, 1));
  }
  RETURN_IF_ERROR(conn_->Exec("INSERT INTO templates (name, config_yaml, create_ms, update_ms, owner) "
                              "VALUES ($1, $2, $3, $4, $5) "
                              "ON CONFLICT (name) DO UPDATE SET config_yaml = EXCLUDED.config_yaml, "
                              "update_ms = EXCLUDED.update_ms",
                              {name, config_yaml, t.create_time_ms(), now_ms, t.owner()})
                      .status());
  RETURN_IF_ERROR(tx.Commit());
  *created = is_new;
  return t;
}

absl::StatusOr<v1::Template> PostgresStore::GetTemplate(const std::string& name) {
  ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT config_yaml, create_ms, update_ms, owner "
                                         "FROM templates WHERE name = $1",
                                         {name}));
  if (r.rows() == 0) return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
  v1::Template t;
  t.set_name(name);
  t.set_config_yaml(r.Text(0, 0));
  t.set_create_time_ms(r.Int(0, 1));
  t.set_update_time_ms(r.Int(0, 2));
  t.set_owner(r.Text(0, 3));
  return t;
}

absl::StatusOr<std::vector<v1::Template>> PostgresStore::ListTemplates() {
  ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT name, config_yaml, create_ms, update_ms, owner "
                                         "FROM templates ORDER BY name COLLATE \"C\""));
  std::vector<v1::Template> out;
  for (int i = 0; i < r.rows(); ++i) {
    v1::Template& t = out.emplace_back();
    t.set_name(r.Text(i, 0));
    t.set_config_yaml(r.Text(i, 1));
    t.set_create_time_ms(r.Int(i, 2));
    t.set_update_time_ms(r.Int(i, 3));
    t.set_owner(r.Text(i, 4));
  }
  return out;
}

absl::Status PostgresStore::DeleteTemplate(const std::string& name) {
  ASSIGN_OR_RETURN(Result r, conn_->Exec("DELETE FROM templates WHERE name = $1", {name}));
  if (r.changed() != 1) {
    return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
  }
  return absl::OkStatus();
}

absl::Status PostgresStore::AddSystemMetrics(const std::vector<v1::SystemMetrics>& samples,
                                             int64_t keep_after_ms) {
  std::vector<std::string> data;
  std::vector<std::string_view> agents, data_views;
  std::vector<int64_t> times;
  data.reserve(samples.size());
  for (const auto& m : samples) data.push_back(m.SerializeAsString());
  for (size_t i = 0; i < samples.size(); ++i) {
    agents.push_back(samples[i].agent_id());
    times.push_back(samples[i].time_ms());
    data_views.push_back(data[i]);
  }
  // One statement (one round trip, its own transaction): the samples take ids in order, and
  // what is older than `keep_after_ms` (the new samples too) is dropped. The DELETE does not
  // see the new rows (one snapshot): those too old are not inserted.
  return conn_
      ->Exec("WITH reserved AS ("
             " INSERT INTO id_sequences (name, last) VALUES ('system_metrics', $1::bigint)"
             " ON CONFLICT (name) DO UPDATE SET last = id_sequences.last + EXCLUDED.last"
             " RETURNING last - $1::bigint AS base),"
             " stored AS ("
             " INSERT INTO system_metrics (id, agent_id, time_ms, data)"
             " SELECT reserved.base + u.k, u.agent_id, u.time_ms, u.data"
             " FROM reserved, unnest($2::text[], $3::bigint[], $4::bytea[]) WITH ORDINALITY"
             " AS u(agent_id, time_ms, data, k) WHERE u.time_ms >= $5::bigint)"
             " DELETE FROM system_metrics WHERE time_ms < $5::bigint",
             {static_cast<int64_t>(samples.size()), postgres_internal::TextArray(agents),
              postgres_internal::Int64Array(times), postgres_internal::ByteaArray(data_views),
              keep_after_ms})
      .status();
}

absl::StatusOr<std::vector<v1::SystemMetrics>> PostgresStore::GetSystemMetrics(
    const std::string& agent_id, int limit) {
  ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT data FROM (SELECT id, data FROM system_metrics "
                                         "WHERE agent_id = $1 ORDER BY time_ms DESC, id DESC "
                                         "LIMIT $2) AS latest ORDER BY id",
                                         {agent_id, limit}));
  std::vector<v1::SystemMetrics> out;
  for (int i = 0; i < r.rows(); ++i) {
    RETURN_IF_ERROR(ParseRow(r.Text(i, 0), &out.emplace_back(), "system_metrics"));
  }
  return out;
}

absl::StatusOr<std::vector<UserRow>> PostgresStore::ListUsers() {
  ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT id, username, password_hash, admin, created_ms, "
                                         "agent_user, agent_uid, agent_group, agent_gid "
                                         "FROM users ORDER BY id"));
  std::vector<UserRow> out;
  for (int i = 0; i < r.rows(); ++i) {
    UserRow& u = out.emplace_back();
    u.id = r.Int(i, 0);
    u.username = r.Text(i, 1);
    u.password_hash = r.Text(i, 2);
    u.admin = r.Int(i, 3) != 0;
    u.created_ms = r.Int(i, 4);
    if (!r.Text(i, 5).empty()) {
      u.agent_user_group.set_agent_user(r.Text(i, 5));
      u.agent_user_group.set_agent_uid(r.Int(i, 6));
      u.agent_user_group.set_agent_group(r.Text(i, 7));
      u.agent_user_group.set_agent_gid(r.Int(i, 8));
    }
  }
  return out;
}

absl::StatusOr<int64_t> PostgresStore::InsertUser(const UserRow& user) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(int64_t id, ReserveIds(conn_.get(), "users"));
  absl::Status st = conn_
                        ->Exec("INSERT INTO users (id, username, password_hash, admin, created_ms) "
                               "VALUES ($1, $2, $3, $4, $5)",
                               {id, user.username, user.password_hash, user.admin ? 1 : 0,
                                user.created_ms})
                        .status();
  if (absl::IsAlreadyExists(st)) {
    return absl::AlreadyExistsError(absl::StrCat("user '", user.username, "' already exists"));
  }
  RETURN_IF_ERROR(st);
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status PostgresStore::SetUserPassword(int64_t user_id, const std::string& password_hash) {
  ASSIGN_OR_RETURN(Result r, conn_->Exec("UPDATE users SET password_hash = $1 WHERE id = $2",
                                         {password_hash, user_id}));
  if (r.changed() != 1) return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  return absl::OkStatus();
}

absl::Status PostgresStore::SetUserAgentUserGroup(int64_t user_id, const v1::AgentUserGroup& link) {
  ASSIGN_OR_RETURN(Result r, conn_->Exec("UPDATE users SET agent_user = $1, agent_uid = $2, "
                                         "agent_group = $3, agent_gid = $4 WHERE id = $5",
                                         {link.agent_user(), link.agent_uid(), link.agent_group(),
                                          link.agent_gid(), user_id}));
  if (r.changed() != 1) return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  return absl::OkStatus();
}

absl::Status PostgresStore::SetUsername(int64_t user_id, const std::string& username) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  // The templates the user owns (by name) follow the new name.
  RETURN_IF_ERROR(conn_->Exec("UPDATE templates SET owner = $1 "
                              "WHERE owner = (SELECT username FROM users WHERE id = $2)",
                              {username, user_id})
                      .status());
  absl::StatusOr<Result> r =
      conn_->Exec("UPDATE users SET username = $1 WHERE id = $2", {username, user_id});
  if (!r.ok() && absl::IsAlreadyExists(r.status())) {
    return absl::AlreadyExistsError(absl::StrCat("user '", username, "' already exists"));
  }
  RETURN_IF_ERROR(r.status());
  if (r->changed() != 1) return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  return tx.Commit();
}

absl::StatusOr<std::vector<SessionRow>> PostgresStore::LoadSessions(int64_t now_ms) {
  RETURN_IF_ERROR(conn_->Exec("DELETE FROM sessions WHERE expires_ms <= $1", {now_ms}).status());
  ASSIGN_OR_RETURN(Result r, conn_->Exec("SELECT token_hash, user_id, created_ms, expires_ms "
                                         "FROM sessions"));
  std::vector<SessionRow> out;
  for (int i = 0; i < r.rows(); ++i) {
    SessionRow& s = out.emplace_back();
    s.token_hash = r.Text(i, 0);
    s.user_id = r.Int(i, 1);
    s.created_ms = r.Int(i, 2);
    s.expires_ms = r.Int(i, 3);
  }
  return out;
}

absl::Status PostgresStore::InsertSession(const SessionRow& session) {
  return conn_
      ->Exec("INSERT INTO sessions (token_hash, user_id, created_ms, expires_ms) "
             "VALUES ($1, $2, $3, $4)",
             {session.token_hash, session.user_id, session.created_ms, session.expires_ms})
      .status();
}

absl::Status PostgresStore::DeleteSession(const std::string& token_hash) {
  return conn_->Exec("DELETE FROM sessions WHERE token_hash = $1", {token_hash}).status();
}

absl::Status PostgresStore::DeleteUserSessions(int64_t user_id, const std::string& keep_token_hash) {
  return conn_
      ->Exec("DELETE FROM sessions WHERE user_id = $1 AND token_hash <> $2",
             {user_id, keep_token_hash})
      .status();
}

absl::StatusOr<int64_t> PostgresStore::InsertModel(const v1::Model& model) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(int64_t id, ReserveIds(conn_.get(), "models"));
  v1::Model stored = model;
  stored.set_id(id);
  const std::string data = ModelData(stored);
  RETURN_IF_ERROR(ModelNameTaken(
      conn_->Exec("INSERT INTO models (id, name, data) VALUES ($1, $2, $3)",
                  {id, model.name(), Bytes{data}})
          .status(),
      model.name()));
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status PostgresStore::WriteModel(const v1::Model& model) {
  const std::string data = ModelData(model);
  absl::StatusOr<Result> r = conn_->Exec("UPDATE models SET name = $1, data = $2 WHERE id = $3",
                                         {model.name(), Bytes{data}, model.id()});
  RETURN_IF_ERROR(ModelNameTaken(r.status(), model.name()));
  if (r->changed() != 1) return ModelNotStored(model.id());
  return absl::OkStatus();
}

absl::Status PostgresStore::UpdateModel(const v1::Model& model) { return WriteModel(model); }

absl::Status PostgresStore::DeleteModel(int64_t model_id) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  RETURN_IF_ERROR(conn_->Exec("DELETE FROM model_versions WHERE model_id = $1", {model_id}).status());
  ASSIGN_OR_RETURN(Result r, conn_->Exec("DELETE FROM models WHERE id = $1", {model_id}));
  if (r.changed() != 1) return ModelNotStored(model_id);
  return tx.Commit();
}

absl::StatusOr<int64_t> PostgresStore::InsertModelVersion(const v1::ModelVersion& version,
                                                          const v1::Model& model) {
  if (version.model_id() != model.id()) return ModelNotStored(version.model_id());
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  RETURN_IF_ERROR(WriteModel(model));  // NotFound for a model not stored.
  ASSIGN_OR_RETURN(int64_t id, ReserveIds(conn_.get(), "model_versions"));
  v1::ModelVersion stored = version;
  stored.set_id(id);
  stored.clear_model_name();
  stored.clear_checkpoint();
  const std::string data = stored.SerializeAsString();
  RETURN_IF_ERROR(conn_->Exec("INSERT INTO model_versions (id, model_id, version, checkpoint_uuid, "
                              "data) VALUES ($1, $2, $3, $4, $5)",
                              {id, version.model_id(), version.version(), version.checkpoint_uuid(),
                               Bytes{data}})
                      .status());
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status PostgresStore::DeleteModelVersion(int64_t version_id, const v1::Model& model) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  ASSIGN_OR_RETURN(Result r, conn_->Exec("DELETE FROM model_versions WHERE id = $1", {version_id}));
  if (r.changed() != 1) {
    return absl::NotFoundError(absl::StrCat("model version ", version_id, " not in the database"));
  }
  RETURN_IF_ERROR(WriteModel(model));
  return tx.Commit();
}

absl::Status PostgresStore::UpdateModelVersion(const v1::ModelVersion& version,
                                               const v1::Model& model) {
  Transaction tx(conn_.get());
  RETURN_IF_ERROR(tx.status());
  v1::ModelVersion stored = version;
  stored.clear_model_name();
  stored.clear_checkpoint();
  const std::string data = stored.SerializeAsString();
  ASSIGN_OR_RETURN(Result r, conn_->Exec("UPDATE model_versions SET data = $1 WHERE id = $2",
                                         {Bytes{data}, version.id()}));
  if (r.changed() != 1) {
    return absl::NotFoundError(absl::StrCat("model version ", version.id(), " not in the database"));
  }
  RETURN_IF_ERROR(WriteModel(model));
  return tx.Commit();
}

}  // namespace det::master
