// AllocationManager with the managers a run's life involves (master/testing:
// manager_harness: experiments, checkpoints, scheduling, agent liveness), on a FakeClock
// loop over an InMemoryStore: no sockets, no sleeps.
#include "master/allocations/allocation_manager.h"

#include <memory>
#include <string>

#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using testing::ManagerHarness;

class AllocationManagerTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(h_.Start().ok()); }

  FakeClock clock_;
  InMemoryStore store_;
  ManagerHarness h_{testing::LoopbackMasterConfig("/unused"), store_, clock_};
  const config::MasterConfig& config_ = h_.config;
};

TEST_F(AllocationManagerTest, ARunWaitsForItsSilentAgentThenIsRequeuedWithoutCountingARestart) {
  const int64_t trial = h_.CreateExperiment("lost-agent");
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_QUEUED);
  h_.Register("a", 1);  // The turn's scheduling pass places the trial.
  v1::Trial started = h_.Trial(trial);
  ASSERT_EQ(started.state(), v1::STATE_STARTING);
  ASSERT_EQ(started.allocation().ranks_size(), 1);
  EXPECT_EQ(started.allocation().ranks(0).agent_id(), "a");

  // The agent stops heartbeating: its run is kept for agent_reconnect_wait.
  h_.Advance(config_.agent_timeout + absl::Seconds(1));
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_STARTING);
  EXPECT_THAT(h_.Logs(trial), HasSubstr("agent a stopped answering"));
  h_.Advance(config_.agent_reconnect_wait - absl::Seconds(1));
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_STARTING);

  // It did not return: the run is lost, the trial queued again, not as a restart.
  h_.Advance(absl::Seconds(2));
  v1::Trial requeued = h_.Trial(trial);
  EXPECT_EQ(requeued.state(), v1::STATE_QUEUED);
  EXPECT_EQ(requeued.restarts(), 0);
  EXPECT_EQ(requeued.run_id(), 1);
  EXPECT_THAT(h_.Logs(trial), HasSubstr("lost; rescheduling (not counted as a restart)"));

  // A fresh agent takes the next run.
  h_.Register("b", 1);
  v1::Trial rerun = h_.Trial(trial);
  EXPECT_EQ(rerun.state(), v1::STATE_STARTING);
  EXPECT_EQ(rerun.allocation().id(), absl::StrCat(trial, ".1"));
  EXPECT_EQ(rerun.allocation().ranks(0).agent_id(), "b");
}

TEST_F(AllocationManagerTest, AnAgentThatReturnsInTimeKeepsItsRun) {
  const int64_t trial = h_.CreateExperiment("lost-agent");
  h_.Register("a", 1);
  const std::string allocation = h_.Trial(trial).allocation().id();
  h_.Advance(config_.agent_timeout + absl::Seconds(1));
  v1::RegisterResponse resp;
  h_.Register("a", 1, {allocation}, &resp);
  EXPECT_EQ(resp.kill_allocations_size(), 0);
  h_.Advance(config_.agent_reconnect_wait + absl::Seconds(1));
  v1::Trial kept = h_.Trial(trial);
  EXPECT_EQ(kept.state(), v1::STATE_STARTING);
  EXPECT_EQ(kept.allocation().id(), allocation);
  EXPECT_THAT(h_.Logs(trial), HasSubstr("agent a reattached"));
}

}  // namespace
}  // namespace det::master
