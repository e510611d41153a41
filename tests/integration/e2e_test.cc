// The whole path with real processes: det CLI -> det-master -> scheduler -> det-agent ->
// det-fashion-mnist workers -> metrics back -> det CLI.
#include <signal.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/ascii.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// `batches` long, validated halfway and at the end, no restarts.
ExampleExperiment Short(int64_t batches, int unit) {
  ExampleExperiment exp;
  exp.name = "e2e";
  exp.batches = batches;
  exp.validation_period = batches / 2;
  exp.scheduling_unit = unit;
  exp.max_restarts = 0;
  return exp;
}

class EndToEnd : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  }
  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(EndToEnd, TrialTrainsAndReportsBack) {
  std::string config = cluster_.WriteFile("exp.yaml", Short(300, 50).Yaml());
  CommandResult create = cluster_.Det({"experiment", "create", config, "-f"});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster_.LogTail("master")
                                << cluster_.LogTail("agent-a");
  EXPECT_THAT(create.out, HasSubstr("Created experiment 1"));
  EXPECT_THAT(create.out, HasSubstr("validation at batch 300"));
  EXPECT_THAT(create.out, HasSubstr("Experiment 1 ended: COMPLETED"));

  nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(d.is_object()) << "describe --json did not parse";
  EXPECT_EQ(d["experiment"]["state"], "STATE_COMPLETED");
  EXPECT_EQ(d["experiment"]["progress"], 1);
  ASSERT_EQ(d["trials"].size(), 1u);
  const auto& t = d["trials"][0];
  EXPECT_EQ(t["state"], "STATE_COMPLETED");
  EXPECT_EQ(Int(t["total_batches"]), 300);
  EXPECT_EQ(Int(t["training_summary"]["loss"]["count"]), 6);
  EXPECT_EQ(Int(t["validation_summary"]["accuracy"]["count"]), 2);
  double accuracy = t["validation_summary"]["accuracy"]["last"].get<double>();
  EXPECT_GT(accuracy, 0.5);
  EXPECT_LE(accuracy, 1.0);
  EXPECT_LT(t["training_summary"]["loss"]["last"].get<double>(),
            t["training_summary"]["loss"]["max"].get<double>());

  // The rows behind those summaries are in the store.
  EXPECT_EQ(Sql(cluster_.db_path(), "SELECT COUNT(*) FROM metrics WHERE trial_id = 1 AND grp = 'training'"), "6");
  EXPECT_EQ(Sql(cluster_.db_path(), "PRAGMA journal_mode"), "wal");

  CommandResult logs = cluster_.Det({"trial", "logs", "1"});
  ASSERT_TRUE(logs.exit.ok()) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("batch 300/300"));
  EXPECT_THAT(logs.out, HasSubstr("scheduled on agent-a"));

  CommandResult cfg = cluster_.Det({"experiment", "config", "1"});
  EXPECT_THAT(cfg.out, HasSubstr("experiment_seed:"));
  EXPECT_THAT(cfg.out, HasSubstr("slots_per_trial: 1"));

  nlohmann::json agents = cluster_.DetJson({"agent", "list"});
  ASSERT_EQ(agents["agents"].size(), 1u);
  EXPECT_EQ(agents["agents"][0]["id"], "agent-a");
  EXPECT_EQ(agents["agents"][0]["slots"][0]["allocation_id"], "");  // Released.
}

