// Determined's Core API tutorial (det's versions in
// common/worker/python/examples/determined/core_api, README.md there) under a real
// det-master and two det-agents of one slot each, every stage with its published config
// unchanged. The master's checkpoint_storage comes from master.yaml, as in a Determined
// cluster. What a user sees: the experiment COMPLETED, its metrics in `det experiment
// describe` and `det trial describe`, its checkpoints in `det e list-checkpoints`, the
// best one in `det e lc --best 1`, and the trial log.
#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;

constexpr char kTutorial[] = "common/worker/python/examples/determined/core_api/";

class CoreApiTutorial : public ::testing::Test {
 protected:
  void SetUp() override {
    storage_ = cluster_.dir() + "/checkpoints";
    ASSERT_EQ(mkdir(storage_.c_str(), 0755), 0);
    ASSERT_TRUE(cluster_
                    .StartMaster(absl::StrCat("checkpoint_storage: {type: shared_fs, host_path: '",
                                              storage_, "'}\n"))
                    .ok())
        << cluster_.LogTail("master");
    // Scripts that stop on should_preempt() checkpoint first: more than TestCluster's 3 s
    // between SIGTERM and SIGKILL, should one come on a loaded machine.
    for (const std::string id : {"agent-a", "agent-b"}) {
      std::string yaml = cluster_.AgentYaml(id, 1);
      size_t grace = yaml.find("kill_grace: 3s");
      ASSERT_NE(grace, std::string::npos) << yaml;
      yaml.replace(grace, 14, "kill_grace: 120s");
      ASSERT_TRUE(cluster_.StartAgentWithYaml(id, yaml).ok()) << cluster_.LogTail(id);
    }
    // The tutorial's directory, as a user has it, is the context directory.
    ASSERT_EQ(mkdir((cluster_.dir() + "/core_api").c_str(), 0755), 0);
    for (const std::string stage :
         {"0_start", "1_metrics", "2_checkpoints", "3_hpsearch", "4_distributed"}) {
      for (const std::string ext : {".py", ".yaml"}) {
        const std::string text = Slurp(Runfiles() + kTutorial + stage + ext);
        ASSERT_FALSE(text.empty()) << stage << ext;
        context_ = cluster_.WriteFile("core_api/" + stage + ext, text);
      }
    }
    context_ = context_.substr(0, context_.rfind('/'));
    // 4_distributed.yaml runs the script itself (`./4_distributed.py launcher`), as the
    // repository's copy is executable.
    ASSERT_EQ(chmod((context_ + "/4_distributed.py").c_str(), 0755), 0);
  }

  static std::string Runfiles() { return TestCluster::BinDir() + "/../../"; }

  // `det experiment create STAGE.yaml CONTEXT`, the config as published; the id, or -1.
  int64_t Create(const std::string& stage) {
    CommandResult r = cluster_.Det(
        {"experiment", "create", context_ + "/" + stage + ".yaml", context_, "--json"});
    EXPECT_TRUE(r.exit.ok()) << r.out << r.err;
    nlohmann::json j = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    return j.is_object() ? Int(j["experiment"]["id"]) : -1;
  }

  nlohmann::json Describe(int64_t experiment) {
    return cluster_.DetJson({"experiment", "describe", absl::StrCat(experiment)});
  }

  nlohmann::json Trial(int64_t id) {
    nlohmann::json d = cluster_.DetJson({"trial", "describe", absl::StrCat(id)});
    return d.is_object() ? d["trial"] : nlohmann::json();
  }

  std::string Logs(int64_t trial) { return cluster_.Det({"trial", "logs", absl::StrCat(trial)}).out; }

  // Waits for the experiment to end; its describe JSON, which must say COMPLETED.
  nlohmann::json WaitCompleted(int64_t experiment, int64_t first_trial,
                               absl::Duration timeout = absl::Minutes(5)) {
    EXPECT_TRUE(WaitUntil(absl::StrCat("experiment ", experiment, " ends"), [&] {
      const std::string s = cluster_.ExperimentState(experiment);
      return s == "STATE_COMPLETED" || s == "STATE_ERROR" || s == "STATE_CANCELED";
    }, timeout));
    nlohmann::json d = Describe(experiment);
    EXPECT_EQ(d["experiment"].value("state", ""), "STATE_COMPLETED")
        << d.dump() << Logs(first_trial) << cluster_.LogTail("master");
    return d;
  }

