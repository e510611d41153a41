// Data-parallel trials with real processes: det CLI -> det-master -> det-agent with 4 CPU
// slots -> 4 det-fashion-mnist ranks all-reducing over Gloo on loopback, bootstrapped
// through the master's rendezvous; checkpoints on shared_fs, their listing and garbage
// collection (a CHECKPOINT_GC task on the agent); timings in `det trial describe`; a rank
// killed mid-training.
#include <signal.h>

#include <iostream>
#include <map>
#include <regex>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// `slots` ranks of global batch 64 for `batches`, a checkpoint every `checkpoint_every`
// under `checkpoints` (the best and the latest kept), no restarts.
ExampleExperiment Ranks(const std::string& name, int slots, int64_t batches,
                        const std::string& checkpoints, int64_t checkpoint_every) {
  ExampleExperiment exp;
  exp.name = name;
  exp.global_batch_size = 64;
  exp.batches = batches;
  exp.checkpoint_period = checkpoint_every;
  exp.scheduling_unit = 50;
  exp.max_restarts = 0;
  exp.slots_per_trial = slots;
  exp.checkpoint_host_path = checkpoints;
  exp.save_trial_best = 1;
  exp.save_trial_latest = 1;
  return exp;
}

class Distributed : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a", 4).ok()) << cluster_.LogTail("agent-a");
  }
  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(Distributed, FourRanksReachTheAccuracyOfOneRankWithTheSameGlobalBatch) {
  const std::string checkpoints = cluster_.dir() + "/checkpoints";
  std::map<int, double> accuracy;
  for (int slots : {1, 4}) {
    // One experiment seed for both: the same initial parameters and sample order.
    ExampleExperiment exp = Ranks(absl::StrCat("ranks-", slots), slots, 300, checkpoints, 100);
    exp.experiment_seed = 20261122;
    std::string config = cluster_.WriteFile(absl::StrCat("exp", slots, ".yaml"), exp.Yaml());
    CommandResult create = cluster_.Det({"experiment", "create", config, "-f"}, absl::Seconds(180));
    ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster_.LogTail("master")
                                  << cluster_.LogTail("agent-a");
    EXPECT_THAT(create.out, HasSubstr(absl::StrCat("rank ", slots - 1, " of ", slots)));
    int64_t id = slots == 1 ? 1 : 2;
    nlohmann::json d = cluster_.DetJson({"experiment", "describe", absl::StrCat(id)});
    ASSERT_TRUE(d.is_object());
    const auto& t = d["trials"][0];
    EXPECT_EQ(t["state"], "STATE_COMPLETED");
    EXPECT_EQ(Int(t["total_batches"]), 300);
    accuracy[slots] = t["validation_summary"]["accuracy"]["last"].get<double>();
  }
  // The same model, data order and steps; only the order of float sums differs.
  std::cout << "validation accuracy after 300 batches: 1 rank " << accuracy[1] << ", 4 ranks "
            << accuracy[4] << std::endl;
  EXPECT_GT(accuracy[1], 0.7);
  EXPECT_NEAR(accuracy[4], accuracy[1], 0.02);

  // Timings, reported per batch group, shown by `det trial describe`.
  CommandResult describe = cluster_.Det({"trial", "describe", "2"});
  ASSERT_TRUE(describe.exit.ok()) << describe.err;
  for (const char* phase : {"dataloader_next", "to_device", "train_batch", "step_lr_schedulers", "from_device",
                            "reduce_metrics"}) {
    EXPECT_THAT(describe.out, HasSubstr(phase));
  }
  EXPECT_THAT(describe.out, HasSubstr("samples/s"));
  nlohmann::json trial = cluster_.DetJson({"trial", "describe", "2"});
  EXPECT_EQ(Int(trial["trial"]["timings_summary"]["train_batch_mean_ms"]["count"]), 6);
  EXPECT_GT(trial["trial"]["timings_summary"]["train_batch_p99_ms"]["last"].get<double>(), 0);

  // Checkpoints at batches 100, 200, 300; once the trial ended, garbage collection keeps
  // the latest (also the best: the only one with validation metrics).
  nlohmann::json listed;
  ASSERT_TRUE(WaitUntil(
      [&] {
        listed = cluster_.DetJson({"experiment", "list-checkpoints", "2"});
        if (!listed.is_object() || listed["checkpoints"].size() != 3) return false;
        int deleted = 0;
        for (const auto& c : listed["checkpoints"]) deleted += c["state"] == "STATE_DELETED";
        return deleted == 2;
      },
      absl::Seconds(30)))
      << listed.dump(2) << cluster_.LogTail("master");
  for (const auto& c : listed["checkpoints"]) {
    const std::string path = c["storage_path"].get<std::string>();
    EXPECT_EQ(path, checkpoints + "/" + c["uuid"].get<std::string>());
    if (Int(c["total_batches"]) == 300) {
      EXPECT_EQ(c["state"], "STATE_COMPLETED");
      EXPECT_TRUE(Exists(path + "/model.bin"));
      EXPECT_TRUE(Exists(path + "/state.json"));
      EXPECT_GT(c["metrics"]["accuracy"].get<double>(), 0.7);
    } else {
      EXPECT_EQ(c["state"], "STATE_DELETED");
      EXPECT_FALSE(Exists(path)) << path;
    }
  }
  CommandResult table = cluster_.Det({"experiment", "list-checkpoints", "2"});
  EXPECT_THAT(table.out, HasSubstr("DELETED"));
  EXPECT_THAT(table.out, HasSubstr("COMPLETED"));
  // The agent deleted them, in a zero-slot CHECKPOINT_GC task (the master deletes nothing).
  nlohmann::json tasks = cluster_.DetJson({"task", "list"});
  ASSERT_TRUE(tasks.is_object());
  bool collected = false;
  for (const auto& task : tasks["tasks"]) {
    if (task.value("type", "") != "CHECKPOINT_GC" || Int(task["trial_id"]) != 2) continue;
    collected = true;
    EXPECT_EQ(task["state"], "STATE_COMPLETED");
    EXPECT_EQ(task["agents"], nlohmann::json::array({"agent-a"}));
    EXPECT_EQ(task["checkpoint_uuids"].size(), 2u);
  }
  EXPECT_TRUE(collected) << tasks.dump(2);
}

