// The Python Core API (det.core) with real PyTorch workers: det-master, det-agent and the
// Core API example (common/worker/python/examples/fashion_mnist_cnn, DDP over Gloo on CPU)
// as real processes; what users see through the det CLI and REST.
#include <signal.h>
#include <sys/stat.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/fashion_mnist_subset.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

// The example's CNN at an eighth of its default width (filters 32/64, hidden 128), for
// the cases whose checks (reports, checkpoints, stops, resumes) do not depend on the model's
// size: the default's batches and validations are most of their CPU time.
constexpr char kSmallCnn[] = R"(
  filters1: 8
  filters2: 16
  hidden: 32)";

// An experiment of the example on `slots` slots, `batches` long, validated (and so
// checkpointed) every `validation` batches, on the data set in `data_dir`; `hparams` (YAML
// lines) are added to its hyperparameters and `extra` is appended.
std::string CnnConfig(int slots, int64_t batches, int64_t validation, const std::string& storage,
                      const std::string& data_dir, const std::string& hparams,
                      const std::string& extra = "") {
  return absl::StrCat(R"(name: core-api
entrypoint: python3 -m det.launch.torch_distributed python3 train.py
hyperparameters:
  global_batch_size: 64
  learning_rate: 0.002)", hparams, R"(
records_per_epoch: 60000
searcher:
  name: single
  metric: validation_loss
  max_length: {batches: )", batches, R"(}
min_validation_period: {batches: )", validation, R"(}
resources: {slots_per_trial: )", slots, R"(}
checkpoint_storage: {type: shared_fs, host_path: ')", storage, R"('}
data: {dir: ')", data_dir, R"('}
)", extra);
}

class CoreApi : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    // Workers stop at a step boundary after validating and checkpointing: give them more
    // than TestCluster's 3 s between SIGTERM and SIGKILL on a loaded machine.
    std::string yaml = cluster_.AgentYaml("agent-a", 2);
    size_t grace = yaml.find("kill_grace: 3s");
    ASSERT_NE(grace, std::string::npos) << yaml;
    yaml.replace(grace, 14, "kill_grace: 120s");
    ASSERT_TRUE(cluster_.StartAgentWithYaml("agent-a", yaml).ok()) << cluster_.LogTail("agent-a");
    storage_ = cluster_.dir() + "/checkpoints";
    // The example's files, copied from the runfiles into a context directory.
    const std::string runfiles = TestCluster::BinDir() + "/../../common/worker/python/examples/"
                                 "fashion_mnist_cnn/";
    ASSERT_EQ(mkdir((cluster_.dir() + "/context").c_str(), 0755), 0);
    for (const char* f : {"train.py", "model.py", "data.py"}) {
      std::string text = Slurp(runfiles + f);
      ASSERT_FALSE(text.empty()) << runfiles << f;
      context_ = cluster_.WriteFile(std::string("context/") + f, text);
    }
    context_ = context_.substr(0, context_.rfind('/'));
    small_data_ = cluster_.dir() + "/fashion-mnist";
    ASSERT_EQ(mkdir(small_data_.c_str(), 0755), 0);
    absl::Status data = WriteFashionMnistSubset(kFashionMnistDir, small_data_, 10000, 2000);
    ASSERT_TRUE(data.ok()) << data;
  }

  // CnnConfig of the small CNN on 10,000 training and 2,000 test images.
  std::string SmallConfig(int slots, int64_t batches, int64_t validation,
                          const std::string& extra = "") {
    return CnnConfig(slots, batches, validation, storage_, small_data_, kSmallCnn, extra);
  }

  // Creates the experiment of `config` (experiment 1).
  bool Create(const std::string& config) {
    std::string path = cluster_.WriteFile("exp.yaml", config);
    CommandResult r = cluster_.Det({"experiment", "create", path, context_});
    EXPECT_TRUE(r.exit.ok()) << r.out << r.err;
    return r.exit.ok();
  }

  nlohmann::json Trial(int64_t id) {
    nlohmann::json d = cluster_.DetJson({"trial", "describe", absl::StrCat(id)});
    return d.is_object() ? d["trial"] : nlohmann::json();
  }

  std::string Logs(int64_t trial) { return cluster_.Det({"trial", "logs", absl::StrCat(trial)}).out; }

  std::string State(int64_t experiment) {
    nlohmann::json d = cluster_.DetJson({"experiment", "describe", absl::StrCat(experiment)});
    return d.is_object() ? d["experiment"].value("state", "") : "";
  }

  // Waits for the experiment to end; its describe JSON.
  nlohmann::json WaitEnded(int64_t experiment, absl::Duration timeout = absl::Minutes(8)) {
    bool ended = WaitUntil([&] {
      std::string s = State(experiment);
      return s == "STATE_COMPLETED" || s == "STATE_ERROR" || s == "STATE_CANCELED";
    }, timeout);
    EXPECT_TRUE(ended) << "experiment " << experiment << " still " << State(experiment) << "\n"
                       << Logs(1) << cluster_.LogTail("agent-a");
    return cluster_.DetJson({"experiment", "describe", absl::StrCat(experiment)});
  }

  // GET http://<master>/api/v1/<path> as admin.
  nlohmann::json Rest(const std::string& path) {
    CommandResult r = RunCommand({"curl", "-sf", "-H", "Authorization: Bearer " + cluster_.token(),
                                  absl::StrCat("http://", cluster_.http_address(), "/api/v1/", path)});
    EXPECT_TRUE(r.exit.ok()) << path << ": " << r.err;
    return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  }

  // The batch of the log line "resumed from checkpoint <uuid> at batch N" (-1 if none).
  static int64_t ResumedAt(const std::string& logs) {
    const std::string marker = "resumed from checkpoint ";
    size_t at = logs.find(marker);
    if (at == std::string::npos) return -1;
    size_t b = logs.find(" at batch ", at);
    int64_t batch = -1;
    std::string rest = logs.substr(b + 10, logs.find('\n', b) - b - 10);
    return absl::SimpleAtoi(rest, &batch) ? batch : -1;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string storage_;
  std::string context_;
  // The data set of SmallConfig (WriteFashionMnistSubset).
  std::string small_data_;
};

