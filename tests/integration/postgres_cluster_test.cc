// The example (det-fashion-mnist) on a cluster whose master keeps its state in a private
// PostgreSQL 15 (TestClusterDb::kPostgres): the master killed with SIGKILL mid-training and
// restarted, and PostgreSQL itself stopped for 10 s mid-training and started again. Each
// time the trial completes and every metric row the worker was acknowledged is stored.
//
// What the worker was acknowledged: the C++ harness prints "batch N/M" after the master
// acknowledged the training report of batch N and "validation at batch N:" after the
// validation report (common/worker/cpp/harness/trial_controller.cc), to the rank's stdout
// file in the agent's work directory, which the test reads directly (not through the
// master, whose shipped logs are what is under test).
#include <signal.h>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"

namespace det::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

constexpr int64_t kBatches = 20000;
constexpr int kUnit = 500;  // scheduling_unit: one training report per 500 batches

// The steps whose report the worker of agent `agent` was acknowledged, by group
// ("training", "validation"), from every rank-0 stdout under its run directory.
struct Acked {
  std::set<int64_t> training;
  std::set<int64_t> validation;
};

Acked ReadAcked(TestCluster& cluster, const std::string& agent) {
  static const std::regex kTraining(R"(^batch (\d+)/\d+)");
  static const std::regex kValidation(R"(^validation at batch (\d+):)");
  Acked acked;
  std::error_code ec;
  const std::filesystem::path run = cluster.dir() + "/" + agent + "/run";
  for (const auto& entry : std::filesystem::directory_iterator(run, ec)) {
    for (const std::string& line : Lines(Slurp((entry.path() / "rank-0.stdout").string()))) {
      std::smatch m;
      if (std::regex_search(line, m, kTraining)) acked.training.insert(std::stoll(m[1]));
      if (std::regex_search(line, m, kValidation)) acked.validation.insert(std::stoll(m[1]));
    }
  }
  return acked;
}

// The union of `into` and `more`.
void Merge(Acked& into, const Acked& more) {
  into.training.insert(more.training.begin(), more.training.end());
  into.validation.insert(more.validation.begin(), more.validation.end());
}

// rank-0's stderr of the agent's allocations, concatenated.
std::string WorkerStderr(TestCluster& cluster, const std::string& agent) {
  std::string all;
  std::error_code ec;
  const std::filesystem::path run = cluster.dir() + "/" + agent + "/run";
  for (const auto& entry : std::filesystem::directory_iterator(run, ec)) {
    all += Slurp((entry.path() / "rank-0.stderr").string());
  }
  return all;
}

// How many times the worker said it retries a refused report.
size_t Retries(const std::string& stderr_text) {
  size_t n = 0;
  for (const std::string& line : Lines(stderr_text)) n += line.find("; retrying") != std::string::npos;
  return n;
}

// The distinct total_batches of trial `trial`'s stored rows of `group`, from the database.
std::set<int64_t> StoredSteps(TestCluster& cluster, int64_t trial, const std::string& group) {
  std::set<int64_t> steps;
  const std::string out = cluster.DbQuery(
      absl::StrCat("SELECT DISTINCT total_batches FROM metrics WHERE trial_id = ", trial,
                   " AND grp = '", group, "' ORDER BY 1"));
  for (const std::string& line : Lines(out)) {
    int64_t v = 0;
    if (absl::SimpleAtoi(line, &v)) steps.insert(v);
    else ADD_FAILURE() << "the database answered: " << out;
  }
  return steps;
}

std::string Join(const std::set<int64_t>& s) { return absl::StrJoin(s, ","); }

class PostgresCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
    ASSERT_EQ(cluster_.DbQuery("SELECT current_setting('server_version_num')::int / 10000"),
              "15");
    ASSERT_TRUE(cluster_.StartAgent("a1", 1).ok()) << cluster_.LogTail("a1");
    ExampleExperiment exp;
    exp.name = "on-postgres";
    exp.batches = kBatches;
    exp.validation_period = kBatches / 2;
    exp.scheduling_unit = kUnit;
    exp.max_restarts = 0;  // a failed run would fail the test, not hide behind a restart
    CommandResult create =
        cluster_.Det({"experiment", "create", cluster_.WriteFile("exp.yaml", exp.Yaml())});
    ASSERT_TRUE(create.exit.ok()) << create.err << cluster_.LogTail("master");
    ASSERT_THAT(create.out, HasSubstr("Created experiment 1"));
  }

  // Waits until the worker was acknowledged at least `reports` training reports; returns
  // what it was acknowledged then.
  Acked WaitAcked(size_t reports) {
    Acked acked;
    EXPECT_TRUE(WaitUntil(absl::StrCat(reports, " acknowledged training reports"),
                          [&] {
                            acked = ReadAcked(cluster_, "a1");
                            return acked.training.size() >= reports;
                          },
                          absl::Seconds(120)))
        << cluster_.LogTail("master") << cluster_.LogTail("a1");
    return acked;
  }

  // Waits for experiment 1 to complete, collecting what the worker was acknowledged while it
  // runs into `acked` (the agent removes the run directory once the trial ends); then checks
  // that every acknowledged row is stored, and that the trial has all its rows.
  void ExpectCompletedWithEveryAcknowledgedRow(Acked& acked) {
    EXPECT_TRUE(WaitUntil("experiment 1 COMPLETED",
                          [&] {
                            Merge(acked, ReadAcked(cluster_, "a1"));
                            return cluster_.ExperimentState(1) == "STATE_COMPLETED";
                          },
                          absl::Seconds(300)))
        << cluster_.ExperimentState(1) << "\n"
        << cluster_.LogTail("master") << cluster_.LogTail("a1");
    const std::set<int64_t> training = StoredSteps(cluster_, 1, "training");
    const std::set<int64_t> validation = StoredSteps(cluster_, 1, "validation");
    EXPECT_THAT(training, IsSupersetOf(acked.training))
        << "acknowledged " << Join(acked.training) << "; stored " << Join(training);
    EXPECT_THAT(validation, IsSupersetOf(acked.validation))
        << "acknowledged " << Join(acked.validation) << "; stored " << Join(validation);
    // One row per report of the whole run: every step from the first unit to the end.
    std::set<int64_t> all;
    for (int64_t b = kUnit; b <= kBatches; b += kUnit) all.insert(b);
    EXPECT_EQ(Join(training), Join(all));
    EXPECT_EQ(Join(validation), Join({kBatches / 2, kBatches}));
    nlohmann::json d = cluster_.DetJson({"experiment", "describe", "1"});
    ASSERT_TRUE(d.is_object());
    ASSERT_EQ(d["trials"].size(), 1u);
    EXPECT_EQ(d["trials"][0]["state"], "STATE_COMPLETED");
    EXPECT_EQ(Int(d["trials"][0]["total_batches"]), kBatches);
    EXPECT_EQ(Int(d["trials"][0]["restarts"]), 0);
  }

  TestCluster cluster_{::testing::UnitTest::GetInstance()->current_test_info()->name(),
                       TestClusterDb::kPostgres};
};

