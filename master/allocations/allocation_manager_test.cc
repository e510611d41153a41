// The managers of a run's life composed as the master composes them (experiments,
// allocations, checkpoints, scheduling, agent liveness), on an EventLoop driven by a
// FakeClock over an InMemoryStore: no sockets, no sleeps. Each step is one turn on the
// loop (the call, then the end of the turn: scheduling pass, events).
#include "master/allocations/allocation_manager.h"

#include <memory>
#include <string>

#include "common/clock/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/cluster/agent_liveness.h"
#include "master/experiments/experiment_manager.h"
#include "master/scheduling/scheduling_service.h"
#include "master/store/in_memory_store.h"
#include "master/testing/master_testing.h"
#include "master/views/views.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;

class AllocationManagerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    turns_.SetSchedulePass([this] { scheduling_.SchedulePass(); });
    turns_.SetTurnEnd([this] {
      if (logs_.HasPendingEvents()) logs_.FlushEvents();
    });
    loop_.Start();
    Turn([this] { liveness_.CheckAgents(); });
  }
  void TearDown() override {
    loop_.RunSync([this] {
      registry_.shutting_down = true;
      logs_.AnswerAll();
      agents_.FailPolls(absl::UnavailableError("test ends"));
    });
    loop_.Stop();
  }

  // Runs `fn` on the loop as one turn.
  void Turn(const std::function<void()>& fn) {
    loop_.RunSync([&] {
      fn();
      turns_.EndTurn();
    });
  }
  // Moves the clock on; the timers now due run before the next turn.
  void Advance(absl::Duration d) {
    clock_.Advance(d);
    loop_.Wake();
    Turn([] {});
  }
  int64_t CreateExperiment() {
    v1::CreateExperimentRequest req;
    req.set_config_yaml(testing::ExperimentYaml("lost-agent", 1));
    v1::CreateExperimentResponse resp;
    absl::Status st;
    Turn([&] { st = experiments_.Create("alice", req, &resp); });
    EXPECT_TRUE(st.ok()) << st;
    return registry_.experiments.at(resp.experiment().id()).trial_ids.at(0);
  }
  void Register(const std::string& id) {
    v1::RegisterResponse resp;
    absl::Status st;
    Turn([&] { st = liveness_.Register(testing::RegisterRequest(id, 1), &resp); });
    ASSERT_TRUE(st.ok()) << st;
  }
  v1::Trial Trial(int64_t id) {
    v1::Trial t;
    loop_.RunSync([&] { t = registry_.TrialView(registry_.trials.at(id)); });
    return t;
  }
  std::string Events(int64_t id) {
    std::string out;
    loop_.RunSync([&] {
      auto lines = store_.GetLogs(id, 0, 1000, std::nullopt);
      for (const auto& l : *lines) out += l.message() + "\n";
    });
    return out;
  }

  config::MasterConfig config_ = testing::LoopbackMasterConfig("/unused");
  FakeClock clock_;
  InMemoryStore store_;
  EventLoop loop_{clock_};
  Turns turns_{loop_};
  AgentManager agents_{clock_, loop_, store_,
                       AgentManager::Options{config_.cluster_secret, config_.agent_timeout,
                                             absl::Seconds(5)}};
  Templates templates_{store_, clock_};
  ExperimentRegistry registry_;
  LogManager logs_{clock_, loop_, store_, [this](int64_t id) -> absl::StatusOr<bool> {
                     return views::Terminal(registry_.trials.at(id).trial.state());
                   }};
  CheckpointManager checkpoints_{clock_, turns_, store_, agents_, logs_, registry_};
  ExperimentManager experiments_{
      config_, clock_, turns_, store_, agents_, templates_, logs_, checkpoints_, registry_,
      [this](TrialState& t, const std::string& reason) { allocations_.Kill(t, reason); }};
  AllocationManager allocations_{clock_, turns_, store_, agents_, logs_, registry_, experiments_};
  SchedulingService scheduling_{config_, turns_, agents_, logs_,
                                registry_, allocations_, checkpoints_};
  AgentLiveness liveness_{config_, clock_, turns_, store_, agents_,
                          registry_, allocations_, checkpoints_};
};

TEST_F(AllocationManagerTest, ARunWaitsForItsSilentAgentThenIsRequeuedWithoutCountingARestart) {
  const int64_t trial = CreateExperiment();
  EXPECT_EQ(Trial(trial).state(), v1::STATE_QUEUED);
  Register("a");  // The turn's scheduling pass places the trial.
  v1::Trial started = Trial(trial);
  ASSERT_EQ(started.state(), v1::STATE_STARTING);
  ASSERT_EQ(started.allocation().ranks_size(), 1);
  EXPECT_EQ(started.allocation().ranks(0).agent_id(), "a");

  // The agent stops heartbeating: its run is kept for agent_reconnect_wait.
  Advance(config_.agent_timeout + absl::Seconds(1));
  EXPECT_EQ(Trial(trial).state(), v1::STATE_STARTING);
  EXPECT_THAT(Events(trial), HasSubstr("agent a stopped answering"));
  Advance(config_.agent_reconnect_wait - absl::Seconds(1));
  EXPECT_EQ(Trial(trial).state(), v1::STATE_STARTING);

  // It did not return: the run is lost, the trial queued again, not as a restart.
  Advance(absl::Seconds(2));
  v1::Trial requeued = Trial(trial);
  EXPECT_EQ(requeued.state(), v1::STATE_QUEUED);
  EXPECT_EQ(requeued.restarts(), 0);
  EXPECT_EQ(requeued.run_id(), 1);
  EXPECT_THAT(Events(trial), HasSubstr("lost; rescheduling (not counted as a restart)"));

  // A fresh agent takes the next run.
  Register("b");
  v1::Trial rerun = Trial(trial);
  EXPECT_EQ(rerun.state(), v1::STATE_STARTING);
  EXPECT_EQ(rerun.allocation().id(), absl::StrCat(trial, ".1"));
  EXPECT_EQ(rerun.allocation().ranks(0).agent_id(), "b");
}

TEST_F(AllocationManagerTest, AnAgentThatReturnsInTimeKeepsItsRun) {
  const int64_t trial = CreateExperiment();
  Register("a");
  const std::string allocation = Trial(trial).allocation().id();
  Advance(config_.agent_timeout + absl::Seconds(1));
  v1::RegisterResponse resp;
  absl::Status st;
  Turn([&] {
    st = liveness_.Register(testing::RegisterRequest("a", 1, {allocation}), &resp);
  });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(resp.kill_allocations_size(), 0);
  Advance(config_.agent_reconnect_wait + absl::Seconds(1));
  v1::Trial kept = Trial(trial);
  EXPECT_EQ(kept.state(), v1::STATE_STARTING);
  EXPECT_EQ(kept.allocation().id(), allocation);
  EXPECT_THAT(Events(trial), HasSubstr("agent a reattached"));
}

}  // namespace
}  // namespace det::master
