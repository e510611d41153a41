#include "master/searcher/searcher.h"

#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/config/experiment_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/searcher/sampling.h"
#include "nlohmann/json.hpp"

namespace det::master::searcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

config::ExperimentConfig Parse(const std::string& searcher, const std::string& hyperparameters,
                               int seed = 1234) {
  std::string yaml = "entrypoint: x\nreproducibility: {experiment_seed: " + std::to_string(seed) +
                     "}\nsearcher: " + searcher + "\nhyperparameters:\n" + hyperparameters;
  auto parsed = config::ParseExperimentConfig(yaml, "exp.yaml", 1);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? parsed->config : config::ExperimentConfig{};
}

std::unique_ptr<Searcher> New(const config::ExperimentConfig& c, std::vector<TrialRecord> existing = {}) {
  auto s = NewSearcher(c, std::move(existing));
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

constexpr char kSpace[] =
    "  lr: {type: log, minval: -4, maxval: -1}\n"
    "  hidden: {type: int, minval: 8, maxval: 64}\n"
    "  act: {type: categorical, vals: [relu, tanh]}\n";

TEST(Single, OneTrialThenDone) {
  auto s = New(Parse("{name: single, metric: loss, max_length: {batches: 10}}", "  a: {type: int, minval: 1, maxval: 9}\n"));
  auto trials = s->NextTrials();
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].target_batches, 10);
  EXPECT_EQ(s->PlannedTrials(), 1);
  EXPECT_TRUE(s->NextTrials().empty());
  EXPECT_FALSE(s->Done());
  EXPECT_FALSE(s->OnValidation(0, 10, 0.5).stop);
  s->OnTrialEnded(0);
  EXPECT_TRUE(s->NextTrials().empty());
  EXPECT_TRUE(s->Done());
}

TEST(Random, FixedSeedIsReproducible) {
  const std::string searcher = "{name: random, metric: loss, max_length: {batches: 10}, max_trials: 6}";
  auto a = New(Parse(searcher, kSpace, 77));
  auto b = New(Parse(searcher, kSpace, 77));
  auto other = New(Parse(searcher, kSpace, 78));
  auto ta = a->NextTrials(), tb = b->NextTrials(), tc = other->NextTrials();
  ASSERT_EQ(ta.size(), 6u);
  std::set<uint32_t> seeds;
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_EQ(ta[i].index, static_cast<int>(i));
    EXPECT_EQ(ta[i].hparams_json, tb[i].hparams_json);
    EXPECT_EQ(ta[i].seed, tb[i].seed);
    EXPECT_NE(ta[i].hparams_json, tc[i].hparams_json);
    EXPECT_LE(ta[i].seed, 2147483647u);
    seeds.insert(ta[i].seed);
    auto j = nlohmann::json::parse(ta[i].hparams_json);
    EXPECT_GE(j["hidden"].get<int>(), 8);
    EXPECT_LE(j["hidden"].get<int>(), 64);
  }
  EXPECT_EQ(seeds.size(), 6u);
  // The documented order: per trial, its samples (names sorted) and then its seed.
  Generator gen(77);
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_EQ(ta[i].hparams_json, SampleHyperparameters(Parse(searcher, kSpace, 77).hyperparameters, gen));
    EXPECT_EQ(ta[i].seed, DrawTrialSeed(gen));
  }
}

TEST(Random, ConcurrencyAndDone) {
  auto s = New(Parse("{name: random, metric: loss, max_length: {batches: 10}, max_trials: 5, max_concurrent_trials: 2}", kSpace));
  EXPECT_EQ(s->PlannedTrials(), 5);
  EXPECT_EQ(s->NextTrials().size(), 2u);
  EXPECT_TRUE(s->NextTrials().empty());
  s->OnTrialEnded(1);
  auto next = s->NextTrials();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].index, 2);
  for (int i : {0, 2}) s->OnTrialEnded(i);
  EXPECT_EQ(s->NextTrials().size(), 2u);
  EXPECT_FALSE(s->Done());
  for (int i : {3, 4}) s->OnTrialEnded(i);
  EXPECT_TRUE(s->NextTrials().empty());
  EXPECT_TRUE(s->Done());
}

