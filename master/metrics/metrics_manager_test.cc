// MetricsManager through the worker channel (ReportMetrics) on the manager harness, over
// an InMemoryStore and a real SQLite file: what a worker reports is what GetTrial and the
// store's reads (StoreReads, as GetTrialMetrics reads) return, NaN and infinities
// included, also after a restart; malformed reports are refused naming the field; a
// refused group commit stores nothing, keeps the summaries and warns on the trial.
#include "master/metrics/metrics_manager.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/fault_injecting_store.h"
#include "master/store/in_memory_store.h"
#include "master/store/sqlite_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using testing::ManagerHarness;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

v1::Metrics Row(const std::string& group, int64_t batches,
                std::map<std::string, double> values) {
  v1::Metrics m;
  m.set_group(group);
  m.set_total_batches(batches);
  for (const auto& [k, v] : values) (*m.mutable_values())[k] = v;
  return m;
}

// The rows of `req.trial_id()` as GetTrialMetrics answers them: read on the harness's
// store read pool (master/reads), waited for with a deadline.
absl::Status Read(ManagerHarness& h, const v1::GetTrialMetricsRequest& req,
                  v1::GetTrialMetricsResponse* resp) {
  auto answer = std::make_shared<std::pair<absl::Notification, absl::Status>>();
  auto rows = std::make_shared<std::vector<v1::Metrics>>();
  h.reads.Run([answer](absl::Status st) {
                answer->second = st;
                answer->first.Notify();
              },
              [req, rows](MetricsReader& reader) -> absl::Status {
                ASSIGN_OR_RETURN(*rows, reader.GetTrialMetrics(req.trial_id(), req.group(),
                                                               req.max_points()));
                return absl::OkStatus();
              });
  if (!answer->first.WaitForNotificationWithTimeout(absl::Seconds(15))) {
    return absl::DeadlineExceededError("the read did not answer within 15 s");
  }
  resp->clear_metrics();
  for (v1::Metrics& m : *rows) *resp->add_metrics() = std::move(m);
  return answer->second;
}

// "sqlite" or "memory".
class MetricsManagerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "sqlite") {
      const char* dir = std::getenv("TEST_TMPDIR");
      static int n = 0;
      path_ = absl::StrCat(dir ? dir : "/tmp", "/metrics_", getpid(), "_", ++n, ".db");
      std::remove(path_.c_str());
      auto opened = SqliteStore::Open(path_, 0);
      ASSERT_TRUE(opened.ok()) << opened.status();
      store_ = *std::move(opened);
    } else {
      store_ = std::make_unique<InMemoryStore>();
    }
    faulty_ = std::make_unique<FaultInjectingStore>(*store_);
    h_ = std::make_unique<ManagerHarness>(testing::LoopbackMasterConfig("/unused"), *faulty_,
                                          clock_);
    ASSERT_TRUE(h_->Start().ok());
    trial_ = h_->CreateExperiment("metrics", 2);
    session_ = h_->Register("a", 2);
    launch_ = h_->NextLaunch("a", session_);
    ASSERT_EQ(launch_.trial_id(), trial_);
  }

  v1::GetTrialMetricsResponse Metrics(ManagerHarness& h, const std::string& group) {
    v1::GetTrialMetricsRequest req;
    req.set_trial_id(trial_);
    req.set_group(group);
    v1::GetTrialMetricsResponse resp;
    absl::Status st = Read(h, req, &resp);
    EXPECT_TRUE(st.ok()) << st;
    return resp;
  }

  v1::Trial GetTrial(ManagerHarness& h) {
    v1::GetTrialRequest req;
    req.set_id(trial_);
    v1::GetTrialResponse resp;
    absl::Status st;
    h.Turn([&] { st = h.experiments.GetTrial(req, &resp); });
    EXPECT_TRUE(st.ok()) << st;
    return resp.trial();
  }

  // NaN, +inf and -inf as stored and summarised: the rows keep them, `last` keeps them,
  // min and max are of the finite values.
  void ExpectNonFinite(ManagerHarness& h) {
    v1::GetTrialMetricsResponse rows = Metrics(h, "training");
    ASSERT_EQ(rows.metrics_size(), 3);
    EXPECT_TRUE(std::isnan(rows.metrics(0).values().at("loss")));
    EXPECT_EQ(rows.metrics(0).values().at("grad"), kInf);
    EXPECT_EQ(rows.metrics(1).values().at("loss"), 0.5);
    EXPECT_EQ(rows.metrics(1).values().at("grad"), -kInf);
    EXPECT_TRUE(std::isnan(rows.metrics(2).values().at("loss")));
    v1::Trial t = GetTrial(h);
    const v1::MetricSummary& loss = t.training_summary().at("loss");
    EXPECT_TRUE(std::isnan(loss.last()));
    EXPECT_EQ(loss.min(), 0.5);
    EXPECT_EQ(loss.max(), 0.5);
    EXPECT_EQ(loss.count(), 3);
    const v1::MetricSummary& grad = t.training_summary().at("grad");
    EXPECT_EQ(grad.last(), 2.0);
    EXPECT_EQ(grad.min(), 2.0);
    EXPECT_EQ(grad.max(), 2.0);
    // Only non-finite values so far: min and max are NaN (no finite value), last is kept.
    const v1::MetricSummary& v = t.validation_summary().at("validation_loss");
    EXPECT_EQ(v.last(), kInf);
    EXPECT_TRUE(std::isnan(v.min()));
    EXPECT_TRUE(std::isnan(v.max()));
    EXPECT_EQ(Metrics(h, "validation").metrics(0).values().at("validation_loss"), kInf);
    EXPECT_EQ(t.total_batches(), 30);
  }

  void TearDown() override { h_.reset(); }

  FakeClock clock_;
  std::string path_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<FaultInjectingStore> faulty_;
  std::unique_ptr<ManagerHarness> h_;
  int64_t trial_ = 0;
  std::string session_;
  v1::LaunchCommand launch_;
};

