#include "master/auth/user_service.h"

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/clock/clock.h"
#include "common/event_loop/event_loop.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/fault_injecting_store.h"
#include "master/store/sqlite_store.h"

namespace det::master {
namespace {

using ::det::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kAdminPassword[] = "first-admin-password";

absl::Status Wait(const std::function<void(Done)>& call) {
  absl::Notification n;
  absl::Status status;
  call([&](absl::Status st) {
    status = st;
    n.Notify();
  });
  n.WaitForNotification();
  return status;
}

class UserServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = absl::StrCat(tmp ? tmp : "/tmp", "/users_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    std::remove(path_.c_str());
    Open(kAdminPassword);
  }
  void TearDown() override { Close(); }

  void Open(const std::string& admin_password) {
    auto store = SqliteStore::Open(path_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    faults_ = std::make_unique<FaultInjectingStore>(*store_);
    loop_ = std::make_unique<EventLoop>(clock_);
    UserServiceOptions options;
    options.session_ttl = absl::Hours(1);
    options.initial_admin_password = admin_password;
    users_ = std::make_unique<UserService>(*loop_, *faults_, clock_, options);
    ASSERT_TRUE(users_->Restore().ok());
    loop_->Start();
  }
  void Close() {
    if (loop_) loop_->Stop();
    users_.reset();
    loop_.reset();
    faults_.reset();
    store_.reset();
  }

  absl::StatusOr<std::string> Login(const std::string& user, const std::string& password) {
    v1::LoginRequest req;
    req.set_username(user);
    req.set_password(password);
    v1::LoginResponse resp;
    absl::Status st = Wait([&](Done d) { users_->Login(req, &resp, std::move(d)); });
    if (!st.ok()) return st;
    EXPECT_EQ(resp.user().username(), user);
    EXPECT_EQ(resp.expires_ms(), clock_.NowMs() + 3600 * 1000);
    return resp.token();
  }

  absl::StatusOr<Caller> Auth(const std::string& token) {
    Caller caller;
    absl::Status st = Wait([&](Done d) { users_->Authenticate(token, &caller, std::move(d)); });
    if (!st.ok()) return st;
    return caller;
  }

  absl::Status CreateUser(const Caller& as, const std::string& name, const std::string& password,
                          bool admin = false) {
    v1::CreateUserRequest req;
    req.set_username(name);
    req.set_password(password);
    req.set_admin(admin);
    v1::CreateUserResponse resp;
    return Wait([&](Done d) { users_->CreateUser(as, req, &resp, std::move(d)); });
  }

  absl::Status ChangePassword(const Caller& as, const std::string& name, const std::string& old,
                              const std::string& fresh) {
    v1::ChangePasswordRequest req;
    req.set_username(name);
    req.set_old_password(old);
    req.set_new_password(fresh);
    v1::ChangePasswordResponse resp;
    return Wait([&](Done d) { users_->ChangePassword(as, req, &resp, std::move(d)); });
  }

  absl::Status Link(const Caller& as, const std::string& name, const std::string& user,
                    int64_t uid, const std::string& group, int64_t gid) {
    v1::LinkWithAgentUserRequest req;
    req.set_username(name);
    req.mutable_agent_user_group()->set_agent_user(user);
    req.mutable_agent_user_group()->set_agent_uid(uid);
    req.mutable_agent_user_group()->set_agent_group(group);
    req.mutable_agent_user_group()->set_agent_gid(gid);
    v1::LinkWithAgentUserResponse resp;
    return Wait([&](Done d) { users_->LinkWithAgentUser(as, req, &resp, std::move(d)); });
  }

  // Creates user "bob" as `admin` and logs him in twice: his two tokens.
  std::pair<absl::StatusOr<std::string>, absl::StatusOr<std::string>> BobWithTwoSessions(
      const Caller& admin) {
    EXPECT_TRUE(CreateUser(admin, "bob", "bobs-password").ok());
    auto first = Login("bob", "bobs-password");
    return {first, Login("bob", "bobs-password")};
  }

  absl::Status SetActive(const Caller& as, const std::string& name, bool active) {
    v1::SetUserActiveRequest req;
    req.set_username(name);
    req.set_active(active);
    v1::SetUserActiveResponse resp;
    return Wait([&](Done d) { users_->SetUserActive(as, req, &resp, std::move(d)); });
  }

  // Blocks the loop until the returned gate is opened (Notify) and the gate object is
  // done with: every closure posted meanwhile waits behind it.
  std::shared_ptr<absl::Notification> BlockLoop() {
    auto gate = std::make_shared<absl::Notification>();
    absl::Notification blocked;
    loop_->Post([gate, &blocked] {
      blocked.Notify();
      gate->WaitForNotification();
    });
    blocked.WaitForNotification();
    return gate;
  }

  v1::ListUsersResponse List(const Caller& as) {
    v1::ListUsersResponse list;
    EXPECT_TRUE(Wait([&](Done d) { users_->ListUsers(as, {}, &list, std::move(d)); }).ok());
    return list;
  }

  Caller AdminCaller() {
    auto token = Login("admin", kAdminPassword);
    EXPECT_TRUE(token.ok()) << token.status();
    auto caller = Auth(token.value_or(""));
    EXPECT_TRUE(caller.ok()) << caller.status();
    return caller.value_or(Caller{});
  }

  FakeClock clock_;
  std::string path_;
  std::unique_ptr<SqliteStore> store_;
  std::unique_ptr<FaultInjectingStore> faults_;  // Wraps store_; users_ writes through it.
  std::unique_ptr<EventLoop> loop_;
  std::unique_ptr<UserService> users_;
};

TEST_F(UserServiceTest, AdminIsCreatedOnFirstStartAndLogsIn) {
  auto token = Login("admin", kAdminPassword);
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(token->size(), 64u);
  auto caller = Auth(*token);
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->user.username(), "admin");
  EXPECT_TRUE(caller->user.admin());
  EXPECT_EQ(caller->token, *token);

