// A real cluster for the attack suite: TestCluster (det-master, det-agent, workers) plus a
// one-rank experiment whose entrypoint is a shell script, and its trial as the CLI shows it.
#ifndef DET_TESTS_SECURITY_SECURITY_CLUSTER_H_
#define DET_TESTS_SECURITY_SECURITY_CLUSTER_H_

#include <sys/stat.h>

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {

class SecurityCluster : public ::testing::Test {
 protected:
  // Submits an experiment running `script` (sh) as its single rank; TEST_DIR is the
  // cluster's directory. Fails the test when the CLI refuses it.
  void CreateScriptExperiment(const std::string& name, const std::string& script) {
    const std::string context = cluster_.dir() + "/ctx-" + name;
    mkdir(context.c_str(), 0755);
    std::ofstream(context + "/train.sh") << "#!/bin/sh\n" << script;
    chmod((context + "/train.sh").c_str(), 0755);
    const std::string config = cluster_.WriteFile(
        name + ".yaml",
        absl::StrCat("name: ", name, "\nentrypoint: [\"./train.sh\"]\n"
                     "searcher:\n  name: single\n  metric: loss\n  max_length:\n    batches: 1\n"
                     "resources:\n  slots_per_trial: 1\nmax_restarts: 0\n"
                     "environment:\n  environment_variables:\n    - TEST_DIR=",
                     cluster_.dir(), "\n"));
    CommandResult r = cluster_.Det({"experiment", "create", config, context});
    ASSERT_TRUE(r.exit.ok()) << r.out << r.err;
  }

  nlohmann::json Trial(int64_t id = 1) {
    nlohmann::json t = cluster_.DetJson({"trial", "describe", absl::StrCat(id)});
    return t.is_object() && t.contains("trial") ? t["trial"] : nlohmann::json::object();
  }
  std::string TrialState(int64_t id = 1) { return Trial(id).value("state", ""); }
  bool WaitForTrialState(const std::string& state, absl::Duration timeout = absl::Seconds(90)) {
    return WaitUntil([&] { return TrialState() == state; }, timeout);
  }
  std::string Logs(int64_t id = 1) {
    return cluster_.Det({"trial", "logs", absl::StrCat(id)}).out;
  }
  bool WaitForFile(const std::string& name, absl::Duration timeout = absl::Seconds(60)) {
    return WaitUntil([&] { return Exists(cluster_.dir() + "/" + name); }, timeout);
  }
  void Touch(const std::string& name) { std::ofstream(cluster_.dir() + "/" + name) << ""; }

  std::string Diagnostics() {
    return absl::StrCat("\n--- trial\n", Trial().dump(), "\n--- trial logs\n", Logs(),
                        "\n--- master\n", cluster_.LogTail("master"), "\n--- agent-a\n",
                        cluster_.LogTail("agent-a"));
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
};

}  // namespace det::testing

#endif  // DET_TESTS_SECURITY_SECURITY_CLUSTER_H_