  // The experiment's checkpoints (det e lc --json), by steps.
  std::map<int64_t, nlohmann::json> Checkpoints(int64_t experiment,
                                                const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"experiment", "list-checkpoints", absl::StrCat(experiment)};
    args.insert(args.end(), extra.begin(), extra.end());
    std::map<int64_t, nlohmann::json> out;
    nlohmann::json lc = cluster_.DetJson(args);
    if (!lc.is_object() || !lc.contains("checkpoints")) return out;
    for (const auto& c : lc["checkpoints"]) out[Int(c["total_batches"])] = c;
    return out;
  }

  // The trial's hyperparameter `name` (describe's hparams_json).
  static int64_t HParam(const nlohmann::json& trial, const std::string& name) {
    nlohmann::json h = trial.contains("hparams_json")
                           ? nlohmann::json::parse(trial.value("hparams_json", "{}"), nullptr,
                                                   /*allow_exceptions=*/false)
                           : trial.value("hparams", nlohmann::json::object());
    return h.is_object() && h.contains(name) ? Int(h[name]) : -1;
  }

  // How often each N of the log's "x is now N" lines appears.
  static std::map<int64_t, int> XValues(const std::string& logs) {
    std::map<int64_t, int> out;
    for (absl::string_view line : absl::StrSplit(logs, '\n')) {
      size_t at = line.find("x is now ");
      int64_t n = 0;
      if (at != absl::string_view::npos &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(at + 9)), &n)) {
        ++out[n];
      }
    }
    return out;
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name()};
  std::string storage_;
  std::string context_;
};

// Stage 0 (no det calls; a single searcher with a unitless max_length the script ignores)
// and stage 1 (metrics and progress through det.core).
TEST_F(CoreApiTutorial, Stage0And1RunAndReportMetrics) {
  ASSERT_EQ(Create("0_start"), 1);
  ASSERT_EQ(Create("1_metrics"), 2);
  ASSERT_EQ(WaitCompleted(1, 1)["experiment"].value("state", ""), "STATE_COMPLETED");
  std::map<int64_t, int> x0 = XValues(Logs(1));
  EXPECT_EQ(x0.size(), 100u);
  EXPECT_EQ(x0[100], 1);

  ASSERT_EQ(WaitCompleted(2, 2)["experiment"].value("state", ""), "STATE_COMPLETED");
  const std::string logs = Logs(2);
  // det.LOG_FORMAT: the level leads each line.
  EXPECT_THAT(logs, HasSubstr("WARNING: "));
  EXPECT_THAT(logs, HasSubstr("warning-level message"));
  EXPECT_THAT(logs, HasSubstr("debug-level message"));
  const nlohmann::json t = Trial(2);
  EXPECT_EQ(Int(t["training_summary"]["x"]["count"]), 10) << t.dump();
  EXPECT_EQ(t["training_summary"]["x"]["last"].get<double>(), 100) << t.dump();
  EXPECT_EQ(t["validation_summary"]["x"]["last"].get<double>(), 100) << t.dump();
  // In the experiment's description too, as the searcher metric of its trial.
  nlohmann::json d = Describe(2);
  ASSERT_EQ(d["trials"].size(), 1u) << d.dump();
  EXPECT_THAT(d.dump(), HasSubstr("\"x\"")) << d.dump();
}

