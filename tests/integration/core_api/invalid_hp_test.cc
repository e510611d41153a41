// det.InvalidHP under a real det-master and det-agent: a random search of 2 trials (one at
// a time) whose first trial raises det.InvalidHP from a det.core script. The master ends
// that trial as invalid (COMPLETED, no restart, "invalid hyperparameters" in its log), the
// searcher creates a replacement, and the experiment ends COMPLETED with 3 trials; a later
// trial reads the experiment's best validation from the master.
#include <sys/stat.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(InvalidHp, RandomSearchReplacesATrialThatRaisesInvalidHp) {
  TestCluster cluster(::testing::UnitTest::GetInstance()->current_test_info()->name());
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("agent-a", 1).ok()) << cluster.LogTail("agent-a");
  const std::string script =
      Slurp(TestCluster::BinDir() + "/../../tests/integration/core_api/invalid_hp_train.py");
  ASSERT_FALSE(script.empty());
  ASSERT_EQ(mkdir((cluster.dir() + "/context").c_str(), 0755), 0);
  std::string context = cluster.WriteFile("context/invalid_hp_train.py", script);
  context = context.substr(0, context.rfind('/'));
  std::string config = cluster.WriteFile("exp.yaml", R"(name: invalid-hp
entrypoint: python3 invalid_hp_train.py
hyperparameters:
  invalid_trial: 1
  lr: {type: double, minval: 0.001, maxval: 0.1}
searcher: {name: random, metric: loss, max_trials: 2, max_concurrent_trials: 1}
max_restarts: 2
)");
  CommandResult created = cluster.Det({"experiment", "create", config, context});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  nlohmann::json d;
  auto state = [&] {
    d = cluster.DetJson({"experiment", "describe", "1"});
    return d.is_object() ? d["experiment"].value("state", "") : "";
  };
  ASSERT_TRUE(WaitUntil([&] {
    std::string s = state();
    return s == "STATE_COMPLETED" || s == "STATE_ERROR" || s == "STATE_CANCELED";
  }, absl::Minutes(4))) << state() << cluster.LogTail("master");
  const std::string logs1 = cluster.Det({"trial", "logs", "1"}).out;
  ASSERT_EQ(state(), "STATE_COMPLETED") << d.dump() << logs1;

  // Two valid trials as max_trials says, and the invalid one they replaced it with.
  ASSERT_EQ(d["trials"].size(), 3u) << d.dump();
  for (const auto& t : d["trials"]) EXPECT_EQ(t["state"], "STATE_COMPLETED") << t.dump();
  nlohmann::json first = cluster.DetJson({"trial", "describe", "1"});
  EXPECT_EQ(first["trial"].value("restarts", 0), 0) << first.dump();
  EXPECT_EQ(first["trial"]["search"].value("invalid_hp", false), true) << first.dump();
  EXPECT_THAT(logs1, HasSubstr("trial 1: these hyperparameters cannot train"));
  EXPECT_THAT(logs1, HasSubstr("rank 0 reported invalid hyperparameters"));
  EXPECT_THAT(logs1, HasSubstr("invalid hyperparameters"));
  EXPECT_THAT(logs1, Not(HasSubstr("restart 1 of")));

  // Trial 2 reported 0.2, trial 3 then 0.3: the best (smallest) is trial 2's.
  EXPECT_THAT(cluster.Det({"trial", "logs", "2"}).out, HasSubstr("best validation: 0.2"));
  EXPECT_THAT(cluster.Det({"trial", "logs", "3"}).out, HasSubstr("best validation: 0.2"));
}

}  // namespace
}  // namespace det::testing
