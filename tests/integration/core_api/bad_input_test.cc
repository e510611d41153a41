// Bad input to the Python Core API under a real det-master and det-agent: NaN and
// infinities are numbers (sent and stored), a string metric and checkpoint paths outside
// the storage are refused with errors naming them, and Core API calls with the environment
// of an allocation that has ended (a metric report, should_preempt) get an error saying so.
#include <sys/stat.h>

#include <iostream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

TEST(BadInput, CoreApiRefusesWhatIsNotValidAndAcceptsNanAndInfinities) {
  TestCluster cluster(::testing::UnitTest::GetInstance()->current_test_info()->name());
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("agent-a", 1).ok()) << cluster.LogTail("agent-a");
  const std::string script =
      Slurp(TestCluster::BinDir() + "/../../tests/integration/core_api/bad_input_train.py");
  ASSERT_FALSE(script.empty());
  ASSERT_EQ(mkdir((cluster.dir() + "/context").c_str(), 0755), 0);
  std::string context = cluster.WriteFile("context/bad_input_train.py", script);
  context = context.substr(0, context.rfind('/'));
  const std::string env_out = cluster.dir() + "/worker_env.json";
  std::string config = cluster.WriteFile("exp.yaml", absl::StrCat(R"(name: bad-input
entrypoint: python3 bad_input_train.py
hyperparameters: {env_out: ')", env_out, R"('}
searcher: {name: single, metric: loss, max_length: {batches: 1}}
checkpoint_storage: {type: shared_fs, host_path: ')", cluster.dir(), R"(/checkpoints'}
)"));
  CommandResult created = cluster.Det({"experiment", "create", config, context});
  ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  auto state = [&] {
    nlohmann::json d = cluster.DetJson({"experiment", "describe", "1"});
    return d.is_object() ? d["experiment"].value("state", "") : "";
  };
  ASSERT_TRUE(WaitUntil([&] {
    std::string s = state();
    return s == "STATE_COMPLETED" || s == "STATE_ERROR" || s == "STATE_CANCELED";
  }, absl::Minutes(4))) << state();
  const std::string logs = cluster.Det({"trial", "logs", "1"}).out;
  ASSERT_EQ(state(), "STATE_COMPLETED") << logs;
  EXPECT_THAT(logs, HasSubstr("reported nan and infinities"));
  EXPECT_THAT(logs, HasSubstr("string metric: TypeError: training metric 'loss' at "
                              "steps_completed=2: expected a number"));
  EXPECT_THAT(logs, HasSubstr("restore outside: ValueError: restore_path: '../../etc' is "
                              "outside the checkpoint storage"));
  EXPECT_THAT(logs, HasSubstr("metadata outside: ValueError: restore_path: '/etc/passwd' is "
                              "outside the checkpoint storage"));
  // What the master made of NaN and the infinities.
  nlohmann::json trial = cluster.DetJson({"trial", "describe", "1"});
  std::cout << "training summary: " << trial["trial"]["training_summary"].dump() << "\n";
  const nlohmann::json summary = trial["trial"]["training_summary"];
  EXPECT_EQ(summary["loss"]["last"], "NaN") << summary.dump();
  EXPECT_EQ(summary["big"]["last"], "Infinity") << summary.dump();
  EXPECT_EQ(summary["small"]["last"], "-Infinity") << summary.dump();

  // The ended allocation's environment: every Core API call says the allocation has ended.
  nlohmann::json env = nlohmann::json::parse(Slurp(env_out), nullptr, false);
  ASSERT_TRUE(env.is_object()) << Slurp(env_out);
  std::map<std::string, std::string> vars;
  for (const auto& [k, v] : env.items()) vars[k] = v.get<std::string>();
  CommandResult late = RunCommand(
      {"/usr/bin/python3", "-c", R"(
import time
import det
with det.core.init() as core:
    try:
        core.train.report_training_metrics(steps_completed=3, metrics={"loss": 1.0})
        print("report accepted")
    except det.AllocationEndedError as e:
        print("report refused:", e)
    try:
        # The answer comes from a background long-poll: ask until it is in.
        for _ in range(400):
            core.preempt.should_preempt()
            time.sleep(0.05)
        print("should_preempt accepted")
    except det.AllocationEndedError as e:
        print("should_preempt refused:", e)
)"},
      absl::Seconds(60), vars);
  EXPECT_THAT(late.out, HasSubstr("report refused: ")) << late.out << late.err;
  EXPECT_THAT(late.out, HasSubstr("allocation is over")) << late.out << late.err;
  EXPECT_THAT(late.out, HasSubstr("should_preempt refused: should_preempt: ")) << late.out
                                                                               << late.err;
}

}  // namespace
}  // namespace det::testing
