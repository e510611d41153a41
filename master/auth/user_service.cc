#include "master/auth/user_service.h"

#include <sodium.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"

namespace det::master {
namespace {

constexpr char kAdmin[] = "admin";
constexpr int kTokenBytes = 32;
constexpr size_t kMinPassword = 8;
constexpr size_t kMaxPassword = 1024;

std::string Hex(const unsigned char* bytes, size_t n) {
  std::string out(2 * n + 1, '\0');
  sodium_bin2hex(out.data(), out.size(), bytes, n);
  out.pop_back();
  return out;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  randombytes_buf(raw.data(), raw.size());
  return Hex(reinterpret_cast<const unsigned char*>(raw.data()), raw.size());
}

void Wipe(std::string& secret) {
  if (!secret.empty()) sodium_memzero(secret.data(), secret.size());
  secret.clear();
}

// A deactivated user's stored hash is their password hash behind this prefix, as a locked
// account in /etc/shadow: it matches no password and keeps the password for activation, so
// users need no new column.
constexpr char kLocked[] = "!";

bool IsActive(const UserRow& row) { return !absl::StartsWith(row.password_hash, kLocked); }

// The hash that checks passwords, with the deactivation mark taken off.
std::string PasswordHashOf(const std::string& stored) {
  return std::string(absl::StripPrefix(stored, kLocked));
}

absl::Status Deactivated(const std::string& name) {
  return absl::UnauthenticatedError(absl::StrCat(
      "user '", name, "' is deactivated: an admin can activate them with `det user activate ",
      name, "`"));
}

absl::Status NotAdmin(const Caller& caller, const std::string& what) {
  return absl::PermissionDeniedError(absl::StrCat("only an admin can ", what, "; user '",
                                                  caller.user.username(), "' is not one"));
}

}  // namespace

absl::Status ValidateUsername(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 64 && absl::ascii_isalnum(name[0]);
  for (char c : name) {
    ok = ok && (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' || c == '@');
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "username: expected 1 to 64 letters, digits, '.', '_', '-' or '@' starting with a "
        "letter or a digit, got \"",
        name, "\""));
  }
  return absl::OkStatus();
}

absl::Status ValidatePassword(const std::string& password, const std::string& field) {
  if (password.size() < kMinPassword || password.size() > kMaxPassword) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": expected ", kMinPassword, " to ",
                                                   kMaxPassword, " characters, got ",
                                                   password.size()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> HashPassword(const std::string& password) {
  char out[crypto_pwhash_STRBYTES];
  if (crypto_pwhash_str(out, password.data(), password.size(),
                        crypto_pwhash_OPSLIMIT_INTERACTIVE,
                        crypto_pwhash_MEMLIMIT_INTERACTIVE) != 0) {
    return absl::ResourceExhaustedError("cannot hash the password: out of memory");
  }
  return std::string(out);
}

bool VerifyPassword(const std::string& hash, const std::string& password) {
  if (hash.empty() || hash.size() >= crypto_pwhash_STRBYTES) return false;
  return crypto_pwhash_str_verify(hash.c_str(), password.data(), password.size()) == 0;
}

std::string TokenHash(const std::string& token) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(token.data()), token.size());
  return Hex(digest, sizeof(digest));
}

UserService::UserService(EventLoop& loop, Store& store, Clock& clock, UserServiceOptions options)
    : loop_(loop), store_(store), clock_(clock), options_(std::move(options)), hasher_(clock) {
  if (sodium_init() < 0) {
    // Only fails when the system has no usable randomness: nothing can be secured then.
    Logger("master")->critical("libsodium cannot initialize");
    std::abort();
  }
  hasher_.Start();
}

UserService::~UserService() {
  hasher_.Stop();
  Wipe(options_.initial_admin_password);
}