TEST(Random, RestoredSearcherContinuesTheSameSequence) {
  config::ExperimentConfig c = Parse("{name: random, metric: loss, max_length: {batches: 10}, max_trials: 6, max_concurrent_trials: 2}", kSpace);
  auto live = New(c);
  live->NextTrials();
  live->OnTrialEnded(0);
  live->NextTrials();  // Trial 2.
  // A master restart: the records of trials 0..2, trial 0 ended.
  std::vector<TrialRecord> records(3);
  records[0].ended = true;
  auto restored = New(c, records);
  EXPECT_TRUE(restored->NextTrials().empty());  // 1 and 2 still run.
  live->OnTrialEnded(1);
  restored->OnTrialEnded(1);
  auto a = live->NextTrials(), b = restored->NextTrials();
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].index, 3);
  EXPECT_EQ(b[0].index, 3);
  EXPECT_EQ(a[0].hparams_json, b[0].hparams_json);
  EXPECT_EQ(a[0].seed, b[0].seed);
}

TEST(Grid, CreatesEveryPointOnce) {
  auto s = New(Parse("{name: grid, metric: loss, max_length: {batches: 4}, max_concurrent_trials: 0}",
                     "  a: {type: int, minval: 1, maxval: 5, count: 3}\n  b: {type: categorical, vals: [x, y]}\n  c: {type: log, minval: -2, maxval: -1, count: 2}\n"));
  EXPECT_EQ(s->PlannedTrials(), 12);
  auto trials = s->NextTrials();
  ASSERT_EQ(trials.size(), 12u);
  std::set<std::string> points;
  for (const auto& t : trials) points.insert(t.hparams_json);
  EXPECT_EQ(points.size(), 12u);
  EXPECT_EQ(trials[0].hparams_json, R"({"a":1,"b":"x","c":0.01})");
  EXPECT_EQ(trials[11].hparams_json, R"({"a":5,"b":"y","c":0.1})");
  // Seeds still come from the generator, one per trial.
  EXPECT_NE(trials[0].seed, trials[1].seed);
}

struct BracketCase {
  std::string searcher;
  std::vector<std::vector<int64_t>> rungs;
  std::vector<int> max_trials;
  std::vector<int> max_concurrent;
};

TEST(AdaptiveAsha, Brackets) {
  const std::vector<BracketCase> cases = {
      {"{max_trials: 10, max_rungs: 3, mode: aggressive}", {{4, 16, 64}}, {10}, {16}},
      {"{max_trials: 10, max_rungs: 3, mode: standard}", {{4, 16, 64}, {16, 64}}, {7, 3}, {8, 8}},
      {"{max_trials: 10, max_rungs: 3, mode: conservative}", {{4, 16, 64}, {16, 64}, {64}}, {7, 2, 1}, {6, 5, 5}},
      // More brackets than trials: one bracket per trial.
      {"{max_trials: 2, max_rungs: 4, mode: conservative}", {{1, 4, 16, 64}, {4, 16, 64}}, {1, 1}, {8, 8}},
      // Rungs shorter than a batch collapse.
      {"{max_trials: 4, max_rungs: 5, mode: aggressive, max_length: {batches: 8}}", {{1, 2, 8}}, {4}, {16}},
      {"{max_trials: 9, max_rungs: 2, divisor: 3, mode: aggressive, max_concurrent_trials: 0}", {{21, 64}}, {9}, {0}},
      {"{max_trials: 9, max_rungs: 3, mode: conservative, max_concurrent_trials: 1}", {{4, 16, 64}, {16, 64}, {64}}, {6, 2, 1}, {1, 1, 1}},
  };
  for (const auto& tc : cases) {
    SCOPED_TRACE(tc.searcher);
    std::string yaml = tc.searcher;
    yaml.insert(1, "name: adaptive_asha, metric: loss, ");
    if (yaml.find("max_length") == std::string::npos) yaml.insert(1, "max_length: {batches: 64}, ");
    config::ExperimentConfig c = Parse(yaml, "  a: 1\n");
    auto brackets = AshaBrackets(c.searcher, c.searcher.max_length->value);
    std::vector<std::vector<int64_t>> rungs;
    std::vector<int> trials, concurrent;
    for (const auto& b : brackets) {
      rungs.push_back(b.rungs);
      trials.push_back(b.max_trials);
      concurrent.push_back(b.max_concurrent_trials);
    }
    EXPECT_EQ(rungs, tc.rungs);
    EXPECT_EQ(trials, tc.max_trials);
    EXPECT_EQ(concurrent, tc.max_concurrent);
  }
}

struct Event {
  int trial;
  int64_t batches;
  double metric;
  bool stop;
};

