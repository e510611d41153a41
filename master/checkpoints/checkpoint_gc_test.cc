#include "master/checkpoints/checkpoint_gc.h"

#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::master {
namespace {

using ::testing::UnorderedElementsAreArray;

v1::Checkpoint C(const std::string& uuid, int64_t trial, int64_t batches, std::optional<double> loss = {}) {
  v1::Checkpoint c;
  c.set_uuid(uuid);
  c.set_trial_id(trial);
  c.set_total_batches(batches);
  c.set_state(v1::STATE_COMPLETED);
  if (loss) (*c.mutable_metrics())["validation_loss"] = *loss;
  return c;
}

struct Case {
  std::string name;
  CheckpointGcPolicy policy;
  std::set<int64_t> ended;
  std::vector<std::string> deleted;
};

TEST(CheckpointsToDelete, KeepsWhatEachRuleAsksFor) {
  // Trial 1: losses 0.5 (b100), 0.3 (b200), 0.4 (b300), none (b400).
  // Trial 2: 0.2 (b100), 0.6 (b200).
  std::vector<v1::Checkpoint> all = {C("1a", 1, 100, 0.5), C("1b", 1, 200, 0.3), C("1c", 1, 300, 0.4),
                                     C("1d", 1, 400), C("2a", 2, 100, 0.2), C("2b", 2, 200, 0.6)};
  auto policy = [](int exp_best, int trial_best, int latest) {
    CheckpointGcPolicy p;
    p.save_experiment_best = exp_best;
    p.save_trial_best = trial_best;
    p.save_trial_latest = latest;
    p.metric = "validation_loss";
    return p;
  };
  std::vector<Case> cases = {
      {"defaults: trial best + trial latest", policy(0, 1, 1), {1, 2}, {"1a", "1c"}},
      {"only ended trials are collected", policy(0, 1, 1), {1}, {"1a", "1c"}},
      {"running trials keep everything", policy(0, 0, 0), {}, {}},
      {"keep nothing", policy(0, 0, 0), {1, 2}, {"1a", "1b", "1c", "1d", "2a", "2b"}},
      {"experiment best spans trials", policy(2, 0, 0), {1, 2}, {"1a", "1c", "1d", "2b"}},
      {"latest two", policy(0, 0, 2), {1, 2}, {"1a", "1b"}},
      {"best two per trial", policy(0, 2, 0), {1, 2}, {"1a", "1d"}},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(CheckpointsToDelete(all, c.ended, c.policy), UnorderedElementsAreArray(c.deleted)) << c.name;
  }
  CheckpointGcPolicy larger = policy(1, 0, 0);
  larger.smaller_is_better = false;
  EXPECT_THAT(CheckpointsToDelete(all, {1, 2}, larger),
              UnorderedElementsAreArray({"1a", "1b", "1c", "1d", "2a"}));
  // Already deleted ones are not deleted again.
  all[0].set_state(v1::STATE_DELETED);
  EXPECT_THAT(CheckpointsToDelete(all, {1, 2}, policy(0, 1, 1)), UnorderedElementsAreArray({"1c"}));
}

TEST(GcPolicyFromConfig, ReadsTheConfigWithDeterminedDefaults) {
  auto parsed = config::ParseExperimentConfig(
      "entrypoint: train\n"
      "searcher: {name: single, metric: accuracy, smaller_is_better: false,"
      " max_length: {batches: 1}}\n"
      "checkpoint_storage: {type: shared_fs, host_path: /ckpt, save_trial_latest: 3}\n",
      "exp.yaml", 1);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  CheckpointGcPolicy p = GcPolicyFromConfig(parsed->config);
  EXPECT_EQ(p.metric, "accuracy");
  EXPECT_FALSE(p.smaller_is_better);
  EXPECT_EQ(p.save_experiment_best, 0);
  EXPECT_EQ(p.save_trial_best, 1);
  EXPECT_EQ(p.save_trial_latest, 3);
  // Without checkpoint_storage: Determined's defaults (nothing is stored to collect).
  config::ExperimentConfig none;
  none.searcher.metric = "loss";
  p = GcPolicyFromConfig(none);
  EXPECT_EQ(p.metric, "loss");
  EXPECT_TRUE(p.smaller_is_better);
  EXPECT_EQ(p.save_experiment_best, 0);
  EXPECT_EQ(p.save_trial_best, 1);
  EXPECT_EQ(p.save_trial_latest, 1);
}

TEST(NotYetCollected, LeavesOutWhatALiveTaskDeletesAlready) {
  auto task = [](v1::State state, std::vector<std::string> uuids) {
    v1::CheckpointGcTask t;
    t.set_state(state);
    for (const auto& u : uuids) t.add_checkpoints()->set_uuid(u);
    return t;
  };
  v1::CheckpointGcTask queued = task(v1::STATE_QUEUED, {"a"});
  v1::CheckpointGcTask running = task(v1::STATE_RUNNING, {"b", "z"});
  v1::CheckpointGcTask failed = task(v1::STATE_ERROR, {"c"});
  v1::CheckpointGcTask done = task(v1::STATE_COMPLETED, {"d"});
  EXPECT_THAT(NotYetCollected({"a", "b", "c", "d", "e"}, {&queued, &running, &failed, &done}),
              ::testing::ElementsAre("c", "d", "e"));
  EXPECT_THAT(NotYetCollected({"e", "a"}, {}), ::testing::ElementsAre("e", "a"));
}

}  // namespace
}  // namespace det::master