absl::Status UserService::Restore() {
  ASSIGN_OR_RETURN(std::vector<UserRow> rows, store_.ListUsers());
  ASSIGN_OR_RETURN(std::vector<SessionRow> sessions, store_.LoadSessions(clock_.NowMs()));
  {
    absl::MutexLock l(&mu_);
    for (auto& u : rows) users_[u.id] = std::move(u);
    for (const auto& s : sessions) sessions_[s.token_hash] = {s.user_id, s.expires_ms};
    if (!users_.empty()) return absl::OkStatus();
  }

  std::string password = options_.initial_admin_password;
  const bool generated = password.empty();
  if (generated) {
    password = RandomHex(12);
  } else if (absl::Status st = ValidatePassword(password, "DET_ADMIN_PASSWORD"); !st.ok()) {
    return st;
  }
  UserRow admin;
  admin.username = kAdmin;
  admin.admin = true;
  admin.created_ms = clock_.NowMs();
  ASSIGN_OR_RETURN(admin.password_hash, HashPassword(password));
  ASSIGN_OR_RETURN(admin.id, store_.InsertUser(admin));
  {
    absl::MutexLock l(&mu_);
    users_[admin.id] = admin;
  }
  if (generated) {
    Logger("master")->warn(
        "created user 'admin' with password {} (shown once; log in with `det user login "
        "admin`, then change it with `det user change-password`)",
        password);
  } else {
    Logger("master")->info("created user 'admin' with the password from DET_ADMIN_PASSWORD");
  }
  Wipe(password);
  return absl::OkStatus();
}

std::optional<UserRow> UserService::UserNamed(const std::string& name) const {
  absl::ReaderMutexLock l(&mu_);
  for (const auto& [id, u] : users_) {
    if (u.username == name) return u;
  }
  return std::nullopt;
}

std::optional<UserRow> UserService::UserWithId(int64_t id) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = users_.find(id);
  if (it == users_.end()) return std::nullopt;
  return it->second;
}

v1::User UserService::ToProto(const UserRow& row) const {
  v1::User u;
  u.set_id(row.id);
  u.set_username(row.username);
  u.set_admin(row.admin);
  u.set_created_ms(row.created_ms);
  u.set_active(IsActive(row));
  if (!row.agent_user_group.agent_user().empty()) {
    *u.mutable_agent_user_group() = row.agent_user_group;
  }
  return u;
}

const std::string& UserService::DummyHash() {
  if (dummy_hash_.empty()) dummy_hash_ = HashPassword(RandomHex(16)).value_or("");
  return dummy_hash_;
}

absl::Status UserService::StartSession(const UserRow& user, v1::LoginResponse* response) {
  std::string token = RandomHex(kTokenBytes);
  SessionRow row;
  row.token_hash = TokenHash(token);
  row.user_id = user.id;
  row.created_ms = clock_.NowMs();
  row.expires_ms = row.created_ms + absl::ToInt64Milliseconds(options_.session_ttl);
  RETURN_IF_ERROR(store_.InsertSession(row));
  {
    absl::MutexLock l(&mu_);
    sessions_[row.token_hash] = {row.user_id, row.expires_ms};
  }
  response->set_token(token);
  *response->mutable_user() = ToProto(user);
  response->set_expires_ms(row.expires_ms);
  Logger("master")->info("user '{}' logged in", user.username);
  return absl::OkStatus();
}

