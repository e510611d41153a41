// det.pytorch's deterministic mode under real det-master and det-agent processes: the same
// Core API script (deterministic_train.py: DeterministicDDP over Gloo, ElasticSampler) on 1,
// 2 and 4 slots, and on 4 slots paused at a known step, resized to 2 slots and activated
// (resuming from its checkpoint), gives bitwise-equal per-step losses and final parameters.
// What rank 0 printed (each step's loss as float.hex, a sha256 of the final parameters) is
// read back from the trials' logs.
#include <sys/stat.h>

#include <map>
#include <regex>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 12;
// The resized experiment's workers wait at this step until the pause reaches them.
constexpr int kPauseAt = 5;

std::string Config(int slots, const std::string& storage, int wait_after) {
  return absl::StrCat(R"(name: deterministic
entrypoint: python3 deterministic_train.py
hyperparameters:
  global_batch_size: 32
  wait_after: )", wait_after, R"(
records_per_epoch: 512
searcher:
  name: single
  metric: loss
  smaller_is_better: true
  max_length: {batches: )", kSteps, R"(}
resources: {slots_per_trial: )", slots, R"(}
checkpoint_storage: {type: shared_fs, host_path: ')", storage, R"('}
)");
}

// What rank 0 printed: step -> loss (float.hex), and the final parameters' hash.
struct Printed {
  std::map<int, std::string> losses;
  std::string params;
};

Printed Parse(const std::string& logs) {
  Printed run;
  static const std::regex step(R"(step (\d+) loss (\S+))");
  static const std::regex params(R"(params sha256 ([0-9a-f]+))");
  for (auto it = std::sregex_iterator(logs.begin(), logs.end(), step);
       it != std::sregex_iterator(); ++it) {
    const int k = std::stoi((*it)[1]);
    const std::string loss = (*it)[2];
    // A step trained twice (it never is here) must have given the same loss.
    auto [at, inserted] = run.losses.emplace(k, loss);
    EXPECT_EQ(at->second, loss) << "step " << k;
  }
  std::smatch m;
  if (std::regex_search(logs, m, params)) run.params = m[1];
  return run;
}

class Deterministic : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    // 1 + 2 + 4 + 4 slots: every experiment runs at once. Workers checkpoint at a step
    // boundary when paused: more than TestCluster's 3 s before SIGKILL on a loaded machine.
    std::string yaml = cluster_.AgentYaml("agent-a", 11);
    size_t grace = yaml.find("kill_grace: 3s");
    ASSERT_NE(grace, std::string::npos) << yaml;
    yaml.replace(grace, 14, "kill_grace: 120s");
    ASSERT_TRUE(cluster_.StartAgentWithYaml("agent-a", yaml).ok()) << cluster_.LogTail("agent-a");
    storage_ = cluster_.dir() + "/checkpoints";
    const std::string script = Slurp(TestCluster::BinDir() +
                                     "/../../tests/integration/core_api/deterministic_train.py");
    ASSERT_FALSE(script.empty());
    ASSERT_EQ(mkdir((cluster_.dir() + "/context").c_str(), 0755), 0);
    context_ = cluster_.WriteFile("context/deterministic_train.py", script);
    context_ = context_.substr(0, context_.rfind('/'));
  }

  // Creates an experiment; its id (-1 on failure).
  int64_t Create(int slots, int wait_after) {
    std::string path = cluster_.WriteFile(absl::StrCat("exp", ++configs_, ".yaml"),
                                          Config(slots, storage_, wait_after));
    CommandResult r = cluster_.Det({"experiment", "create", path, context_});
    EXPECT_TRUE(r.exit.ok()) << r.out << r.err;
    int64_t id = -1;
    std::smatch m;
    static const std::regex created(R"(experiment (\d+))", std::regex::icase);
    if (r.exit.ok() && std::regex_search(r.out, m, created)) id = std::stoll(m[1]);
    EXPECT_GT(id, 0) << r.out;
    return id;
  }

  nlohmann::json Describe(int64_t experiment) {
    return cluster_.DetJson({"experiment", "describe", absl::StrCat(experiment)});
  }

  std::string State(int64_t experiment) {
    nlohmann::json d = Describe(experiment);
    return d.is_object() ? d["experiment"].value("state", "") : "";
  }

  // The logs of the experiment's (single) trial.
  std::string Logs(int64_t experiment) {
    nlohmann::json d = Describe(experiment);
    if (!d.is_object() || !d.contains("trials") || d["trials"].empty()) return "";
    return cluster_.Det({"trial", "logs", absl::StrCat(Int(d["trials"][0]["id"]))}).out;
  }

  // Waits for the experiment to complete.
  void WaitCompleted(int64_t experiment) {
    bool ended = WaitUntil([&] {
      std::string s = State(experiment);
      return s == "STATE_COMPLETED" || s == "STATE_ERROR" || s == "STATE_CANCELED";
    }, absl::Minutes(6));
    EXPECT_TRUE(ended) << "experiment " << experiment << " still " << State(experiment) << "\n"
                       << Logs(experiment) << cluster_.LogTail("agent-a");
    EXPECT_EQ(State(experiment), "STATE_COMPLETED") << Logs(experiment);
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string storage_;
  std::string context_;
  int configs_ = 0;
};

TEST_F(Deterministic, BitwiseEqualOn1And2And4SlotsAndAcrossAResize) {
  const int64_t one = Create(1, 0);
  const int64_t two = Create(2, 0);
  const int64_t four = Create(4, 0);
  const int64_t resized = Create(4, kPauseAt);
  ASSERT_GT(resized, 0);

  // Pause the resized experiment where its workers wait, resize it to 2 slots, activate.
  ASSERT_TRUE(WaitUntil([&] {
    return Logs(resized).find(absl::StrCat("waiting for preemption at batch ", kPauseAt)) !=
           std::string::npos;
  }, absl::Minutes(5))) << Logs(resized) << cluster_.LogTail("agent-a");
  CommandResult pause = cluster_.Det({"experiment", "pause", absl::StrCat(resized)});
  ASSERT_TRUE(pause.exit.ok()) << pause.err;
  // The master refuses a resize while the trial is stopping.
  ASSERT_TRUE(WaitUntil([&] {
    return cluster_.Det({"experiment", "set", "slots", absl::StrCat(resized), "2"}).exit.ok();
  }, absl::Minutes(2))) << Logs(resized);
  EXPECT_EQ(State(resized), "STATE_PAUSED");
  CommandResult activate = cluster_.Det({"experiment", "activate", absl::StrCat(resized)});
  ASSERT_TRUE(activate.exit.ok()) << activate.err;

  for (int64_t e : {one, two, four, resized}) WaitCompleted(e);

  const Printed reference = Parse(Logs(one));
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(kSteps)) << Logs(one);
  ASSERT_FALSE(reference.params.empty()) << Logs(one);
  for (int64_t e : {two, four, resized}) {
    SCOPED_TRACE(absl::StrCat("experiment ", e));
    const std::string logs = Logs(e);
    const Printed run = Parse(logs);
    EXPECT_EQ(run.losses, reference.losses) << logs;
    EXPECT_EQ(run.params, reference.params) << logs;
  }
  const std::string logs = Logs(resized);
  EXPECT_THAT(logs, HasSubstr("rank 3 of 4"));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat("asked to stop (")));
  EXPECT_THAT(logs, HasSubstr(absl::StrCat(" at batch ", kPauseAt, "\n")));
  EXPECT_THAT(logs, HasSubstr("rank 1 of 2"));
  EXPECT_THAT(logs, HasSubstr("resumed from checkpoint "));
}

}  // namespace
}  // namespace det::testing