// Stage 2: checkpoints every 10 steps, and a pause mid-run that the script sees through
// should_preempt(): it checkpoints, exits, and continues from that checkpoint when
// activated. No step is lost or trained twice: every "x is now N", N = 1..100, appears once
// across both runs.
TEST_F(CoreApiTutorial, Stage2CheckpointsAndSurvivesAPauseWithoutLosingSteps) {
  ASSERT_EQ(Create("2_checkpoints"), 1);
  ASSERT_TRUE(WaitUntil("trial 1 reports step 20", [&] {
    const nlohmann::json t = Trial(1);
    return t.is_object() && t.contains("training_summary") &&
           t["training_summary"].contains("x") &&
           t["training_summary"]["x"].value("last", 0.0) >= 20;
  }, absl::Minutes(3))) << Logs(1);
  ASSERT_TRUE(cluster_.Det({"experiment", "pause", "1"}).exit.ok());
  ASSERT_TRUE(WaitUntil("experiment 1 paused, its trial stopped", [&] {
    nlohmann::json d = Describe(1);
    return d.is_object() && d["experiment"].value("state", "") == "STATE_PAUSED" &&
           d["trials"].size() == 1 && d["trials"][0].value("state", "") == "STATE_PAUSED";
  }, absl::Minutes(3))) << Describe(1).dump() << Logs(1);
  const std::map<int64_t, int> before = XValues(Logs(1));
  ASSERT_FALSE(before.empty());
  const int64_t paused_at = before.rbegin()->first;
  EXPECT_LT(paused_at, 100) << "the pause came after the end";
  // The script exited right after the checkpoint of the step it stopped at.
  EXPECT_EQ(paused_at % 10, 0) << paused_at;
  EXPECT_TRUE(Checkpoints(1).count(paused_at)) << cluster_.Det({"e", "lc", "1"}).out;

  ASSERT_TRUE(cluster_.Det({"experiment", "activate", "1"}).exit.ok());
  ASSERT_EQ(WaitCompleted(1, 1)["experiment"].value("state", ""), "STATE_COMPLETED");
  std::map<int64_t, int> x = XValues(Logs(1));
  ASSERT_EQ(x.size(), 100u) << Logs(1);
  for (const auto& [n, count] : x) EXPECT_EQ(count, 1) << "x is now " << n;
  EXPECT_EQ(x.begin()->first, 1);
  EXPECT_EQ(x.rbegin()->first, 100);
  const nlohmann::json t = Trial(1);
  EXPECT_EQ(t["validation_summary"]["x"]["last"].get<double>(), 100) << t.dump();
  std::map<int64_t, nlohmann::json> checkpoints = Checkpoints(1);
  for (int64_t step = 10; step <= 100; step += 10) {
    EXPECT_TRUE(checkpoints.count(step)) << step << cluster_.Det({"e", "lc", "1"}).out;
  }
  // The checkpoint holds the script's file, under the storage master.yaml names.
  ASSERT_TRUE(checkpoints.count(100));
  const std::string path = checkpoints[100]["storage_path"].get<std::string>();
  EXPECT_EQ(path.rfind(storage_, 0), 0u) << path;
  EXPECT_EQ(Slurp(path + "/state"), "100,100,1");
}

// Stage 3: adaptive_asha with time_metric/max_time (Determined 0.38's form) over
// increment_by. ASHA stops trials at rungs, each asked through should_preempt(); every
// trial, stopped or not, has the checkpoint of the step it stopped at, tied to that step's
// validation metrics; `det e lc --best 1` answers with the smallest x.
TEST_F(CoreApiTutorial, Stage3AshaStopsTrialsAtRungsWithTheirCheckpoints) {
  ASSERT_EQ(Create("3_hpsearch"), 1);
  nlohmann::json d = WaitCompleted(1, 1, absl::Minutes(8));
  ASSERT_EQ(d["experiment"].value("state", ""), "STATE_COMPLETED");
  ASSERT_EQ(d["trials"].size(), 10u) << d.dump();
  std::map<int64_t, nlohmann::json> checkpoints;
  int stopped = 0;
  int full = 0;
  double best = 1e9;
  for (const auto& summary : d["trials"]) {
    const int64_t id = Int(summary["id"]);
    SCOPED_TRACE(absl::StrCat("trial ", id));
    EXPECT_EQ(summary.value("state", ""), "STATE_COMPLETED") << summary.dump();
    const nlohmann::json t = Trial(id);
    const double x = t["validation_summary"]["x"]["last"].get<double>();
    const double batches = t["validation_summary"]["batches"]["last"].get<double>();
    const bool early = summary.contains("search") &&
                       summary["search"].value("stopped_early", false);
    EXPECT_EQ(early, batches < 100) << summary.dump();
    if (batches < 100) {
      ++stopped;
    } else {
      ++full;
    }
    // x = increment_by x steps at the trial's last validation.
    const int64_t increment_by = HParam(summary, "increment_by");
    EXPECT_GE(increment_by, 1) << summary.dump();
    EXPECT_EQ(x, increment_by * batches) << t.dump();
    // Its last step's checkpoint, with that step's validation metrics.
    bool found = false;
    const nlohmann::json lc = cluster_.DetJson({"e", "lc", "1"});
    for (const auto& c : lc["checkpoints"]) {
      if (Int(c["trial_id"]) != id || Int(c["total_batches"]) != static_cast<int64_t>(batches)) {
        continue;
      }
      found = true;
      EXPECT_EQ(c["metrics"]["x"].get<double>(), x) << c.dump();
    }
    // Every trial, those ASHA stopped included: one stopped at its first validation (step
    // 10) was storing that step's checkpoint before its first should_preempt() call, and
    // det.core.init() had told the master that it answers should_preempt(), so it was
    // asked, not signalled, and kept its checkpoint (searcher_stop_test makes that timing
    // certain).
    EXPECT_TRUE(found) << t.dump() << cluster_.Det({"e", "lc", "1"}).out << Logs(id);
    if (early) {
      EXPECT_THAT(Logs(id), HasSubstr("through should_preempt(): it has")) << summary.dump();
      EXPECT_THAT(Logs(id), ::testing::Not(HasSubstr("did not exit within"))) << summary.dump();
    }
  }
  EXPECT_GT(stopped, 0) << d.dump();
  EXPECT_GT(full, 0) << d.dump();

  // The best checkpoint is the one of smallest x (searcher.metric, smaller is better).
  const nlohmann::json all = cluster_.DetJson({"e", "lc", "1"});
  for (const auto& c : all["checkpoints"]) {
    best = std::min(best, c["metrics"]["x"].get<double>());
  }
  std::map<int64_t, nlohmann::json> top = Checkpoints(1, {"--best", "1"});
  ASSERT_EQ(top.size(), 1u) << cluster_.Det({"e", "lc", "1", "--best", "1"}).out;
  EXPECT_EQ(top.begin()->second["metrics"]["x"].get<double>(), best) << top.begin()->second.dump();
  CommandResult text = cluster_.Det({"e", "lc", "1", "--best", "1"});
  EXPECT_TRUE(text.exit.ok()) << text.out << text.err;
  EXPECT_THAT(text.out, HasSubstr(top.begin()->second.value("uuid", "?")));
}