  // Only the token's hash is stored, and the password only as an argon2id hash.
  auto sessions = store_->LoadSessions(clock_.NowMs());
  ASSERT_TRUE(sessions.ok());
  ASSERT_EQ(sessions->size(), 1u);
  EXPECT_EQ((*sessions)[0].token_hash, TokenHash(*token));
  EXPECT_NE((*sessions)[0].token_hash, *token);
  auto rows = store_->ListUsers();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_THAT((*rows)[0].password_hash, ::testing::StartsWith("$argon2id$"));
  EXPECT_THAT((*rows)[0].password_hash, ::testing::Not(HasSubstr(kAdminPassword)));
}

TEST_F(UserServiceTest, WrongPasswordsUnknownUsersAndBadTokensAreRefused) {
  auto wrong = Login("admin", "not-the-password");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(wrong.status().message(), HasSubstr("wrong user name or password"));
  auto unknown = Login("nobody", kAdminPassword);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(unknown.status().message(), wrong.status().message());

  EXPECT_EQ(Auth("").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(Auth("").status().message(), HasSubstr("det user login"));
  EXPECT_EQ(Auth(std::string(64, 'a')).status().code(), absl::StatusCode::kUnauthenticated);
  absl::Notification n;
  int64_t authenticated = -1, rejected = -1;
  loop_->Post([&] {
    authenticated = users_->authenticated();
    rejected = users_->rejected();
    n.Notify();
  });
  n.WaitForNotification();
  EXPECT_EQ(authenticated, 0);
  EXPECT_EQ(rejected, 5);
}

// After a few failed logins a user name must wait, twice as long after every further
// failure (up to a cap), whether the name exists or not; a success resets it. The wait
// refuses at once, without checking the password.
TEST_F(UserServiceTest, RepeatedFailedLoginsOfANameMustWait) {
  for (const std::string name : {"admin", "nobody"}) {
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(Login(name, "wrong-password").status().code(), absl::StatusCode::kUnauthenticated) << name << i;
    }
    // The sixth failure starts a one-second wait.
    EXPECT_EQ(Login(name, "wrong-password").status().code(), absl::StatusCode::kUnauthenticated);
    auto waiting = Login(name, kAdminPassword);
    EXPECT_EQ(waiting.status().code(), absl::StatusCode::kResourceExhausted) << name;
    EXPECT_THAT(waiting.status().message(), HasSubstr("too many failed logins for '" + name + "': try again in 1 s"));
    clock_.Advance(absl::Seconds(1));
    EXPECT_EQ(Login(name, "wrong-password").status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(Login(name, kAdminPassword).status().message(), HasSubstr("try again in 2 s"));
  }
  // Other names are not held up by them.
  EXPECT_EQ(Login("someone-else", "wrong-password").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Login("admin", kAdminPassword).status().code(), absl::StatusCode::kResourceExhausted);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Login("admin", kAdminPassword).ok());
  // Reset by the success: five more failures before any wait.
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Login("admin", "wrong-password").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(Login("admin", kAdminPassword).ok());
}

TEST_F(UserServiceTest, SessionsExpireAndEndAtLogout) {
  auto token = Login("admin", kAdminPassword);
  ASSERT_TRUE(token.ok());
  clock_.Advance(absl::Minutes(59));
  EXPECT_TRUE(Auth(*token).ok());
  clock_.Advance(absl::Minutes(2));
  auto expired = Auth(*token);
  EXPECT_EQ(expired.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(expired.status().message(), HasSubstr("expired"));
  loop_->RunSync([] {});  // The deletion was posted to the loop before Auth answered.
  EXPECT_TRUE(store_->LoadSessions(0)->empty());  // Deleted from the store too.

  auto again = Login("admin", kAdminPassword);
  ASSERT_TRUE(again.ok());
  auto caller = Auth(*again);
  ASSERT_TRUE(caller.ok());
  v1::WhoAmIResponse me;
  ASSERT_TRUE(Wait([&](Done d) { users_->WhoAmI(*caller, {}, &me, std::move(d)); }).ok());
  EXPECT_EQ(me.user().username(), "admin");
  EXPECT_EQ(me.expires_ms(), clock_.NowMs() + 3600 * 1000);
  v1::LogoutResponse out;
  ASSERT_TRUE(Wait([&](Done d) { users_->Logout(*caller, {}, &out, std::move(d)); }).ok());
  EXPECT_EQ(Auth(*again).status().code(), absl::StatusCode::kUnauthenticated);
}

TEST_F(UserServiceTest, UsersAndSessionsSurviveARestartAndAdminIsMadeOnce) {
  auto token = Login("admin", kAdminPassword);
  ASSERT_TRUE(token.ok());
  Close();
  Open("another-password-ignored");
  EXPECT_TRUE(Auth(*token).ok());
  EXPECT_TRUE(Login("admin", kAdminPassword).ok());
  EXPECT_FALSE(Login("admin", "another-password-ignored").ok());
  EXPECT_EQ(store_->ListUsers()->size(), 1u);
}

TEST_F(UserServiceTest, GeneratedAdminPasswordWhenNoneIsGiven) {
  Close();
  std::remove(path_.c_str());
  Open("");
  auto rows = store_->ListUsers();
  ASSERT_TRUE(rows.ok());
  ASSERT_EQ(rows->size(), 1u);
  EXPECT_EQ((*rows)[0].username, "admin");
  EXPECT_FALSE(Login("admin", "").ok());
  EXPECT_FALSE(Login("admin", kAdminPassword).ok());
}

TEST_F(UserServiceTest, AdminsCreateUsersWhoCannotCreateUsers) {
  Caller admin = AdminCaller();
  ASSERT_TRUE(CreateUser(admin, "bob", "bobs-password").ok());
  auto dup = CreateUser(admin, "bob", "bobs-password");
  EXPECT_EQ(dup.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(CreateUser(admin, "bad name'; --", "whatever-pw").code(),
            absl::StatusCode::kInvalidArgument);
  auto short_pw = CreateUser(admin, "carol", "short");
  EXPECT_EQ(short_pw.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_pw.message(), HasSubstr("password: expected 8"));

  auto bob_token = Login("bob", "bobs-password");
  ASSERT_TRUE(bob_token.ok());
  auto bob = Auth(*bob_token);
  ASSERT_TRUE(bob.ok());
  EXPECT_FALSE(bob->user.admin());
  auto refused = CreateUser(*bob, "mallory", "mallorys-pw");
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("only an admin can create users"));

  v1::ListUsersResponse list;
  ASSERT_TRUE(Wait([&](Done d) { users_->ListUsers(*bob, {}, &list, std::move(d)); }).ok());
  ASSERT_EQ(list.users_size(), 2);
  EXPECT_EQ(list.users(1).username(), "bob");
}

TEST_F(UserServiceTest, ChangingAPasswordEndsOtherSessions) {
  Caller admin = AdminCaller();
  auto [first, second] = BobWithTwoSessions(admin);
  ASSERT_TRUE(first.ok() && second.ok());
  Caller bob = *Auth(*first);

  EXPECT_EQ(ChangePassword(bob, "", "wrong-old", "new-bob-password").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ChangePassword(bob, "admin", "", "new-admin-password").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ChangePassword(bob, "", "bobs-password", "short").code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ChangePassword(bob, "", "bobs-password", "new-bob-password").ok());
  EXPECT_TRUE(Auth(*first).ok());    // The caller's session stays,
  EXPECT_FALSE(Auth(*second).ok());  // the others end.
  EXPECT_FALSE(Login("bob", "bobs-password").ok());
  EXPECT_TRUE(Login("bob", "new-bob-password").ok());

  // An admin sets it without the old one; every session of bob ends.
  ASSERT_TRUE(ChangePassword(admin, "bob", "", "reset-by-admin").ok());
  EXPECT_FALSE(Auth(*first).ok());
  EXPECT_TRUE(Login("bob", "reset-by-admin").ok());
  EXPECT_EQ(ChangePassword(admin, "nobody", "", "whatever-pw").code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(Auth(admin.token).ok());
}

// det user link-with-agent-user: admins only, never root, stored before it is answered,
// shown by ListUsers, kept across restarts, unlinked by an empty agent user.
TEST_F(UserServiceTest, AdminsLinkUsersWithAgentUsers) {
  Caller admin = AdminCaller();
  ASSERT_TRUE(CreateUser(admin, "bob", "bobs-password").ok());
  Caller bob = *Auth(*Login("bob", "bobs-password"));

  EXPECT_THAT(Link(bob, "bob", "nobody", 65534, "nogroup", 65534),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("only an admin can link users with agent users")));
  EXPECT_THAT(Link(admin, "bob", "root", 0, "nogroup", 65534),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("agent_uid (--agent-uid): 0 is root's")));
  EXPECT_THAT(Link(admin, "bob", "nobody", 65534, "root", 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("agent_gid (--agent-gid): 0 is root's")));
  EXPECT_THAT(Link(admin, "bob", "nobody", 4294967295, "nogroup", 65534),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("agent_uid (--agent-uid)")));
  EXPECT_THAT(Link(admin, "bob", "-rf", 65534, "nogroup", 65534),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("agent_user (--agent-user)")));
  EXPECT_THAT(Link(admin, "bob", "nobody", 65534, "", 65534),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("agent_group (--agent-group)")));
  EXPECT_THAT(Link(admin, "carol", "nobody", 65534, "nogroup", 65534),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("user 'carol' not found")));
  EXPECT_FALSE(List(admin).users(1).has_agent_user_group());

  // A store that refuses the write: refused, and nothing changes.
  faults_->FailWrites(true, "SetUserAgentUserGroup");
  EXPECT_THAT(Link(admin, "bob", "nobody", 65534, "nogroup", 65534),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("SetUserAgentUserGroup")));
  EXPECT_FALSE(List(admin).users(1).has_agent_user_group());
  faults_->FailWrites(false, "SetUserAgentUserGroup");

  ASSERT_TRUE(Link(admin, "bob", "nobody", 65534, "nogroup", 65533).ok());
  v1::User listed = List(bob).users(1);
  EXPECT_EQ(listed.username(), "bob");
  EXPECT_EQ(listed.agent_user_group().agent_user(), "nobody");
  EXPECT_EQ(listed.agent_user_group().agent_uid(), 65534);
  EXPECT_EQ(listed.agent_user_group().agent_group(), "nogroup");
  EXPECT_EQ(listed.agent_user_group().agent_gid(), 65533);
  EXPECT_FALSE(List(admin).users(0).has_agent_user_group());  // admin: not linked.
  EXPECT_EQ(Auth(bob.token)->user.agent_user_group().agent_uid(), 65534);

  Close();
  Open(kAdminPassword);
  admin = AdminCaller();
  EXPECT_EQ(List(admin).users(1).agent_user_group().agent_user(), "nobody");
  EXPECT_EQ((*store_->ListUsers())[1].agent_user_group.agent_gid(), 65533);

  EXPECT_THAT(Link(admin, "bob", "", 65534, "", 0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("empty unlinks")));
  ASSERT_TRUE(Link(admin, "bob", "", 0, "", 0).ok());
  EXPECT_FALSE(List(admin).users(1).has_agent_user_group());
  EXPECT_EQ((*store_->ListUsers())[1].agent_user_group.agent_user(), "");
}

