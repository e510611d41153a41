// The whole agent with fake workers (FakeProcessLauncher), a fake master and a FakeClock that
// a driver thread moves 20 ms per real millisecond: no process is started and the kill grace
// passes in fake time.
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "agent/agent.h"
#include "agent/testing/fake_master_client.h"
#include "agent/testing/fake_process_launcher.h"
#include "agent/testing/test_dir.h"
#include "common/clock/clock.h"
#include "common/testing/wait_until.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace det::agent {
namespace {

using ::det::testing::WaitUntil;
using ::testing::Contains;
using ::testing::ElementsAre;

constexpr absl::Duration kWait = absl::Seconds(30);

// Moves `clock` forward until destroyed.
class ClockDriver {
 public:
  explicit ClockDriver(FakeClock& clock)
      : thread_([this, &clock] {
          while (!done_.HasBeenNotified()) {
            clock.Advance(absl::Milliseconds(20));
            done_.WaitForNotificationWithTimeout(absl::Milliseconds(1));
          }
        }) {}
  ~ClockDriver() {
    done_.Notify();
    thread_.join();
  }

 private:
  absl::Notification done_;
  std::thread thread_;
};

class AgentFakeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshTestDir();
    config_.master = "127.0.0.1:1";
    config_.advertise_address = "127.0.0.1";
    config_.agent_id = "agent-a";
    config_.work_dir = dir_ + "/work";
    config_.kill_grace = absl::Seconds(10);
    config_.heartbeat_interval = absl::Milliseconds(100);
    options_.shim_path = "/nonexistent/det-agent";
    options_.clock = &clock_;
    options_.launcher = &launcher_;
    options_.max_real_wait = absl::Milliseconds(5);
    for (int i = 0; i < 2; ++i) {
      slots_.emplace_back().set_id(absl::StrCat(i));
      slots_.back().set_type("cpu");
    }
  }

  v1::AgentCommand Launch(const std::string& id, int ranks) {
    v1::AgentCommand cmd;
    v1::LaunchCommand* l = cmd.mutable_launch();
    l->set_allocation_id(id);
    l->set_trial_id(1);
    l->add_argv("./train.sh");
    for (int r = 0; r < ranks; ++r) {
      v1::RankPlacement* p = l->add_ranks();
      p->set_rank(r);
      p->set_agent_id("agent-a");
      p->add_slot_ids(absl::StrCat(r));
    }
    l->set_world_size(ranks);
    return cmd;
  }

  std::string dir_;
  config::AgentConfig config_;
  AgentOptions options_;
  std::vector<v1::Slot> slots_;
  FakeClock clock_;
  FakeProcessLauncher launcher_;
  FakeMasterClient master_;
};

TEST_F(AgentFakeTest, AFailedRankStopsTheOtherWhichIsKilledAfterTheGrace) {
  ClockDriver driver(clock_);
  Agent agent(config_, master_, slots_, options_);
  absl::Status result;
  std::thread run([&] { result = agent.Run(); });
  master_.Send(Launch("1.0", 2));
  ASSERT_TRUE(WaitUntil(
      "both ranks launched", [&] { return master_.launched().size() == 1; }, kWait));
  EXPECT_THAT(master_.launched()[0].ranks(), ElementsAre(0, 1));
  ASSERT_EQ(launcher_.workers().size(), 2u);
  EXPECT_EQ(launcher_.workers()[0]->spec().cwd, config_.work_dir + "/1.0");
  launcher_.workers()[0]->Exit(ExitStatus{3, 0});
  ASSERT_TRUE(WaitUntil(
      "both exits reported", [&] { return master_.exits().size() == 2; }, kWait));
  std::vector<int> signals = launcher_.workers()[1]->signals();
  EXPECT_EQ(signals.front(), SIGTERM);
  EXPECT_EQ(signals.back(), SIGKILL);
  EXPECT_EQ(master_.exits()[0].exit_code(), 3);
  EXPECT_EQ(master_.exits()[1].signal(), SIGKILL);
  EXPECT_FALSE(master_.exits()[1].agent_stopping());
  ASSERT_TRUE(WaitUntil(
      "the allocation's directories are removed",
      [&] { return !std::filesystem::exists(config_.work_dir + "/run/1.0"); }, kWait));
  agent.Stop();
  run.join();
  EXPECT_TRUE(result.ok()) << result;
}

TEST_F(AgentFakeTest, StopStopsTheWorkersAndReportsThemAsStoppedByTheAgent) {
  ClockDriver driver(clock_);
  Agent agent(config_, master_, slots_, options_);
  std::thread run([&] { agent.Run().IgnoreError(); });
  master_.Send(Launch("1.0", 1));
  ASSERT_TRUE(WaitUntil(
      "the rank launched", [&] { return master_.launched().size() == 1; }, kWait));
  launcher_.workers()[0]->DieOn({SIGTERM});
  agent.Stop();
  run.join();
  ASSERT_EQ(master_.exits().size(), 1u);
  EXPECT_EQ(master_.exits()[0].signal(), SIGTERM);
  EXPECT_TRUE(master_.exits()[0].agent_stopping());
}

TEST_F(AgentFakeTest, ANewAgentAdoptsTheWorkersADetachedOneLeft) {
  ClockDriver driver(clock_);
  {
    Agent agent(config_, master_, slots_, options_);
    std::thread run([&] { agent.Run().IgnoreError(); });
    master_.Send(Launch("1.0", 1));
    ASSERT_TRUE(WaitUntil(
        "the rank launched", [&] { return master_.launched().size() == 1; }, kWait));
    agent.Detach();
    run.join();
  }
  EXPECT_FALSE(launcher_.workers()[0]->exited());
  EXPECT_TRUE(launcher_.workers()[0]->signals().empty());
  FakeMasterClient master2;
  Agent agent(config_, master2, slots_, options_);
  std::thread run([&] { agent.Run().IgnoreError(); });
  ASSERT_TRUE(WaitUntil(
      "the new agent registers", [&] { return master2.registers().size() == 1; }, kWait));
  EXPECT_THAT(master2.registers()[0].running_allocations(), ElementsAre("1.0"));
  EXPECT_THAT(launcher_.adopted(), ElementsAre(launcher_.workers()[0]->pid()));
  launcher_.workers()[0]->Exit(ExitStatus{0, 0});
  ASSERT_TRUE(WaitUntil(
      "the exit is reported", [&] { return master2.exits().size() == 1; }, kWait));
  EXPECT_EQ(master2.exits()[0].exit_code(), 0);
  EXPECT_THAT(master2.AllLines(), ::testing::HasSubstr("agent restarted; watching the worker"));
  agent.Stop();
  run.join();
}

TEST_F(AgentFakeTest, AWorkerThatCannotStartExits127WithTheReason) {
  ClockDriver driver(clock_);
  Agent agent(config_, master_, slots_, options_);
  std::thread run([&] { agent.Run().IgnoreError(); });
  launcher_.FailStarts(absl::PermissionDeniedError("cannot exec the shim"));
  master_.Send(Launch("1.0", 2));
  ASSERT_TRUE(WaitUntil(
      "both exits", [&] { return master_.exits().size() == 2; }, kWait));
  EXPECT_EQ(master_.exits()[0].exit_code(), 127);
  EXPECT_EQ(master_.exits()[0].message(), "cannot exec the shim");
  EXPECT_TRUE(master_.launched().empty());
  EXPECT_THAT(master_.Lines(1, "agent"), Contains("cannot start worker: cannot exec the shim"));
  agent.Stop();
  run.join();
}

}  // namespace
}  // namespace det::agent
