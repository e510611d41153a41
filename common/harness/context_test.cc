#include "common/harness/context.h"

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
}

}  // namespace
}  // namespace det::harness