// Rungs at 2, 4 and 8 batches; divisor 2: of the n trials that reached a rung, the best
// max(1, floor(n/2)) continue.
constexpr char kAsha[] =
    "{name: adaptive_asha, metric: loss, max_length: {batches: 8}, max_trials: 6, "
    "max_rungs: 3, divisor: 2, mode: aggressive, max_concurrent_trials: 6";

TEST(AdaptiveAsha, StopsAndPromotions) {
  const std::vector<Event> events = {
      {0, 2, 0.50, false},  // Rung 0: first, alone: continues.
      {1, 2, 0.70, true},   // 2 reached it, best 1 continues; 0.70 ranks 2nd.
      {2, 2, 0.30, false},  // Best of 3.
      {3, 2, 0.40, false},  // 4 reached it: best 2 continue; 0.40 ranks 2nd.
      {4, 2, 0.40, true},   // Ties rank after earlier equals: 3rd of 5 (best 2).
      {0, 4, 0.45, false},  // Rung 1: first.
      {0, 6, 0.10, false},  // Between rungs: no decision.
      {2, 4, 0.50, true},   // 2nd of 2 at rung 1.
      {1, 4, 0.01, false},  // Already stopped: ignored.
      {0, 8, 0.90, false},  // The top rung is max_length: never stopped there.
      {5, 8, 0.20, false},  // Passes rung 0 (0.20: best of 6, 3 continue) and rung 1 (best of 3, 1 continues) at once.
      {3, 4, 0.48, true},   // Rung 1: 3rd of 4 (0.20, 0.45, 0.48, 0.50): the best 2 continue.
  };
  auto s = New(Parse(std::string(kAsha) + "}", "  a: 1\n"));
  ASSERT_EQ(s->NextTrials().size(), 6u);
  for (const auto& e : events) {
    SCOPED_TRACE(testing::Message() << "trial " << e.trial << " at " << e.batches);
    Decision d = s->OnValidation(e.trial, e.batches, e.metric);
    EXPECT_EQ(d.stop, e.stop) << d.reason;
    if (d.stop) EXPECT_THAT(d.reason, HasSubstr("stopped by adaptive_asha at rung"));
  }
  EXPECT_THAT(s->Record(5).rung_metrics, ElementsAre(0.20, 0.20));
  EXPECT_TRUE(s->Record(1).stopped);
  EXPECT_FALSE(s->Record(0).stopped);
}

TEST(AdaptiveAsha, LargerIsBetter) {
  auto s = New(Parse(std::string(kAsha) + ", smaller_is_better: false}", "  a: 1\n"));
  s->NextTrials();
  EXPECT_FALSE(s->OnValidation(0, 2, 0.5).stop);
  EXPECT_FALSE(s->OnValidation(1, 2, 0.9).stop);  // Better than 0.5: continues.
  EXPECT_TRUE(s->OnValidation(2, 2, 0.1).stop);
  Decision d = s->OnValidation(3, 2, 0.2);
  EXPECT_TRUE(d.stop);
  EXPECT_THAT(d.reason, HasSubstr("loss 0.2 ranks 3 of the 4 trials"));
}

TEST(AdaptiveAsha, StoppedTrialsMakeRoomUntilMaxTrials) {
  auto s = New(Parse("{name: adaptive_asha, metric: loss, max_length: {batches: 8}, max_trials: 4, max_rungs: 2, divisor: 2, mode: aggressive, max_concurrent_trials: 2}", "  a: 1\n"));
  EXPECT_EQ(s->NextTrials().size(), 2u);
  EXPECT_FALSE(s->OnValidation(0, 4, 1.0).stop);
  EXPECT_TRUE(s->OnValidation(1, 4, 2.0).stop);
  s->OnTrialEnded(1);
  auto next = s->NextTrials();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].index, 2);
  s->OnTrialEnded(0);
  s->OnTrialEnded(2);
  EXPECT_EQ(s->NextTrials().size(), 1u);
  EXPECT_FALSE(s->Done());
  s->OnTrialEnded(3);
  EXPECT_TRUE(s->NextTrials().empty());
  EXPECT_TRUE(s->Done());
}

