// TrialContext from a worker's environment: the trial spec the master builds from a real
// parsed config (config::BuildTrialSpec, as the launch does), and the rank's variables.
#include "common/worker/cpp/harness/context.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/config/experiment_config.h"
#include "common/config/trial_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::harness {
namespace {

using ::testing::HasSubstr;

// A file holding `text`, as the agent writes the launch's DET_TRIAL_SPEC; its path.
std::string SpecFile(const std::string& text) {
  static int n = 0;
  const std::string path = absl::StrCat(getenv("TEST_TMPDIR"), "/spec-", ++n, ".json");
  std::ofstream(path) << text;
  return path;
}

// DET_TRIAL_SPEC for `config_yaml` and a trial with `hparams_json`, as the master sends it.
std::string Spec(const std::string& config_yaml, const std::string& hparams_json) {
  auto parsed = config::ParseExperimentConfig(config_yaml, "exp.yaml", 1);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  v1::Trial t;
  t.set_id(9);
  t.set_run_id(2);
  t.set_seed(1234);
  t.set_hparams_json(hparams_json);
  t.set_target_batches(500);
  t.set_latest_checkpoint("/ckpt/x");
  return config::EncodeTrialSpec(
      config::BuildTrialSpec(parsed.ok() ? parsed->config : config::ExperimentConfig{}, 3, t));
}

std::map<std::string, std::string> Env() {
  return {{"DET_MASTER", "127.0.0.1:1"},
          {"DET_ALLOCATION_ID", "9.2"},
          {"DET_ALLOCATION_TOKEN", "tok"},
          {"RANK", "1"},
          {"WORLD_SIZE", "8"},
          {"DET_TRIAL_SPEC_FILE",
           SpecFile(Spec("entrypoint: train\n"
                "searcher: {name: single, metric: loss, max_length: {batches: 500}}\n"
                "hyperparameters: {global_batch_size: 100, lr: 0.1, name: x}\n"
                "records_per_epoch: 1000\nscheduling_unit: 20\n"
                "min_validation_period: {epochs: 2}\ndata: {dir: /d, num_canonical_nodes: 3}\n",
                R"({"global_batch_size": 100, "lr": 0.1, "name": "x"})"))}};
}

TEST(TrialContext, ReadsEverythingTheAgentProvides) {
  auto c = ContextFromEnvironment(Env());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->spec.experiment_id(), 3);
  EXPECT_EQ(c->spec.trial_id(), 9);
  EXPECT_EQ(c->spec.run_id(), 2);
  EXPECT_EQ(c->spec.trial_seed(), 1234u);
  EXPECT_EQ(c->rank, 1);
  EXPECT_FALSE(c->is_chief());
  EXPECT_EQ(c->spec.global_batch_size(), 100);
  EXPECT_EQ(c->per_slot_batch_size(), 12);  // 100 // 8, remainder dropped.
  EXPECT_EQ(c->spec.batches_per_epoch(), 10);
  EXPECT_EQ(c->spec.validation_period(), 20);
  EXPECT_EQ(c->spec.scheduling_unit(), 20);
  EXPECT_EQ(c->spec.target_batches(), 500);
  EXPECT_EQ(c->spec.latest_checkpoint(), "/ckpt/x");
  EXPECT_DOUBLE_EQ(*c->HparamDouble("lr", 0), 0.1);
  EXPECT_DOUBLE_EQ(*c->HparamDouble("missing", 0.5), 0.5);
  EXPECT_THAT(c->HparamInt("name", 0).status().message(), HasSubstr("hyperparameters.name"));
  EXPECT_EQ(c->DataString("dir", ""), "/d");
  EXPECT_EQ(c->DataString("missing", "fb"), "fb");
  EXPECT_EQ(c->DataInt("num_canonical_nodes", 1), 3);
  EXPECT_EQ(c->slot_type, "cpu");
}

TEST(TrialContext, MissingOrBadVariablesAreNamed) {
  auto env = Env();
  env.erase("DET_TRIAL_SPEC_FILE");
  auto c = ContextFromEnvironment(env);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("DET_TRIAL_SPEC_FILE is not set"));
  const std::string gone = absl::StrCat(getenv("TEST_TMPDIR"), "/no-such-spec.json");
  env["DET_TRIAL_SPEC_FILE"] = gone;
  c = ContextFromEnvironment(env);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr(absl::StrCat("DET_TRIAL_SPEC_FILE names '", gone,
                                     "', which cannot be read: No such file or directory")));
  env["DET_TRIAL_SPEC_FILE"] = SpecFile(R"({"trial_id": "nine"})");
  c = ContextFromEnvironment(env);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(),
              HasSubstr("trial spec (DET_TRIAL_SPEC_FILE) is not a det.v1.TrialSpec"));
  env["DET_TRIAL_SPEC_FILE"] = SpecFile(R"({"trial_id": "9", "hparams_json": "[1]"})");
  EXPECT_THAT(ContextFromEnvironment(env).status().message(),
              HasSubstr("DET_TRIAL_SPEC.hparams_json is not a JSON object"));
  env = Env();
  env["RANK"] = "8";
  EXPECT_THAT(ContextFromEnvironment(env).status().message(), HasSubstr("outside WORLD_SIZE"));
  env = Env();
  env.erase("DET_MASTER");
  EXPECT_THAT(ContextFromEnvironment(env).status().message(), HasSubstr("DET_MASTER is not set"));
  env = Env();
  env["DET_SLOT_TYPE"] = "tpu";
  EXPECT_THAT(ContextFromEnvironment(env).status().message(), HasSubstr("DET_SLOT_TYPE: expected cpu or cuda"));
  env["DET_SLOT_TYPE"] = "cuda";
  EXPECT_EQ(ContextFromEnvironment(env)->slot_type, "cuda");
}

