// Elastic determinism end to end: run A trains the example uninterrupted on 4 ranks; run B
// starts on 4 ranks, loses a worker to SIGKILL mid-epoch (restart from its checkpoint), is
// paused and resized to 2 ranks, paused again and resized back to 4, and finishes. With
// reproducibility.deterministic every per-step training loss and the final parameters'
// hash of B equal A's bit for bit, and so do a 1-rank run's; in default mode the losses
// match within a tolerance and the samples of every step are the same.
#include <signal.h>

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

// Every run's length. Run B's disruptions end by about batch 300 (a checkpoint at 50, the
// kill, 100 batches, a pause, 100 batches on 2 ranks, a pause): 600 leaves it half its
// length to finish on 4 ranks again, and every run's steps to compare.
constexpr int64_t kSteps = 600;

struct Step {
  double loss = 0;
  double checksum = 0;
};

struct Result {
  std::map<int64_t, Step> steps;  // total_batches -> training metrics
  double hash_hi = -1, hash_lo = -1;
};

class Elastic : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("a1", 4).ok()) << cluster_.LogTail("a1");
  }

  // Creates an experiment; returns its id (= its trial's id: one trial each).
  int Create(int slots, bool deterministic) {
    ++experiments_;
    ExampleExperiment exp;
    exp.name = "elastic";
    exp.more_hyperparameters = {{"input_noise", "0.05"}};
    exp.batches = kSteps;
    exp.checkpoint_period = 50;
    exp.scheduling_unit = 5;
    exp.max_restarts = 1;
    exp.slots_per_trial = slots;
    exp.experiment_seed = 7;
    exp.deterministic = deterministic;
    exp.checkpoint_host_path = cluster_.dir() + "/checkpoints";
    exp.save_trial_latest = 2;
    exp.more_data = {{"num_canonical_nodes", "4"}};
    std::string config = cluster_.WriteFile(absl::StrCat("exp", experiments_, ".yaml"), exp.Yaml());
    CommandResult r = cluster_.Det({"experiment", "create", config});
    EXPECT_TRUE(r.exit.ok()) << r.err;
    return experiments_;
  }

  nlohmann::json Trial(int id) { return cluster_.DetJson({"trial", "describe", absl::StrCat(id)}); }

  bool WaitState(int id, const std::string& state, absl::Duration timeout = absl::Seconds(120)) {
    return WaitUntil([&] {
      nlohmann::json t = Trial(id);
      return t.is_object() && t["trial"]["state"] == state;
    }, timeout);
  }

  void Pause(int id) {
    ASSERT_TRUE(cluster_.Det({"experiment", "pause", absl::StrCat(id)}).exit.ok());
    ASSERT_TRUE(WaitState(id, "STATE_PAUSED")) << cluster_.LogTail("master");
  }

  void ResizeAndActivate(int id, int slots) {
    CommandResult set = cluster_.Det({"experiment", "set", "slots", absl::StrCat(id), absl::StrCat(slots)});
    ASSERT_TRUE(set.exit.ok()) << set.err;
    ASSERT_TRUE(cluster_.Det({"experiment", "activate", absl::StrCat(id)}).exit.ok());
  }

  // Waits for the trial's batches to pass `batches` (from its metrics).
  bool WaitBatches(int id, int64_t batches) {
    return WaitUntil([&] {
      nlohmann::json t = Trial(id);
      return t.is_object() && Int(t["trial"]["total_batches"]) >= batches;
    }, absl::Seconds(120));
  }

  Result Collect(int id) {
    Result r;
    EXPECT_TRUE(WaitState(id, "STATE_COMPLETED")) << cluster_.LogTail("master") << cluster_.LogTail("a1");
    std::string out = RunCommand({"sqlite3", "-separator", "\t", cluster_.db_path(),
                                  absl::StrCat("SELECT total_batches, grp, vals FROM metrics WHERE trial_id = ", id,
                                               " AND grp IN ('training', 'validation') ORDER BY id")})
                          .out;
    for (absl::string_view line : absl::StrSplit(out, '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, absl::MaxSplits('\t', 2));
      if (f.size() != 3) continue;
      int64_t batches = std::stoll(f[0]);
      nlohmann::json v = nlohmann::json::parse(f[2], nullptr, false);
      if (!v.is_object()) continue;
      if (f[1] == "training") {
        EXPECT_EQ(r.steps.count(batches), 0u) << "two training rows at batch " << batches;
        r.steps[batches] = {v.value("loss", -1.0), v.value("diag/sample_checksum", -1.0)};
      } else if (v.contains("diag/params_hash_hi")) {
        r.hash_hi = v["diag/params_hash_hi"].get<double>();
        r.hash_lo = v["diag/params_hash_lo"].get<double>();
      }
    }
    EXPECT_EQ(r.steps.size(), static_cast<size_t>(kSteps / 5)) << out;
    EXPECT_GE(r.hash_hi, 0);
    return r;
  }

  // Run B: 4 ranks, SIGKILL of rank 2, pause + resize to 2, pause + resize to 4.
  Result Disrupted(bool deterministic) {
    int id = Create(4, deterministic);
    std::map<int, int> pids;
    EXPECT_TRUE(WaitUntil([&] {
      nlohmann::json t = Trial(id);
      if (!t.is_object() || t["trial"]["latest_checkpoint"].get<std::string>().empty()) return false;
      pids = RankPids(cluster_.Det({"trial", "logs", absl::StrCat(id)}).out);
      return pids.size() == 4;
    }, absl::Seconds(60))) << cluster_.LogTail("master");
    EXPECT_EQ(kill(pids[2], SIGKILL), 0);
    EXPECT_TRUE(WaitUntil([&] {
      nlohmann::json t = Trial(id);
      return t.is_object() && t["trial"]["restarts"] == 1 && t["trial"]["state"] == "STATE_RUNNING";
    }, absl::Seconds(60))) << cluster_.LogTail("master");
    int64_t at = Int(Trial(id)["trial"]["total_batches"]);
    EXPECT_TRUE(WaitBatches(id, at + 100));
    Pause(id);
    int64_t paused = Int(Trial(id)["trial"]["total_batches"]);
    EXPECT_LT(paused, kSteps) << "the trial finished before it could be paused";
    ResizeAndActivate(id, 2);
    EXPECT_TRUE(WaitBatches(id, paused + 100));
    Pause(id);
    EXPECT_LT(Int(Trial(id)["trial"]["total_batches"]), kSteps);
    ResizeAndActivate(id, 4);
    Result r = Collect(id);
    nlohmann::json t = Trial(id);
    EXPECT_EQ(t["trial"]["restarts"], 1);
    EXPECT_EQ(t["trial"]["allocation"]["ranks"].size(), 4u);
    return r;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  int experiments_ = 0;
};

TEST_F(Elastic, DeterministicModeIsBitwiseIdenticalAcrossRankCountsKillsAndResizes) {
  int a_id = Create(4, true);
  Result a = Collect(a_id);
  int one_id = Create(1, true);
  Result one = Collect(one_id);
  Result b = Disrupted(true);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  ASSERT_EQ(a.steps.size(), one.steps.size());
  for (const auto& [batch, s] : a.steps) {
    // Bitwise: == on doubles that went through the same JSON encoding.
    EXPECT_EQ(s.loss, b.steps[batch].loss) << "run B, batch " << batch;
    EXPECT_EQ(s.loss, one.steps[batch].loss) << "1 rank, batch " << batch;
    EXPECT_EQ(s.checksum, b.steps[batch].checksum) << batch;
    EXPECT_EQ(s.checksum, one.steps[batch].checksum) << batch;
  }
  EXPECT_EQ(a.hash_hi, b.hash_hi);
  EXPECT_EQ(a.hash_lo, b.hash_lo);
  EXPECT_EQ(a.hash_hi, one.hash_hi);
  EXPECT_EQ(a.hash_lo, one.hash_lo);
}

TEST_F(Elastic, DefaultModeMatchesWithinToleranceOnTheSameSamples) {
  Result a = Collect(Create(4, false));
  Result b = Disrupted(false);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (const auto& [batch, s] : a.steps) {
    EXPECT_EQ(s.checksum, b.steps[batch].checksum) << "samples differ at batch " << batch;
    // Float sums in another order: the curves drift apart slowly, never by much.
    EXPECT_NEAR(s.loss, b.steps[batch].loss, 0.05 + 0.05 * std::abs(s.loss)) << batch;
  }
}

}  // namespace
}  // namespace det::testing