INSTANTIATE_TEST_SUITE_P(Stores, MetricsManagerTest, ::testing::Values("memory", "sqlite"),
                         [](const auto& info) { return info.param; });

TEST_P(MetricsManagerTest, NaNAndInfinitiesAreStoredAndShownAsSuchAlsoAfterARestart) {
  ASSERT_TRUE(h_->ReportMetrics(launch_, {Row("training", 10, {{"loss", kNaN}, {"grad", kInf}}),
                                          Row("training", 20, {{"loss", 0.5}, {"grad", -kInf}})})
                  .ok());
  ASSERT_TRUE(h_->ReportMetrics(launch_, {Row("training", 30, {{"loss", kNaN}, {"grad", 2.0}}),
                                          Row("validation", 30, {{"validation_loss", kInf}})},
                                /*rank=*/1)
                  .ok());
  ExpectNonFinite(*h_);
  // A downsampled read keeps them too (first and last rows of the group).
  v1::GetTrialMetricsRequest req;
  req.set_trial_id(trial_);
  req.set_group("training");
  req.set_max_points(2);
  v1::GetTrialMetricsResponse resp;
  ASSERT_TRUE(Read(*h_, req, &resp).ok());
  ASSERT_EQ(resp.metrics_size(), 2);
  EXPECT_TRUE(std::isnan(resp.metrics(0).values().at("loss")));
  EXPECT_TRUE(std::isnan(resp.metrics(1).values().at("loss")));

  // A restarted master reads the same from the store.
  h_.reset();
  ManagerHarness restarted(testing::LoopbackMasterConfig("/unused"), *store_, clock_);
  ASSERT_TRUE(restarted.Start().ok());
  ExpectNonFinite(restarted);
}

