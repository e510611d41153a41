// A 960 KB config (16 hyperparameter strings of 60 KB each, under the 1 MiB config limit
// and the 64 KiB string limit) is accepted and its trial runs to COMPLETED: the trial spec,
// hyperparameters and config each outgrow one environment string (Linux's 128 KiB
// MAX_ARG_STRLEN), so the agent hands them to the workers as files (docs/worker.md). Before,
// every launch failed "Argument list too long", exit 127. Real det-master, det-agent and
// det-fashion-mnist (whose harness reads the spec from DET_TRIAL_SPEC_FILE).
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(LargeConfig, A960KbConfigRunsToCompleted) {
  TestCluster cluster("large_config");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("agent-a").ok()) << cluster.LogTail("agent-a");

  ExampleExperiment exp;
  exp.name = "large-config";
  // The user's copies arrive whole too (wc counts the bytes of each file).
  exp.entrypoint =
      "[\"sh\", \"-c\", \"echo config bytes $(wc -c < $DET_EXPERIMENT_CONFIG_FILE) hparams "
      "bytes $(wc -c < $DET_HPARAMS_FILE); exec det-fashion-mnist\"]";
  exp.batches = 20;
  exp.validation_period = 10;
  for (int i = 0; i < 16; ++i) {
    exp.more_hyperparameters.emplace_back(absl::StrCat("pad", i),
                                          absl::StrCat("'", std::string(60000, 'a' + i), "'"));
  }
  const std::string yaml = exp.Yaml();
  ASSERT_GT(yaml.size(), 960000u);
  ASSERT_LT(yaml.size(), 1u << 20);
  CommandResult r = cluster.Det({"experiment", "create", cluster.WriteFile("large.yaml", yaml)});
  ASSERT_TRUE(r.exit.ok()) << r.out << r.err;

  std::string state;
  ASSERT_TRUE(WaitUntil(
      [&] {
        nlohmann::json t = cluster.DetJson({"trial", "describe", "1"});
        state = t.is_object() && t.contains("trial") ? t["trial"].value("state", "") : "";
        return state == "STATE_COMPLETED" || state == "STATE_ERROR";
      },
      absl::Seconds(240)))
      << state << "\n" << cluster.LogTail("master") << cluster.LogTail("agent-a");
  const std::string logs = cluster.Det({"trial", "logs", "1"}).out;
  EXPECT_EQ(state, "STATE_COMPLETED") << logs;
  EXPECT_THAT(logs, Not(HasSubstr("Argument list too long")));
  // The effective config (JSON) holds the 16 strings; so do the hyperparameters.
  size_t config_bytes = 0, hparams_bytes = 0;
  const size_t at = logs.find("config bytes ");
  ASSERT_NE(at, std::string::npos) << logs;
  ASSERT_EQ(sscanf(logs.c_str() + at, "config bytes %zu hparams bytes %zu", &config_bytes,
                   &hparams_bytes),
            2)
      << logs.substr(at, 200);
  EXPECT_GT(config_bytes, 960000u);
  EXPECT_GT(hparams_bytes, 960000u);
  // The harness trained with the trial's spec: it reached the searcher's length.
  nlohmann::json t = cluster.DetJson({"trial", "describe", "1"});
  EXPECT_EQ(Int(t["trial"]["total_batches"]), 20) << t.dump().substr(0, 2000);
}

}  // namespace
}  // namespace det::testing