TEST_F(Distributed, KillingOneRankStopsEveryRankAndTheTrialResumesFromItsLatestCheckpoint) {
  const std::string checkpoints = cluster_.dir() + "/checkpoints";
  ExampleExperiment exp = Ranks("kill", 4, 50000, checkpoints, 50);
  exp.max_restarts = 1;
  std::string config = cluster_.WriteFile("long.yaml", exp.Yaml());
  CommandResult create = cluster_.Det({"experiment", "create", config});
  ASSERT_TRUE(create.exit.ok()) << create.err;

  // Mid-training, after a checkpoint.
  std::map<int, int> pids;
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json c = cluster_.DetJson({"experiment", "list-checkpoints", "1"});
        if (!c.is_object() || c.value("checkpoints", nlohmann::json::array()).empty()) return false;
        pids = RankPids(cluster_.Det({"trial", "logs", "1"}).out);
        return pids.size() == 4;
      },
      absl::Seconds(90)))
      << cluster_.Det({"trial", "logs", "1"}).out << cluster_.LogTail("master");

  const int victim = 2;
  ASSERT_EQ(kill(pids[victim], SIGKILL), 0);
  // Every other rank exits within seconds: no rank hangs in an all-reduce.
  bool all_gone = WaitUntil(
      [&] {
        for (const auto& [rank, pid] : pids) {
          if (Running(pid)) return false;
        }
        return true;
      },
      absl::Seconds(15));
  ASSERT_TRUE(all_gone) << cluster_.Det({"trial", "logs", "1"}).out;

  // The trial restarts from its latest checkpoint of the first run.
  std::string logs;
  std::smatch resumed;
  std::regex resume_re(R"(resuming from checkpoint (\S+) at batch (\d+))");
  ASSERT_TRUE(WaitUntil(
      [&] {
        logs = cluster_.Det({"trial", "logs", "1"}).out;
        return std::regex_search(logs, resumed, resume_re);
      },
      absl::Seconds(90)))
      << logs << cluster_.LogTail("master");
  // A surviving rank said what went wrong: which all-reduce (gradients, or the per-step
  // sample checksum right after them, depending on where the kill landed) at which batch.
  EXPECT_THAT(logs, HasSubstr(" all-reduce at batch "));
  EXPECT_THAT(logs, HasSubstr("a peer rank exited or its connection broke"));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("rank ", victim, " exited: killed by signal 9")));

  nlohmann::json list = cluster_.DetJson({"experiment", "list-checkpoints", "1"});
  ASSERT_TRUE(list.is_object());
  // The newest checkpoint reported before the kill is the one the new run starts from.
  std::string latest_path;
  int64_t latest_batches = -1;
  for (const auto& c : list["checkpoints"]) {
    if (Int(c["total_batches"]) > latest_batches && logs.find(c["uuid"].get<std::string>()) != std::string::npos) {
      // Only checkpoints of the first run are logged before the resume line.
      if (logs.find(c["uuid"].get<std::string>()) < logs.find(resumed[0].str())) {
        latest_batches = Int(c["total_batches"]);
        latest_path = c["storage_path"].get<std::string>();
      }
    }
  }
  EXPECT_EQ(resumed[1].str(), latest_path);
  EXPECT_EQ(std::stoll(resumed[2].str()), latest_batches);
  EXPECT_GE(latest_batches, 50);

  nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
  EXPECT_EQ(t["trial"]["restarts"], 1);
  // The new run trains on from there.
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json tr = cluster_.DetJson({"trial", "describe", "1"});
        return tr.is_object() && Int(tr["trial"]["run_id"]) == 1 &&
               Int(tr["trial"]["total_batches"]) > latest_batches + 100;
      },
      absl::Seconds(90)))
      << cluster_.Det({"trial", "logs", "1"}).out;
  ASSERT_TRUE(cluster_.Det({"experiment", "kill", "1"}).exit.ok());
  EXPECT_TRUE(WaitUntil(
      [&] {
        nlohmann::json e = cluster_.DetJson({"experiment", "describe", "1"});
        return e.is_object() && e["experiment"]["state"] == "STATE_CANCELED";
      },
      absl::Seconds(60)));
}