// Stage 4: slots_per_trial 2 over the two agents; the script is its own launcher
// (./4_distributed.py launcher), each worker builds a DistributedContext and allgathers
// increment_by every step; searcher.operations() with a unitless max_length of 100.
TEST_F(CoreApiTutorial, Stage4RunsOnTwoSlotsAcrossTwoAgents) {
  ASSERT_EQ(Create("4_distributed"), 1);
  ASSERT_EQ(WaitCompleted(1, 1)["experiment"].value("state", ""), "STATE_COMPLETED");
  const std::string logs = Logs(1);
  const nlohmann::json t = Trial(1);
  const int64_t increment_by = HParam(Describe(1)["trials"][0], "increment_by");
  ASSERT_GE(increment_by, 1) << Describe(1).dump();
  // Both workers' increment_by every step: x = 100 x 2 x increment_by.
  EXPECT_EQ(t["validation_summary"]["x"]["last"].get<double>(), 200.0 * increment_by)
      << t.dump() << logs;
  EXPECT_EQ(Int(t["training_summary"]["x"]["count"]), 10) << t.dump();
  std::map<int64_t, int> x = XValues(logs);
  EXPECT_EQ(x.size(), 100u) << logs;
  // One worker per rank, started by each rank's launcher.
  std::string rank1 = cluster_.Det({"trial", "logs", "1", "--rank", "1"}).out;
  EXPECT_THAT(rank1, HasSubstr("worker starting")) << logs;
  std::string rank0 = cluster_.Det({"trial", "logs", "1", "--rank", "0"}).out;
  EXPECT_THAT(rank0, HasSubstr("worker starting")) << logs;
  // Across both agents.
  EXPECT_THAT(logs, HasSubstr("agent-a")) << logs;
  EXPECT_THAT(logs, HasSubstr("agent-b")) << logs;
  std::map<int64_t, nlohmann::json> checkpoints = Checkpoints(1);
  for (int64_t step = 10; step <= 100; step += 10) {
    EXPECT_TRUE(checkpoints.count(step)) << step << cluster_.Det({"e", "lc", "1"}).out;
  }
  ASSERT_TRUE(checkpoints.count(100));
  EXPECT_EQ(checkpoints[100]["metrics"]["x"].get<double>(), 200.0 * increment_by)
      << checkpoints[100].dump();
}

}  // namespace
}  // namespace det::testing