TEST_F(EndToEnd, BadInputGetsAClearErrorAndCreatesNothing) {
  CommandResult missing = cluster_.Det({"experiment", "create", cluster_.dir() + "/nope.yaml"});
  EXPECT_FALSE(missing.exit.ok());
  EXPECT_THAT(missing.err, HasSubstr("nope.yaml"));

  std::string bad = cluster_.WriteFile("bad.yaml", "name: x\nentrypoint: y\nsearcher: [oops\n");
  CommandResult malformed = cluster_.Det({"experiment", "create", bad});
  EXPECT_FALSE(malformed.exit.ok());
  EXPECT_THAT(malformed.err, HasSubstr("bad.yaml:"));
  EXPECT_THAT(malformed.err, HasSubstr("malformed YAML"));

  ExampleExperiment with_typo = Short(10, 5);
  with_typo.extra_yaml = "max_restart: 2\n";
  std::string typo = cluster_.WriteFile("typo.yaml", with_typo.Yaml());
  CommandResult unknown = cluster_.Det({"experiment", "create", typo});
  EXPECT_FALSE(unknown.exit.ok());
  EXPECT_THAT(unknown.err, HasSubstr("typo.yaml:"));
  EXPECT_THAT(unknown.err, HasSubstr("did you mean 'max_restarts'"));

  nlohmann::json list = cluster_.DetJson({"experiment", "list"});
  ASSERT_TRUE(list.is_object());
  EXPECT_EQ(list.value("experiments", nlohmann::json::array()).size(), 0u);

  CommandResult unreachable = RunCommand({TestCluster::BinDir() + "/det", "-m", "127.0.0.1:1", "experiment", "list"});
  EXPECT_FALSE(unreachable.exit.ok());
  EXPECT_THAT(unreachable.err, HasSubstr("127.0.0.1:1"));
}

TEST(MasterStartup, UnusableDataDirOrConfigIsAClearError) {
  TestCluster c("startup");
  std::string file = c.WriteFile("not-a-dir", "x");
  std::string bad_dir = c.WriteFile("bad-dir.yaml", "grpc_listen: \"127.0.0.1:0\"\ndata_dir: " + file + "/data\n");
  CommandResult r = RunCommand({TestCluster::BinDir() + "/det-master", "--config", bad_dir}, absl::Seconds(30));
  EXPECT_FALSE(r.exit.ok());
  EXPECT_THAT(r.err, HasSubstr("cannot create directory '" + file + "/data': Not a directory"));

  std::string malformed = c.WriteFile("malformed.yaml", "grpc_listen: [\n");
  r = RunCommand({TestCluster::BinDir() + "/det-master", "--config", malformed}, absl::Seconds(30));
  EXPECT_FALSE(r.exit.ok());
  EXPECT_THAT(r.err, HasSubstr("malformed.yaml:"));

  std::string typo = c.WriteFile("typo.yaml", "grpc_listne: \"127.0.0.1:0\"\n");
  r = RunCommand({TestCluster::BinDir() + "/det-master", "--config", typo}, absl::Seconds(30));
  EXPECT_THAT(r.err, HasSubstr("typo.yaml:1: grpc_listne: unknown key (did you mean 'grpc_listen'?)"));
}

TEST(MasterStartup, AFullDatabaseRefusesNewWorkWithAClearError) {
  TestCluster c("full");
  ASSERT_TRUE(c.StartMaster("db_max_size_mb: 1\n").ok()) << c.LogTail("master");
  // Experiments carry their model context; a 300 KiB context fills 1 MiB in a few.
  std::string dir = c.dir() + "/ctx";
  ASSERT_EQ(RunCommand({"mkdir", "-p", dir}).exit.exit_code, 0);
  ASSERT_EQ(RunCommand({"sh", "-c", "head -c 307200 /dev/urandom > " + dir + "/blob"}).exit.exit_code, 0);
  std::string config = c.WriteFile("exp.yaml", Short(10, 5).Yaml());
  CommandResult r;
  int created = 0;
  for (int i = 0; i < 10; ++i) {
    r = c.Det({"experiment", "create", config, dir});
    if (!r.exit.ok()) break;
    ++created;
  }
  EXPECT_FALSE(r.exit.ok());
  EXPECT_THAT(r.err, HasSubstr("disk full"));
  EXPECT_GT(created, 0);
  // What was acknowledged is intact; the master still answers.
  nlohmann::json list = c.DetJson({"experiment", "list"});
  ASSERT_TRUE(list.is_object());
  EXPECT_EQ(static_cast<int>(list["experiments"].size()), created);
  EXPECT_EQ(Sql(c.db_path(), "PRAGMA integrity_check"), "ok");
}

