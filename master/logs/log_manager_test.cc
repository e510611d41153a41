// LogManager on an EventLoop driven by a FakeClock, over an InMemoryStore: no sockets, no
// sleeps (the test runs each step on the loop with RunSync).
#include "master/logs/log_manager.h"

#include <atomic>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/clock/clock.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/fault_injecting_store.h"
#include "master/store/in_memory_store.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using testing::Pending;
using det::testing::WaitUntil;

class LogManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::Experiment e;
    e.set_name("e");
    std::vector<v1::Trial> trials(1);
    ASSERT_TRUE(store_.InsertExperiment(e, "", &trials).ok());
    trial_ = trials[0].id();
    loop_.Start();
  }
  void TearDown() override {
    loop_.RunSync([this] { logs_.AnswerAll(); });
    reads_.Stop();
    loop_.RunSync([] {});
    loop_.Stop();
  }
  // Until the poll read on the pool came back to wait on the loop.
  ::testing::AssertionResult PollsWaiting(size_t n) {
    return WaitUntil(absl::StrCat(n, " polls waiting"), [&] {
      size_t waiting = 0;
      loop_.RunSync([&] { waiting = logs_.waiting_polls(); });
      return waiting == n;
    }, absl::Seconds(10));
  }

  FakeClock clock_;
  EventLoop loop_{clock_};
  InMemoryStore store_;
  StoreReads reads_{store_, 2};
  int64_t trial_ = 0;
  std::atomic<bool> ended_{false};
  LogManager logs_{clock_, loop_, store_, reads_, [this](int64_t id) -> absl::StatusOr<bool> {
                     if (id != trial_) return absl::NotFoundError("trial not found");
                     return ended_;
                   }};
};

TEST_F(LogManagerTest, EventsAreStoredByTheFlushAndAnswerAWaitingPoll) {
  v1::GetTrialLogsRequest req;
  req.set_trial_id(trial_);
  req.set_wait_ms(30000);
  v1::GetTrialLogsResponse resp;
  Pending poll;
  loop_.RunSync([&] { logs_.Read(req, &resp, poll.Callback(), /*no_wait=*/false); });
  EXPECT_FALSE(poll.done.HasBeenNotified());  // No lines yet: it waits.
  loop_.RunSync([&] {
    logs_.Event(trial_, "allocation 1.0 scheduled");
    EXPECT_TRUE(logs_.HasPendingEvents());
    logs_.FlushEvents();
  });
  ASSERT_TRUE(poll.Wait());
  ASSERT_TRUE(poll.status.ok()) << poll.status;
  ASSERT_EQ(resp.lines_size(), 1);
  EXPECT_EQ(resp.lines(0).message(), "allocation 1.0 scheduled");
  EXPECT_EQ(resp.lines(0).stream(), "master");
  EXPECT_FALSE(resp.done());
}

TEST_F(LogManagerTest, APollTimesOutOnTheClockAndAnEndedTrialIsDone) {
  v1::GetTrialLogsRequest req;
  req.set_trial_id(trial_);
  req.set_wait_ms(5000);
  v1::GetTrialLogsResponse resp;
  Pending poll;
  loop_.RunSync([&] { logs_.Read(req, &resp, poll.Callback(), false); });
  ASSERT_TRUE(PollsWaiting(1));
  clock_.Advance(absl::Seconds(6));
  loop_.Wake();
  ASSERT_TRUE(poll.Wait());
  EXPECT_TRUE(poll.status.ok());
  EXPECT_EQ(resp.lines_size(), 0);

  ended_ = true;
  Pending now;
  loop_.RunSync([&] { logs_.Read(req, &resp, now.Callback(), false); });
  ASSERT_TRUE(now.Wait());  // Answered without waiting.
  EXPECT_TRUE(now.status.ok()) << now.status;
  EXPECT_TRUE(resp.done());
}

TEST_F(LogManagerTest, AnUnknownTrialIsNotFoundAndRefusedLinesAreAnError) {
  v1::GetTrialLogsRequest req;
  req.set_trial_id(trial_ + 100);
  v1::GetTrialLogsResponse resp;
  Pending read;
  loop_.RunSync([&] { logs_.Read(req, &resp, read.Callback(), false); });
  ASSERT_TRUE(read.Wait());
  EXPECT_EQ(read.status.code(), absl::StatusCode::kNotFound);

  std::vector<v1::LogLine> lines(1);
  lines[0].set_trial_id(trial_);
  lines[0].set_message("hello");
  absl::Status st;
  loop_.RunSync([&] { st = logs_.AddLines(&lines, {trial_}); });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(logs_.lines_stored_total(), 1);
}

// A full database (SqliteStore answers RESOURCE_EXHAUSTED) loses nothing silently: shipped
// lines are refused as UNAVAILABLE (the agent keeps and resends them); the master's own
// events stay pending and are stored once the store takes them again; beyond the bound the
// oldest are dropped, counted and noted.
TEST_F(LogManagerTest, AFullStoreLosesNoLineSilently) {
  FaultInjectingStore full(store_);
  full.SetFaultCode(absl::StatusCode::kResourceExhausted);
  std::vector<std::pair<int64_t, int64_t>> dropped;
  LogManager logs(clock_, loop_, full, reads_, [](int64_t) -> absl::StatusOr<bool> { return false; });
  logs.SetLinesDropped([&](int64_t trial, int64_t count, const std::string&) {
    dropped.emplace_back(trial, count);
  });
  full.FailWrites(true, "AddLogs");

  absl::Status shipped;
  loop_.RunSync([&] {
    std::vector<v1::LogLine> lines(2);
    for (auto& l : lines) {
      l.set_trial_id(trial_);
      l.set_stream("stdout");
      l.set_message("worker line");
    }
    shipped = logs.AddLines(&lines, {trial_});
  });
  EXPECT_TRUE(absl::IsUnavailable(shipped)) << shipped;
  EXPECT_THAT(shipped.message(), HasSubstr("could not store 2 log lines (send them again)"));

  const size_t bound = LogManager::kMaxPendingEvents;
  loop_.RunSync([&] {
    for (size_t i = 0; i < bound + 3; ++i) logs.Event(trial_, absl::StrCat("event ", i));
    logs.FlushEvents();
  });
  EXPECT_EQ(dropped, (std::vector<std::pair<int64_t, int64_t>>{{trial_, 3}}));
  loop_.RunSync([&] { EXPECT_TRUE(logs.HasPendingEvents()); });

  full.FailWrites(false, "AddLogs");
  clock_.Advance(absl::Seconds(1));
  loop_.RunSync([&] { logs.FlushEvents(); });
  auto stored = store_.GetLogs(trial_, 0, 5, std::nullopt);
  ASSERT_TRUE(stored.ok());
  ASSERT_EQ(stored->size(), 5u);
  EXPECT_EQ((*stored)[0].message(),
            "[3 of the master's lines about this trial were dropped: the database refused them]");
  EXPECT_EQ((*stored)[1].message(), "event 3");
  auto all = store_.GetLogs(trial_, 0, 20000, std::nullopt);
  EXPECT_EQ(all->size(), bound + 1);
  loop_.RunSync([&] { EXPECT_FALSE(logs.HasPendingEvents()); });
}

}  // namespace
}  // namespace det::master
