// Users and sessions with the real master and the real det CLI: login/logout/whoami/
// create/change-password, the token file, calls refused without a token, and ownership
// (only an experiment's owner or an admin changes it).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class Auth : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_FALSE(cluster_.token().empty());
  }

  // A fresh HOME for a user of the CLI.
  std::string Home(const std::string& name) {
    std::string home = absl::StrCat(cluster_.dir(), "/home-", name);
    mkdir(home.c_str(), 0700);
    return home;
  }

  // det with HOME = `home`, no DET_USER_TOKEN and `env` on top.
  CommandResult DetIn(const std::string& home, const std::vector<std::string>& args,
                      std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {TestCluster::BinDir() + "/det", "-m", cluster_.address()};
    argv.insert(argv.end(), args.begin(), args.end());
    env["HOME"] = home;
    env.emplace("DET_USER_TOKEN", "");
    env.emplace("DET_PASSWORD", "");
    return RunCommand(argv, absl::Seconds(60), env);
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(Auth, CallsWithoutASessionAreRefused) {
  std::string home = Home("nobody");
  CommandResult list = DetIn(home, {"experiment", "list"});
  EXPECT_EQ(list.exit.exit_code, 1);
  EXPECT_THAT(list.err, HasSubstr("det: no session token: log in with `det user login`"));
  CommandResult forged = DetIn(home, {"agent", "list"}, {{"DET_USER_TOKEN", std::string(64, '0')}});
  EXPECT_EQ(forged.exit.exit_code, 1);
  EXPECT_THAT(forged.err, HasSubstr("invalid or expired session token"));
  // The cluster's own admin session works.
  EXPECT_TRUE(cluster_.Det({"experiment", "list"}).exit.ok());
}

TEST_F(Auth, LoginKeepsATokenOnlyTheUserCanReadAndLogoutEndsIt) {
  std::string home = Home("admin");
  CommandResult wrong = DetIn(home, {"user", "login", "admin"}, {{"DET_PASSWORD", "wrong-password"}});
  EXPECT_EQ(wrong.exit.exit_code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("wrong user name or password"));
  EXPECT_NE(access((home + "/.det/auth.json").c_str(), F_OK), 0);

  CommandResult login = DetIn(home, {"user", "login", "admin"}, {{"DET_PASSWORD", kTestAdminPassword}});
  ASSERT_TRUE(login.exit.ok()) << login.err;
  EXPECT_THAT(login.out, HasSubstr("Logged in as admin on " + cluster_.address()));
  const std::string file = home + "/.det/auth.json";
  struct stat st;
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600);
  ASSERT_EQ(stat((home + "/.det").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700);
  nlohmann::json auth = nlohmann::json::parse(Slurp(file));
  EXPECT_EQ(auth["masters"][cluster_.address()]["username"], "admin");
  EXPECT_EQ(auth["masters"][cluster_.address()]["token"].get<std::string>().size(), 64u);
  EXPECT_THAT(Slurp(file), Not(HasSubstr(kTestAdminPassword)));

  CommandResult whoami = DetIn(home, {"user", "whoami"});
  ASSERT_TRUE(whoami.exit.ok()) << whoami.err;
  EXPECT_THAT(whoami.out, HasSubstr("admin (admin) on " + cluster_.address()));
  EXPECT_TRUE(DetIn(home, {"experiment", "list"}).exit.ok());

  // A token file others could read is refused, not used.
  chmod(file.c_str(), 0644);
  CommandResult loose = DetIn(home, {"experiment", "list"});
  EXPECT_EQ(loose.exit.exit_code, 1);
  EXPECT_THAT(loose.err, HasSubstr("other users may read it"));
  chmod(file.c_str(), 0600);

  CommandResult logout = DetIn(home, {"user", "logout"});
  ASSERT_TRUE(logout.exit.ok()) << logout.err;
  EXPECT_THAT(logout.out, HasSubstr("Logged out of " + cluster_.address()));
  EXPECT_EQ(nlohmann::json::parse(Slurp(file))["masters"].size(), 0u);
  EXPECT_EQ(DetIn(home, {"experiment", "list"}).exit.exit_code, 1);
  // The ended session is refused even when presented again.
  CommandResult replay = DetIn(home, {"experiment", "list"},
                               {{"DET_USER_TOKEN", auth["masters"][cluster_.address()]["token"]}});
  EXPECT_EQ(replay.exit.exit_code, 1);
  EXPECT_THAT(replay.err, HasSubstr("invalid or expired session token"));
}

TEST_F(Auth, AdminCreatesUsersWhoChangeTheirPasswords) {
  CommandResult create = cluster_.Det({"user", "create", "bob"});
  EXPECT_EQ(create.exit.exit_code, 1);  // No terminal and no DET_NEW_PASSWORD.
  EXPECT_THAT(create.err, HasSubstr("DET_NEW_PASSWORD"));
  create = RunCommand({TestCluster::BinDir() + "/det", "-m", cluster_.address(), "user", "create",
                       "bob"},
                      absl::Seconds(60),
                      {{"DET_USER_TOKEN", cluster_.token()}, {"DET_NEW_PASSWORD", "bobs-password"}});
  ASSERT_TRUE(create.exit.ok()) << create.err;
  EXPECT_THAT(create.out, HasSubstr("Created user bob"));
  CommandResult users = cluster_.Det({"user", "list"});
  EXPECT_EQ(users.out,
            " Username | Admin | Active | Agent User\n----------+-------+--------+------------\n"
            " admin    | yes   | yes    |\n bob      | no    | yes    |\n");

  std::string home = Home("bob");
  ASSERT_TRUE(DetIn(home, {"user", "login", "bob"}, {{"DET_PASSWORD", "bobs-password"}}).exit.ok());
  CommandResult whoami = DetIn(home, {"user", "whoami", "--json"});
  ASSERT_TRUE(whoami.exit.ok()) << whoami.err;
  EXPECT_EQ(nlohmann::json::parse(whoami.out)["user"]["username"], "bob");
  CommandResult refused = DetIn(home, {"user", "create", "eve"}, {{"DET_NEW_PASSWORD", "eves-password"}});
  EXPECT_EQ(refused.exit.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("only an admin can create users"));

  CommandResult change = DetIn(home, {"user", "change-password"},
                               {{"DET_PASSWORD", "bobs-password"}, {"DET_NEW_PASSWORD", "bobs-new-password"}});
  ASSERT_TRUE(change.exit.ok()) << change.err;
  EXPECT_TRUE(DetIn(home, {"experiment", "list"}).exit.ok());  // Bob's own session stays.
  EXPECT_EQ(DetIn(Home("bob2"), {"user", "login", "bob"}, {{"DET_PASSWORD", "bobs-password"}})
                .exit.exit_code,
            1);
  EXPECT_TRUE(DetIn(Home("bob3"), {"user", "login", "bob"}, {{"DET_PASSWORD", "bobs-new-password"}})
                  .exit.ok());
  // The login name defaults to the last one used with this master.
  CommandResult again = DetIn(home, {"user", "login"}, {{"DET_PASSWORD", "bobs-new-password"}});
  ASSERT_TRUE(again.exit.ok()) << again.err;
  EXPECT_THAT(again.out, HasSubstr("Logged in as bob"));
}

// Ownership: a user who does not own an experiment cannot kill it (it keeps running),
// nor disable agents; an admin can.
TEST_F(Auth, OnlyTheOwnerOrAnAdminKillsAnExperiment) {
  ASSERT_TRUE(cluster_.StartAgent("agent-a", 1).ok()) << cluster_.LogTail("agent-a");
  CommandResult create = RunCommand(
      {TestCluster::BinDir() + "/det", "-m", cluster_.address(), "user", "create", "bob"},
      absl::Seconds(60), {{"DET_USER_TOKEN", cluster_.token()}, {"DET_NEW_PASSWORD", "bobs-password"}});
  ASSERT_TRUE(create.exit.ok()) << create.err;
  std::string bob = Home("bob");
  ASSERT_TRUE(DetIn(bob, {"user", "login", "bob"}, {{"DET_PASSWORD", "bobs-password"}}).exit.ok());

  std::string config = cluster_.WriteFile("long.yaml", ExampleExperiment{.batches = 100000}.Yaml());
  ASSERT_TRUE(cluster_.Det({"e", "create", config}).exit.ok());  // Owned by admin.
  CommandResult kill = DetIn(bob, {"e", "kill", "1"});
  EXPECT_EQ(kill.exit.exit_code, 1);
  EXPECT_THAT(kill.err, HasSubstr("only the experiment's owner (admin) or an admin may kill "
                                  "experiment 1; you are 'bob'"));
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {"e", "pause", "1"}, {"e", "set", "priority", "1", "5"}, {"e", "label", "add", "1", "x"}}) {
    CommandResult refused = DetIn(bob, args);
    EXPECT_EQ(refused.exit.exit_code, 1) << args[1];
    EXPECT_THAT(refused.err, HasSubstr("only the experiment's owner (admin) or an admin may"));
  }
  CommandResult disable = DetIn(bob, {"agent", "disable", "agent-a"});
  EXPECT_EQ(disable.exit.exit_code, 1);
  EXPECT_THAT(disable.err, HasSubstr("only an admin may disable agents; user 'bob' is not one"));
  nlohmann::json d = cluster_.DetJson({"e", "describe", "1"});
  ASSERT_TRUE(d.is_object());
  EXPECT_EQ(d["experiment"]["state"], "STATE_ACTIVE");
  EXPECT_NE(d["trials"][0]["state"], "STATE_CANCELED");
  // Bob's own experiment is his to change; the admin kills the other.
  ASSERT_TRUE(DetIn(bob, {"e", "create", config}).exit.ok());
  EXPECT_TRUE(DetIn(bob, {"e", "label", "add", "2", "mine"}).exit.ok());
  EXPECT_TRUE(DetIn(bob, {"e", "kill", "2"}).exit.ok());
  CommandResult admin_kill = cluster_.Det({"e", "kill", "1"});
  EXPECT_TRUE(admin_kill.exit.ok()) << admin_kill.err;
}

TEST_F(Auth, SessionsSurviveAMasterRestart) {
  cluster_.StopMaster(SIGTERM);
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  CommandResult whoami = cluster_.Det({"user", "whoami"});
  ASSERT_TRUE(whoami.exit.ok()) << whoami.err;
  EXPECT_THAT(whoami.out, HasSubstr("admin (admin)"));
}

}  // namespace
}  // namespace det::testing
