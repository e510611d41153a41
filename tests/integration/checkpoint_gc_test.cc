// Checkpoint garbage collection with real processes: det CLI -> det-master -> det-agent ->
// det-fashion-mnist writing checkpoints on shared_fs; when the trial ends, the master
// queues a zero-slot CHECKPOINT_GC task that runs on the agent (`det-agent
// --checkpoint-gc`), deletes what checkpoint_storage.save_* does not keep, and marks it
// DELETED in the store.
#include <signal.h>

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/sqlite_store.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

TEST(CheckpointGc, RunsAsAZeroSlotTaskOnTheAgentAndKeepsWhatTheConfigSays) {
  TestCluster cluster("CheckpointGc");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("agent-a", 1).ok()) << cluster.LogTail("agent-a");
  const std::string storage = cluster.dir() + "/checkpoints";
  // Checkpoints at batches 10, 20, 30, 40; validation (the metric) only at 40, so the
  // latest is also the only "best": it alone is kept.
  ExampleExperiment exp;
  exp.name = "gc";
  exp.batches = 40;
  exp.validation_period = 40;
  exp.checkpoint_period = 10;
  exp.scheduling_unit = 10;
  exp.checkpoint_host_path = storage;
  exp.save_trial_best = 1;
  exp.save_trial_latest = 1;
  std::string config = cluster.WriteFile("gc.yaml", exp.Yaml());
  CommandResult create = cluster.Det({"experiment", "create", config, "-f"});
  ASSERT_TRUE(create.exit.ok()) << create.out << create.err << cluster.LogTail("master");

  // The task: listed by `det task list --json` until it has completed on the agent.
  nlohmann::json gc;
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json tasks = cluster.DetJson({"task", "list"});
        if (!tasks.is_object()) return false;
        for (const auto& t : tasks.value("tasks", nlohmann::json::array())) {
          if (t.value("type", "") == "CHECKPOINT_GC") gc = t;
        }
        return gc.is_object() && gc.value("state", "") == "STATE_COMPLETED";
      },
      absl::Seconds(60)))
      << gc.dump(2) << cluster.LogTail("master") << cluster.LogTail("agent-a");
  EXPECT_EQ(gc["allocation_id"], "gc-1.0");
  EXPECT_EQ(Int(gc["experiment_id"]), 1);
  EXPECT_EQ(Int(gc["trial_id"]), 1);
  EXPECT_EQ(gc.value("slots", 0), 0);
  EXPECT_EQ(gc["agents"], nlohmann::json::array({"agent-a"}));
  EXPECT_EQ(gc["resource_pool"], "default");
  std::set<std::string> collected;
  for (const auto& u : gc["checkpoint_uuids"]) collected.insert(u.get<std::string>());
  EXPECT_EQ(collected.size(), 3u) << gc.dump(2);

  // It ran on the agent, as the agent's own binary, supervised like a worker.
  std::string agent_log = cluster.LogTail("agent-a");
  EXPECT_THAT(agent_log, HasSubstr("allocation gc-1.0: rank 0 started"));
  EXPECT_THAT(agent_log, HasSubstr("det-agent --checkpoint-gc "));
  EXPECT_THAT(agent_log, HasSubstr("allocation gc-1.0: finished and cleaned up"));
  CommandResult table = cluster.Det({"task", "list"});
  EXPECT_THAT(table.out, HasSubstr("CHECKPOINT_GC"));
  EXPECT_THAT(table.out, HasSubstr("agent-a"));

  // Only the latest checkpoint is left, on disk and in the listing.
  nlohmann::json listed = cluster.DetJson({"experiment", "list-checkpoints", "1"});
  ASSERT_TRUE(listed.is_object());
  ASSERT_EQ(listed["checkpoints"].size(), 4u) << listed.dump(2);
  std::string kept;
  for (const auto& c : listed["checkpoints"]) {
    const std::string uuid = c["uuid"].get<std::string>();
    const std::string path = c["storage_path"].get<std::string>();
    EXPECT_EQ(path, storage + "/" + uuid);
    if (Int(c["total_batches"]) == 40) {
      kept = uuid;
      EXPECT_EQ(c["state"], "STATE_COMPLETED");
      EXPECT_TRUE(Exists(path + "/model.bin")) << path;
      EXPECT_EQ(collected.count(uuid), 0u);
    } else {
      EXPECT_EQ(c["state"], "STATE_DELETED") << uuid;
      EXPECT_FALSE(Exists(path)) << path;
      EXPECT_EQ(collected.count(uuid), 1u) << uuid;
    }
  }
  ASSERT_FALSE(kept.empty()) << listed.dump(2);

  // The trial's log tells the story: queued, placed with no slots, the agent's output, and
  // one line per deleted checkpoint.
  std::string logs = cluster.Det({"trial", "logs", "1"}).out;
  EXPECT_THAT(logs,
              HasSubstr("checkpoint garbage collection gc-1 queued: 3 checkpoint(s) to delete"));
  EXPECT_THAT(logs,
              HasSubstr("checkpoint garbage collection gc-1.0 scheduled on agent-a (0 slots)"));
  EXPECT_THAT(logs, HasSubstr("checkpoint gc: 3 checkpoint(s) deleted"));
  EXPECT_THAT(logs, HasSubstr("checkpoint garbage collection gc-1.0 completed on agent-a"));
  for (const auto& uuid : collected) {
    EXPECT_THAT(
        logs, HasSubstr(absl::StrCat("deleted checkpoint ", uuid, " (", storage, "/", uuid, ")")));
    EXPECT_THAT(logs, HasSubstr(absl::StrCat("checkpoint ", uuid, " (batch ")));
  }
  EXPECT_THAT(logs, HasSubstr("deleted by garbage collection"));

  // The store: the task row COMPLETED on agent-a, the collected checkpoints DELETED.
  cluster.StopMaster(SIGTERM);
  auto store = master::SqliteStore::Open(cluster.db_path());
  ASSERT_TRUE(store.ok()) << store.status();
  auto snap = (*store)->Load();
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->checkpoint_gc_tasks.size(), 1u);
  EXPECT_EQ(snap->checkpoint_gc_tasks[0].state(), v1::STATE_COMPLETED);
  EXPECT_EQ(snap->checkpoint_gc_tasks[0].agent_id(), "agent-a");
  auto rows = (*store)->GetCheckpoints(1);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 4u);
  for (const auto& c : *rows) {
    EXPECT_EQ(c.state(), c.uuid() == kept ? v1::STATE_COMPLETED : v1::STATE_DELETED) << c.uuid();
  }
}

}  // namespace
}  // namespace det::testing