TEST_F(EndToEnd, FailingWorkerIsRestartedThenTheTrialErrors) {
  ExampleExperiment exp = Short(100, 10);
  exp.max_restarts = 1;
  exp.data_dir = "/no/such/dir";
  std::string config = cluster_.WriteFile("fail.yaml", exp.Yaml());
  CommandResult create = cluster_.Det({"experiment", "create", config, "-f"});
  EXPECT_FALSE(create.exit.ok());
  EXPECT_THAT(create.err, HasSubstr("ERROR"));
  nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(d.is_object());
  EXPECT_EQ(d["experiment"]["state"], "STATE_ERROR");
  EXPECT_EQ(d["trials"][0]["state"], "STATE_ERROR");
  EXPECT_EQ(d["trials"][0]["restarts"], 1);
  EXPECT_THAT(d["trials"][0]["error"].get<std::string>(), HasSubstr("exit code 1"));
  CommandResult logs = cluster_.Det({"trial", "logs", "1"});
  EXPECT_THAT(logs.out, HasSubstr("/no/such/dir/train-images-idx3-ubyte.gz"));
}

TEST_F(EndToEnd, MissingEntrypointIsReportedNotHung) {
  ExampleExperiment exp = Short(10, 5);
  exp.entrypoint = "no-such-program";
  std::string config = cluster_.WriteFile("noentry.yaml", exp.Yaml());
  CommandResult create = cluster_.Det({"experiment", "create", config, "-f"}, absl::Seconds(60));
  EXPECT_FALSE(create.exit.ok());
  CommandResult logs = cluster_.Det({"trial", "logs", "1"});
  EXPECT_THAT(logs.out, HasSubstr("no-such-program"));
  nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
  EXPECT_EQ(d["trials"][0]["state"], "STATE_ERROR");
}

TEST_F(EndToEnd, MasterKilledMidTrialLosesNothingAcknowledged) {
  std::string config = cluster_.WriteFile("long.yaml", Short(20000, 100).Yaml());
  CommandResult create = cluster_.Det({"experiment", "create", config});
  ASSERT_TRUE(create.exit.ok()) << create.err;
  int64_t before = 0;
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
        if (!t.is_object()) return false;
        before = Int(t["trial"]["training_summary"]["loss"]["count"]);
        return before >= 3;
      },
      absl::Seconds(60)))
      << cluster_.LogTail("master");

  cluster_.StopMaster(SIGKILL);
  // Every row the API showed was committed before it was acknowledged.
  int64_t stored = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      Sql(cluster_.db_path(), "SELECT COUNT(*) FROM metrics WHERE trial_id = 1 AND grp = 'training'"),
      &stored));
  EXPECT_GE(stored, before);
  EXPECT_EQ(Sql(cluster_.db_path(), "PRAGMA integrity_check"), "ok");

  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(d.is_object());
  EXPECT_EQ(d["experiment"]["name"], "e2e");
  ASSERT_EQ(d["trials"].size(), 1u);
  EXPECT_GE(Int(d["trials"][0]["training_summary"]["loss"]["count"]), before);

  // The agent comes back, the trial is reattached, and it finishes without a restart.
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json e = cluster_.DetJson({"experiment", "describe", "1"});
        return e.is_object() && e["experiment"]["state"] == "STATE_COMPLETED";
      },
      absl::Seconds(180)))
      << cluster_.LogTail("master") << cluster_.LogTail("agent-a");
  d = cluster_.DetJson({"experiment", "describe", "1"});
  EXPECT_EQ(d["trials"][0]["restarts"], 0);
  EXPECT_EQ(Int(d["trials"][0]["total_batches"]), 20000);
  // One row for every reported batch group, none missing.
  EXPECT_EQ(Sql(cluster_.db_path(),
                "SELECT COUNT(DISTINCT total_batches) FROM metrics WHERE trial_id = 1 AND grp = 'training'"),
            "200");
  CommandResult logs = cluster_.Det({"trial", "logs", "1"});
  EXPECT_THAT(logs.out, HasSubstr("reattached"));
}

}  // namespace
}  // namespace det::testing