TEST_P(MetricsManagerTest, MalformedReportsAreRefusedNamingTheField) {
  auto refused = [&](const std::vector<v1::Metrics>& rows, int rank, const std::string& what) {
    absl::Status st = h_->ReportMetrics(launch_, rows, rank);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(what));
  };
  refused({Row("training", 1, {{"loss", 1}})}, 2, "auth.rank: 2 is not a rank of allocation");
  refused({Row("training", 1, {{"loss", 1}})}, -1, "auth.rank: -1");
  refused({Row("training", -5, {{"loss", 1}})}, 0,
          "metrics[0].total_batches: expected a count >= 0, got -5");
  refused({Row("training", 1, {}), Row("bogus", 1, {{"loss", 1}})}, 0,
          "metrics[1].group: expected one of training, validation, timings, progress, got 'bogus'");
  refused({Row("", 1, {{"loss", 1}})}, 0, "metrics[0].group");
  refused({Row("training", 1, {{"", 1}})}, 0, "metrics[0].values: a metric name is empty");
  refused({Row("training", 1, {{std::string(2000, 'x'), 1}})}, 0,
          "is 2000 bytes, over the limit of 1024");
  // What is wrong with the auth is said first, as before the rows were checked off the loop.
  refused({Row("bogus", -1, {{"", 1}})}, 2, "auth.rank: 2 is not a rank of allocation");
  // Nothing of a refused report is stored; every known group is accepted.
  EXPECT_EQ(Metrics(*h_, "").metrics_size(), 0);
  ASSERT_TRUE(h_->ReportMetrics(launch_, {Row("training", 1, {{"loss", 1}}),
                                          Row("validation", 1, {{"validation_loss", 1}}),
                                          Row("timings", 1, {{"train_batch_ms", 1}}),
                                          Row("progress", 1, {{"progress", 0.01}})},
                                /*rank=*/1)
                  .ok());
  EXPECT_EQ(Metrics(*h_, "").metrics_size(), 4);
}

// What a worker reports is summarised on its trial and read back whole, by group, or
// downsampled; an allocation's token reports for its own trial only. (Moved from
// http_server_test's TrialMetricsTimingsLogsAndWorkerTokens.)
TEST_P(MetricsManagerTest, RowsAreSummarisedAndReadBackAndATokenReportsForItsTrialOnly) {
  std::vector<v1::Metrics> rows;
  for (int b = 1; b <= 50; ++b) {
    rows.push_back(Row("training", b * 10, {{"loss", 2.0 / b}}));
    if (b % 10 == 0) {
      rows.push_back(Row("validation", b * 10, {{"validation_loss", 1.0 / b}}));
      rows.push_back(Row("timings", b * 10, {{"train_batch_mean_ms", 3.5}}));
    }
  }
  ASSERT_TRUE(h_->ReportMetrics(launch_, rows).ok());
  v1::Trial t = GetTrial(*h_);
  EXPECT_EQ(t.total_batches(), 500);
  EXPECT_EQ(t.training_summary().at("loss").count(), 50);
  EXPECT_EQ(Metrics(*h_, "").metrics_size(), 60);
  v1::GetTrialMetricsResponse timings = Metrics(*h_, "timings");
  ASSERT_EQ(timings.metrics_size(), 5);
  EXPECT_EQ(timings.metrics(0).values().at("train_batch_mean_ms"), 3.5);
  v1::GetTrialMetricsRequest thin_req;
  thin_req.set_trial_id(trial_);
  thin_req.set_group("training");
  thin_req.set_max_points(10);
  v1::GetTrialMetricsResponse thin;
  absl::Status st = Read(*h_, thin_req, &thin);
  ASSERT_TRUE(st.ok()) << st;
  ASSERT_EQ(thin.metrics_size(), 10);
  EXPECT_EQ(thin.metrics(0).total_batches(), 10);
  EXPECT_EQ(thin.metrics(9).total_batches(), 500);
  for (const auto& m : thin.metrics()) EXPECT_EQ(m.group(), "training");

  // A second trial on another agent.
  const int64_t other = h_->CreateExperiment("other");
  std::string b_session = h_->Register("b", 1);
  v1::LaunchCommand two = h_->NextLaunch("b", b_session);
  ASSERT_EQ(two.trial_id(), other);
  auto report = [&](const v1::LaunchCommand& as, const std::string& token, int64_t for_trial) {
    v1::ReportMetricsRequest req;
    req.mutable_auth()->set_allocation_id(as.allocation_id());
    req.mutable_auth()->set_token(token);
    req.set_trial_id(for_trial);
    for (const auto& m : rows) *req.add_metrics() = m;
    std::optional<absl::Status> acked;
    h_->Turn([&] { h_->metrics.Report(req, [&](absl::Status s) { acked = s; }); });
    h_->loop.RunSync([] {});
    return acked.value_or(absl::InternalError("not acknowledged"));
  };
  const std::string one_token = launch_.env().at("DET_ALLOCATION_TOKEN");
  // Trial 1's allocation token cannot report for trial 2, nor pose as trial 2's allocation.
  st = report(launch_, one_token, other);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr(absl::StrCat("only for trial ", trial_)));
  st = report(two, one_token, other);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_EQ(h_->Trial(other).total_batches(), 0);  // Nothing stored for it.
  EXPECT_EQ(GetTrial(*h_).training_summary().at("loss").count(), 50);
}