// The example as shipped (its CNN, the full data set); the other cases run it smaller.
TEST_F(CoreApi, ExampleReportsMetricsValidationCheckpointsAndTimings) {
  ASSERT_TRUE(Create(CnnConfig(2, 200, 100, storage_, kFashionMnistDir, "")));
  nlohmann::json d = WaitEnded(1);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << Logs(1);
  const nlohmann::json t = Trial(1);
  EXPECT_EQ(t["state"], "STATE_COMPLETED");
  EXPECT_EQ(Int(t["total_batches"]), 200);
  EXPECT_EQ(Int(t["training_summary"]["loss"]["count"]), 2);
  EXPECT_EQ(Int(t["validation_summary"]["accuracy"]["count"]), 2);
  EXPECT_GT(t["validation_summary"]["accuracy"]["last"].get<double>(), 0.6);
  EXPECT_LT(t["validation_summary"]["validation_loss"]["last"].get<double>(),
            t["validation_summary"]["validation_loss"]["max"].get<double>());
  // Timings in the C++ harness's shape.
  for (const char* name : {"dataloader_next_mean_ms", "to_device_p50_ms", "train_batch_p99_ms",
                           "from_device_max_ms", "reduce_metrics_mean_ms", "samples_per_second"}) {
    EXPECT_TRUE(t["timings_summary"].contains(name)) << name << " in " << t["timings_summary"].dump();
  }
  EXPECT_EQ(Int(t["timings_summary"]["train_batch_count"]["count"]), 2);

  // REST: the trial, its timings rows, and the checkpoints with their files and metadata.
  nlohmann::json rest_trial = Rest("trials/1");
  EXPECT_EQ(Int(rest_trial["trial"]["total_batches"]), 200) << rest_trial.dump();
  nlohmann::json timings = Rest("trials/1/timings");
  ASSERT_TRUE(timings.contains("metrics")) << timings.dump();
  EXPECT_EQ(timings["metrics"].size(), 2u);
  EXPECT_GT(timings["metrics"][0]["values"]["train_batch_mean_ms"].get<double>(), 0);
  nlohmann::json checkpoints = Rest("experiments/1/checkpoints");
  ASSERT_TRUE(checkpoints.contains("checkpoints")) << checkpoints.dump();
  bool latest_seen = false;
  for (const auto& c : checkpoints["checkpoints"]) {
    SCOPED_TRACE(c.dump());
    nlohmann::json metadata = nlohmann::json::parse(c.value("metadata_json", "{}"));
    EXPECT_EQ(Int(metadata["steps_completed"]), Int(c["total_batches"]));
    EXPECT_TRUE(c["resources"].contains("state.pt"));
    EXPECT_TRUE(c["resources"].contains("sampler.json"));
    EXPECT_TRUE(c["resources"].contains("metadata.json"));
    EXPECT_EQ(c["storage_path"], absl::StrCat(storage_, "/", c["uuid"].get<std::string>()));
    if (Int(c["total_batches"]) == 200) {
      latest_seen = true;
      EXPECT_TRUE(Exists(c["storage_path"].get<std::string>() + "/state.pt"));
      // Reported without metrics (store_path): it carries the validation at batch 200.
      EXPECT_TRUE(c.contains("metrics") && c["metrics"].contains("validation_loss"));
    }
  }
  EXPECT_TRUE(latest_seen);
  // So `det e lc --best` ranks the Core API's checkpoints by the searcher metric.
  CommandResult best = cluster_.Det({"experiment", "list-checkpoints", "1", "--best", "1", "--json"});
  ASSERT_TRUE(best.exit.ok()) << best.out << best.err;
  nlohmann::json ranked = nlohmann::json::parse(best.out, nullptr, false);
  ASSERT_TRUE(ranked.contains("checkpoints") && ranked["checkpoints"].size() == 1) << best.out;
  EXPECT_TRUE(ranked["checkpoints"][0]["metrics"].contains("validation_loss")) << best.out;
  std::string logs = Logs(1);
  EXPECT_THAT(logs, HasSubstr("rank 1 of 2"));
  EXPECT_THAT(logs, HasSubstr("validation at batch 200"));
}

