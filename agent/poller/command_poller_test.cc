// The poller against a fake master: commands handed over in order, a forgotten session,
// and the thread ending on Stop().
#include "agent/poller/command_poller.h"

#include <thread>

#include "agent/testing/fake_master_client.h"
#include "common/clock/clock.h"
#include "common/testing/status_matchers.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::det::testing::StatusIs;
using ::det::testing::WaitUntil;
using ::testing::ElementsAre;

class RecordingHandler : public CommandHandler {
 public:
  void Launch(const v1::LaunchCommand& launch) override {
    absl::MutexLock l(&mu_);
    seen_.push_back("launch " + launch.allocation_id());
  }
  void Kill(const std::string& id, const std::string& reason, absl::Duration grace) override {
    absl::MutexLock l(&mu_);
    seen_.push_back(absl::StrCat("kill ", id, " (", reason, ") ", absl::FormatDuration(grace)));
  }
  std::vector<std::string> seen() {
    absl::MutexLock l(&mu_);
    return seen_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> seen_ ABSL_GUARDED_BY(mu_);
};

class CommandPollerTest : public ::testing::Test {
 protected:
  CommandPollerTest() : session_(Config(), master_, {}, std::nullopt), stop_(clock_) {}
  static config::AgentConfig Config() {
    config::AgentConfig c;
    c.agent_id = "agent-a";
    c.advertise_address = "127.0.0.1";
    c.work_dir = "/nonexistent";
    return c;
  }

  FakeMasterClient master_;
  FakeClock clock_;
  Session session_;
  StopSignal stop_;
  RecordingHandler handler_;
};

TEST_F(CommandPollerTest, CommandsAreHandedOverInOrder) {
  v1::AgentCommand launch;
  launch.mutable_launch()->set_allocation_id("1.0");
  v1::AgentCommand kill;
  kill.mutable_kill()->set_allocation_id("2.0");
  kill.mutable_kill()->set_reason("user");
  kill.mutable_kill()->set_grace_ms(1500);
  master_.Send(launch);
  master_.Send(kill);
  CommandPoller poller("agent-a", master_, session_, handler_, stop_);
  ASSERT_TRUE(poller.PollOnce("s").ok());
  EXPECT_THAT(handler_.seen(), ElementsAre("launch 1.0", "kill 2.0 (user) 1.5s"));
}

TEST_F(CommandPollerTest, ASessionTheMasterDoesNotKnowIsDropped) {
  ASSERT_TRUE(session_.Register({}).ok());
  ASSERT_EQ(session_.id(), "session-1");
  CommandPoller poller("agent-a", master_, session_, handler_, stop_);
  master_.FailPolls(absl::UnavailableError("master down"));
  EXPECT_THAT(poller.PollOnce("session-1"),
              StatusIs(absl::StatusCode::kUnavailable, "master down"));
  EXPECT_EQ(session_.id(), "session-1");
  master_.FailPolls(absl::NotFoundError("no session session-1"));
  EXPECT_THAT(poller.PollOnce("session-1"),
              StatusIs(absl::StatusCode::kNotFound, "no session session-1"));
  EXPECT_EQ(session_.id(), "");
}

TEST_F(CommandPollerTest, RunEndsOnStop) {
  PollerOptions options;
  options.poll_wait = absl::Milliseconds(10);
  ASSERT_TRUE(session_.Register({}).ok());
  CommandPoller poller("agent-a", master_, session_, handler_, stop_, options);
  v1::AgentCommand launch;
  launch.mutable_launch()->set_allocation_id("1.0");
  master_.Send(launch);
  std::thread t([&] { poller.Run(); });
  EXPECT_TRUE(WaitUntil(
      "the launch is handled", [&] { return handler_.seen().size() == 1; }, absl::Seconds(30)));
  stop_.Stop();
  master_.Shutdown();  // as the agent does: ends the poll in flight
  t.join();
  EXPECT_THAT(handler_.seen(), ElementsAre("launch 1.0"));
}

}  // namespace
}  // namespace det::agent
