// Hyperparameter search with real processes: seeds and samples are reproducible, and
// adaptive_asha stops weak trials of the example model early.
#include <signal.h>

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

std::string RandomConfig(const std::string& seed_line) {
  return absl::StrCat(R"(name: random
entrypoint: det-fashion-mnist
hyperparameters:
  global_batch_size: 32
  learning_rate: {type: log, minval: -3, maxval: -1}
  hidden_size: {type: int, minval: 8, maxval: 64}
  optimizer:
    momentum: {type: double, minval: 0.5, maxval: 0.95}
    nesterov: {type: categorical, vals: [true, false]}
searcher:
  name: random
  metric: validation_loss
  max_length: {batches: 10}
  max_trials: 5
)", seed_line);
}

struct Trial {
  std::string hparams;
  int64_t seed;
  bool operator==(const Trial& o) const { return hparams == o.hparams && seed == o.seed; }
};

class Search : public ::testing::Test {
 protected:
  // Creates an experiment from `yaml`; its id.
  int64_t Create(const std::string& yaml) {
    std::string path = cluster_.WriteFile(absl::StrCat("exp", ++files_, ".yaml"), yaml);
    nlohmann::json r = cluster_.DetJson({"experiment", "create", path});
    EXPECT_TRUE(r.is_object()) << cluster_.LogTail("master");
    return r.is_object() ? Int(r["experiment"]["id"]) : -1;
  }
  std::vector<Trial> Trials(int64_t experiment) {
    nlohmann::json d = cluster_.DetJson({"experiment", "describe", absl::StrCat(experiment)});
    std::vector<Trial> out;
    if (!d.is_object()) return out;
    for (const auto& t : d["trials"]) out.push_back({t["hparams_json"], Int(t["seed"])});
    return out;
  }
  // `det experiment describe` of `experiment` once it is no longer active (within 120 s).
  nlohmann::json WaitUntilEnded(int64_t experiment) {
    nlohmann::json d;
    EXPECT_TRUE(WaitUntil(
        [&] {
          d = cluster_.DetJson({"experiment", "describe", absl::StrCat(experiment)});
          return d.is_object() && d["experiment"]["state"] != "STATE_ACTIVE";
        },
        absl::Seconds(120)))
        << cluster_.LogTail("master") << cluster_.LogTail("agent-a");
    return d;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  int files_ = 0;
};

// No agent: the trials only need to be created.
TEST_F(Search, RandomSearchWithAFixedSeedIsReproducible) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  const std::string fixed = "reproducibility: {experiment_seed: 4242}\n";
  std::vector<Trial> a = Trials(Create(RandomConfig(fixed)));
  std::vector<Trial> b = Trials(Create(RandomConfig(fixed)));
  std::vector<Trial> other = Trials(Create(RandomConfig("reproducibility: {experiment_seed: 4243}\n")));
  ASSERT_EQ(a.size(), 5u);
  EXPECT_EQ(a, b);
  ASSERT_EQ(other.size(), 5u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NE(a[i].hparams, other[i].hparams);
    EXPECT_NE(a[i].seed, other[i].seed);
    auto h = nlohmann::json::parse(a[i].hparams);
    EXPECT_EQ(h["global_batch_size"], 32);
    EXPECT_GE(h["learning_rate"].get<double>(), 0.001);
    EXPECT_LT(h["learning_rate"].get<double>(), 0.1);
    EXPECT_TRUE(h["optimizer"]["nesterov"].is_boolean());
  }

  // Without a seed the master picks one and stores it: the stored config recreates the
  // same trials.
  int64_t chosen = Create(RandomConfig(""));
  CommandResult config = cluster_.Det({"experiment", "config", absl::StrCat(chosen)});
  ASSERT_TRUE(config.exit.ok()) << config.err;
  EXPECT_THAT(config.out, HasSubstr("experiment_seed: "));
  EXPECT_EQ(Trials(Create(config.out)), Trials(chosen));
}

constexpr int kMaxLength = 800;

