// det user activate / deactivate (issue 28) with the real master and the real det CLI: a
// deactivated user cannot log in and their existing session is refused, with a message
// that says why; activating them lets them in again; only admins may do either; the state
// survives a restart of the master; `det user list` shows it in its Active column.
#include <signal.h>
#include <sys/stat.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

class UserActive : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    absl::StatusOr<TestCluster::DetRunner> bob = cluster_.DetAsNewUser("bob", "bobs-password");
    ASSERT_TRUE(bob.ok()) << bob.status();
    bob_ = *std::move(bob);
  }

  // `det user login bob` with `password` from a fresh HOME named `home` (no stored session).
  CommandResult BobLogsIn(const std::string& home, const std::string& password = "bobs-password") {
    const std::string dir = absl::StrCat(cluster_.dir(), "/", home);
    mkdir(dir.c_str(), 0700);
    return RunCommand(
        {TestCluster::BinDir() + "/det", "-m", cluster_.address(), "user", "login", "bob"},
        absl::Seconds(60), {{"HOME", dir}, {"DET_USER_TOKEN", ""}, {"DET_PASSWORD", password}});
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  TestCluster::DetRunner bob_;  // det as bob, with the session DetAsNewUser stored
};

TEST_F(UserActive, DeactivatedUserCannotLogInOrUseTheirSessionUntilActivated) {
  ASSERT_TRUE(bob_({"experiment", "list"}).exit.ok());

  CommandResult deactivate = cluster_.Det({"user", "deactivate", "bob"});
  ASSERT_TRUE(deactivate.exit.ok()) << deactivate.err;
  EXPECT_THAT(deactivate.out, HasSubstr("Deactivated bob"));

  // The session bob already had is refused, saying why.
  CommandResult old_session = bob_({"experiment", "list"});
  EXPECT_EQ(old_session.exit.exit_code, 1);
  EXPECT_THAT(old_session.err, HasSubstr("user 'bob' is deactivated"));
  // A new login with the right password is refused the same way.
  CommandResult login = BobLogsIn("bob2");
  EXPECT_EQ(login.exit.exit_code, 1);
  EXPECT_THAT(login.err, HasSubstr("user 'bob' is deactivated"));
  // A wrong password says only that, telling nothing about the account.
  CommandResult wrong = BobLogsIn("bob3", "not-bobs-password");
  EXPECT_EQ(wrong.exit.exit_code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("wrong user name or password"));

  CommandResult users = cluster_.Det({"user", "list", "--json"});
  ASSERT_TRUE(users.exit.ok()) << users.err;
  EXPECT_THAT(users.out, HasSubstr("\"active\": true"));  // admin
  CommandResult table = cluster_.Det({"user", "list"});
  EXPECT_THAT(table.out, HasSubstr("Active"));
  EXPECT_THAT(table.out, HasSubstr("bob      | no    | no"));

  // Still deactivated after the master restarts.
  cluster_.StopMaster(SIGTERM);
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  login = BobLogsIn("bob4");
  EXPECT_EQ(login.exit.exit_code, 1);
  EXPECT_THAT(login.err, HasSubstr("user 'bob' is deactivated"));

  CommandResult activate = cluster_.Det({"user", "activate", "bob"});
  ASSERT_TRUE(activate.exit.ok()) << activate.err;
  EXPECT_THAT(activate.out, HasSubstr("Activated bob"));
  login = BobLogsIn("bob5");
  ASSERT_TRUE(login.exit.ok()) << login.err;
  EXPECT_TRUE(bob_({"experiment", "list"}).exit.ok());  // the old session works again
  table = cluster_.Det({"user", "list"});
  EXPECT_THAT(table.out, HasSubstr("bob      | no    | yes"));
}

TEST_F(UserActive, OnlyAdminsMayAndNotOnThemselves) {
  CommandResult refused = bob_({"user", "deactivate", "admin"});
  EXPECT_EQ(refused.exit.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("only an admin can deactivate users"));
  refused = bob_({"user", "activate", "bob"});
  EXPECT_EQ(refused.exit.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("only an admin can activate users"));

  CommandResult self = cluster_.Det({"user", "deactivate", "admin"});
  EXPECT_EQ(self.exit.exit_code, 1);
  EXPECT_THAT(self.err, HasSubstr("cannot deactivate themselves"));
  CommandResult missing = cluster_.Det({"user", "deactivate", "nobody"});
  EXPECT_EQ(missing.exit.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("user 'nobody' not found"));
  CommandResult no_name = cluster_.Det({"user", "deactivate"});
  EXPECT_NE(no_name.exit.exit_code, 0);
  EXPECT_THAT(no_name.err, HasSubstr("USERNAME"));
}

}  // namespace
}  // namespace det::testing