// Authenticate answers on the calling thread: a loop that is busy (here, blocked) holds
// no API call up, and the counters count calls answered off the loop.
TEST_F(UserServiceTest, AuthenticatesWhileTheLoopIsBlocked) {
  auto token = Login("admin", kAdminPassword);
  ASSERT_TRUE(token.ok());
  std::shared_ptr<absl::Notification> gate = BlockLoop();
  auto caller = Auth(*token);
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->user.username(), "admin");
  EXPECT_THAT(Auth("").status(), StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("no session token")));
  EXPECT_THAT(Auth(std::string(64, 'b')).status(),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("invalid or expired")));
  EXPECT_EQ(users_->authenticated(), 1);
  EXPECT_EQ(users_->rejected(), 2);

  // An expired session is refused at once; its deletion waits for the loop.
  clock_.Advance(absl::Hours(2));
  EXPECT_THAT(Auth(*token).status(), StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("expired")));
  EXPECT_EQ(store_->LoadSessions(0)->size(), 1u);
  gate->Notify();
  loop_->RunSync([] {});
  EXPECT_TRUE(store_->LoadSessions(0)->empty());
  EXPECT_EQ(users_->rejected(), 3);
}

// Every change to users and sessions is seen by a call that begins after the change was
// acknowledged, even while the loop is blocked right after the acknowledgement: the
// turn that made the change updated what Authenticate reads before it answered.
TEST_F(UserServiceTest, EveryChangeIsSeenByACallBegunAfterItsAcknowledgement) {
  Caller admin = AdminCaller();
  auto [first, second] = BobWithTwoSessions(admin);
  ASSERT_TRUE(first.ok() && second.ok());
  // A new session: seen.
  {
    auto gate = BlockLoop();
    EXPECT_TRUE(Auth(*first).ok());
    gate->Notify();
  }
  // Logout: the session is gone.
  Caller bob = *Auth(*second);
  v1::LogoutResponse out;
  ASSERT_TRUE(Wait([&](Done d) { users_->Logout(bob, {}, &out, std::move(d)); }).ok());
  {
    auto gate = BlockLoop();
    EXPECT_THAT(Auth(*second).status(), StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("log in again")));
    EXPECT_TRUE(Auth(*first).ok());
    gate->Notify();
  }
  // A link with an agent user: in the caller.
  ASSERT_TRUE(Link(admin, "bob", "nobody", 65534, "nogroup", 65534).ok());
  {
    auto gate = BlockLoop();
    EXPECT_EQ(Auth(*first)->user.agent_user_group().agent_user(), "nobody");
    gate->Notify();
  }
  // Deactivation refuses every session of the user; activation lets them in again.
  ASSERT_TRUE(SetActive(admin, "bob", false).ok());
  {
    auto gate = BlockLoop();
    EXPECT_THAT(Auth(*first).status(),
                StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("'bob' is deactivated")));
    EXPECT_TRUE(Auth(admin.token).ok());
    gate->Notify();
  }
  ASSERT_TRUE(SetActive(admin, "bob", true).ok());
  {
    auto gate = BlockLoop();
    EXPECT_TRUE(Auth(*first).ok());
    gate->Notify();
  }
  // A password set by an admin ends all of the user's sessions.
  ASSERT_TRUE(ChangePassword(admin, "bob", "", "reset-by-admin").ok());
  {
    auto gate = BlockLoop();
    EXPECT_THAT(Auth(*first).status(), StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("log in again")));
    EXPECT_TRUE(Auth(admin.token).ok());
    gate->Notify();
  }
}

