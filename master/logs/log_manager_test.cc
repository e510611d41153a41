// LogManager on an EventLoop driven by a FakeClock, over an InMemoryStore: no sockets, no
// sleeps (the test runs each step on the loop with RunSync).
#include "master/logs/log_manager.h"

#include <memory>

#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using testing::Pending;

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
    loop_.Stop();
  }

  FakeClock clock_;
  EventLoop loop_{clock_};
  InMemoryStore store_;
  int64_t trial_ = 0;
  bool ended_ = false;
  LogManager logs_{clock_, loop_, store_, [this](int64_t id) -> absl::StatusOr<bool> {
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
  clock_.Advance(absl::Seconds(6));
  loop_.Wake();
  ASSERT_TRUE(poll.Wait());
  EXPECT_TRUE(poll.status.ok());
  EXPECT_EQ(resp.lines_size(), 0);

  ended_ = true;
  Pending now;
  loop_.RunSync([&] { logs_.Read(req, &resp, now.Callback(), false); });
  ASSERT_TRUE(now.Wait(absl::ZeroDuration()));  // Answered in the same turn.
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

}  // namespace
}  // namespace det::master