void UserService::Authenticate(const std::string& token, Caller* caller, Done done) {
  if (token.empty()) {
    ++rejected_;
    return done(absl::UnauthenticatedError(
        "no session token: log in with `det user login` (REST: POST /api/v1/auth/login, "
        "then send \"Authorization: Bearer TOKEN\")"));
  }
  const std::string hash = TokenHash(token);
  const int64_t now = clock_.NowMs();
  absl::Status status;
  bool expired = false;
  {
    absl::ReaderMutexLock l(&mu_);
    auto it = sessions_.find(hash);
    expired = it != sessions_.end() && it->second.expires_ms <= now;
    auto user = it == sessions_.end() || expired ? users_.end() : users_.find(it->second.user_id);
    if (user == users_.end()) {
      status = absl::UnauthenticatedError(
          "invalid or expired session token: log in again with `det user login`");
    } else if (!IsActive(user->second)) {
      status = Deactivated(user->second.username);
    } else {
      caller->user = ToProto(user->second);
      caller->token = token;
    }
  }
  if (expired) {
    // Refused above whatever happens to it here.
    loop_.Post([this, hash, now] {
      {
        absl::MutexLock l(&mu_);
        auto it = sessions_.find(hash);
        if (it == sessions_.end() || it->second.expires_ms > now) return;
        sessions_.erase(it);
      }
      absl::Status st = store_.DeleteSession(hash);
      if (!st.ok()) Logger("master")->error("cannot delete an expired session: {}", st.ToString());
    });
  }
  ++(status.ok() ? authenticated_ : rejected_);
  done(status);
}

void UserService::Login(const v1::LoginRequest& request, v1::LoginResponse* response,
                        Done done) {
  loop_.Post([this, &request, response, done = std::move(done)]() mutable {
    // Unknown names wait like known ones, so the delay tells nothing about who exists.
    if (absl::Status st = CheckLoginDelay(request.username()); !st.ok()) {
      ++rejected_;
      done(st);
      return;
    }
    std::optional<UserRow> user = UserNamed(request.username());
    std::string hash = user ? PasswordHashOf(user->password_hash) : "";
    int64_t id = user ? user->id : 0;
    std::string password = request.password();
    hasher_.Post([this, hash, id, name = request.username(), password, response,
                  done = std::move(done)]() mutable {
      // An unknown user costs as much time as a wrong password.
      bool ok = VerifyPassword(hash.empty() ? DummyHash() : hash, password) && !hash.empty();
      Wipe(password);
      loop_.Post([this, ok, id, name, response, done = std::move(done)] {
        std::optional<UserRow> user = UserWithId(id);
        RecordLogin(name, ok && user);
        if (!ok || !user) {
          ++rejected_;
          done(absl::UnauthenticatedError("wrong user name or password"));
          return;
        }
        // Said only after the right password, so it tells nothing to others.
        if (!IsActive(*user)) {
          ++rejected_;
          done(Deactivated(user->username));
          return;
        }
        done(StartSession(*user, response));
      });
    });
  });
}

absl::Status UserService::CheckLoginDelay(const std::string& name) {
  auto f = failures_.find(name);
  const int64_t now = clock_.NowMs();
  if (f == failures_.end() || f->second.retry_ms <= now) return absl::OkStatus();
  const int64_t wait_s = (f->second.retry_ms - now + 999) / 1000;
  return absl::ResourceExhaustedError(absl::StrCat("too many failed logins for '", name, "': try again in ",
                                                   wait_s, " s"));
}

void UserService::RecordLogin(const std::string& name, bool ok) {
  if (ok) {
    failures_.erase(name);
    return;
  }
  if (failures_.size() >= kMaxTrackedNames && !failures_.count(name)) {
    // Forget the names whose wait is over; if none, the one whose wait ends first.
    const int64_t now = clock_.NowMs();
    for (auto it = failures_.begin(); it != failures_.end();) {
      it = it->second.retry_ms <= now ? failures_.erase(it) : std::next(it);
    }
    if (failures_.size() >= kMaxTrackedNames) {
      failures_.erase(std::min_element(failures_.begin(), failures_.end(), [](const auto& a, const auto& b) {
        return a.second.retry_ms < b.second.retry_ms;
      }));
    }
  }
  Failures& f = failures_[name];
  ++f.count;
  const int over = f.count - options_.free_login_failures;
  if (over <= 0) return;
  const absl::Duration delay = std::min(options_.max_login_delay, absl::Seconds(1) * (int64_t{1} << std::min(over - 1, 20)));
  f.retry_ms = clock_.NowMs() + absl::ToInt64Milliseconds(delay);
}

