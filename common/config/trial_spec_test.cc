// BuildTrialSpec: what a worker is told, from the typed config and the trial; the
// DET_TRIAL_SPEC codec.
#include "common/config/trial_spec.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace det::config {
namespace {

using ::testing::HasSubstr;

ExperimentConfig Parse(const std::string& yaml) {
  auto parsed = ParseExperimentConfig(yaml, "exp.yaml", 7);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? parsed->config : ExperimentConfig{};
}

v1::Trial Trial() {
  v1::Trial t;
  t.set_id(12);
  t.set_run_id(3);
  t.set_seed(4242);
  t.set_hparams_json(R"({"global_batch_size":64,"lr":0.1})");
  t.set_target_batches(500);
  t.set_latest_checkpoint("/ckpt/exp/abc");
  return t;
}

struct Case {
  std::string name;
  std::string yaml;
  // The expected spec, as TrialSpec JSON (ids, seed, hparams, target and latest
  // checkpoint of Trial() are checked apart).
  std::string expected;
};

TEST(BuildTrialSpec, FromTypedConfigAndTrial) {
  const std::string searcher =
      "entrypoint: train\nsearcher: {name: single, metric: loss, max_length: {batches: 100}}\n";
  const std::vector<Case> cases = {
      {"defaults", searcher,
       R"({"scheduling_unit": "100", "searcher": {"metric": "loss", "smaller_is_better": true,
           "max_length_value": "100", "max_length_unit": "batches", "max_length_batches": "100"},
           "checkpoint_policy": "best", "aggregation_frequency": 1,
           "average_training_metrics": true, "bucket_bytes": "67108864", "data_json": "{}"})"},
      {"epochs resolved to batches",
       "entrypoint: train\nrecords_per_epoch: 6400\nhyperparameters: {global_batch_size: 64}\n"
       "searcher: {name: single, metric: acc, smaller_is_better: false, max_length: {epochs: 3}}\n"
       "min_validation_period: {epochs: 1}\nmin_checkpoint_period: {batches: 50}\n"
       "scheduling_unit: 10\n",
       R"({"global_batch_size": "64", "records_per_epoch": "6400", "batches_per_epoch": "100",
           "scheduling_unit": "10", "validation_period": "100", "checkpoint_period": "50",
           "searcher": {"metric": "acc", "max_length_value": "3", "max_length_unit": "epochs",
           "max_length_batches": "300"}, "checkpoint_policy": "best",
           "aggregation_frequency": 1, "average_training_metrics": true,
           "bucket_bytes": "67108864", "data_json": "{}"})"},
      {"checkpoint storage, policy, optimizations, data, deterministic",
       searcher +
           "checkpoint_storage: {type: shared_fs, host_path: /ckpt, storage_path: exp}\n"
           "checkpoint_policy: all\nreproducibility: {deterministic: true}\n"
           "optimizations: {aggregation_frequency: 4, average_training_metrics: false,"
           " tensor_fusion_threshold: 2}\n"
           "data: {dir: /data/fm, num_canonical_nodes: 2}\n",
       R"({"scheduling_unit": "100", "searcher": {"metric": "loss", "smaller_is_better": true,
           "max_length_value": "100", "max_length_unit": "batches", "max_length_batches": "100"},
           "checkpoint_dir": "/ckpt/exp", "checkpoint_policy": "all", "deterministic": true,
           "aggregation_frequency": 4, "bucket_bytes": "2097152",
           "data_json": "{\"dir\":\"/data/fm\",\"num_canonical_nodes\":2}"})"},
      {"absolute storage_path", searcher +
           "checkpoint_storage: {type: shared_fs, host_path: /ckpt, storage_path: /ckpt/a/b}\n",
       R"({"scheduling_unit": "100", "searcher": {"metric": "loss", "smaller_is_better": true,
           "max_length_value": "100", "max_length_unit": "batches", "max_length_batches": "100"},
           "checkpoint_dir": "/ckpt/a/b", "checkpoint_policy": "best",
           "aggregation_frequency": 1, "average_training_metrics": true,
           "bucket_bytes": "67108864", "data_json": "{}"})"},
      // Determined 0.38's forms (docs/configuration.md).
      {"no max_length: no limit",
       "entrypoint: train\nsearcher: {name: single, metric: loss}\n",
       R"({"scheduling_unit": "100", "searcher": {"metric": "loss", "smaller_is_better": true},
           "checkpoint_policy": "best", "aggregation_frequency": 1,
           "average_training_metrics": true, "bucket_bytes": "67108864", "data_json": "{}"})"},
      {"unitless max_length counts batches",
       "entrypoint: train\nsearcher: {name: single, metric: loss, max_length: 100}\n",
       R"({"scheduling_unit": "100", "searcher": {"metric": "loss", "smaller_is_better": true,
           "max_length_value": "100", "max_length_unit": "batches", "max_length_batches": "100"},
           "checkpoint_policy": "best", "aggregation_frequency": 1,
           "average_training_metrics": true, "bucket_bytes": "67108864", "data_json": "{}"})"},
      {"records: ceil(N / global_batch_size) batches",
       "entrypoint: train\nhyperparameters: {global_batch_size: 64}\n"
       "searcher: {name: single, metric: loss, max_length: {records: 1000}}\n"
       "min_validation_period: {records: 640}\nmin_checkpoint_period: {records: 65}\n",
       R"({"global_batch_size": "64", "scheduling_unit": "100", "validation_period": "10",
           "checkpoint_period": "2", "searcher": {"metric": "loss", "smaller_is_better": true,
           "max_length_value": "1000", "max_length_unit": "records", "max_length_batches": "16"},
           "checkpoint_policy": "best", "aggregation_frequency": 1,
           "average_training_metrics": true, "bucket_bytes": "67108864", "data_json": "{}"})"},
      {"adaptive_asha time_metric epochs",
       "entrypoint: train\nrecords_per_epoch: 6400\nhyperparameters: {global_batch_size: 64}\n"
       "searcher: {name: adaptive_asha, metric: loss, max_trials: 4, time_metric: epochs, "
       "max_time: 2}\n",
       R"({"global_batch_size": "64", "records_per_epoch": "6400", "batches_per_epoch": "100",
           "scheduling_unit": "100", "searcher": {"metric": "loss", "smaller_is_better": true,
           "max_length_value": "2", "max_length_unit": "epochs", "max_length_batches": "200"},
           "checkpoint_policy": "best", "aggregation_frequency": 1,
           "average_training_metrics": true, "bucket_bytes": "67108864", "data_json": "{}"})"},
      {"adaptive_asha time_metric batches",
       "entrypoint: train\n"
       "searcher: {name: adaptive_asha, metric: loss, max_trials: 4, time_metric: batches, "
       "max_time: 1000}\n",
       R"({"scheduling_unit": "100", "searcher": {"metric": "loss", "smaller_is_better": true,
           "max_length_value": "1000", "max_length_unit": "batches", "max_length_batches": "1000"},
           "checkpoint_policy": "best", "aggregation_frequency": 1,
           "average_training_metrics": true, "bucket_bytes": "67108864", "data_json": "{}"})"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::TrialSpec got = BuildTrialSpec(Parse(c.yaml), 5, Trial());
    EXPECT_EQ(got.experiment_id(), 5);
    EXPECT_EQ(got.trial_id(), 12);
    EXPECT_EQ(got.run_id(), 3);
    EXPECT_EQ(got.trial_seed(), 4242u);
    EXPECT_EQ(got.hparams_json(), R"({"global_batch_size":64,"lr":0.1})");
    EXPECT_EQ(got.target_batches(), 500);
    EXPECT_EQ(got.latest_checkpoint(), "/ckpt/exp/abc");
    got.clear_experiment_id();
    got.clear_trial_id();
    got.clear_run_id();
    got.clear_trial_seed();
    got.clear_hparams_json();
    got.clear_target_batches();
    got.clear_latest_checkpoint();
    absl::StatusOr<v1::TrialSpec> want = DecodeTrialSpec(c.expected);
    ASSERT_TRUE(want.ok()) << want.status();
    std::string diff;
    google::protobuf::util::MessageDifferencer d;
    d.ReportDifferencesToString(&diff);
    EXPECT_TRUE(d.Compare(*want, got)) << diff;
  }
}