TEST(AdaptiveAsha, RestoredSearcherDecidesTheSame) {
  config::ExperimentConfig c = Parse(std::string(kAsha) + "}", "  a: 1\n");
  auto live = New(c);
  live->NextTrials();
  live->OnValidation(0, 2, 0.5);
  live->OnValidation(1, 2, 0.7);
  live->OnValidation(2, 4, 0.3);
  std::vector<TrialRecord> records;
  for (int i = 0; i < live->NumTrials(); ++i) records.push_back(live->Record(i));
  auto restored = New(c, records);
  for (const auto& [trial, metric] : std::vector<std::pair<int, double>>{{3, 0.4}, {4, 0.6}, {0, 0.2}}) {
    Decision a = live->OnValidation(trial, 4, metric), b = restored->OnValidation(trial, 4, metric);
    EXPECT_EQ(a.stop, b.stop);
    EXPECT_EQ(a.reason, b.reason);
  }
}

// det.InvalidHP (Determined 0.38's TrialExitedEarly with InvalidHP): per searcher, whether
// the invalid trial is replaced.
struct InvalidCase {
  std::string name;
  std::string searcher;
  std::string hyperparameters;
  // Trials created at the start (all of them run at once).
  size_t initial;
  // A replacement trial is created (index `initial`, in the invalid trial's bracket).
  bool replaced;
};

TEST(InvalidHp, ReplacedByRandomAndAshaNotByGridOrSingle) {
  const std::vector<InvalidCase> cases = {
      {"random", "{name: random, metric: loss, max_length: {batches: 10}, max_trials: 3}", kSpace, 3,
       true},
      {"adaptive_asha", std::string(kAsha) + "}", "  a: {type: int, minval: 1, maxval: 9}\n", 6, true},
      {"grid", "{name: grid, metric: loss, max_length: {batches: 4}}",
       "  a: {type: int, minval: 1, maxval: 3, count: 3}\n", 3, false},
      {"single", "{name: single, metric: loss, max_length: {batches: 10}}",
       "  a: {type: int, minval: 1, maxval: 9}\n", 1, false},
  };
  for (const InvalidCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    auto s = New(Parse(tc.searcher, tc.hyperparameters));
    const int planned = s->PlannedTrials();
    auto first = s->NextTrials();
    ASSERT_EQ(first.size(), tc.initial);
    s->OnTrialInvalid(0);
    EXPECT_TRUE(s->Record(0).invalid);
    EXPECT_TRUE(s->Record(0).ended);
    auto next = s->NextTrials();
    EXPECT_EQ(s->PlannedTrials(), planned);  // Invalid trials are not planned ones.
    if (tc.replaced) {
      ASSERT_EQ(next.size(), 1u);
      EXPECT_EQ(next[0].index, static_cast<int>(tc.initial));
      EXPECT_EQ(next[0].bracket, first[0].bracket);
      EXPECT_NE(next[0].seed, first[0].seed);  // A new draw, not a retry.
    } else {
      EXPECT_TRUE(next.empty());
    }
    for (int i = 1; i < s->NumTrials(); ++i) {
      EXPECT_FALSE(s->Done());
      s->OnTrialEnded(i);
    }
    EXPECT_TRUE(s->NextTrials().empty());
    EXPECT_TRUE(s->Done());
    // A restarted master rebuilds the same search from the records.
    std::vector<TrialRecord> records;
    for (int i = 0; i < s->NumTrials(); ++i) records.push_back(s->Record(i));
    auto restored = New(Parse(tc.searcher, tc.hyperparameters), records);
    ASSERT_NE(restored, nullptr);
    EXPECT_TRUE(restored->NextTrials().empty());
    EXPECT_TRUE(restored->Done());
  }
}

TEST(InvalidHp, EndedTrialsAndRepeatsAreIgnored) {
  auto s = New(Parse("{name: random, metric: loss, max_length: {batches: 10}, max_trials: 2}", kSpace));
  s->NextTrials();
  s->OnTrialEnded(0);
  s->OnTrialInvalid(0);  // Already ended: not invalid, nothing to replace.
  EXPECT_FALSE(s->Record(0).invalid);
  s->OnTrialInvalid(1);
  s->OnTrialInvalid(1);
  s->OnTrialInvalid(7);  // Unknown.
  EXPECT_EQ(s->NextTrials().size(), 1u);
}

