// Users, passwords and sessions of the user API (det user ..., POST /api/v1/auth/login).
//
// Passwords are stored as libsodium argon2id hash strings (crypto_pwhash_str); a session
// is a random 256-bit token that the client sends as "Bearer TOKEN" and the master keeps
// only as its SHA-256 hash, with an expiry. On first start (no users in the database) an
// admin account "admin" is created. Design notes: docs/operations.md
// ("Users, sessions and security").
#ifndef DET_MASTER_AUTH_USER_SERVICE_H_
#define DET_MASTER_AUTH_USER_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "master/api/handlers.h"
#include "master/store/store.h"

namespace det::master {

struct UserServiceOptions {
  // How long a session lasts after login. Default: 7 days.
  absl::Duration session_ttl = absl::Hours(7 * 24);
  // Password of the admin account made when the database has no user; empty: a random
  // one, written once to the master's log.
  std::string initial_admin_password;
  // Failed logins of one user name allowed before further attempts wait: after that the
  // wait doubles with every failure, from one second up to max_login_delay. A success
  // resets it.
  int free_login_failures = 5;
  absl::Duration max_login_delay = absl::Minutes(1);
};

// InvalidArgument unless `name` is 1 to 64 letters, digits, '.', '_', '-' or '@',
// starting with a letter or a digit.
absl::Status ValidateUsername(const std::string& name);
// InvalidArgument unless `password` has 8 to 1024 bytes.
absl::Status ValidatePassword(const std::string& password, const std::string& field);
// The argon2id hash string of `password` (slow on purpose: ~0.1 s, 64 MiB).
absl::StatusOr<std::string> HashPassword(const std::string& password);
// Whether `password` matches `hash` (a HashPassword result). Slow like HashPassword.
bool VerifyPassword(const std::string& hash, const std::string& password);
// InvalidArgument naming the field (and its det user link-with-agent-user flag) unless
// `link` is empty (unlink) or names an OS user and group (1 to 32 of [A-Za-z0-9._-], not
// starting with '-') with uid and gid in [1, 2^32 - 2]: never root's 0.
absl::Status ValidateAgentUserGroup(const v1::AgentUserGroup& link);
// SHA-256 of `token`, hex: what the store keeps of a session token.
std::string TokenHash(const std::string& token);

// Implements UserHandler on the master's event loop. Password hashing and checking run
// on a thread of this object so they never hold the loop up. Authenticate runs on the
// calling thread (it never waits for the loop): users and sessions sit behind a mutex,
// written on the loop inside the turn that changes them, before that turn acknowledges,
// so a call begun after a logout, a deactivation or a password change was acknowledged
// sees it.
class UserService : public UserHandler {
 public:
  // `loop`, `store` and `clock` must outlive this object; `store` is only used on `loop`.
  UserService(EventLoop& loop, Store& store, Clock& clock, UserServiceOptions options);
  ~UserService() override;
  UserService(const UserService&) = delete;
  UserService& operator=(const UserService&) = delete;

  // Loads users and live sessions and, when there is no user yet, creates "admin".
  // REQUIRES: called once, before `loop` runs closures of this object.
  absl::Status Restore();

  // User API calls that passed / failed Authenticate, and failed logins. Thread-safe.
  int64_t authenticated() const { return authenticated_.load(); }
  int64_t rejected() const { return rejected_.load(); }

  // UserHandler. Authenticate: any thread, answers before it returns.
  void Authenticate(const std::string& token, Caller* caller, Done done) override;
  void Login(const v1::LoginRequest& request, v1::LoginResponse* response, Done done) override;
  void Logout(const Caller& caller, const v1::LogoutRequest& request,
              v1::LogoutResponse* response, Done done) override;
  void WhoAmI(const Caller& caller, const v1::WhoAmIRequest& request,
              v1::WhoAmIResponse* response, Done done) override;
  void CreateUser(const Caller& caller, const v1::CreateUserRequest& request,
                  v1::CreateUserResponse* response, Done done) override;
  void ListUsers(const Caller& caller, const v1::ListUsersRequest& request,
                 v1::ListUsersResponse* response, Done done) override;
  void ChangePassword(const Caller& caller, const v1::ChangePasswordRequest& request,
                      v1::ChangePasswordResponse* response, Done done) override;
  void LinkWithAgentUser(const Caller& caller, const v1::LinkWithAgentUserRequest& request,
                         v1::LinkWithAgentUserResponse* response, Done done) override;
  void SetUserActive(const Caller& caller, const v1::SetUserActiveRequest& request,
                     v1::SetUserActiveResponse* response, Done done) override;
  void RenameUser(const Caller& caller, const v1::RenameUserRequest& request,
                  v1::RenameUserResponse* response, Done done) override;

  // Called on the loop after a user was renamed (and stored), in the same turn, so what
  // the master keeps under the old name (owners of experiments and models) follows the
  // new one before the rename is acknowledged; its error is the call's. Default: none.
  // REQUIRES: set before the loop runs closures of this object.
  using RenameHook = std::function<absl::Status(const std::string& from, const std::string& to)>;
  void SetRenameHook(RenameHook hook) { on_rename_ = std::move(hook); }

 private:
  struct Session {
    int64_t user_id = 0;
    int64_t expires_ms = 0;
  };
  // Consecutive failed logins of one user name.
  struct Failures {
    int count = 0;
    int64_t retry_ms = 0;  // no attempt before this time
  };
  // Most user names whose failures are tracked; beyond, the oldest-waiting are forgotten.
  static constexpr size_t kMaxTrackedNames = 10000;

  // Loop thread: ResourceExhausted while `name` must wait after failed logins.
  absl::Status CheckLoginDelay(const std::string& name);
  // Loop thread: records the outcome of a login of `name`.
  void RecordLogin(const std::string& name, bool ok);

  // A copy of the user named `name` / with id `id`, if any.
  std::optional<UserRow> UserNamed(const std::string& name) const ABSL_LOCKS_EXCLUDED(mu_);
  std::optional<UserRow> UserWithId(int64_t id) const ABSL_LOCKS_EXCLUDED(mu_);
  v1::User ToProto(const UserRow& row) const;
  // Loop thread: a new session for `user`, persisted, filled into `response`.
  absl::Status StartSession(const UserRow& user, v1::LoginResponse* response);
  // Hasher thread: a hash that matches no password, for logins of unknown users.
  const std::string& DummyHash();

  EventLoop& loop_;
  Store& store_;
  Clock& clock_;
  UserServiceOptions options_;
  EventLoop hasher_;
  RenameHook on_rename_;

  // Users and sessions: written only on the loop thread, read anywhere (Authenticate).
  mutable absl::Mutex mu_;
  std::map<int64_t, UserRow> users_ ABSL_GUARDED_BY(mu_);         // by id
  std::map<std::string, Session> sessions_ ABSL_GUARDED_BY(mu_);  // by token hash
  // Loop thread.
  std::map<std::string, Failures> failures_;  // by user name, known or not
  std::atomic<int64_t> authenticated_{0};
  std::atomic<int64_t> rejected_{0};

  // Hasher thread.
  std::string dummy_hash_;
};

}  // namespace det::master

#endif  // DET_MASTER_AUTH_USER_SERVICE_H_