// A searched global_batch_size: each trial's lengths in epochs and records are in its own
// batches.
TEST(BuildTrialSpec, SearchedGlobalBatchSizeIsTheTrials) {
  const ExperimentConfig config = Parse(
      "entrypoint: train\nrecords_per_epoch: 6400\n"
      "hyperparameters:\n  global_batch_size: {type: categorical, vals: [32, 64, 128]}\n"
      "searcher: {name: random, metric: loss, max_trials: 3, max_length: {epochs: 2}}\n"
      "min_validation_period: {records: 1000}\nmin_checkpoint_period: {batches: 7}\n");
  struct Want {
    int64_t batch, per_epoch, max_length, validation;
  };
  for (const Want& w : {Want{32, 200, 400, 32}, Want{64, 100, 200, 16}, Want{128, 50, 100, 8}}) {
    SCOPED_TRACE(w.batch);
    v1::Trial t = Trial();
    t.set_hparams_json(absl::StrCat(R"({"global_batch_size":)", w.batch, R"(,"lr":0.1})"));
    v1::TrialSpec spec = BuildTrialSpec(config, 5, t);
    EXPECT_EQ(spec.global_batch_size(), w.batch);
    EXPECT_EQ(spec.records_per_epoch(), 6400);
    EXPECT_EQ(spec.batches_per_epoch(), w.per_epoch);
    EXPECT_EQ(spec.searcher().max_length_value(), 2);
    EXPECT_EQ(spec.searcher().max_length_unit(), "epochs");
    EXPECT_EQ(spec.searcher().max_length_batches(), w.max_length);
    EXPECT_EQ(spec.validation_period(), w.validation);  // ceil(1000 / batch)
    EXPECT_EQ(spec.checkpoint_period(), 7);
  }
}