TEST(InvalidHp, AshaDropsTheTrialFromItsRungs) {
  auto s = New(Parse(std::string(kAsha) + "}", "  a: 1\n"));
  ASSERT_EQ(s->NextTrials().size(), 6u);
  EXPECT_FALSE(s->OnValidation(0, 4, 0.10).stop);  // Rungs 0 and 1: best.
  s->OnTrialInvalid(0);
  // Without trial 0, trial 1 is alone at rung 0 and continues, as it would have were 0 never
  // there; with 0 it would rank 2nd of 2 and stop.
  EXPECT_FALSE(s->OnValidation(1, 2, 0.50).stop);
  EXPECT_TRUE(s->OnValidation(2, 2, 0.60).stop);  // 2nd of 2.
  auto next = s->NextTrials();
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].index, 6);
  // Rebuilt from the records, the rungs hold the same metrics.
  std::vector<TrialRecord> records;
  for (int i = 0; i < s->NumTrials(); ++i) records.push_back(s->Record(i));
  auto restored = New(Parse(std::string(kAsha) + "}", "  a: 1\n"), records);
  for (auto* search : {s.get(), restored.get()}) {
    Decision d = search->OnValidation(3, 2, 0.55);  // 2nd of 3 (0.50, 0.55, 0.60): best 1 goes on.
    EXPECT_TRUE(d.stop);
    EXPECT_THAT(d.reason, HasSubstr("ranks 2 of the 3 trials"));
  }
}

// Determined 0.38's forms (docs/configuration.md).

TEST(Determined038, NoMaxLengthMeansNoTarget) {
  for (const std::string& searcher : {"{name: single, metric: loss}",
                                      "{name: random, metric: loss, max_trials: 3}"}) {
    SCOPED_TRACE(searcher);
    auto s = New(Parse(searcher, "  a: {type: int, minval: 1, maxval: 9}\n"));
    auto trials = s->NextTrials();
    ASSERT_FALSE(trials.empty());
    for (const auto& t : trials) EXPECT_EQ(t.target_batches, 0);  // The script decides.
    EXPECT_FALSE(s->OnValidation(0, 1000000, 0.5).stop);
  }
  auto grid = New(Parse("{name: grid, metric: loss}", "  a: {type: categorical, vals: [1, 2]}\n"));
  auto trials = grid->NextTrials();
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[1].target_batches, 0);
}

TEST(Determined038, LengthForms) {
  struct Case {
    std::string searcher;
    std::string rest;
    int64_t target;
  };
  const std::vector<Case> cases = {
      {"{name: single, metric: loss, max_length: 100}", "  a: 1\n", 100},
      {"{name: single, metric: loss, max_length: {records: 1000}}", "  global_batch_size: 64\n", 16},
      {"{name: single, metric: loss, max_length: {records: 1024}}", "  global_batch_size: 64\n", 16},
      {"{name: adaptive_asha, metric: loss, max_trials: 2, time_metric: batches, max_time: 640}",
       "  a: 1\n", 640},
      {"{name: adaptive_asha, metric: loss, max_trials: 2, time_metric: epochs, max_time: 3}",
       "  global_batch_size: 64\nrecords_per_epoch: 6400\n", 300},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.searcher);
    auto s = New(Parse(c.searcher, c.rest));
    for (const auto& t : s->NextTrials()) EXPECT_EQ(t.target_batches, c.target);
  }
}

// adaptive_asha's 0.38 form is the same search as the max_length form of the same length.
TEST(Determined038, TimeMetricSearchesAsMaxLength) {
  const std::string common = "{name: adaptive_asha, metric: loss, max_trials: 6, max_rungs: 3, "
                             "divisor: 2, mode: standard, ";
  config::ExperimentConfig timed = Parse(common + "time_metric: epochs, max_time: 1}",
                                         "  global_batch_size: 8\nrecords_per_epoch: 64\n");
  config::ExperimentConfig legacy = Parse(common + "max_length: {epochs: 1}}",
                                          "  global_batch_size: 8\nrecords_per_epoch: 64\n");
  auto a = New(timed), b = New(legacy);
  auto ta = a->NextTrials(), tb = b->NextTrials();
  ASSERT_EQ(ta.size(), tb.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    EXPECT_EQ(ta[i].bracket, tb[i].bracket);
    EXPECT_EQ(ta[i].target_batches, 8);
    EXPECT_EQ(tb[i].target_batches, 8);
  }
  for (const auto& [trial, batches, metric] :
       std::vector<std::tuple<int, int64_t, double>>{{0, 2, 0.5}, {1, 2, 0.7}, {2, 4, 0.3}, {3, 4, 0.9}}) {
    Decision da = a->OnValidation(trial, batches, metric), db = b->OnValidation(trial, batches, metric);
    EXPECT_EQ(da.stop, db.stop);
    EXPECT_EQ(da.reason, db.reason);
  }
}