void UserService::Logout(const Caller& caller, const v1::LogoutRequest&, v1::LogoutResponse*,
                         Done done) {
  loop_.Post([this, token = caller.token, done = std::move(done)] {
    const std::string hash = TokenHash(token);
    {
      absl::MutexLock l(&mu_);
      sessions_.erase(hash);
    }
    done(store_.DeleteSession(hash));
  });
}

void UserService::WhoAmI(const Caller& caller, const v1::WhoAmIRequest&,
                         v1::WhoAmIResponse* response, Done done) {
  loop_.Post([this, token = caller.token, user_id = caller.user.id(), response,
              done = std::move(done)] {
    absl::ReaderMutexLock l(&mu_);
    auto u = users_.find(user_id);
    auto s = sessions_.find(TokenHash(token));
    if (u == users_.end() || s == sessions_.end()) {
      done(absl::UnauthenticatedError("the session has ended: log in again with `det user login`"));
      return;
    }
    *response->mutable_user() = ToProto(u->second);
    response->set_expires_ms(s->second.expires_ms);
    done(absl::OkStatus());
  });
}

void UserService::CreateUser(const Caller& caller, const v1::CreateUserRequest& request,
                             v1::CreateUserResponse* response, Done done) {
  if (!caller.user.admin()) return done(NotAdmin(caller, "create users"));
  if (absl::Status st = ValidateUsername(request.username()); !st.ok()) return done(st);
  if (absl::Status st = ValidatePassword(request.password(), "password"); !st.ok()) {
    return done(st);
  }
  loop_.Post([this, &request, response, done = std::move(done)]() mutable {
    if (UserNamed(request.username())) {
      done(absl::AlreadyExistsError(
          absl::StrCat("user '", request.username(), "' already exists")));
      return;
    }
    UserRow row;
    row.username = request.username();
    row.admin = request.admin();
    std::string password = request.password();
    hasher_.Post([this, row, password, response, done = std::move(done)]() mutable {
      absl::StatusOr<std::string> hash = HashPassword(password);
      Wipe(password);
      loop_.Post([this, row, hash, response, done = std::move(done)]() mutable {
        if (!hash.ok()) return done(hash.status());
        row.password_hash = *hash;
        row.created_ms = clock_.NowMs();
        absl::StatusOr<int64_t> id = store_.InsertUser(row);
        if (!id.ok()) return done(id.status());
        row.id = *id;
        {
          absl::MutexLock l(&mu_);
          users_[row.id] = row;
        }
        *response->mutable_user() = ToProto(row);
        Logger("master")->info("user '{}' created{}", row.username, row.admin ? " (admin)" : "");
        done(absl::OkStatus());
      });
    });
  });
}

void UserService::ListUsers(const Caller&, const v1::ListUsersRequest&,
                            v1::ListUsersResponse* response, Done done) {
  loop_.Post([this, response, done = std::move(done)] {
    absl::ReaderMutexLock l(&mu_);
    for (const auto& [id, u] : users_) *response->add_users() = ToProto(u);
    done(absl::OkStatus());
  });
}

