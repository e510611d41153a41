// Issue 23: with profiling on, `det trial describe` shows a PyTorchTrial's timings and its
// agent's system metrics. A real master and agent run the Fashion-MNIST PyTorchTrial
// example (common/worker/python/examples/fashion_mnist_trial, configs/examples/
// trial-const.yaml, `profiling.enabled: true`), slowed per batch so that it runs while the
// agent samples its host; the test reads what a user reads, through the det CLI.
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/fashion_mnist_subset.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// The example's trial with a sleep per batch: a 100-batch run (5 s of sleeps alone) lasts
// well over the agent's sampling period (500ms here).
constexpr char kSlowTrial[] = R"(import time

import model_def


class SlowTrial(model_def.FashionTrial):
    def train_batch(self, batch, epoch_idx, batch_idx):
        time.sleep(0.05)
        return super().train_batch(batch, epoch_idx, batch_idx)
)";

class TrialProfilingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a", 1, "system_metrics_period: 500ms\n").ok())
        << cluster_.LogTail("agent-a");
    const std::string runfiles = TestCluster::BinDir() + "/../../";
    ASSERT_EQ(mkdir((cluster_.dir() + "/context").c_str(), 0755), 0);
    for (const char* f : {"model_def.py", "data.py"}) {
      std::string text =
          Slurp(runfiles + "common/worker/python/examples/fashion_mnist_trial/" + f);
      ASSERT_FALSE(text.empty()) << f;
      cluster_.WriteFile(std::string("context/") + f, text);
    }
    std::string path = cluster_.WriteFile("context/slow_trial.py", kSlowTrial);
    context_ = path.substr(0, path.rfind('/'));
    config_ = runfiles + "configs/examples/trial-const.yaml";
    // 10,000 training and 2,000 test images: loading the full set and validating over
    // 10,000 would be most of the run's CPU time.
    data_ = cluster_.dir() + "/fashion-mnist";
    ASSERT_EQ(mkdir(data_.c_str(), 0755), 0);
    absl::Status data = WriteFashionMnistSubset(kFashionMnistDir, data_, 10000, 2000);
    ASSERT_TRUE(data.ok()) << data;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string context_;
  std::string config_;
  std::string data_;
};

TEST_F(TrialProfilingTest, DescribeShowsTimingsAndSystemMetricsOfAPyTorchTrial) {
  CommandResult created = cluster_.Det(
      {"experiment", "create", config_, context_, "--config", "entrypoint=slow_trial:SlowTrial",
       "--config", "profiling={enabled: true}", "--config",
       "searcher.max_length={batches: 100}", "--config", "min_validation_period={batches: 0}",
       "--config", "scheduling_unit=20", "--config",
       // The CNN at an eighth of its default width: the timings and samples do not depend on
       // its size, and the default's batches and validation are most of the run's CPU time.
       "hyperparameters.n_filters1=8", "--config", "hyperparameters.n_filters2=16", "--config",
       "hyperparameters.hidden=32", "--config", "data={dir: '" + data_ + "'}", "--config",
       "checkpoint_storage={type: shared_fs, host_path: '" + cluster_.dir() + "/checkpoints'}"});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;

  // While it trains: timings reported and host samples of its agent, in the JSON...
  nlohmann::json trial;
  ASSERT_TRUE(WaitUntil(
      "trial 1 describes timings and non-zero system metrics",
      [&] {
        nlohmann::json d = cluster_.DetJson({"trial", "describe", "1"});
        if (!d.is_object() || !d.contains("system_metrics")) return false;
        trial = d;
        const nlohmann::json& t = d["trial"];
        if (!t.contains("timings_summary") ||
            !t["timings_summary"].contains("batches_per_second")) {
          return false;
        }
        for (const auto& m : d["system_metrics"]) {
          if (m.value("agent_id", "") == "agent-a" &&
              m.value("cpu_utilization_percent", 0.0) > 0 &&
              Int(m["memory_total_bytes"]) > 0 && Int(m["memory_free_bytes"]) > 0) {
            return true;
          }
        }
        return false;
      },
      absl::Minutes(4)))
      << trial.dump() << cluster_.Det({"trial", "logs", "1"}).out << cluster_.LogTail("agent-a");
  EXPECT_GT(trial["trial"]["timings_summary"]["batches_per_second"]["last"].get<double>(), 0)
      << trial.dump();
  EXPECT_GT(trial["trial"]["timings_summary"]["samples_per_second"]["last"].get<double>(), 0)
      << trial.dump();

  // ... and in the text a user reads.
  CommandResult text = cluster_.Det({"trial", "describe", "1"});
  ASSERT_TRUE(text.exit.ok()) << text.err;
  EXPECT_THAT(text.out, HasSubstr("Timings (per batch, over ")) << text.out;
  EXPECT_THAT(text.out, HasSubstr("Throughput: ")) << text.out;
  // The PyTorchTrial loop's phases, under Determined's profiler names.
  for (const char* phase : {"dataloader_next", "to_device", "train_batch", "from_device"}) {
    EXPECT_THAT(text.out, HasSubstr(phase)) << text.out;
  }
  EXPECT_THAT(text.out, HasSubstr("Batches per second: ")) << text.out;
  EXPECT_THAT(text.out, HasSubstr("System metrics:")) << text.out;
  EXPECT_THAT(text.out, HasSubstr("CPU (latest, mean)")) << text.out;
  EXPECT_THAT(text.out, HasSubstr("Memory Used (latest, mean)")) << text.out;
  EXPECT_THAT(text.out, HasSubstr(" agent-a ")) << text.out;

  CommandResult wait = cluster_.Det({"experiment", "wait", "1", "--interval", "0.5"},
                                    absl::Minutes(5));
  nlohmann::json e = cluster_.DetJson({"experiment", "describe", "1"});
  ASSERT_TRUE(e.is_object()) << wait.out << wait.err;
  EXPECT_EQ(e["experiment"]["state"], "STATE_COMPLETED")
      << cluster_.Det({"trial", "logs", "1"}).out;
  // After the run, the timings stay: every report of the 100 batches; and the COMPLETED
  // trial shows the system metrics of the agent of its last run.
  CommandResult done = cluster_.Det({"trial", "describe", "1"});
  EXPECT_THAT(done.out, HasSubstr("Timings (per batch, over ")) << done.out;
  EXPECT_THAT(done.out, HasSubstr("System metrics:")) << done.out;
  EXPECT_THAT(done.out, HasSubstr(" agent-a ")) << done.out;
  nlohmann::json ended = cluster_.DetJson({"trial", "describe", "1"});
  ASSERT_TRUE(ended.is_object()) << done.out;
  EXPECT_EQ(ended["trial"]["state"], "STATE_COMPLETED") << ended.dump();
  bool agent_a = false;
  for (const auto& m : ended["system_metrics"]) agent_a |= m.value("agent_id", "") == "agent-a";
  EXPECT_TRUE(agent_a) << ended.dump();
}

}  // namespace
}  // namespace det::testing