TEST_F(CoreApi, KilledRankResumesFromTheLatestCheckpoint) {
  ASSERT_TRUE(Create(SmallConfig(2, 300, 100, "max_restarts: 1\n")));
  // Once a checkpoint is registered, kill rank 1.
  ASSERT_TRUE(WaitUntil([&] { return !Trial(1).value("latest_checkpoint", "").empty(); },
                        absl::Minutes(5)))
      << Logs(1);
  std::map<int, int> pids = RankPids(Logs(1));
  ASSERT_TRUE(pids.count(1)) << Logs(1);
  ASSERT_EQ(kill(pids[1], SIGKILL), 0);
  nlohmann::json d = WaitEnded(1);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << Logs(1);
  const nlohmann::json t = Trial(1);
  EXPECT_EQ(t["restarts"], 1);
  EXPECT_EQ(Int(t["total_batches"]), 300);
  std::string logs = Logs(1);
  int64_t resumed = ResumedAt(logs);
  EXPECT_GE(resumed, 100) << logs;
  EXPECT_LT(resumed, 300) << logs;
  EXPECT_EQ(resumed % 100, 0) << logs;
  EXPECT_THAT(logs, HasSubstr("validation at batch 300"));
}

TEST_F(CoreApi, PauseIsSeenByShouldPreemptThenResizeAndActivateContinue) {
  ASSERT_TRUE(Create(SmallConfig(2, 500, 100)));
  ASSERT_TRUE(WaitUntil([&] { return Int(Trial(1)["total_batches"]) >= 100; }, absl::Minutes(5)))
      << Logs(1);
  CommandResult pause = cluster_.Det({"experiment", "pause", "1"});
  ASSERT_TRUE(pause.exit.ok()) << pause.err;
  ASSERT_TRUE(WaitUntil([&] { return Logs(1).find("asked to stop (") != std::string::npos; },
                        absl::Minutes(2)))
      << Logs(1);
  // The worker stopped at a step boundary and checkpointed there.
  std::string logs = Logs(1);
  size_t at = logs.find("asked to stop (");
  std::string line = logs.substr(at, logs.find('\n', at) - at);
  int64_t stopped_at = -1;
  ASSERT_TRUE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &stopped_at)) << line;
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("at batch ", stopped_at, "\n")));
  // Resize once the trial has stopped (the master refuses while it is stopping).
  ASSERT_TRUE(WaitUntil([&] { return cluster_.Det({"experiment", "set", "slots", "1", "1"}).exit.ok(); },
                        absl::Minutes(2)))
      << cluster_.Det({"experiment", "set", "slots", "1", "1"}).err;
  EXPECT_EQ(State(1), "STATE_PAUSED");
  CommandResult activate = cluster_.Det({"experiment", "activate", "1"});
  ASSERT_TRUE(activate.exit.ok()) << activate.err;
  nlohmann::json d = WaitEnded(1);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << Logs(1);
  EXPECT_EQ(Int(Trial(1)["total_batches"]), 500);
  logs = Logs(1);
  EXPECT_EQ(ResumedAt(logs), stopped_at) << logs;
  EXPECT_THAT(logs, HasSubstr("rank 0 of 1"));
  EXPECT_THAT(logs, HasSubstr("validation at batch 500"));
}

