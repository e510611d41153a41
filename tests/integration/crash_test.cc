// The master killed with SIGKILL at random points of a busy run (experiments being created,
// metrics arriving, trials finishing), 20 times: after every restart each acknowledged write
// is there, the database is intact, and in the end no experiment is stuck.
#include <signal.h>

#include <map>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

TEST(CrashLoop, KilledMasterKeepsEveryAcknowledgedWrite) {
  TestCluster cluster("crash");
  ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
  ASSERT_TRUE(cluster.StartAgent("a1", 2).ok());
  ExampleExperiment exp;
  exp.name = "crash";
  exp.batches = 1500;
  exp.validation_period = 750;
  exp.scheduling_unit = 50;
  exp.max_restarts = 3;
  std::string config = cluster.WriteFile("crash.yaml", exp.Yaml());
  std::mt19937 rng(20261122);
  std::vector<int64_t> acked;               // experiments whose creation was acknowledged
  std::map<int64_t, int64_t> seen_rows;     // trial -> training rows the API showed
  constexpr int kKills = 20;
  for (int kill = 0; kill < kKills; ++kill) {
    SCOPED_TRACE(absl::StrCat("kill ", kill + 1));
    CommandResult create = cluster.Det({"experiment", "create", config});
    ASSERT_TRUE(create.exit.ok()) << create.err << cluster.LogTail("master");
    int64_t id = -1;
    absl::string_view out = create.out;
    ASSERT_TRUE(absl::ConsumePrefix(&out, "Created experiment "));
    ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(out.substr(0, out.find('\n'))), &id));
    acked.push_back(id);
    absl::SleepFor(absl::Milliseconds(100 + rng() % 900));  // A random point of the run.
    for (int64_t e : acked) {
      nlohmann::json d = cluster.DetJson({"experiment", "describe", absl::StrCat(e)});
      if (!d.is_object()) continue;
      for (const auto& t : d["trials"]) {
        int64_t rows = t["training_summary"].contains("loss") ? Int(t["training_summary"]["loss"]["count"]) : 0;
        seen_rows[Int(t["id"])] = std::max(seen_rows[Int(t["id"])], rows);
      }
    }
    cluster.StopMaster(SIGKILL);
    CommandResult check = RunCommand({"sqlite3", cluster.db_path(), "PRAGMA integrity_check"});
    EXPECT_EQ(std::string(absl::StripAsciiWhitespace(check.out)), "ok") << check.err;
    ASSERT_TRUE(cluster.StartMaster().ok()) << cluster.LogTail("master");
    for (int64_t e : acked) {
      nlohmann::json d = cluster.DetJson({"experiment", "describe", absl::StrCat(e)});
      ASSERT_TRUE(d.is_object()) << "experiment " << e << " lost";
      for (const auto& t : d["trials"]) {
        int64_t rows = t["training_summary"].contains("loss") ? Int(t["training_summary"]["loss"]["count"]) : 0;
        EXPECT_GE(rows, seen_rows[Int(t["id"])]) << "trial " << Int(t["id"]) << " lost rows";
      }
    }
  }
  // Nothing is stuck: every experiment finishes, and the agent is back.
  for (int64_t e : acked) {
    EXPECT_TRUE(WaitUntil(
        [&] {
          nlohmann::json d = cluster.DetJson({"experiment", "describe", absl::StrCat(e)});
          return d.is_object() && d["experiment"]["state"] == "STATE_COMPLETED";
        },
        absl::Seconds(120)))
        << "experiment " << e << " did not complete\n" << cluster.LogTail("master");
  }
  nlohmann::json agents = cluster.DetJson({"agent", "list"});
  ASSERT_EQ(agents["agents"].size(), 1u);
  EXPECT_EQ(agents["agents"][0]["connected"], true);
  // Every trial ran to its full length, with one training row per reported step.
  for (int64_t e : acked) {
    nlohmann::json d = cluster.DetJson({"experiment", "describe", absl::StrCat(e)});
    for (const auto& t : d["trials"]) {
      EXPECT_EQ(Int(t["total_batches"]), 1500);
      CommandResult distinct = RunCommand(
          {"sqlite3", cluster.db_path(),
           absl::StrCat("SELECT COUNT(DISTINCT total_batches) FROM metrics WHERE grp = 'training' AND trial_id = ", Int(t["id"]))});
      EXPECT_EQ(std::string(absl::StripAsciiWhitespace(distinct.out)), "30") << "trial " << Int(t["id"]);
    }
  }
}

}  // namespace
}  // namespace det::testing
