// det user rename (issue 28; Determined's `det user rename TARGET NEW`) with the real master
// and the real det CLI: an admin renames a user, whose existing session keeps working under
// the new name (sessions belong to the user, as in Determined), who logs in with the new
// name only, and whose experiments, models and templates follow the new name (they may still
// change them; a new user given the old name may not). A taken name, a bad name, an unknown user
// and a non-admin caller get clear errors; the rename survives a restart of the master.
#include <signal.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class UserRename : public ::testing::Test {
 protected:
  // bob, logged in from HOME "bob" (Bob runs det there).
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    CommandResult created = CreateUser("bob", "bobs-password");
    ASSERT_TRUE(created.exit.ok()) << created.err;
    CommandResult login = LogIn("bob", "bob", "bobs-password");
    ASSERT_TRUE(login.exit.ok()) << login.err;
  }

  // `det user create NAME` as admin.
  CommandResult CreateUser(const std::string& name, const std::string& password) {
    return RunCommand(
        {TestCluster::BinDir() + "/det", "-m", cluster_.address(), "user", "create", name},
        absl::Seconds(60), {{"DET_USER_TOKEN", cluster_.token()}, {"DET_NEW_PASSWORD", password}});
  }
  CommandResult Bob(std::vector<std::string> args) { return As("bob", std::move(args)); }

  // `det user login NAME` with `password` from a fresh HOME named `home`.
  CommandResult LogIn(const std::string& home, const std::string& name,
                      const std::string& password) {
    const std::string dir = absl::StrCat(cluster_.dir(), "/", home);
    mkdir(dir.c_str(), 0700);
    return RunCommand(
        {TestCluster::BinDir() + "/det", "-m", cluster_.address(), "user", "login", name},
        absl::Seconds(60), {{"HOME", dir}, {"DET_USER_TOKEN", ""}, {"DET_PASSWORD", password}});
  }

  // det with the session `det user login` stored in HOME `home` (see LogIn).
  CommandResult As(const std::string& home, std::vector<std::string> args) {
    args.insert(args.begin(), {TestCluster::BinDir() + "/det", "-m", cluster_.address()});
    return RunCommand(args, absl::Seconds(60),
                      {{"HOME", absl::StrCat(cluster_.dir(), "/", home)}, {"DET_USER_TOKEN", ""}});
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(UserRename, RenamedUserKeepsSessionAndWhatTheyOwn) {
  // bob owns a model and an experiment (queued: the cluster has no agent).
  CommandResult model = Bob({"model", "create", "bobs-model"});
  ASSERT_TRUE(model.exit.ok()) << model.err;
  const std::string config =
      cluster_.WriteFile("grid.yaml", GridYaml("bobs-exp", 5, cluster_.dir() + "/checkpoints"));
  CommandResult exp = Bob({"experiment", "create", config});
  ASSERT_TRUE(exp.exit.ok()) << exp.err;
  const std::string tpl = cluster_.WriteFile("tpl.yaml", "description: bobs\n");
  CommandResult tpl_created = Bob({"template", "create", "bobs-template", tpl});
  ASSERT_TRUE(tpl_created.exit.ok()) << tpl_created.err;

  CommandResult renamed = cluster_.Det({"user", "rename", "bob", "robert"});
  ASSERT_TRUE(renamed.exit.ok()) << renamed.err;
  EXPECT_THAT(renamed.out, HasSubstr("Renamed user bob to robert: their sessions, experiments, "
                                         "models and templates carry over"));

  // The session bob had is robert's now.
  CommandResult who = Bob({"user", "whoami"});
  ASSERT_TRUE(who.exit.ok()) << who.err;
  EXPECT_THAT(who.out, HasSubstr("robert"));
  EXPECT_THAT(who.out, Not(HasSubstr("bob")));
  // Its CLI session is kept under the old name: -u with the new one logs in (the password
  // from DET_PASSWORD here, else the terminal), as Determined's CLI does.
  CommandResult as_new = Bob({"-u", "robert", "user", "whoami"});
  EXPECT_EQ(as_new.exit.exit_code, 1);
  EXPECT_THAT(as_new.err, HasSubstr("DET_PASSWORD"));
  as_new = RunCommand({TestCluster::BinDir() + "/det", "-m", cluster_.address(), "-u", "robert",
                       "user", "whoami"},
                      absl::Seconds(60),
                      {{"HOME", absl::StrCat(cluster_.dir(), "/bob")},
                       {"DET_USER_TOKEN", ""},
                       {"DET_PASSWORD", "bobs-password"}});
  ASSERT_TRUE(as_new.exit.ok()) << as_new.err;
  EXPECT_THAT(as_new.out, HasSubstr("robert"));
  // What bob owned is robert's.
  nlohmann::json exps = cluster_.DetJson({"experiment", "list"});
  ASSERT_TRUE(exps.is_object()) << exps.dump();
  ASSERT_EQ(exps["experiments"].size(), 1u) << exps.dump();
  EXPECT_EQ(exps["experiments"][0].value("owner", ""), "robert");
  nlohmann::json models = cluster_.DetJson({"model", "list"});
  ASSERT_TRUE(models.is_object()) << models.dump();
  ASSERT_EQ(models["models"].size(), 1u) << models.dump();
  EXPECT_EQ(models["models"][0].value("username", ""), "robert");
  nlohmann::json templates = cluster_.DetJson({"template", "list"});
  ASSERT_TRUE(templates.is_object()) << templates.dump();
  ASSERT_EQ(templates["templates"].size(), 1u) << templates.dump();
  EXPECT_EQ(templates["templates"][0].value("owner", ""), "robert");
  CommandResult owned = Bob({"experiment", "list", "--user", "robert"});
  ASSERT_TRUE(owned.exit.ok()) << owned.err;
  EXPECT_THAT(owned.out, HasSubstr("bobs-exp"));

  // Logins: the new name only.
  CommandResult old_login = LogIn("old", "bob", "bobs-password");
  EXPECT_EQ(old_login.exit.exit_code, 1);
  EXPECT_THAT(old_login.err, HasSubstr("wrong user name or password"));
  CommandResult new_login = LogIn("new", "robert", "bobs-password");
  ASSERT_TRUE(new_login.exit.ok()) << new_login.err;

  // A new user given the old name owns nothing of robert's.
  CommandResult created = CreateUser("bob", "other-password");
  ASSERT_TRUE(created.exit.ok()) << created.err;
  ASSERT_TRUE(LogIn("new-bob", "bob", "other-password").exit.ok());
  CommandResult refused = As("new-bob", {"model", "delete", "bobs-model", "--yes"});
  EXPECT_EQ(refused.exit.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("only the model's owner (robert) or an admin"));
  CommandResult replaced = As("new-bob", {"template", "update-config", "bobs-template", tpl});
  EXPECT_EQ(replaced.exit.exit_code, 1);
  EXPECT_THAT(replaced.err, HasSubstr("only the template's owner (robert) or an admin"));
  CommandResult killed = As("new-bob", {"experiment", "kill", "1"});
  EXPECT_EQ(killed.exit.exit_code, 1) << killed.out;
  EXPECT_THAT(killed.err, HasSubstr("robert")) << killed.err;

  // Kept across a restart of the master.
  cluster_.StopMaster(SIGTERM);
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  exps = cluster_.DetJson({"experiment", "list"});
  ASSERT_TRUE(exps.is_object()) << exps.dump();
  EXPECT_EQ(exps["experiments"][0].value("owner", ""), "robert");
  templates = cluster_.DetJson({"template", "list"});
  ASSERT_TRUE(templates.is_object()) << templates.dump();
  EXPECT_EQ(templates["templates"][0].value("owner", ""), "robert");
  who = Bob({"user", "whoami"});
  EXPECT_THAT(who.out, HasSubstr("robert"));
  // robert (the session of the login under the new name) still changes what is theirs.
  CommandResult deleted = As("new", {"model", "delete", "bobs-model", "--yes"});
  EXPECT_TRUE(deleted.exit.ok()) << deleted.err;
  CommandResult updated = As("new", {"template", "update-config", "bobs-template", tpl});
  EXPECT_TRUE(updated.exit.ok()) << updated.err;
}

TEST_F(UserRename, ClearErrors) {
  CommandResult taken = cluster_.Det({"user", "rename", "bob", "admin"});
  EXPECT_EQ(taken.exit.exit_code, 1);
  EXPECT_EQ(taken.err, "det: new_username: user 'admin' already exists; choose another name\n");
  CommandResult same = cluster_.Det({"user", "rename", "bob", "bob"});
  EXPECT_EQ(same.exit.exit_code, 1);
  EXPECT_THAT(same.err, HasSubstr("user 'bob' already has that name"));
  CommandResult bad = cluster_.Det({"user", "rename", "bob", "-x y"});
  EXPECT_NE(bad.exit.exit_code, 0);
  CommandResult bad2 = cluster_.Det({"user", "rename", "bob", "x y"});
  EXPECT_EQ(bad2.exit.exit_code, 1);
  EXPECT_THAT(bad2.err, HasSubstr("new_username: expected 1 to 64 letters"));
  CommandResult missing = cluster_.Det({"user", "rename", "nobody", "somebody"});
  EXPECT_EQ(missing.exit.exit_code, 1);
  EXPECT_THAT(missing.err, HasSubstr("user 'nobody' not found"));
  CommandResult not_admin = Bob({"user", "rename", "bob", "bobby"});
  EXPECT_EQ(not_admin.exit.exit_code, 1);
  EXPECT_THAT(not_admin.err, HasSubstr("only an admin can rename users"));
  CommandResult usage = cluster_.Det({"user", "rename", "bob"});
  EXPECT_NE(usage.exit.exit_code, 0);
  EXPECT_THAT(usage.err, HasSubstr("NEW_USERNAME"));
  // Nothing changed.
  CommandResult who = Bob({"user", "whoami"});
  EXPECT_THAT(who.out, HasSubstr("bob"));
}

}  // namespace
}  // namespace det::testing
