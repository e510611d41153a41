// det experiment continue (issue 28; Determined's `det e continue ID --config ...`) on a real
// master and agent with the C++ example: a single-trial experiment that COMPLETED at 20
// batches continues with searcher.max_length.batches=40 from its checkpoint at batch 20 (its
// new run's first rows are past 20, none is trained twice) and COMPLETES at 40 with its
// validation metrics. Refused, with what the user sees: an ACTIVE experiment, and a grid
// search given overrides; that search, continued without them, runs its canceled trials to
// the end.
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

class Continue : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a", 1).ok()) << cluster_.LogTail("agent-a");
  }

  // Waits until experiment `id` is in `state` ("STATE_COMPLETED").
  void AwaitState(int64_t id, const std::string& state) {
    ASSERT_TRUE(WaitUntil([&] { return cluster_.ExperimentState(id) == state; },
                          absl::Seconds(240)))
        << "experiment " << id << " is " << cluster_.ExperimentState(id) << ", not " << state
        << cluster_.LogTail("master") << cluster_.LogTail("agent-a");
  }

  // SELECT `what` over trial `trial`'s training rows of run `run`.
  std::string TrainingRows(const std::string& what, int64_t trial, int64_t run) {
    return cluster_.DbQuery(absl::StrCat("SELECT ", what, " FROM metrics WHERE trial_id = ", trial,
                                         " AND run_id = ", run, " AND grp = 'training'"));
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(Continue, ACompletedTrialContinuesFromItsCheckpointToTheNewLength) {
  ExampleExperiment exp;
  exp.name = "to-continue";
  exp.batches = 20;
  exp.scheduling_unit = 5;
  exp.validation_period = 10;
  exp.checkpoint_period = 10;
  exp.checkpoint_host_path = cluster_.dir() + "/checkpoints";
  const std::string config = cluster_.WriteFile("single.yaml", exp.Yaml());
  CommandResult create = cluster_.Det({"experiment", "create", config, "-f"});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster_.LogTail("master");
  ASSERT_EQ(cluster_.ExperimentState(1), "STATE_COMPLETED");
  nlohmann::json before = cluster_.DetJson({"trial", "describe", "1"});
  ASSERT_TRUE(before.is_object());
  ASSERT_EQ(Int(before["trial"]["total_batches"]), 20) << before.dump(2);
  const int64_t first_run = Int(before["trial"]["run_id"]) < 0 ? 0 : Int(before["trial"]["run_id"]);
  ASSERT_EQ(TrainingRows("MAX(total_batches)", 1, first_run), "20");

  // An ACTIVE experiment is refused, naming its state.
  const std::string long_config = cluster_.WriteFile(
      "long.yaml", ExampleExperiment{.name = "long", .batches = 100000}.Yaml());
  CommandResult running = cluster_.Det({"experiment", "create", long_config});
  ASSERT_TRUE(running.exit.ok()) << running.err;
  CommandResult active = cluster_.Det({"experiment", "continue", "2"});
  EXPECT_FALSE(active.exit.ok());
  EXPECT_THAT(active.err, HasSubstr("experiment 2 is ACTIVE: only an ended experiment "
                                    "(COMPLETED, CANCELED or ERROR) can be continued"));
  ASSERT_TRUE(cluster_.Det({"experiment", "kill", "2"}).exit.ok());
  AwaitState(2, "STATE_CANCELED");

  // Continued with twice the length.
  CommandResult continued =
      cluster_.Det({"experiment", "continue", "1", "--config", "searcher.max_length.batches=40"});
  ASSERT_TRUE(continued.exit.ok()) << continued.out << continued.err << cluster_.LogTail("master");
  EXPECT_THAT(continued.out, HasSubstr("Continued experiment 1"));
  AwaitState(1, "STATE_COMPLETED");

  nlohmann::json after = cluster_.DetJson({"trial", "describe", "1"});
  ASSERT_TRUE(after.is_object());
  const nlohmann::json& trial = after["trial"];
  EXPECT_EQ(trial["state"], "STATE_COMPLETED") << after.dump(2);
  EXPECT_EQ(Int(trial["total_batches"]), 40) << after.dump(2);
  EXPECT_EQ(Int(trial["target_batches"]), 40) << after.dump(2);
  const int64_t second_run = Int(trial["run_id"]);
  ASSERT_GT(second_run, first_run) << after.dump(2);
  // The new run started from the checkpoint at 20: its rows are 25..40, none trained twice.
  EXPECT_EQ(TrainingRows("MIN(total_batches)", 1, second_run), "25");
  EXPECT_EQ(TrainingRows("MAX(total_batches)", 1, second_run), "40");
  EXPECT_EQ(cluster_.DbQuery("SELECT COUNT(DISTINCT total_batches) FROM metrics WHERE "
                             "trial_id = 1 AND grp = 'training'"),
            "8");
  EXPECT_EQ(cluster_.DbQuery("SELECT GROUP_CONCAT(total_batches) FROM (SELECT total_batches "
                             "FROM metrics WHERE trial_id = 1 AND grp = 'validation' ORDER BY "
                             "total_batches)"),
            "10,20,30,40");
  const std::string logs = cluster_.Det({"trial", "logs", "1"}).out;
  EXPECT_THAT(logs, HasSubstr("experiment continued: trial queued again; it resumes from its "
                              "latest checkpoint toward 40 batches"));
  EXPECT_THAT(logs, HasSubstr("batch 25/40"));
  EXPECT_THAT(logs, HasSubstr("validation at batch 40"));
  nlohmann::json experiment = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(experiment.is_object());
  EXPECT_THAT(experiment["experiment"].value("config_yaml", ""), HasSubstr("batches: 40"));
}

TEST_F(Continue, ASearchTakesNoOverridesAndContinuesItsUnfinishedTrials) {
  const std::string config =
      cluster_.WriteFile("grid.yaml", GridYaml("grid", 10, cluster_.dir() + "/checkpoints"));
  ASSERT_TRUE(cluster_.Det({"experiment", "create", config}).exit.ok());
  ASSERT_TRUE(cluster_.Det({"experiment", "kill", "1"}).exit.ok());
  AwaitState(1, "STATE_CANCELED");

  CommandResult refused =
      cluster_.Det({"experiment", "continue", "1", "--config", "searcher.max_length.batches=20"});
  EXPECT_FALSE(refused.exit.ok());
  EXPECT_THAT(refused.err,
              HasSubstr("experiment 1 uses the grid searcher (2 trials): only a single-searcher "
                        "experiment takes an override config when continued"));
  const std::string file = cluster_.WriteFile("more.yaml", "searcher:\n  max_length:\n    batches: 20\n");
  refused = cluster_.Det({"experiment", "continue", "1", "--config-file", file});
  EXPECT_FALSE(refused.exit.ok());
  EXPECT_THAT(refused.err, HasSubstr("only a single-searcher experiment takes an override config"));
  EXPECT_EQ(cluster_.ExperimentState(1), "STATE_CANCELED");

  CommandResult continued = cluster_.Det({"experiment", "continue", "1"});
  ASSERT_TRUE(continued.exit.ok()) << continued.out << continued.err;
  AwaitState(1, "STATE_COMPLETED");
  nlohmann::json described = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(described.is_object());
  ASSERT_EQ(described["trials"].size(), 2u) << described.dump(2);
  for (const auto& t : described["trials"]) {
    EXPECT_EQ(t["state"], "STATE_COMPLETED") << described.dump(2);
    EXPECT_EQ(Int(t["total_batches"]), 10) << described.dump(2);
  }
  // Completed: nothing is left to continue.
  refused = cluster_.Det({"experiment", "continue", "1"});
  EXPECT_FALSE(refused.exit.ok());
  EXPECT_THAT(refused.err, HasSubstr("experiment 1 has been completed: each of its 2 trials "
                                     "COMPLETED, so nothing is left to continue"));
}

}  // namespace
}  // namespace det::testing
