// SqliteStore: templates, agents' host metrics, users and sessions.
#include "master/store/sqlite_store.h"

#include <sqlite3.h>

#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "master/store/sqlite_internal.h"

namespace det::master {
namespace {

using sqlite_internal::ParseRow;
using sqlite_internal::SqlError;
using sqlite_internal::Stmt;
using sqlite_internal::Transaction;

}  // namespace

absl::StatusOr<v1::Template> SqliteStore::PutTemplate(const std::string& name,
                                                      const std::string& config_yaml,
                                                      const std::string& owner,
                                                      int64_t now_ms, bool* created) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  v1::Template t;
  t.set_name(name);
  t.set_config_yaml(config_yaml);
  t.set_create_time_ms(now_ms);
  t.set_update_time_ms(now_ms);
  t.set_owner(owner);
  {
    Stmt s(db_, "SELECT create_ms, owner FROM templates WHERE name = ?");
    s.Bind(1, name);
    *created = !s.Step();
    RETURN_IF_ERROR(s.status());
    if (!*created) {
      t.set_create_time_ms(s.Int(0));
      t.set_owner(s.Text(1));
    }
  }
  Stmt s(db_,
         "INSERT INTO templates (name, config_yaml, create_ms, update_ms, owner) "
         "VALUES (?, ?, ?, ?, ?) "
         "ON CONFLICT(name) DO UPDATE SET config_yaml = excluded.config_yaml, "
         "update_ms = excluded.update_ms");
  s.Bind(1, name).Bind(2, config_yaml).Bind(3, t.create_time_ms()).Bind(4, now_ms);
  s.Bind(5, t.owner());
  RETURN_IF_ERROR(s.Run());
  RETURN_IF_ERROR(tx.Commit());
  return t;
}

absl::StatusOr<v1::Template> SqliteStore::GetTemplate(const std::string& name) {
  Stmt s(db_, "SELECT config_yaml, create_ms, update_ms, owner FROM templates WHERE name = ?");
  s.Bind(1, name);
  if (!s.Step()) {
    RETURN_IF_ERROR(s.status());
    return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
  }
  v1::Template t;
  t.set_name(name);
  t.set_config_yaml(s.Text(0));
  t.set_create_time_ms(s.Int(1));
  t.set_update_time_ms(s.Int(2));
  t.set_owner(s.Text(3));
  return t;
}