TEST(TrialContext, CollectivePeerTimeout) {
  auto env = Env();
  EXPECT_EQ(ContextFromEnvironment(env)->collective_peer_timeout, absl::Seconds(15));
  env["DET_COLLECTIVE_PEER_TIMEOUT"] = "1m30s";
  EXPECT_EQ(ContextFromEnvironment(env)->collective_peer_timeout, absl::Seconds(90));
  for (const char* bad : {"soon", "500ms", "-3s"}) {
    env["DET_COLLECTIVE_PEER_TIMEOUT"] = bad;
    EXPECT_THAT(ContextFromEnvironment(env).status().message(),
                HasSubstr(absl::StrCat("DET_COLLECTIVE_PEER_TIMEOUT: expected a duration of at "
                                       "least 1s such as \"30s\", got '", bad, "'")));
  }
}

std::map<std::string, std::string> EnvWithConfig(const std::string& rest) {
  return {{"DET_MASTER", "127.0.0.1:1"},
          {"DET_ALLOCATION_ID", "9.2"},
          {"DET_ALLOCATION_TOKEN", "tok"},
          {"RANK", "0"},
          {"WORLD_SIZE", "4"},
          {"DET_TRIAL_SPEC_FILE",
           SpecFile(Spec("entrypoint: train\nhyperparameters: {global_batch_size: 64}\n" + rest,
                R"({"global_batch_size": 64})"))}};
}

TEST(TrialContext, ReadsTrainingSettingsFromTheSpec) {
  auto c = ContextFromEnvironment(EnvWithConfig(
      "records_per_epoch: 6400\n"
      "searcher: {name: single, metric: accuracy, smaller_is_better: false,"
      " max_length: {batches: 10}}\n"
      "min_checkpoint_period: {epochs: 1}\n"
      "checkpoint_policy: all\n"
      "reproducibility: {deterministic: true}\n"
      "checkpoint_storage: {type: shared_fs, host_path: /mnt/ckpt, storage_path: det}\n"
      "optimizations: {aggregation_frequency: 4, average_training_metrics: false,"
      " tensor_fusion_threshold: 2}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->spec.searcher().metric(), "accuracy");
  EXPECT_FALSE(c->spec.searcher().smaller_is_better());
  EXPECT_EQ(c->spec.checkpoint_period(), 100);
  EXPECT_EQ(c->spec.checkpoint_policy(), "all");
  EXPECT_TRUE(c->spec.deterministic());
  EXPECT_EQ(c->spec.checkpoint_dir(), "/mnt/ckpt/det");
  EXPECT_EQ(c->spec.aggregation_frequency(), 4);
  EXPECT_FALSE(c->spec.average_training_metrics());
  EXPECT_EQ(c->spec.bucket_bytes(), 2 << 20);
  EXPECT_EQ(c->per_slot_batch_size(), 16);
  EXPECT_EQ(c->effective_global_batch_size(), 64);
  EXPECT_EQ(c->collective_host, "");
}

// The defaults are common/config's: a config without the settings gets them via the spec.
TEST(TrialContext, ConfigDefaultsArriveThroughTheSpec) {
  auto c = ContextFromEnvironment(EnvWithConfig(
      "searcher: {name: single, metric: loss, max_length: {batches: 10}}\n"));
  ASSERT_TRUE(c.ok()) << c.status();
  config::ExperimentConfig defaults;
  EXPECT_EQ(c->spec.aggregation_frequency(), defaults.optimizations.aggregation_frequency);
  EXPECT_EQ(c->spec.average_training_metrics(), defaults.optimizations.average_training_metrics);
  EXPECT_EQ(c->spec.checkpoint_policy(), defaults.checkpoint_policy);
  EXPECT_EQ(c->spec.scheduling_unit(), defaults.scheduling_unit);
  EXPECT_FALSE(c->spec.deterministic());
  EXPECT_EQ(c->spec.checkpoint_dir(), "");
  EXPECT_EQ(c->spec.bucket_bytes(), int64_t{64} << 20);
  EXPECT_EQ(c->spec.validation_period(), 0);
  EXPECT_TRUE(c->data.empty());
}

}  // namespace
}  // namespace det::harness