// kill -9 of the master after some reports were acknowledged; the worker retries while it
// is gone; the restarted master (same PostgreSQL database) adopts the trial again.
TEST_F(PostgresCluster, KilledMasterKeepsEveryAcknowledgedMetricRow) {
  Acked acked = WaitAcked(3);
  cluster_.StopMaster(SIGKILL);
  // Read after the kill: nothing printed after it can have been acknowledged by it.
  Merge(acked, ReadAcked(cluster_, "a1"));
  ASSERT_LT(*acked.training.rbegin(), kBatches) << "the trial ended before the kill";
  const std::set<int64_t> before_restart = acked.training;
  ASSERT_TRUE(cluster_.StartMaster().ok()) << cluster_.LogTail("master");
  // Rows acknowledged by the killed master are there as soon as the new one is up.
  EXPECT_THAT(StoredSteps(cluster_, 1, "training"), IsSupersetOf(before_restart));
  ExpectCompletedWithEveryAcknowledgedRow(acked);
  EXPECT_GT(acked.training.size(), before_restart.size()) << "no report after the restart";
}

// PostgreSQL stopped (fast shutdown: the master's connections are closed) for 10 s while
// the trial trains: the worker's reports are refused with UNAVAILABLE and retried; once the
// server is back the master reconnects by itself and the trial carries on.
TEST_F(PostgresCluster, PostgresStoppedForTenSecondsLosesNothingAcknowledged) {
  Acked acked = WaitAcked(3);
  const size_t retries_before = Retries(WorkerStderr(cluster_, "a1"));
  ASSERT_TRUE(cluster_.postgres()->Stop().ok());
  const absl::Time stopped = absl::Now();
  Merge(acked, ReadAcked(cluster_, "a1"));
  ASSERT_LT(*acked.training.rbegin(), kBatches) << "the trial ended before the outage";
  // The worker's next report is refused, and it says it retries.
  std::string stderr_text;
  EXPECT_TRUE(WaitUntil("the worker retrying a refused report",
                        [&] {
                          stderr_text = WorkerStderr(cluster_, "a1");
                          return Retries(stderr_text) > retries_before;
                        },
                        absl::Seconds(20)))
      << stderr_text << cluster_.LogTail("master");
  EXPECT_THAT(stderr_text, HasSubstr("database"));
  // Other writes are refused too, naming the database; the master itself stays up.
  CommandResult refused = cluster_.Det({"experiment", "create", cluster_.dir() + "/exp.yaml"});
  EXPECT_FALSE(refused.exit.ok()) << refused.out;
  EXPECT_THAT(refused.err, HasSubstr("database"));
  const Acked during = ReadAcked(cluster_, "a1");
  // The outage itself: the specified 10 s, counted from the stop (longer only if the
  // checks above took longer).
  absl::SleepFor(stopped + absl::Seconds(10) - absl::Now());
  // Nothing was acknowledged while the database was down.
  EXPECT_EQ(Join(ReadAcked(cluster_, "a1").training), Join(during.training));
  ASSERT_TRUE(cluster_.postgres()->Restart().ok());
  const absl::Duration outage = absl::Now() - stopped;
  EXPECT_GE(outage, absl::Seconds(10));
  RecordProperty("outage_ms", absl::StrCat(absl::ToInt64Milliseconds(outage)));
  Merge(acked, during);
  const size_t before_restart = acked.training.size();
  ExpectCompletedWithEveryAcknowledgedRow(acked);
  EXPECT_GT(acked.training.size(), before_restart) << "no report after the outage";
  // The create refused during the outage left nothing behind.
  EXPECT_EQ(cluster_.DbQuery("SELECT COUNT(*) FROM experiments"), "1");
}

}  // namespace
}  // namespace det::testing
