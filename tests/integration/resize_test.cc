// Pause, resize and activate: a paused 2-slot trial resumes from its latest checkpoint on
// 1 slot with the same global batch, and its loss curve keeps one value per step.
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// The trial's length: the pause comes after batch 1000 (a checkpoint at 500 and 1000),
// and what follows on 1 slot needs only to be more than one checkpoint period long.
constexpr int64_t kBatches = 6000;

TEST(Resize, PausedTrialResumesOnAnotherSlotCountFromItsCheckpoint) {
  TestCluster cluster("resize");
  ASSERT_TRUE(cluster.StartMaster().ok());
  ASSERT_TRUE(cluster.StartAgent("a1", 2).ok());
  ExampleExperiment exp;
  exp.name = "resize";
  exp.global_batch_size = 64;
  exp.batches = kBatches;
  exp.checkpoint_period = 500;
  exp.scheduling_unit = 100;
  exp.max_restarts = 0;
  exp.slots_per_trial = 2;
  exp.checkpoint_host_path = cluster.dir() + "/checkpoints";
  exp.save_trial_latest = 2;
  std::string config = cluster.WriteFile("resize.yaml", exp.Yaml());
  ASSERT_TRUE(cluster.Det({"experiment", "create", config}).exit.ok());
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json t = cluster.DetJson({"trial", "describe", "1"});
    return t.is_object() && !t["trial"]["latest_checkpoint"].get<std::string>().empty() &&
           Int(t["trial"]["total_batches"]) >= 1000;
  }, absl::Seconds(60))) << cluster.LogTail("master");

  CommandResult pause = cluster.Det({"experiment", "pause", "1"});
  ASSERT_TRUE(pause.exit.ok()) << pause.err;
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json t = cluster.DetJson({"trial", "describe", "1"});
    return t.is_object() && t["trial"]["state"] == "STATE_PAUSED";
  }, absl::Seconds(30))) << cluster.LogTail("master");
  nlohmann::json paused = cluster.DetJson({"trial", "describe", "1"});
  EXPECT_LT(Int(paused["trial"]["total_batches"]), kBatches);

  // 64 does not split over 3 slots: refused with the reason; nothing changes.
  CommandResult three = cluster.Det({"experiment", "set", "slots", "1", "3"});
  EXPECT_FALSE(three.exit.ok());
  EXPECT_THAT(three.err, HasSubstr("slots_per_trial 3 does not divide global_batch_size 64"));
  // Only a paused experiment can be resized; this one is, so 1 slot is fine.
  CommandResult one = cluster.Det({"experiment", "set", "slots", "1", "1"});
  ASSERT_TRUE(one.exit.ok()) << one.err;
  EXPECT_THAT(cluster.Det({"experiment", "config", "1"}).out, HasSubstr("slots_per_trial: 1"));

  ASSERT_TRUE(cluster.Det({"experiment", "activate", "1"}).exit.ok());
  ASSERT_TRUE(WaitUntil([&] {
    nlohmann::json d = cluster.DetJson({"experiment", "describe", "1"});
    return d.is_object() && d["experiment"]["state"] == "STATE_COMPLETED";
  }, absl::Seconds(120))) << cluster.LogTail("master") << cluster.LogTail("a1");

  nlohmann::json t = cluster.DetJson({"trial", "describe", "1"});
  EXPECT_EQ(t["trial"]["restarts"], 0);  // Pausing is not a failure.
  EXPECT_EQ(t["trial"]["run_id"], 1);
  EXPECT_EQ(Int(t["trial"]["total_batches"]), kBatches);
  EXPECT_EQ(t["trial"]["allocation"]["ranks"].size(), 1u);  // The last run had 1 rank.
  // One training row per reported step: what run 0 reported after its checkpoint was
  // superseded by run 1.
  std::string db = cluster.db_path();
  const std::string steps = absl::StrCat(kBatches / 100);  // scheduling_unit 100
  EXPECT_EQ(Sql(db, "SELECT COUNT(*) FROM metrics WHERE trial_id = 1 AND grp = 'training'"), steps);
  EXPECT_EQ(Sql(db, "SELECT COUNT(DISTINCT total_batches) FROM metrics WHERE trial_id = 1 AND grp = 'training'"), steps);
  EXPECT_EQ(Int(t["trial"]["training_summary"]["loss"]["count"]), kBatches / 100);
  // Run 1 resumed past batch 0: it reported no step it did not need to.
  EXPECT_NE(Sql(db, "SELECT MIN(total_batches) FROM metrics WHERE trial_id = 1 AND run_id = 1"), "100");

  EXPECT_FALSE(cluster.Det({"experiment", "set", "slots", "1", "2"}).exit.ok());  // Not paused.
}

}  // namespace
}  // namespace det::testing