// Reports from many threads at once (as gRPC's threads call Report) are all stored and
// acknowledged, and the trial's summaries are exactly those of every row applied in turn:
// count, min, max and last of each metric, total_batches the largest. A report whose token
// is wrong is refused among them and stores nothing.
TEST_P(MetricsManagerTest, ReportsFromManyThreadsAreAllStoredAndSummarisedExactly) {
  constexpr int kThreads = 8, kReports = 20, kRows = 50;
  const std::string token = launch_.env().at("DET_ALLOCATION_TOKEN");
  absl::Mutex mu;
  int acked = 0, refused = 0;
  std::vector<absl::Status> failures;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kReports; ++r) {
        v1::ReportMetricsRequest req;
        req.mutable_auth()->set_allocation_id(launch_.allocation_id());
        // Thread 0's last report carries a wrong token.
        const bool bad = t == 0 && r == kReports - 1;
        req.mutable_auth()->set_token(bad ? "not-the-token" : token);
        req.mutable_auth()->set_rank(t % 2);
        req.set_trial_id(trial_);
        for (int i = 0; i < kRows; ++i) {
          // Values t*10000 + r*100 + i: distinct, with NaN on thread 1 (counted, never min/max).
          const double v = t == 1 && i == 0 ? kNaN : t * 10000 + r * 100 + i;
          *req.add_metrics() = Row(i % 10 == 0 ? "validation" : "training",
                                   static_cast<int64_t>(std::isnan(v) ? 1 : v),
                                   {{i % 10 == 0 ? "validation_loss" : "loss", v}});
        }
        absl::Notification done;
        absl::Status status;
        h_->metrics.Report(req, [&](absl::Status st) {
          status = st;
          done.Notify();
        });
        // `req` must outlive nothing past Report; the answer comes after the flush.
        EXPECT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
        absl::MutexLock l(&mu);
        if (bad) {
          if (status.code() == absl::StatusCode::kPermissionDenied) ++refused;
          else failures.push_back(status);
        } else if (status.ok()) {
          ++acked;
        } else {
          failures.push_back(status);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(failures, ::testing::IsEmpty());
  EXPECT_EQ(acked, kThreads * kReports - 1);
  EXPECT_EQ(refused, 1);
  const int stored_reports = kThreads * kReports - 1;
  EXPECT_EQ(Metrics(*h_, "").metrics_size(), stored_reports * kRows);
  v1::Trial trial = GetTrial(*h_);
  const v1::MetricSummary& loss = trial.training_summary().at("loss");
  EXPECT_EQ(loss.count(), stored_reports * kRows * 9 / 10);
  EXPECT_EQ(loss.min(), 1);                          // thread 0, report 0, row 1
  EXPECT_EQ(loss.max(), 7 * 10000 + 19 * 100 + 49);  // thread 7's last report's last row
  const v1::MetricSummary& val = trial.validation_summary().at("validation_loss");
  EXPECT_EQ(val.count(), stored_reports * kRows / 10);
  EXPECT_EQ(val.min(), 0);  // thread 0, report 0, row 0; thread 1's row 0 is NaN
  EXPECT_EQ(val.max(), 7 * 10000 + 19 * 100 + 40);
  EXPECT_EQ(trial.total_batches(), 7 * 10000 + 19 * 100 + 49);
  // `last` is the value of the last row stored, whichever thread's report that was.
  v1::GetTrialMetricsResponse rows = Metrics(*h_, "training");
  ASSERT_FALSE(rows.metrics().empty());
  EXPECT_EQ(loss.last(), rows.metrics(rows.metrics_size() - 1).values().at("loss"));
}

}  // namespace
}  // namespace det::master