TEST_F(Search, AdaptiveAshaStopsWeakTrialsEarly) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  // One slot: the trials run one after the other. Rungs at 200 and 800 batches; at the
  // first rung a trial continues while it ranks in the best max(1, n/4) of the n trials
  // that reached it. With seed 31 the trials draw (hidden_size, learning_rate) = (16, 0.02),
  // (32, 0.0001), (16, 0.0001), (32, 0.02) (docs/configuration.md, "Seeds"): trial 2 barely
  // learns at 0.0001 and ranks behind trial 1, which goes on to 800 batches.
  int64_t id = Create(absl::StrCat(R"(name: asha
entrypoint: det-fashion-mnist
hyperparameters:
  global_batch_size: 32
  hidden_size: {type: categorical, vals: [16, 32]}
  learning_rate: {type: categorical, vals: [0.02, 0.0001]}
records_per_epoch: 60000
searcher:
  name: adaptive_asha
  metric: validation_loss
  max_length: {batches: )", kMaxLength, R"(}
  max_trials: 4
  max_rungs: 2
  divisor: 4
  mode: aggressive
reproducibility: {experiment_seed: 31}
min_validation_period: {batches: 200}
scheduling_unit: 200
data: {dir: /usr/share/datasets/fashion-mnist}
)"));
  ASSERT_EQ(id, 1);
  nlohmann::json d = WaitUntilEnded(1);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << d.dump(2);
  ASSERT_EQ(d["trials"].size(), 4u);
  const auto& trials = d["trials"];
  EXPECT_EQ(nlohmann::json::parse(trials[0]["hparams_json"].get<std::string>())["learning_rate"], 0.02);
  EXPECT_EQ(nlohmann::json::parse(trials[1]["hparams_json"].get<std::string>())["learning_rate"], 0.0001);
  int stopped = 0;
  for (const auto& t : trials) {
    SCOPED_TRACE(t.dump());
    EXPECT_EQ(t["state"], "STATE_COMPLETED");
    const bool early = t.contains("search") && t["search"].value("stopped_early", false);
    stopped += early;
    if (early) {
      EXPECT_LT(Int(t["total_batches"]), kMaxLength);
      EXPECT_THAT(t["search"]["stop_reason"].get<std::string>(),
                  HasSubstr("stopped by adaptive_asha at rung 0 (200 of 800 batches)"));
    } else {
      EXPECT_EQ(Int(t["total_batches"]), kMaxLength);
    }
    // The worker was told its trial seed.
    CommandResult logs = cluster_.Det({"trial", "logs", absl::StrCat(Int(t["id"]))});
    EXPECT_THAT(logs.out, HasSubstr(absl::StrCat("seed ", Int(t["seed"]))));
  }
  EXPECT_FALSE(trials[0]["search"].value("stopped_early", false));
  EXPECT_TRUE(trials[1]["search"].value("stopped_early", false));
  EXPECT_GE(stopped, 1);
  CommandResult logs = cluster_.Det({"trial", "logs", absl::StrCat(Int(trials[1]["id"]))});
  EXPECT_THAT(logs.out, HasSubstr("stopped early by the searcher"));
}

TEST_F(Search, RestartedMasterGoesOnWithTheSearch) {
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  ASSERT_TRUE(cluster_.StartAgent("agent-a").ok()) << cluster_.LogTail("agent-a");
  // One trial at a time: the searcher creates the next when one ends.
  auto config = [](int concurrent) {
    return absl::StrCat(R"(name: restart
entrypoint: det-fashion-mnist
hyperparameters:
  global_batch_size: 32
  hidden_size: 16
  learning_rate: {type: log, minval: -2, maxval: -1}
records_per_epoch: 60000
searcher:
  name: random
  metric: validation_loss
  max_length: {batches: 200}
  max_trials: 3
  max_concurrent_trials: )", concurrent, R"(
reproducibility: {experiment_seed: 7}
data: {dir: /usr/share/datasets/fashion-mnist}
)");
  };
  ASSERT_EQ(Create(config(1)), 1);
  EXPECT_EQ(Trials(1).size(), 1u);
  ASSERT_TRUE(WaitUntil([&] { return Trials(1).size() >= 2; }, absl::Seconds(60)))
      << cluster_.LogTail("master");
  cluster_.StopMaster(SIGKILL);
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  nlohmann::json d = WaitUntilEnded(1);
  ASSERT_EQ(d["experiment"]["state"], "STATE_COMPLETED") << d.dump(2);
  for (const auto& t : d["trials"]) EXPECT_EQ(t["state"], "STATE_COMPLETED");
  // The rebuilt searcher went on drawing where it had stopped: the trials are those the
  // same search creates all at once.
  int64_t all_at_once = Create(config(0));
  std::vector<Trial> expected = Trials(all_at_once);
  cluster_.Det({"experiment", "kill", absl::StrCat(all_at_once)});
  ASSERT_EQ(expected.size(), 3u);
  EXPECT_EQ(Trials(1), expected);
}

}  // namespace
}  // namespace det::testing
