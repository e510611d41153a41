// det on a real Slurm: a master with `resource_manager: {type: slurm}` and no agents, a
// private Slurm of two slurmds on this machine (slurm_cluster.h), and the example model.
// Trials become batch jobs, their ranks det-slurm-launcher tasks under srun.
#include <signal.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/slurm/slurm_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

class SlurmResourceManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(slurm_.Start({.nodes = {"n1", "n2"}, .cpus_per_node = 2}).ok());
    ASSERT_TRUE(master_.StartMaster(MasterYaml()).ok()) << master_.LogTail("master");
  }

  std::string MasterYaml() const {
    return absl::StrCat("resource_manager:\n  type: slurm\n  partition: ", SlurmCluster::kPartition,
                        "\n  work_dir: ", slurm_.dir(), "/work\n  worker_path: [",
                        TestCluster::BinDir(), "]\n  poll_interval: 200ms\n  kill_grace: 5s\n",
                        "  slots_per_node: 2\n");
  }

  // The example model, `batches` long, validated and checkpointed every `period` batches
  // into a directory of the test.
  ExampleExperiment Example(int64_t batches, int64_t period, int slots = 1) const {
    ExampleExperiment exp;
    exp.name = "slurm";
    exp.batches = batches;
    exp.validation_period = period;
    exp.checkpoint_period = period;
    exp.scheduling_unit = 25;
    exp.slots_per_trial = slots;
    exp.max_restarts = 2;
    exp.checkpoint_host_path = master_.dir() + "/checkpoints";
    return exp;
  }

  int64_t Create(const ExampleExperiment& exp, const std::string& file) {
    CommandResult create = master_.Det({"experiment", "create", master_.WriteFile(file, exp.Yaml())});
    EXPECT_TRUE(create.exit.ok()) << create.out << create.err;
    int64_t id = -1;
    absl::string_view out = create.out;
    if (absl::ConsumePrefix(&out, "Created experiment ")) {
      (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(out.substr(0, out.find('\n'))), &id);
    }
    return id;
  }

  nlohmann::json Describe(int64_t id) { return master_.DetJson({"experiment", "describe", absl::StrCat(id)}); }

  bool WaitState(int64_t id, const std::string& state, absl::Duration timeout) {
    return WaitUntil(absl::StrCat("experiment ", id, " ", state), [&] {
      nlohmann::json d = Describe(id);
      return d.is_object() && d["experiment"]["state"] == state;
    }, timeout, absl::Milliseconds(200));
  }

  std::string Diagnostics() {
    return absl::StrCat(master_.LogTail("master"), "\n--- squeue:\n",
                        slurm_.Run({"squeue", "--states=all"}).value_or("?"));
  }

  SlurmCluster slurm_;
  TestCluster master_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

TEST_F(SlurmResourceManagerTest, CppExampleCompletesWithMetricsAndCheckpoints) {
  const int64_t id = Create(Example(100, 50), "exp.yaml");
  ASSERT_EQ(id, 1);
  ASSERT_TRUE(WaitState(id, "STATE_COMPLETED", absl::Seconds(90))) << Diagnostics();
  nlohmann::json d = Describe(id);
  ASSERT_EQ(d["trials"].size(), 1u);
  const auto& t = d["trials"][0];
  EXPECT_EQ(t["state"], "STATE_COMPLETED");
  EXPECT_EQ(Int(t["total_batches"]), 100);
  EXPECT_EQ(Int(t["training_summary"]["loss"]["count"]), 4);
  EXPECT_EQ(Int(t["validation_summary"]["accuracy"]["count"]), 2);
  EXPECT_EQ(Int(t["restarts"]), 0);
  nlohmann::json checkpoints = master_.DetJson({"checkpoint", "list", "1"});
  ASSERT_TRUE(checkpoints.is_object()) << "checkpoint list --json did not parse";
  ASSERT_GE(checkpoints["checkpoints"].size(), 1u);
  // Every checkpoint reported is on disk.
  for (const auto& c : checkpoints["checkpoints"]) {
    EXPECT_TRUE(Exists(c["storage_path"].get<std::string>())) << c.dump();
  }
  // The rank's output reached the trial's log through the launcher, beside Slurm's events.
  CommandResult logs = master_.Det({"trial", "logs", "1"});
  ASSERT_TRUE(logs.exit.ok()) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("batch 100/100"));
  EXPECT_THAT(logs.out, HasSubstr("submitted as Slurm job"));
  EXPECT_THAT(logs.out, HasSubstr("scheduled on slurm-trial-1"));
  // Slurm is done with the job.
  auto state = slurm_.Run({"squeue", "-h", "--states=all", "-o", "%T"});
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(std::string(absl::StripAsciiWhitespace(*state)), "COMPLETED");
}

}  // namespace
}  // namespace det::testing