TEST_F(CoreApi, AdaptiveAshaStopsWeakTrialsThroughSearcherOperations) {
  constexpr int kMaxLength = 100;
  std::string path = cluster_.WriteFile("asha.yaml", absl::StrCat(R"(name: asha
entrypoint: python3 train.py
hyperparameters:
  global_batch_size: 64
  hidden_size: {type: categorical, vals: [16, 32]}
  learning_rate: {type: categorical, vals: [0.002, 0.0000001]})", kSmallCnn, R"(
records_per_epoch: 60000
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_length: {batches: )", kMaxLength, R"(}
  max_trials: 4
  max_rungs: 2
  divisor: 4
  mode: aggressive
  max_concurrent_trials: 2
reproducibility: {experiment_seed: 31}
min_validation_period: {batches: 25}
checkpoint_storage: {type: shared_fs, host_path: ')", storage_, R"('}
data: {dir: ')", small_data_, R"('}
)"));
  CommandResult r = cluster_.Det({"experiment", "create", path, context_});
  ASSERT_TRUE(r.exit.ok()) << r.out << r.err;
  nlohmann::json d = WaitEnded(1, absl::Minutes(12));
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << d.dump(2);
  ASSERT_EQ(d["trials"].size(), 4u);
  int stopped = 0;
  for (const auto& t : d["trials"]) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(t["state"], "STATE_COMPLETED");
    const bool early = t.contains("search") && t["search"].value("stopped_early", false);
    std::string logs = Logs(Int(t["id"]));
    if (early) {
      ++stopped;
      EXPECT_LT(Int(t["total_batches"]), kMaxLength);
      // The worker learned it from should_preempt() and stopped at a step boundary.
      EXPECT_THAT(logs, HasSubstr("asked to stop ("));
      EXPECT_THAT(logs, HasSubstr("rank 0 exited: exit code 0"));
    } else {
      EXPECT_EQ(Int(t["total_batches"]), kMaxLength);
      EXPECT_THAT(logs, HasSubstr(absl::StrCat("validation at batch ", kMaxLength)));
    }
  }
  // Asynchronous: which trials a rung stops depends on the order they reach it.
  EXPECT_GE(stopped, 1);
}

}  // namespace
}  // namespace det::testing
