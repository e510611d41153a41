// Nothing lost silently for metrics and checkpoints (issue 15 point 3): a Core API worker
// reports metrics until the master's database is full (db_max_size_mb), then a checkpoint.
// Each report the master cannot store is refused to the worker (det.MasterError naming
// RESOURCE_EXHAUSTED and the full disk), never acknowledged and dropped; once the database
// has room again (the master restarted with a larger limit) the trial's log shows what the
// worker was told; while it is full, the trial's describe counts what was refused. Real
// det-master, det-agent and worker.
#include <csignal>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/security/security_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kTrain[] = R"py(
import os
import det

done = os.environ["TEST_DIR"] + "/worker-done"
if os.path.exists(os.environ["TEST_DIR"] + "/stop"):
    # A later run, after the master restarted (the first run's end was not stored).
    print("a later run: stopping at once", flush=True)
    raise SystemExit(0)
try:
    with det.core.init() as core:
        wide = {f"m{i}": float(i) for i in range(2000)}
        steps = 0
        try:
            while steps < 10000:
                core.train.report_training_metrics(steps_completed=steps + 1,
                                                   metrics=dict(wide, loss=1.0))
                steps += 1
            print("every metric report was acknowledged", flush=True)
        except det.MasterError as e:
            print(f"metrics refused after {steps} reports: {e}", flush=True)
        try:
            with core.checkpoint.store_path({"steps_completed": steps}) as (path, storage_id):
                with open(os.path.join(path, "weights"), "w") as f:
                    f.write("w")
            print(f"checkpoint {storage_id} acknowledged", flush=True)
        except det.MasterError as e:
            print(f"checkpoint refused: {e}", flush=True)
            raise
finally:
    open(done, "w").close()
)py";

class StoreFullTest : public SecurityCluster {
 protected:
  // A master whose database holds at most 4 MB, an agent, and experiment `name` running
  // `script` as train.py (one rank, max_restarts 0, TEST_DIR the cluster's directory),
  // with `extra_yaml` (whole lines) in its config.
  void StartFullClusterRunning(const std::string& name, const std::string& script,
                               const std::string& extra_yaml = "") {
    ASSERT_TRUE(cluster_.StartMaster("db_max_size_mb: 4\n").ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
    const std::string context = cluster_.dir() + "/ctx";
    mkdir(context.c_str(), 0755);
    std::ofstream(context + "/train.py") << script;
    const std::string config = cluster_.WriteFile(
        name + ".yaml",
        absl::StrCat("name: ", name, "\nentrypoint: python3 train.py\nsearcher:\n  name: single\n"
                     "  metric: loss\n  max_length:\n    batches: 100000\nmax_restarts: 0\n",
                     extra_yaml, "environment:\n  environment_variables:\n    - TEST_DIR=",
                     cluster_.dir(), "\n"));
    CommandResult r = cluster_.Det({"experiment", "create", config, context});
    ASSERT_TRUE(r.exit.ok()) << r.out << r.err;
  }
};

TEST_F(StoreFullTest, MetricsAndCheckpointsTheMasterCannotStoreAreRefusedToTheWorker) {
  ASSERT_NO_FATAL_FAILURE(StartFullClusterRunning(
      "full", kTrain,
      absl::StrCat("checkpoint_storage:\n  type: shared_fs\n  host_path: ", cluster_.dir(),
                   "/checkpoints\n")));
  ASSERT_TRUE(WaitForFile("worker-done", absl::Seconds(240))) << Diagnostics();
  // The trial's describe counts what was refused (while the database is full, in the
  // master's memory).
  std::string warnings;
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json t = cluster_.DetJson({"trial", "describe", "1"});
        warnings = t.is_object() ? t["trial"].value("warnings", nlohmann::json::array()).dump() : "";
        return warnings.find("checkpoint reports refused: 1 ") != std::string::npos;
      },
      absl::Seconds(60)))
      << warnings << Diagnostics();
  EXPECT_THAT(warnings, HasSubstr("metric rows refused: "));
  EXPECT_THAT(warnings, HasSubstr("the master could not store them"));

  // Room again: what the worker was told reaches the trial's log. (The first run's end
  // could not be stored either, so the restarted master runs the trial again: that run
  // stops at once.)
  Touch("stop");
  cluster_.StopMaster(SIGTERM);
  ASSERT_TRUE(cluster_.StartMaster("db_max_size_mb: 400\n").ok()) << cluster_.LogTail("master");
  std::string logs;
  ASSERT_TRUE(WaitUntil(
      [&] {
        logs = Logs();
        return logs.find("checkpoint refused") != std::string::npos;
      },
      absl::Seconds(120)))
      << Diagnostics();
  EXPECT_THAT(logs, HasSubstr("metrics refused after "));
  EXPECT_THAT(logs, HasSubstr("ReportMetrics to master"));
  EXPECT_THAT(logs, HasSubstr("failed: RESOURCE_EXHAUSTED"));
  EXPECT_THAT(logs, HasSubstr("(disk full)"));
  EXPECT_THAT(logs, HasSubstr("checkpoint refused: ReportCheckpoint to master"));
  EXPECT_THAT(logs, Not(HasSubstr("every metric report was acknowledged")));
  EXPECT_THAT(logs, Not(HasSubstr(" acknowledged\n")));
  // The refused checkpoint was not stored: a report is one transaction, both the row and
  // the trial's latest_checkpoint or neither.
  nlohmann::json checkpoints = cluster_.DetJson({"experiment", "list-checkpoints", "1"});
  EXPECT_TRUE(checkpoints.value("checkpoints", nlohmann::json::array()).empty()) << checkpoints.dump();
}