// A searched global_batch_size with lengths in epochs: each trial trains max_length in its
// own batches, and its rungs are the same fractions of that length.
TEST(Determined038, SearchedGlobalBatchSizeGivesEachTrialItsLength) {
  const std::string space =
      "  global_batch_size: {type: categorical, vals: [32, 64]}\nrecords_per_epoch: 6400\n";
  // Rungs for the longest trial (global batch 32, 200 batches): 12, 50, 200.
  config::ExperimentConfig c = Parse(
      "{name: adaptive_asha, metric: loss, max_trials: 8, max_rungs: 3, mode: aggressive, "
      "max_length: {epochs: 1}, max_concurrent_trials: 8}", space, 5);
  auto s = New(c);
  auto trials = s->NextTrials();
  ASSERT_EQ(trials.size(), 8u);
  int small = -1, large = -1;
  for (const auto& t : trials) {
    const int64_t batch = nlohmann::json::parse(t.hparams_json)["global_batch_size"].get<int64_t>();
    EXPECT_EQ(t.target_batches, 6400 / batch) << t.hparams_json;
    (batch == 32 ? small : large) = t.index;
  }
  ASSERT_GE(small, 0) << "no trial drew a global batch of 32; change the seed";
  ASSERT_GE(large, 0) << "no trial drew a global batch of 64; change the seed";
  // Global batch 64: 100 batches, rungs at 6 and 25.
  EXPECT_FALSE(s->OnValidation(large, 5, 0.5).stop);
  EXPECT_TRUE(s->Record(large).rung_metrics.empty());
  EXPECT_FALSE(s->OnValidation(large, 6, 0.5).stop);
  EXPECT_THAT(s->Record(large).rung_metrics, ElementsAre(0.5));
  // Global batch 32: 200 batches, rungs at 12 and 50.
  EXPECT_FALSE(s->OnValidation(small, 11, 0.4).stop);
  EXPECT_TRUE(s->Record(small).rung_metrics.empty());
  EXPECT_FALSE(s->OnValidation(small, 12, 0.4).stop);
  EXPECT_THAT(s->Record(small).rung_metrics, ElementsAre(0.4));
  // The next at rung 1 of a large-batch trial: after 25 of its 100 batches.
  Decision d = s->OnValidation(large, 25, 0.9);
  EXPECT_THAT(s->Record(large).rung_metrics, ElementsAre(0.5, 0.9));
  EXPECT_FALSE(d.stop);  // Alone at rung 1.

  // A restarted master rebuilds the same targets and rungs from the replayed draws.
  std::vector<TrialRecord> records;
  for (int i = 0; i < s->NumTrials(); ++i) records.push_back(s->Record(i));
  auto restored = New(c, records);
  for (int i = 0; i < 8; ++i) {
    if (i == small || i == large) continue;
    Decision a = s->OnValidation(i, 6400, 0.7), b = restored->OnValidation(i, 6400, 0.7);
    EXPECT_EQ(a.stop, b.stop);
    EXPECT_EQ(a.reason, b.reason);
  }
}

TEST(Determined038, SearchedGlobalBatchSizeInRecords) {
  auto s = New(Parse("{name: random, metric: loss, max_trials: 6, max_length: {records: 1000}}",
                     "  global_batch_size: {type: int, minval: 10, maxval: 300}\n"));
  for (const auto& t : s->NextTrials()) {
    const int64_t batch = nlohmann::json::parse(t.hparams_json)["global_batch_size"].get<int64_t>();
    EXPECT_EQ(t.target_batches, (1000 + batch - 1) / batch) << t.hparams_json;
  }
}

TEST(NewSearcher, RecordsThatDoNotFitAreDataLoss) {
  config::ExperimentConfig c = Parse(std::string(kAsha) + "}", "  a: 1\n");
  std::vector<TrialRecord> bad(1);
  bad[0].bracket = 3;
  EXPECT_EQ(NewSearcher(c, bad).status().code(), absl::StatusCode::kDataLoss);
  bad[0].bracket = 0;
  bad[0].rung_metrics = {1, 2, 3};
  EXPECT_EQ(NewSearcher(c, bad).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(NewSearcher(c, std::vector<TrialRecord>(7)).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace det::master::searcher
