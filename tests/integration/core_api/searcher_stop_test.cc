// A Core API trial stopped by its searcher while it stores its first checkpoint, before its
// script first calls should_preempt() (Determined's Core API tutorial, stage 3, whose
// trials ASHA judges at their first validation), under a real det-master and det-agent.
// det.core.init() told the master that the run answers should_preempt(), so the stop gives
// it the stop grace period instead of a SIGTERM mid-store: the checkpoint is recorded with
// that step's validation metrics, the script stops at its first should_preempt(), and the
// trial ends COMPLETED, stopped early, as Determined's would. The script's store waits on a
// FIFO the test opens only once the master has decided the stop.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(SearcherStop, AStopDuringTheFirstCheckpointKeepsItAndEndsTheTrialCompleted) {
  TestCluster cluster(::testing::UnitTest::GetInstance()->current_test_info()->name());
  const std::string storage = cluster.dir() + "/checkpoints";
  ASSERT_EQ(mkdir(storage.c_str(), 0755), 0);
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("agent-a", 1).ok()) << cluster.LogTail("agent-a");
  const std::string script =
      Slurp(TestCluster::BinDir() + "/../../tests/integration/core_api/searcher_stop_train.py");
  ASSERT_FALSE(script.empty());
  ASSERT_EQ(mkdir((cluster.dir() + "/context").c_str(), 0755), 0);
  std::string context = cluster.WriteFile("context/searcher_stop_train.py", script);
  context = context.substr(0, context.rfind('/'));
  const std::string fifo = cluster.dir() + "/release";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  // Rungs at 5 and 10 batches, one trial at a time: trial 1 (loss 1) leads rung 0 and
  // trains to 10; trial 2 (loss 2) ranks behind it there and is stopped at batch 5.
  const std::string config = cluster.WriteFile("exp.yaml", absl::StrCat(R"(name: searcher-stop
entrypoint: python3 searcher_stop_train.py
hyperparameters:
  blocked_trial: 2
  release_fifo: ')", fifo, R"('
searcher:
  name: adaptive_asha
  metric: loss
  max_length: {batches: 10}
  max_trials: 2
  max_rungs: 2
  divisor: 2
  mode: aggressive
  max_concurrent_trials: 1
checkpoint_storage: {type: shared_fs, host_path: ')", storage, R"('}
max_restarts: 0
)"));
  CommandResult created = cluster.Det({"experiment", "create", config, context});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;

  nlohmann::json t2;
  ASSERT_TRUE(WaitUntil("adaptive_asha stops trial 2", [&] {
    nlohmann::json d = cluster.DetJson({"trial", "describe", "2"});
    if (!d.is_object() || !d.contains("trial")) return false;
    t2 = d["trial"];
    return t2.contains("search") && t2["search"].value("stopped_early", false);
  }, absl::Minutes(4))) << t2.dump() << cluster.LogTail("master");
  // Asked through should_preempt(), not signalled: the run still stores its checkpoint.
  EXPECT_EQ(t2.value("state", ""), "STATE_RUNNING") << t2.dump();

  // The store may end now: the script opened the FIFO, or soon will.
  int fd = -1;
  ASSERT_TRUE(WaitUntil("trial 2's script waits on the FIFO", [&] {
    fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    return fd >= 0;
  }, absl::Minutes(2))) << cluster.Det({"trial", "logs", "2"}).out;
  ASSERT_EQ(write(fd, "go\n", 3), 3);
  close(fd);

  ASSERT_TRUE(WaitUntil("experiment 1 ends", [&] {
    const std::string s = cluster.ExperimentState(1);
    return s == "STATE_COMPLETED" || s == "STATE_ERROR" || s == "STATE_CANCELED";
  }, absl::Minutes(3))) << cluster.LogTail("master");
  const std::string logs = cluster.Det({"trial", "logs", "2"}).out;
  nlohmann::json d = cluster.DetJson({"experiment", "describe", "1"});
  ASSERT_EQ(d["experiment"].value("state", ""), "STATE_COMPLETED") << d.dump() << logs;
  ASSERT_EQ(d["trials"].size(), 2u) << d.dump();

  // Trial 2: COMPLETED, stopped early, with the checkpoint of batch 5 and that step's loss.
  t2 = cluster.DetJson({"trial", "describe", "2"})["trial"];
  EXPECT_EQ(t2.value("state", ""), "STATE_COMPLETED") << t2.dump();
  EXPECT_TRUE(t2["search"].value("stopped_early", false)) << t2.dump();
  bool found = false;
  const nlohmann::json lc = cluster.DetJson({"experiment", "list-checkpoints", "1"});
  ASSERT_TRUE(lc.is_object() && lc.contains("checkpoints")) << lc.dump();
  for (const auto& c : lc["checkpoints"]) {
    if (Int(c["trial_id"]) != 2) continue;
    EXPECT_FALSE(found) << "one checkpoint only: " << c.dump();
    found = true;
    EXPECT_EQ(Int(c["total_batches"]), 5) << c.dump();
    EXPECT_EQ(c["metrics"]["loss"].get<double>(), 2.0) << c.dump();
    EXPECT_EQ(Slurp(c["storage_path"].get<std::string>() + "/state"), "2,5") << c.dump();
  }
  EXPECT_TRUE(found) << cluster.Det({"e", "lc", "1"}).out << logs;
  // What the user reads in the trial log: the stop through should_preempt(), the script
  // stopping at its first should_preempt() after the store, and no signal.
  EXPECT_THAT(logs, HasSubstr("stopped by adaptive_asha at rung 0"));
  EXPECT_THAT(logs, HasSubstr("through should_preempt(): it has"));
  EXPECT_THAT(logs, HasSubstr("released: go"));
  EXPECT_THAT(logs, HasSubstr("stopping after batch 5: stopped early by the searcher"));
  EXPECT_THAT(logs, Not(HasSubstr("did not exit within")));
  EXPECT_THAT(logs, Not(HasSubstr("SIGTERM received")));

  // Trial 1 trained to the end, with both checkpoints.
  nlohmann::json t1 = cluster.DetJson({"trial", "describe", "1"})["trial"];
  EXPECT_EQ(t1.value("state", ""), "STATE_COMPLETED") << t1.dump();
  EXPECT_FALSE(t1.contains("search") && t1["search"].value("stopped_early", false)) << t1.dump();
}

}  // namespace
}  // namespace det::testing