void UserService::ChangePassword(const Caller& caller, const v1::ChangePasswordRequest& request,
                                 v1::ChangePasswordResponse*, Done done) {
  const std::string target =
      request.username().empty() ? caller.user.username() : request.username();
  const bool self = target == caller.user.username();
  if (!self && !caller.user.admin()) {
    return done(NotAdmin(caller, "change another user's password"));
  }
  if (absl::Status st = ValidatePassword(request.new_password(), "new_password"); !st.ok()) {
    return done(st);
  }
  loop_.Post([this, target, self, token = caller.token, &request, done = std::move(done)]() mutable {
    std::optional<UserRow> user = UserNamed(target);
    if (!user) {
      done(absl::NotFoundError(absl::StrCat("user '", target, "' not found")));
      return;
    }
    struct Work {
      int64_t id;
      std::string old_hash, old_password, new_password;
    };
    Work w{user->id, PasswordHashOf(user->password_hash), request.old_password(),
           request.new_password()};
    hasher_.Post([this, w = std::move(w), self, token, done = std::move(done)]() mutable {
      absl::StatusOr<std::string> hash =
          self && !VerifyPassword(w.old_hash, w.old_password)
              ? absl::StatusOr<std::string>(
                    absl::PermissionDeniedError("old_password: wrong password"))
              : HashPassword(w.new_password);
      Wipe(w.old_password);
      Wipe(w.new_password);
      loop_.Post([this, id = w.id, hash, self, token, done = std::move(done)] {
        if (!hash.ok()) return done(hash.status());
        std::optional<UserRow> user = UserWithId(id);
        if (!user) return done(absl::NotFoundError("the user was removed"));
        // A deactivated user stays deactivated.
        const std::string stored = IsActive(*user) ? *hash : kLocked + *hash;
        if (absl::Status st = store_.SetUserPassword(id, stored); !st.ok()) return done(st);
        // The user's other sessions end; the caller's own stays when it is theirs.
        const std::string keep = self ? TokenHash(token) : "";
        absl::Status deleted = store_.DeleteUserSessions(id, keep);
        {
          absl::MutexLock l(&mu_);
          users_.at(id).password_hash = stored;
          if (deleted.ok()) {
            for (auto it = sessions_.begin(); it != sessions_.end();) {
              it = it->second.user_id == id && it->first != keep ? sessions_.erase(it) : std::next(it);
            }
          }
        }
        if (!deleted.ok()) return done(deleted);
        Logger("master")->info("password of user '{}' changed", user->username);
        done(absl::OkStatus());
      });
    });
  });
}

absl::Status ValidateAgentUserGroup(const v1::AgentUserGroup& link) {
  if (link.agent_user().empty()) {
    if (link.agent_uid() != 0 || link.agent_gid() != 0 || !link.agent_group().empty()) {
      return absl::InvalidArgumentError(
          "agent_user (--agent-user): empty unlinks the user, so agent_uid, agent_gid and "
          "agent_group must be empty too");
    }
    return absl::OkStatus();
  }
  for (const auto& [field, name] : {std::pair{"agent_user (--agent-user)", &link.agent_user()},
                                    std::pair{"agent_group (--agent-group)", &link.agent_group()}}) {
    bool ok = !name->empty() && name->size() <= 32 && (*name)[0] != '-';
    for (char c : *name) ok = ok && (absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-');
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": expected an OS name of 1 to 32 letters, digits, '.', '_' or '-' not "
                 "starting with '-', got \"",
          *name, "\""));
    }
  }
  // 2^32 - 1 is (uid_t)-1, "no change" to setresuid: never a user.
  constexpr int64_t kMaxId = 4294967294;
  for (const auto& [field, id] : {std::pair{"agent_uid (--agent-uid)", link.agent_uid()},
                                  std::pair{"agent_gid (--agent-gid)", link.agent_gid()}}) {
    if (id == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": 0 is root's; workers never run as root, link an unprivileged user"));
    }
    if (id < 0 || id > kMaxId) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": expected 1 to ", kMaxId, ", got ", id));
    }
  }
  return absl::OkStatus();
}

void UserService::LinkWithAgentUser(const Caller& caller,
                                    const v1::LinkWithAgentUserRequest& request,
                                    v1::LinkWithAgentUserResponse*, Done done) {
  if (!caller.user.admin()) return done(NotAdmin(caller, "link users with agent users"));
  if (absl::Status st = ValidateAgentUserGroup(request.agent_user_group()); !st.ok()) {
    return done(st);
  }
  loop_.Post([this, name = request.username(), link = request.agent_user_group(),
              done = std::move(done)] {
    std::optional<UserRow> user = UserNamed(name);
    if (!user) return done(absl::NotFoundError(absl::StrCat("user '", name, "' not found")));
    // Persisted before it is used or acknowledged.
    if (absl::Status st = store_.SetUserAgentUserGroup(user->id, link); !st.ok()) return done(st);
    {
      absl::MutexLock l(&mu_);
      users_.at(user->id).agent_user_group = link;
    }
    if (link.agent_user().empty()) {
      Logger("master")->info("user '{}' unlinked from its agent user", name);
    } else {
      Logger("master")->info("user '{}' linked with agent user {} (uid {}) group {} (gid {})",
                             name, link.agent_user(), link.agent_uid(), link.agent_group(),
                             link.agent_gid());
    }
    done(absl::OkStatus());
  });
}