// Determined's `entrypoint: MODULE:CLASS` reaches the workers as det's Trial runner.
TEST(BuildTrialSpec, TrialClassEntrypointRunsTheRunner) {
  const ExperimentConfig config =
      Parse("entrypoint: model_def:MNistTrial\nsearcher: {name: single, metric: loss, "
            "max_length: {batches: 10}}\n");
  EXPECT_EQ(config.entrypoint, (std::vector<std::string>{"python3", "-m", "det.pytorch.run",
                                                         "model_def:MNistTrial"}));
}

TEST(BuildTrialSpec, EmptyHparamsAreAnObject) {
  v1::Trial t;
  t.set_id(1);
  EXPECT_EQ(BuildTrialSpec(ExperimentConfig{}, 1, t).hparams_json(), "{}");
}

TEST(TrialSpecCodec, RoundTrips) {
  v1::TrialSpec spec = BuildTrialSpec(
      Parse("entrypoint: train\nsearcher: {name: single, metric: loss, max_length: "
            "{batches: 9}}\ndata: {dir: \"/a b\", note: \"quote \\\" and é\"}\n"),
      7, Trial());
  std::string text = EncodeTrialSpec(spec);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_THAT(text, HasSubstr(R"("trial_id":"12")"));
  absl::StatusOr<v1::TrialSpec> back = DecodeTrialSpec(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*back, spec));
}

TEST(TrialSpecCodec, MissingOrMalformedNamesTheVariable) {
  for (const std::string& text : {std::string(), std::string("{"),
                                  std::string(R"({"trial_id": "x"})"),
                                  std::string(R"({"no_such_field": 1})")}) {
    SCOPED_TRACE(text);
    absl::StatusOr<v1::TrialSpec> got = DecodeTrialSpec(text);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(got.status().message()), HasSubstr("DET_TRIAL_SPEC"));
  }
}

}  // namespace
}  // namespace det::config