absl::StatusOr<std::vector<v1::Template>> SqliteStore::ListTemplates() {
  Stmt s(db_,
         "SELECT name, config_yaml, create_ms, update_ms, owner FROM templates ORDER BY name");
  std::vector<v1::Template> out;
  while (s.Step()) {
    v1::Template& t = out.emplace_back();
    t.set_name(s.Text(0));
    t.set_config_yaml(s.Text(1));
    t.set_create_time_ms(s.Int(2));
    t.set_update_time_ms(s.Int(3));
    t.set_owner(s.Text(4));
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::Status SqliteStore::DeleteTemplate(const std::string& name) {
  Stmt s(db_, "DELETE FROM templates WHERE name = ?");
  RETURN_IF_ERROR(s.Bind(1, name).Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("template '", name, "' does not exist"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::AddSystemMetrics(const std::vector<v1::SystemMetrics>& samples,
                                           int64_t keep_after_ms) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  Stmt s(db_, "INSERT INTO system_metrics (agent_id, time_ms, data) VALUES (?, ?, ?)");
  for (const auto& m : samples) {
    RETURN_IF_ERROR(s.Bind(1, m.agent_id()).Bind(2, m.time_ms()).BindBlob(3, m.SerializeAsString()).Run());
    s.Reset();
  }
  Stmt old(db_, "DELETE FROM system_metrics WHERE time_ms < ?");
  RETURN_IF_ERROR(old.Bind(1, keep_after_ms).Run());
  return tx.Commit();
}

absl::StatusOr<std::vector<v1::SystemMetrics>> SqliteStore::GetSystemMetrics(
    const std::string& agent_id, int limit) {
  Stmt s(db_,
         "SELECT data FROM (SELECT id, data FROM system_metrics WHERE agent_id = ? "
         "ORDER BY time_ms DESC, id DESC LIMIT ?) ORDER BY id");
  s.Bind(1, agent_id).Bind(2, limit);
  std::vector<v1::SystemMetrics> out;
  while (s.Step()) RETURN_IF_ERROR(ParseRow(s.Text(0), &out.emplace_back(), "system_metrics"));
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::StatusOr<std::vector<UserRow>> SqliteStore::ListUsers() {
  Stmt s(db_,
         "SELECT id, username, password_hash, admin, created_ms, agent_user, agent_uid, "
         "agent_group, agent_gid FROM users ORDER BY id");
  std::vector<UserRow> out;
  while (s.Step()) {
    UserRow& u = out.emplace_back();
    u.id = s.Int(0);
    u.username = s.Text(1);
    u.password_hash = s.Text(2);
    u.admin = s.Int(3) != 0;
    u.created_ms = s.Int(4);
    if (!s.Text(5).empty()) {
      u.agent_user_group.set_agent_user(s.Text(5));
      u.agent_user_group.set_agent_uid(s.Int(6));
      u.agent_user_group.set_agent_group(s.Text(7));
      u.agent_user_group.set_agent_gid(s.Int(8));
    }
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::StatusOr<int64_t> SqliteStore::InsertUser(const UserRow& user) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  {
    Stmt exists(db_, "SELECT 1 FROM users WHERE username = ?");
    if (exists.Bind(1, user.username).Step()) {
      return absl::AlreadyExistsError(absl::StrCat("user '", user.username, "' already exists"));
    }
    RETURN_IF_ERROR(exists.status());
  }
  Stmt s(db_,
         "INSERT INTO users (username, password_hash, admin, created_ms) VALUES (?, ?, ?, ?)");
  s.Bind(1, user.username).Bind(2, user.password_hash).Bind(3, int64_t{user.admin ? 1 : 0});
  RETURN_IF_ERROR(s.Bind(4, user.created_ms).Run());
  int64_t id = sqlite3_last_insert_rowid(db_);
  RETURN_IF_ERROR(tx.Commit());
  return id;
}

absl::Status SqliteStore::SetUserPassword(int64_t user_id, const std::string& password_hash) {
  Stmt s(db_, "UPDATE users SET password_hash = ? WHERE id = ?");
  RETURN_IF_ERROR(s.Bind(1, password_hash).Bind(2, user_id).Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::SetUserAgentUserGroup(int64_t user_id,
                                                const v1::AgentUserGroup& link) {
  Stmt s(db_,
         "UPDATE users SET agent_user = ?, agent_uid = ?, agent_group = ?, agent_gid = ? "
         "WHERE id = ?");
  s.Bind(1, link.agent_user()).Bind(2, link.agent_uid()).Bind(3, link.agent_group());
  RETURN_IF_ERROR(s.Bind(4, link.agent_gid()).Bind(5, user_id).Run());
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::SetUsername(int64_t user_id, const std::string& username) {
  Transaction tx(db_);
  RETURN_IF_ERROR(tx.status());
  // The templates the user owns (by name) follow the new name.
  Stmt templates(db_, "UPDATE templates SET owner = ? "
                      "WHERE owner = (SELECT username FROM users WHERE id = ?)");
  RETURN_IF_ERROR(templates.Bind(1, username).Bind(2, user_id).Run());
  Stmt s(db_, "UPDATE users SET username = ? WHERE id = ?");
  if (absl::Status st = s.Bind(1, username).Bind(2, user_id).Run(); !st.ok()) {
    if (absl::IsAlreadyExists(st)) {
      return absl::AlreadyExistsError(absl::StrCat("user '", username, "' already exists"));
    }
    return st;
  }
  if (sqlite3_changes(db_) != 1) {
    return absl::NotFoundError(absl::StrCat("user ", user_id, " does not exist"));
  }
  return tx.Commit();
}

absl::StatusOr<std::vector<SessionRow>> SqliteStore::LoadSessions(int64_t now_ms) {
  Stmt expired(db_, "DELETE FROM sessions WHERE expires_ms <= ?");
  RETURN_IF_ERROR(expired.Bind(1, now_ms).Run());
  Stmt s(db_, "SELECT token_hash, user_id, created_ms, expires_ms FROM sessions");
  std::vector<SessionRow> out;
  while (s.Step()) {
    SessionRow& r = out.emplace_back();
    r.token_hash = s.Text(0);
    r.user_id = s.Int(1);
    r.created_ms = s.Int(2);
    r.expires_ms = s.Int(3);
  }
  RETURN_IF_ERROR(s.status());
  return out;
}

absl::Status SqliteStore::InsertSession(const SessionRow& session) {
  Stmt s(db_,
         "INSERT INTO sessions (token_hash, user_id, created_ms, expires_ms) VALUES (?, ?, ?, ?)");
  return s.Bind(1, session.token_hash)
      .Bind(2, session.user_id)
      .Bind(3, session.created_ms)
      .Bind(4, session.expires_ms)
      .Run();
}

absl::Status SqliteStore::DeleteSession(const std::string& token_hash) {
  Stmt s(db_, "DELETE FROM sessions WHERE token_hash = ?");
  return s.Bind(1, token_hash).Run();
}

absl::Status SqliteStore::DeleteUserSessions(int64_t user_id, const std::string& keep_token_hash) {
  Stmt s(db_, "DELETE FROM sessions WHERE user_id = ? AND token_hash != ?");
  return s.Bind(1, user_id).Bind(2, keep_token_hash).Run();
}

}  // namespace det::master
