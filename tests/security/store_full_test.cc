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

class StoreFullTest : public SecurityCluster {};

TEST_F(StoreFullTest, MetricsAndCheckpointsTheMasterCannotStoreAreRefusedToTheWorker) {
  ASSERT_TRUE(cluster_.StartMaster("db_max_size_mb: 4\n").ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  const std::string context = cluster_.dir() + "/ctx";
  mkdir(context.c_str(), 0755);
  std::ofstream(context + "/train.py") << kTrain;
  const std::string config = cluster_.WriteFile(
      "full.yaml",
      absl::StrCat("name: full\nentrypoint: python3 train.py\nsearcher:\n  name: single\n"
                   "  metric: loss\n  max_length:\n    batches: 100000\nmax_restarts: 0\n"
                   "checkpoint_storage:\n  type: shared_fs\n  host_path: ",
                   cluster_.dir(), "/checkpoints\nenvironment:\n  environment_variables:\n"
                   "    - TEST_DIR=",
                   cluster_.dir(), "\n"));
  CommandResult r = cluster_.Det({"experiment", "create", config, context});
  ASSERT_TRUE(r.exit.ok()) << r.out << r.err;
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

}  // namespace
}  // namespace det::testing
