#include "common/harness/context.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::harness {
namespace {

using ::testing::HasSubstr;

std::map<std::string, std::string> Env() {
  return {{"DET_MASTER", "127.0.0.1:1"},
          {"DET_EXPERIMENT_ID", "3"},
          {"DET_TRIAL_ID", "9"},
          {"DET_TRIAL_SEED", "1234"},
          {"DET_TRIAL_TARGET_BATCHES", "500"},
          {"RANK", "1"},
          {"WORLD_SIZE", "8"},
          {"DET_HPARAMS", R"({"global_batch_size": 100, "lr": 0.1, "name": "x"})"},
          {"DET_EXPERIMENT_CONFIG",
           R"({"records_per_epoch": 1000, "scheduling_unit": 20,
               "min_validation_period": {"epochs": 2}, "data": {"dir": "/d"}})"}};
}

TEST(TrialContext, ReadsEverythingTheAgentProvides) {
  auto c = ContextFromEnvironment(Env());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->trial_id, 9);
  EXPECT_EQ(c->trial_seed, 1234u);
  EXPECT_EQ(c->rank, 1);
  EXPECT_FALSE(c->is_chief());
  EXPECT_EQ(c->global_batch_size, 100);
  EXPECT_EQ(c->per_slot_batch_size, 12);  // 100 // 8, remainder dropped.
  EXPECT_EQ(c->batches_per_epoch, 10);
  EXPECT_EQ(c->validation_period, 20);
  EXPECT_EQ(c->scheduling_unit, 20);
  EXPECT_EQ(c->target_batches, 500);
  EXPECT_DOUBLE_EQ(*c->HparamDouble("lr", 0), 0.1);
  EXPECT_DOUBLE_EQ(*c->HparamDouble("missing", 0.5), 0.5);
  EXPECT_THAT(c->HparamInt("name", 0).status().message(), HasSubstr("hyperparameters.name"));
  EXPECT_EQ(c->DataString("dir", ""), "/d");
  EXPECT_EQ(c->slot_type, "cpu");
}

TEST(TrialContext, MissingOrBadVariablesAreNamed) {
  auto env = Env();
  env.erase("DET_TRIAL_ID");
  EXPECT_THAT(ContextFromEnvironment(env).status().message(), HasSubstr("DET_TRIAL_ID is not set"));
  env = Env();
  env["RANK"] = "8";
  EXPECT_THAT(ContextFromEnvironment(env).status().message(), HasSubstr("outside WORLD_SIZE"));
  env = Env();
  env["DET_HPARAMS"] = "{not json";
  EXPECT_THAT(ContextFromEnvironment(env).status().message(), HasSubstr("DET_HPARAMS is not a JSON object"));
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

}  // namespace
}  // namespace det::harness

namespace det::harness {
namespace {

std::map<std::string, std::string> EnvWithConfig(const std::string& config) {
  return {{"DET_MASTER", "127.0.0.1:1"}, {"DET_EXPERIMENT_ID", "1"}, {"DET_TRIAL_ID", "2"},
          {"DET_TRIAL_SEED", "3"},       {"RANK", "0"},              {"WORLD_SIZE", "4"},
          {"DET_HPARAMS", R"({"global_batch_size": 64})"},           {"DET_EXPERIMENT_CONFIG", config}};
}

TEST(TrialContext, ReadsTrainingSettingsFromTheConfig) {
  auto c = ContextFromEnvironment(EnvWithConfig(R"({
      "records_per_epoch": 6400,
      "searcher": {"metric": "accuracy", "smaller_is_better": false},
      "min_checkpoint_period": {"epochs": 1},
      "checkpoint_policy": "all",
      "checkpoint_storage": {"type": "shared_fs", "host_path": "/mnt/ckpt", "storage_path": "det"},
      "optimizations": {"aggregation_frequency": 4, "average_training_metrics": false,
                        "tensor_fusion_threshold": 2}})"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->searcher_metric, "accuracy");
  EXPECT_FALSE(c->smaller_is_better);
  EXPECT_EQ(c->checkpoint_period, 100);
  EXPECT_EQ(c->checkpoint_policy, "all");
  EXPECT_EQ(c->checkpoint_dir, "/mnt/ckpt/det");
  EXPECT_EQ(c->aggregation_frequency, 4);
  EXPECT_FALSE(c->average_training_metrics);
  EXPECT_EQ(c->bucket_bytes, 2 << 20);
  EXPECT_EQ(c->per_slot_batch_size, 16);
  EXPECT_EQ(c->effective_global_batch_size(), 64);
  EXPECT_EQ(c->collective_host, "");
}

TEST(TrialContext, DefaultsWithoutTrainingSettings) {
  auto c = ContextFromEnvironment(EnvWithConfig("{}"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->aggregation_frequency, 1);
  EXPECT_TRUE(c->average_training_metrics);
  EXPECT_EQ(c->checkpoint_policy, "best");
  EXPECT_EQ(c->checkpoint_dir, "");
  EXPECT_EQ(c->bucket_bytes, int64_t{64} << 20);
}

TEST(TrialContext, BadTrainingSettingsAreNamed) {
  for (const auto& [config, field] : std::vector<std::pair<std::string, std::string>>{
           {R"({"optimizations": {"aggregation_frequency": 0}})", "optimizations.aggregation_frequency"},
           {R"({"optimizations": {"average_training_metrics": "yes"}})", "optimizations.average_training_metrics"},
           {R"({"checkpoint_storage": {"type": "s3", "bucket": "b"}})", "checkpoint_storage.type"},
           {R"({"checkpoint_storage": {"type": "shared_fs", "host_path": "relative"}})", "checkpoint_storage.host_path"},
           {R"({"checkpoint_policy": "sometimes"})", "checkpoint_policy"}}) {
    auto c = ContextFromEnvironment(EnvWithConfig(config));
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << config;
    EXPECT_THAT(c.status().message(), HasSubstr(field)) << config;
  }
}

}  // namespace
}  // namespace det::harness