// Issue 25 item 6: a worker that dies while the database is full frees its slot. Its last
// lines cannot be stored (the agent keeps them and sends them again); its exit report no
// longer waits behind them, so the trial leaves RUNNING and `det slot list` shows the slot
// free while the database is still full.
constexpr char kDieWhenFull[] = R"py(
import os
import sys
import det

with det.core.init() as core:
    wide = {f"m{i}": float(i) for i in range(2000)}
    try:
        for steps in range(1, 100000):
            core.train.report_training_metrics(steps_completed=steps,
                                               metrics=dict(wide, loss=1.0))
    except det.MasterError as e:
        print(f"metrics refused: {e}", flush=True)
# More than the full database's last pages hold: these lines, and the ones after them,
# cannot be stored.
for i in range(200):
    print(f"filler {i} " + "x" * 4000, flush=True)
for i in range(3):
    print(f"last words {i}", flush=True)
open(os.environ["TEST_DIR"] + "/worker-done", "w").close()
sys.exit(1)
)py";

TEST_F(StoreFullTest, AWorkerThatDiesWhileTheDatabaseIsFullFreesItsSlot) {
  ASSERT_NO_FATAL_FAILURE(StartFullClusterRunning("die", kDieWhenFull));
  ASSERT_TRUE(WaitForFile("worker-done", absl::Seconds(240))) << Diagnostics();

  std::string slots;
  std::string state;
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json s = cluster_.DetJson({"slot", "list"});
        slots = s.dump();
        state = TrialState();
        bool free = s.is_object() && s["slots"].size() == 1 &&
                    s["slots"][0].value("allocation_id", "").empty();
        return free && state != "STATE_RUNNING";
      },
      absl::Seconds(60)))
      << "slots " << slots << " trial " << state << Diagnostics();
  EXPECT_EQ(state, "STATE_ERROR");
  // Still full: the worker's last lines wait on the agent, behind the exit that went first.
  EXPECT_THAT(Logs(), Not(HasSubstr("last words 2")));
  EXPECT_THAT(cluster_.DetJson({"trial", "describe", "1"}).dump(),
              HasSubstr("metric rows refused: "));
}

}  // namespace
}  // namespace det::testing
