// det model ... (the model registry) with the real det CLI against a real cluster (master
// with SQLite, an agent, example workers): create, list, describe, register-version of a
// checkpoint the grid stored, list-versions, delete-version and delete, in tables and JSON;
// a registered checkpoint cannot be deleted (det checkpoint delete, det experiment delete)
// until its version is deleted; a second user may read a model but not change it; det model
// edit-version (PatchModelVersion) changes only the fields given; the model tables wrap to
// $COLUMNS.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(ModelCli, RegisterACheckpointAndItIsKept) {
  TestCluster cluster("model_cli");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("agent-a", 2).ok()) << cluster.LogTail("agent-a");
  const std::string storage = cluster.dir() + "/checkpoints";
  std::string config = cluster.WriteFile("grid.yaml", GridYaml("models", 20, storage));
  ASSERT_TRUE(cluster.Det({"e", "create", config}).exit.ok());
  CommandResult wait = cluster.Det({"e", "wait", "1", "--interval", "0.2"}, absl::Seconds(240));
  ASSERT_TRUE(wait.exit.ok()) << wait.out << wait.err << cluster.LogTail("master");
  nlohmann::json cps = cluster.DetJson({"e", "lc", "1"});
  ASSERT_TRUE(cps.is_object());
  std::string uuid;
  int64_t trial = 0;
  for (const auto& c : cps["checkpoints"]) {
    if (c["state"] == "STATE_COMPLETED") {
      uuid = c["uuid"];
      trial = Int(c["trial_id"]);
    }
  }
  ASSERT_FALSE(uuid.empty()) << cps.dump(2);

  CommandResult created =
      cluster.Det({"model", "create", "mnist", "--description", "digits", "--label", "prod"});
  ASSERT_TRUE(created.exit.ok()) << created.err;
  EXPECT_THAT(created.out, HasSubstr("Name:"));
  EXPECT_THAT(created.out, HasSubstr("mnist"));
  EXPECT_THAT(created.out, HasSubstr("digits"));
  CommandResult twice = cluster.Det({"model", "create", "mnist"});
  EXPECT_EQ(twice.exit.exit_code, 1);
  EXPECT_EQ(twice.err, "det: model 'mnist' already exists\n");
  CommandResult bad = cluster.Det({"model", "create", "a b"});
  EXPECT_FALSE(bad.exit.ok());
  EXPECT_THAT(bad.err, HasSubstr("model name 'a b': use 1 to 128 letters"));

  CommandResult ls = cluster.Det({"m", "ls"});
  ASSERT_TRUE(ls.exit.ok()) << ls.err;
  EXPECT_THAT(ls.out, StartsWith(" ID | Name  | Owner | Versions | Labels |"));
  EXPECT_THAT(ls.out, HasSubstr(" 1  | mnist | admin | 0        | prod   |"));
  EXPECT_THAT(cluster.Det({"model", "describe", "mnist"}).out, Not(HasSubstr("Checkpoint UUID")));

  CommandResult none = cluster.Det({"model", "register-version", "mnist", "no-such-uuid"});
  EXPECT_FALSE(none.exit.ok());
  EXPECT_EQ(none.err, "det: checkpoint no-such-uuid not found\n");
  CommandResult reg = cluster.Det({"model", "register-version", "mnist", uuid, "--notes", "v1"});
  ASSERT_TRUE(reg.exit.ok()) << reg.err;
  EXPECT_THAT(reg.out, StartsWith(absl::StrCat("Registered checkpoint ", uuid,
                                               " as version 1 of model mnist\n")));
  CommandResult versions = cluster.Det({"model", "list-versions", "mnist"});
  ASSERT_TRUE(versions.exit.ok()) << versions.err;
  EXPECT_THAT(versions.out, HasSubstr(" Version | Checkpoint UUID"));
  EXPECT_THAT(versions.out, HasSubstr(absl::StrCat(" 1       | ", uuid, " | 1          | ", trial)));
  EXPECT_THAT(versions.out, HasSubstr("COMPLETED"));
  EXPECT_THAT(versions.out, HasSubstr("validation_loss="));
  nlohmann::json described = cluster.DetJson({"model", "describe", "mnist"});
  ASSERT_TRUE(described.is_object()) << described.dump();
  EXPECT_EQ(described["model"].value("num_versions", 0), 1);
  ASSERT_EQ(described["model_versions"].size(), 1u);
  EXPECT_EQ(described["model_versions"][0]["checkpoint"].value("uuid", ""), uuid);
  EXPECT_EQ(described["model_versions"][0].value("notes", ""), "v1");
  CommandResult v9 = cluster.Det({"model", "describe", "mnist", "--version", "9"});
  EXPECT_EQ(v9.err, "det: model 'mnist' has no version 9\n");

  // PatchModelVersion: only the fields given change.
  CommandResult edited =
      cluster.Det({"model", "edit-version", "mnist", "1", "--name", "best", "--comment",
                   "from the grid", "--add-label", "prod", "--add-label", "candidate"});
  ASSERT_TRUE(edited.exit.ok()) << edited.err;
  EXPECT_THAT(edited.out, StartsWith("Changed version 1 of model mnist\n"));
  EXPECT_THAT(edited.out, HasSubstr("prod, candidate"));
  ASSERT_TRUE(cluster.Det({"model", "edit-version", "mnist", "1", "--remove-label", "prod",
                           "--metadata", R"({"stage": "staging"})"})
                  .exit.ok());
  nlohmann::json version = cluster.DetJson({"model", "describe", "mnist", "--version", "1"});
  ASSERT_TRUE(version.is_object()) << version.dump();
  const nlohmann::json& v1 = version["model_versions"][0];
  EXPECT_EQ(v1.value("name", ""), "best");
  EXPECT_EQ(v1.value("comment", ""), "from the grid");
  EXPECT_EQ(v1.value("notes", ""), "v1");  // not given: kept
  EXPECT_EQ(v1["labels"], nlohmann::json::array({"candidate"}));
  EXPECT_EQ(v1.value("metadata_json", ""), R"({"stage": "staging"})");
  CommandResult nothing = cluster.Det({"model", "edit-version", "mnist", "1"});
  EXPECT_EQ(nothing.exit.exit_code, 1);
  EXPECT_THAT(nothing.err, HasSubstr("nothing to change; give --name, --comment"));
  CommandResult bad_meta = cluster.Det({"model", "edit-version", "mnist", "1", "--metadata", "[1]"});
  EXPECT_EQ(bad_meta.err, "det: metadata: expected a JSON object, got '[1]'\n");
  CommandResult no_version = cluster.Det({"model", "edit-version", "mnist", "9", "--name", "x"});
  EXPECT_EQ(no_version.err, "det: model 'mnist' has no version 9\n");
  CommandResult zero = cluster.Det({"model", "edit-version", "mnist", "0", "--name", "x"});
  EXPECT_NE(zero.exit.exit_code, 0);
  EXPECT_THAT(zero.err, HasSubstr("VERSION"));

  // Long descriptions and labels wrap: no line wider than $COLUMNS, nothing cut off.
  std::string long_text;
  for (int i = 0; i < 40; ++i) absl::StrAppend(&long_text, "word", i, " ");
  ASSERT_TRUE(cluster.Det({"model", "create", "wide", "--description", long_text, "--label",
                           std::string(150, 'l')})
                  .exit.ok());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"model", "list"}, {"model", "describe", "wide"},
        {"model", "describe", "mnist"}, {"model", "list-versions", "wide"}}) {
    std::vector<std::string> argv = {TestCluster::BinDir() + "/det", "-m", cluster.address()};
    argv.insert(argv.end(), args.begin(), args.end());
    CommandResult narrow = RunCommand(argv, absl::Seconds(60),
                                      {{"DET_USER_TOKEN", cluster.token()}, {"COLUMNS", "120"}});
    ASSERT_TRUE(narrow.exit.ok()) << narrow.err;
    for (absl::string_view line : absl::StrSplit(narrow.out, '\n')) {
      EXPECT_LE(line.size(), 120u) << args[1] << ":\n" << narrow.out;
    }
    if (args[1] != "describe" || args[2] == "wide") {
      EXPECT_THAT(narrow.out, HasSubstr("word39")) << narrow.out;
      EXPECT_THAT(narrow.out, HasSubstr("word0")) << narrow.out;
    }
  }

  // Kept: neither its deletion nor its experiment's is allowed while it is a version.
  CommandResult del = cluster.Det({"checkpoint", "delete", uuid, "--yes"});
  EXPECT_FALSE(del.exit.ok());
  EXPECT_EQ(del.err, absl::StrCat("det: checkpoint ", uuid,
                                  " is version 1 of model 'mnist': a registered checkpoint is "
                                  "never deleted; delete the model version first\n"));
  CommandResult edel = cluster.Det({"e", "delete", "1", "--yes"});
  EXPECT_FALSE(edel.exit.ok());
  EXPECT_THAT(edel.err, HasSubstr(absl::StrCat("experiment 1 cannot be deleted: its checkpoint ",
                                               uuid, " is version 1 of model 'mnist'")));

  // Another user (logged in with the real `det user login`) reads it but may not change it.
  absl::StatusOr<TestCluster::DetRunner> as_bob = cluster.DetAsNewUser("bob", "bobs-password");
  ASSERT_TRUE(as_bob.ok()) << as_bob.status();
  CommandResult bob_reads = (*as_bob)({"model", "list-versions", "mnist"});
  EXPECT_TRUE(bob_reads.exit.ok()) << bob_reads.err;
  EXPECT_THAT(bob_reads.out, HasSubstr(uuid));
  CommandResult bob_deletes = (*as_bob)({"model", "delete", "mnist", "--yes"});
  EXPECT_EQ(bob_deletes.err,
            "det: only the model's owner (admin) or an admin may delete model 'mnist'; you are "
            "'bob'\n");

  // The version deleted, the checkpoint may go.
  CommandResult unconfirmed = cluster.Det({"model", "delete-version", "mnist", "1"});
  EXPECT_FALSE(unconfirmed.exit.ok());
  EXPECT_THAT(unconfirmed.err, HasSubstr("pass --yes to go ahead"));
  ASSERT_TRUE(cluster.Det({"model", "delete-version", "mnist", "1", "--yes"}).exit.ok());
  CommandResult freed = cluster.Det({"checkpoint", "delete", uuid, "--yes"});
  ASSERT_TRUE(freed.exit.ok()) << freed.err;
  EXPECT_THAT(freed.out, StartsWith("Deleting 1 checkpoint(s)"));
  ASSERT_TRUE(cluster.Det({"model", "delete", "mnist", "--yes"}).exit.ok());
  CommandResult gone = cluster.Det({"model", "describe", "mnist"});
  EXPECT_EQ(gone.err, "det: model 'mnist' does not exist\n");
  EXPECT_THAT(cluster.Det({"m", "ls"}).out, Not(HasSubstr("mnist")));
}

}  // namespace
}  // namespace det::testing