TEST_F(UserServiceTest, AdminsRenameUsersWhoKeepTheirSessions) {
  Caller admin = AdminCaller();
  ASSERT_TRUE(CreateUser(admin, "bob", "bobs-password", false).ok());
  auto bob_token = Login("bob", "bobs-password");
  ASSERT_TRUE(bob_token.ok());
  auto bob = Auth(*bob_token);
  ASSERT_TRUE(bob.ok());
  std::vector<std::pair<std::string, std::string>> hooked;
  users_->SetRenameHook([&](const std::string& from, const std::string& to) {
    hooked.emplace_back(from, to);
    return absl::OkStatus();
  });
  auto rename = [&](const Caller& as, const std::string& from, const std::string& to) {
    v1::RenameUserRequest req;
    req.set_username(from);
    req.set_new_username(to);
    v1::RenameUserResponse resp;
    absl::Status st = Wait([&](Done d) { users_->RenameUser(as, req, &resp, std::move(d)); });
    if (st.ok()) EXPECT_EQ(resp.user().username(), to);
    return st;
  };

  EXPECT_THAT(rename(*bob, "bob", "bobby"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       HasSubstr("only an admin can rename users")));
  EXPECT_THAT(rename(admin, "bob", "admin"),
              StatusIs(absl::StatusCode::kAlreadyExists,
                       "new_username: user 'admin' already exists; choose another name"));
  EXPECT_THAT(rename(admin, "bob", "b b"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("new_username: expected")));
  EXPECT_THAT(rename(admin, "nobody", "x"),
              StatusIs(absl::StatusCode::kNotFound, "user 'nobody' not found"));
  EXPECT_THAT(rename(admin, "bob", "bob"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("already has that name")));
  EXPECT_THAT(rename(admin, "", "x"), StatusIs(absl::StatusCode::kInvalidArgument, "username: required"));
  EXPECT_TRUE(hooked.empty());
  // A failed store write renames nothing.
  faults_->FailWrites(true, "SetUsername");
  EXPECT_FALSE(rename(admin, "bob", "robert").ok());
  faults_->FailWrites(false, "SetUsername");
  EXPECT_TRUE(hooked.empty());
  EXPECT_EQ(Auth(*bob_token)->user.username(), "bob");

  ASSERT_TRUE(rename(admin, "bob", "robert").ok());
  EXPECT_THAT(hooked, ElementsAre(std::pair<std::string, std::string>("bob", "robert")));
  // The session goes on as robert; logins use the new name.
  auto after = Auth(*bob_token);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->user.username(), "robert");
  EXPECT_FALSE(Login("bob", "bobs-password").ok());
  EXPECT_TRUE(Login("robert", "bobs-password").ok());
  // The old name is free again.
  EXPECT_TRUE(CreateUser(admin, "bob", "another-password", false).ok());

  // A hook that fails is the call's error (the rename itself stays).
  users_->SetRenameHook([](const std::string&, const std::string&) {
    return absl::UnavailableError("store gone");
  });
  EXPECT_THAT(rename(admin, "robert", "rob"),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("not all moved")));

  Close();
  Open(kAdminPassword);
  EXPECT_EQ(Auth(*bob_token)->user.username(), "rob");
}

}  // namespace
}  // namespace det::master