void UserService::SetUserActive(const Caller& caller, const v1::SetUserActiveRequest& request,
                                v1::SetUserActiveResponse* response, Done done) {
  const bool active = request.active();
  if (!caller.user.admin()) {
    return done(NotAdmin(caller, active ? "activate users" : "deactivate users"));
  }
  if (request.username().empty()) return done(absl::InvalidArgumentError("username: required"));
  if (!active && request.username() == caller.user.username()) {
    return done(absl::InvalidArgumentError(
        "username: an admin cannot deactivate themselves (another admin can)"));
  }
  loop_.Post([this, name = request.username(), active, response, done = std::move(done)] {
    std::optional<UserRow> user = UserNamed(name);
    if (!user) return done(absl::NotFoundError(absl::StrCat("user '", name, "' not found")));
    if (IsActive(*user) != active) {
      const std::string hash = PasswordHashOf(user->password_hash);
      const std::string stored = active ? hash : kLocked + hash;
      // Persisted before it is used or acknowledged.
      if (absl::Status st = store_.SetUserPassword(user->id, stored); !st.ok()) return done(st);
      user->password_hash = stored;
      {
        absl::MutexLock l(&mu_);
        users_.at(user->id).password_hash = stored;
      }
      Logger("master")->info("user '{}' {}", name, active ? "activated" : "deactivated");
    }
    *response->mutable_user() = ToProto(*user);
    done(absl::OkStatus());
  });
}

void UserService::RenameUser(const Caller& caller, const v1::RenameUserRequest& request,
                             v1::RenameUserResponse* response, Done done) {
  if (!caller.user.admin()) return done(NotAdmin(caller, "rename users"));
  if (request.username().empty()) return done(absl::InvalidArgumentError("username: required"));
  if (absl::Status st = ValidateUsername(request.new_username()); !st.ok()) {
    // "username: expected ..." names the request's field.
    return done(absl::InvalidArgumentError(std::string(st.message()).replace(0, 8, "new_username")));
  }
  loop_.Post([this, from = request.username(), to = request.new_username(), response,
              done = std::move(done)] {
    std::optional<UserRow> user = UserNamed(from);
    if (!user) return done(absl::NotFoundError(absl::StrCat("user '", from, "' not found")));
    if (from == to) {
      return done(absl::InvalidArgumentError(
          absl::StrCat("new_username: user '", from, "' already has that name")));
    }
    if (UserNamed(to)) {
      return done(absl::AlreadyExistsError(absl::StrCat(
          "new_username: user '", to, "' already exists; choose another name")));
    }
    // Persisted before it is used or acknowledged.
    if (absl::Status st = store_.SetUsername(user->id, to); !st.ok()) return done(st);
    user->username = to;
    {
      absl::MutexLock l(&mu_);
      users_.at(user->id).username = to;
    }
    Logger("master")->info("user '{}' renamed to '{}'", from, to);
    if (on_rename_) {
      if (absl::Status st = on_rename_(from, to); !st.ok()) {
        return done(absl::Status(st.code(), absl::StrCat("user '", from, "' was renamed to '",
                                                         to, "', but what they own was not all "
                                                         "moved to the new name: ",
                                                         st.message())));
      }
    }
    *response->mutable_user() = ToProto(*user);
    done(absl::OkStatus());
  });
}

}  // namespace det::master