TEST_F(Distributed, RanksAskedToStopCheckpointFirst) {
  const std::string checkpoints = cluster_.dir() + "/checkpoints";
  // No periodic checkpoints: the only one is the one taken on the way out.
  std::string config =
      cluster_.WriteFile("stop.yaml", Ranks("stop", 2, 50000, checkpoints, 1000000).Yaml());
  ASSERT_TRUE(cluster_.Det({"experiment", "create", config}).exit.ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
        return t.is_object() && Int(t["trial"]["total_batches"]) >= 100;
      },
      absl::Seconds(90)))
      << cluster_.Det({"trial", "logs", "1"}).out;
  // The master asks the agent to stop the workers (SIGTERM, SIGKILL after a grace).
  ASSERT_TRUE(cluster_.Det({"experiment", "kill", "1"}).exit.ok());
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json e = cluster_.DetJson({"experiment", "describe", "1"});
        return e.is_object() && e["experiment"]["state"] == "STATE_CANCELED";
      },
      absl::Seconds(60)));
  std::string logs = cluster_.Det({"trial", "logs", "1"}).out;
  std::smatch stopped;
  ASSERT_TRUE(std::regex_search(logs, stopped, std::regex(R"(checkpointing at batch (\d+))"))) << logs;
  int64_t batch = std::stoll(stopped[1].str());
  EXPECT_EQ(batch % 10, 0);
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("stopped at batch ", batch, " on request")));
  EXPECT_THAT(logs, HasSubstr("exit code 0"));
  nlohmann::json list = cluster_.DetJson({"experiment", "list-checkpoints", "1"});
  ASSERT_TRUE(list.is_object());
  ASSERT_EQ(list["checkpoints"].size(), 1u) << list.dump(2);
  EXPECT_EQ(Int(list["checkpoints"][0]["total_batches"]), batch);
  EXPECT_EQ(list["checkpoints"][0]["state"], "STATE_COMPLETED");
  EXPECT_TRUE(Exists(list["checkpoints"][0]["storage_path"].get<std::string>() + "/model.bin"));
}

TEST(DistributedAcrossAgents, ATrialSpanningTwoAgentsTrainsAsOne) {
  TestCluster cluster("TwoAgents");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("agent-a", 2).ok()) << cluster.LogTail("agent-a");
  ASSERT_TRUE(cluster.StartAgent("agent-b", 2).ok()) << cluster.LogTail("agent-b");
  std::string config = cluster.WriteFile(
      "exp.yaml", Ranks("two-agents", 4, 200, cluster.dir() + "/checkpoints", 100).Yaml());
  CommandResult create = cluster.Det({"experiment", "create", config, "-f"}, absl::Seconds(180));
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster.LogTail("master");
  // Ranks 0-1 on one agent, 2-3 on the other (CROSS_SIZE 2), one collective.
  EXPECT_THAT(create.out, HasSubstr("scheduled on agent-a (slots 0,1), agent-b (slots 0,1)"));
  nlohmann::json d = cluster.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(d.is_object());
  EXPECT_EQ(d["trials"][0]["state"], "STATE_COMPLETED");
  EXPECT_GT(d["trials"][0]["validation_summary"]["accuracy"]["last"].get<double>(), 0.7);
}

}  // namespace
}  // namespace det::testing
