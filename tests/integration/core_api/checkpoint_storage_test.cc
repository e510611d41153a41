// Checkpoint storage users can count on, under a real det-master and det-agent with a Core
// API worker (checkpoint_storage_train.py): a master.yaml `checkpoint_storage` is the
// default of an experiment that sets none (its checkpoint lands under that host_path and
// `det experiment lc` lists it), and without any storage, pausing a running trial says in
// the CLI and in the trial's log that its progress will be lost.
#include <sys/stat.h>

#include <regex>
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

class CheckpointStorage : public ::testing::Test {
 protected:
  // Starts the master with `master_yaml` appended and one agent of 1 slot; writes the
  // worker into a context directory.
  void Start(const std::string& master_yaml) {
    ASSERT_TRUE(cluster_.StartMaster(master_yaml).ok()) << cluster_.LogTail("master");
    ASSERT_TRUE(cluster_.StartAgent("agent-a", 1).ok()) << cluster_.LogTail("agent-a");
    const std::string script = Slurp(
        TestCluster::BinDir() + "/../../tests/integration/core_api/checkpoint_storage_train.py");
    ASSERT_FALSE(script.empty());
    ASSERT_EQ(mkdir((cluster_.dir() + "/context").c_str(), 0755), 0);
    context_ = cluster_.WriteFile("context/checkpoint_storage_train.py", script);
    context_ = context_.substr(0, context_.rfind('/'));
  }

  // Creates experiment 1 running the worker in `mode`, with no checkpoint_storage key.
  void Create(const std::string& mode) {
    std::string config = cluster_.WriteFile("exp.yaml", absl::StrCat(R"(name: storage-)", mode, R"(
entrypoint: python3 checkpoint_storage_train.py
hyperparameters: {mode: )", mode, R"(}
searcher: {name: single, metric: loss, max_length: {batches: 1}}
max_restarts: 0
)"));
    CommandResult created = cluster_.Det({"experiment", "create", config, context_});
    ASSERT_TRUE(created.exit.ok()) << created.out << created.err;
  }

  std::string State() {
    nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
    return d.is_object() ? d["experiment"].value("state", "") : "";
  }

  std::string Logs() { return cluster_.Det({"trial", "logs", "1"}).out; }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string context_;
};

TEST_F(CheckpointStorage, MasterDefaultIsUsedByAnExperimentThatSetsNone) {
  const std::string storage = cluster_.dir() + "/cluster-checkpoints";
  ASSERT_NO_FATAL_FAILURE(Start(absl::StrCat("checkpoint_storage:\n  type: shared_fs\n"
                                             "  host_path: '", storage, "'\n")));
  ASSERT_NO_FATAL_FAILURE(Create("checkpoint"));
  ASSERT_TRUE(WaitUntil([&] {
    std::string s = State();
    return s == "STATE_COMPLETED" || s == "STATE_ERROR" || s == "STATE_CANCELED";
  }, absl::Minutes(4))) << State() << Logs();
  const std::string logs = Logs();
  ASSERT_EQ(State(), "STATE_COMPLETED") << logs;
  // The worker saw the master's storage as its own, and wrote its checkpoint there.
  static const std::regex line(R"(checkpoint ([0-9a-f-]{36}) in (\S+))");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(logs, m, line)) << logs;
  const std::string uuid = m[1];
  EXPECT_EQ(m[2].str(), storage) << logs;
  EXPECT_EQ(Slurp(storage + "/" + uuid + "/weights.txt"), "weights of step 1\n");
  // The master registered it: det experiment lc lists it, in that storage.
  CommandResult lc = cluster_.Det({"experiment", "lc", "1"});
  ASSERT_TRUE(lc.exit.ok()) << lc.out << lc.err;
  EXPECT_THAT(lc.out, HasSubstr(uuid));
  nlohmann::json listed = cluster_.DetJson({"experiment", "lc", "1"});
  EXPECT_THAT(listed.dump(), HasSubstr(storage + "/" + uuid)) << listed.dump();
  EXPECT_THAT(logs, Not(HasSubstr("progress will be lost")));
}

TEST_F(CheckpointStorage, PauseWithoutStorageWarnsInCliAndTrialLog) {
  ASSERT_NO_FATAL_FAILURE(Start(""));
  ASSERT_NO_FATAL_FAILURE(Create("wait"));
  ASSERT_TRUE(WaitUntil([&] { return Logs().find("waiting for a preemption") != std::string::npos; },
                        absl::Minutes(4)))
      << State() << Logs();
  CommandResult paused = cluster_.Det({"experiment", "pause", "1"});
  ASSERT_TRUE(paused.exit.ok()) << paused.out << paused.err;
  const std::string warning = "trial 1 has no checkpoint storage: its progress will be lost";
  EXPECT_THAT(paused.out, HasSubstr("Warning: " + warning)) << paused.out << paused.err;
  // The worker stops at its next should_preempt(); the trial's log says why it was lost.
  ASSERT_TRUE(WaitUntil([&] { return Logs().find("asked to stop") != std::string::npos; },
                        absl::Minutes(2)))
      << State() << Logs();
  ASSERT_TRUE(WaitUntil([&] { return Logs().find(warning) != std::string::npos; },
                        absl::Minutes(1)))
      << Logs();
  ASSERT_TRUE(WaitUntil([&] { return State() == "STATE_PAUSED"; }, absl::Minutes(2))) << State();
  // describe shows it too.
  CommandResult described = cluster_.Det({"trial", "describe", "1"});
  EXPECT_THAT(described.out, HasSubstr(warning)) << described.out;
}

}  // namespace
}  // namespace det::testing
