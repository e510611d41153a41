// AllocationManager with the managers a run's life involves (master/testing:
// manager_harness: experiments, checkpoints, scheduling, agent liveness), on a FakeClock
// loop over an InMemoryStore: no sockets, no sleeps.
#include "master/allocations/allocation_manager.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/clock/clock.h"
#include "common/testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "master/store/in_memory_store.h"
#include "master/testing/manager_harness.h"
#include "master/testing/master_testing.h"

namespace det::master {
namespace {

using ::testing::HasSubstr;
using testing::ManagerHarness;
using ::det::testing::StatusIs;

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

// Kill commands among `commands`.
int Kills(const std::vector<v1::AgentCommand>& commands) {
  int n = 0;
  for (const auto& c : commands) n += c.has_kill() ? 1 : 0;
  return n;
}

// Moves the clock on by `d` in 10 s steps, the agent polling (and so heartbeating) at each;
// returns the kill commands it got.
int AdvancePolling(ManagerHarness& h, absl::Duration d, const std::string& agent,
                   const std::string& session) {
  int kills = 0;
  while (d > absl::ZeroDuration()) {
    absl::Duration step = std::min(d, absl::Seconds(10));
    h.Advance(step);
    d -= step;
    kills += Kills(h.Commands(agent, session));
  }
  return kills;
}

// A pause of a run whose script asks should_preempt(): it is told to stop and has the stop
// grace period to checkpoint and exit before the agent gets a kill (SIGTERM); a run that
// never asked is killed at once; a user's kill during the grace period does not wait.
TEST_F(AllocationManagerTest, AScriptThatAsksShouldPreemptGetsTheGracePeriodBeforeSigterm) {
  std::string session = h_.Register("a1", 1);
  const int64_t trial = h_.CreateExperiment("coop");
  v1::LaunchCommand launch = h_.NextLaunch("a1", session);
  const int64_t experiment = h_.Trial(trial).experiment_id();
  h_.Turn([&] { h_.allocations.SetStopGracePeriod(absl::Minutes(3)); });

  // The script asks (its chief's poll).
  v1::ShouldPreemptRequest ask;
  ask.mutable_auth()->set_allocation_id(launch.allocation_id());
  ask.mutable_auth()->set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
  v1::ShouldPreemptResponse answer;
  absl::Status asked;
  h_.Turn([&] { h_.allocations.ShouldPreempt(ask, &answer, [&](absl::Status st) { asked = st; }); });
  ASSERT_TRUE(asked.ok()) << asked;
  EXPECT_FALSE(answer.preempt());

  v1::PauseExperimentRequest pause;
  pause.set_id(experiment);
  v1::PauseExperimentResponse paused;
  absl::Status st;
  h_.Turn([&] { st = h_.experiments.Pause(pause, &paused); });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(Kills(h_.Commands("a1", session)), 0);  // no signal yet
  h_.Turn([&] { h_.allocations.ShouldPreempt(ask, &answer, [&](absl::Status s) { asked = s; }); });
  EXPECT_TRUE(answer.preempt());
  EXPECT_EQ(answer.reason(), "experiment paused");
  EXPECT_THAT(h_.Logs(trial), HasSubstr("through should_preempt(): it has 3m to checkpoint and "
                                        "exit before SIGTERM"));
  EXPECT_EQ(AdvancePolling(h_, absl::Minutes(3) - absl::Seconds(1), "a1", session), 0);
  EXPECT_EQ(AdvancePolling(h_, absl::Seconds(2), "a1", session), 1);
  EXPECT_THAT(h_.Logs(trial), HasSubstr("did not exit within 3m of being asked to stop: SIGTERM"));
}

// A preemption is bounded by its pool's preemption_timeout: a script that asks gets at most
// that long, not the (longer) stop grace period.
TEST_F(AllocationManagerTest, APreemptionsGracePeriodIsAtMostThePoolsTimeout) {
  std::string session = h_.Register("a1", 1);
  const int64_t trial = h_.CreateExperiment("coop-preempted");
  v1::LaunchCommand launch = h_.NextLaunch("a1", session);
  v1::ShouldPreemptRequest ask;
  ask.mutable_auth()->set_allocation_id(launch.allocation_id());
  ask.mutable_auth()->set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
  v1::ShouldPreemptResponse answer;
  h_.Turn([&] { h_.allocations.ShouldPreempt(ask, &answer, [](absl::Status) {}); });
  h_.Turn([&] {
    h_.allocations.Preempt(h_.registry.trials.at(trial), "preempted by trial 9", absl::Seconds(60));
  });
  EXPECT_THAT(h_.Logs(trial), HasSubstr("it has 1m to checkpoint and exit before SIGTERM"));
  EXPECT_EQ(AdvancePolling(h_, absl::Seconds(59), "a1", session), 0);
  EXPECT_EQ(AdvancePolling(h_, absl::Seconds(2), "a1", session), 1);
}

TEST_F(AllocationManagerTest, AScriptThatExitsInItsGracePeriodIsNotSignalled) {
  std::string session = h_.Register("a1", 1);
  const int64_t trial = h_.CreateExperiment("coop-exits");
  v1::LaunchCommand launch = h_.NextLaunch("a1", session);
  v1::ShouldPreemptRequest ask;
  ask.mutable_auth()->set_allocation_id(launch.allocation_id());
  ask.mutable_auth()->set_token(launch.env().at("DET_ALLOCATION_TOKEN"));
  v1::ShouldPreemptResponse answer;
  h_.Turn([&] { h_.allocations.ShouldPreempt(ask, &answer, [](absl::Status) {}); });
  v1::PauseExperimentRequest pause;
  pause.set_id(h_.Trial(trial).experiment_id());
  v1::PauseExperimentResponse paused;
  h_.Turn([&] { ASSERT_TRUE(h_.experiments.Pause(pause, &paused).ok()); });
  ASSERT_TRUE(h_.ReportExit("a1", session, launch.allocation_id(), 0).ok());
  EXPECT_EQ(AdvancePolling(h_, config_.stop_grace_period + absl::Seconds(1), "a1", session), 0);
  EXPECT_THAT(h_.Logs(trial), ::testing::Not(HasSubstr("did not exit within")));
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_PAUSED);
}

TEST_F(AllocationManagerTest, ARunThatNeverAskedIsKilledAtOnceAndAKillEndsTheGrace) {
  std::string session = h_.Register("a1", 2);
  const int64_t first = h_.CreateExperiment("never-asks");
  v1::LaunchCommand launch = h_.NextLaunch("a1", session);
  v1::PauseExperimentRequest pause;
  pause.set_id(h_.Trial(first).experiment_id());
  v1::PauseExperimentResponse paused;
  h_.Turn([&] { ASSERT_TRUE(h_.experiments.Pause(pause, &paused).ok()); });
  EXPECT_EQ(Kills(h_.Commands("a1", session)), 1);  // SIGTERM now: it would not see the ask

  const int64_t second = h_.CreateExperiment("asks-then-killed");
  v1::LaunchCommand other = h_.NextLaunch("a1", session);
  v1::ShouldPreemptRequest ask;
  ask.mutable_auth()->set_allocation_id(other.allocation_id());
  ask.mutable_auth()->set_token(other.env().at("DET_ALLOCATION_TOKEN"));
  v1::ShouldPreemptResponse answer;
  h_.Turn([&] { h_.allocations.ShouldPreempt(ask, &answer, [](absl::Status) {}); });
  pause.set_id(h_.Trial(second).experiment_id());
  h_.Turn([&] { ASSERT_TRUE(h_.experiments.Pause(pause, &paused).ok()); });
  EXPECT_EQ(Kills(h_.Commands("a1", session)), 0);
  v1::KillExperimentRequest kill;
  kill.set_id(h_.Trial(second).experiment_id());
  h_.Turn([&] { ASSERT_TRUE(h_.experiments.Kill(kill).ok()); });
  EXPECT_EQ(Kills(h_.Commands("a1", session)), 1);  // the kill does not wait for the grace
}

// An agent reports and ships lines only for the ranks placed on it (issue 15: an agent
// with the cluster secret ended another agent's run and wrote into any trial's log).
TEST_F(AllocationManagerTest, AnotherAgentCannotReportOrShipForARunThatIsNotOnIt) {
  const int64_t trial = h_.CreateExperiment("victim");
  const std::string session = h_.Register("a", 1);
  const std::string rogue = h_.Register("rogue", 0);
  const std::string allocation = h_.Trial(trial).allocation().id();
  ASSERT_EQ(h_.Trial(trial).allocation().ranks(0).agent_id(), "a");

  absl::Status launched;
  absl::Status allowed;
  h_.Turn([&] {
    v1::ReportLaunchedRequest req;
    req.set_agent_id("rogue");
    req.set_session_id(rogue);
    req.set_allocation_id(allocation);
    req.add_ranks(0);
    launched = h_.allocations.ReportLaunched(req);
    allowed = h_.allocations.CheckAgentReport("a", allocation, 0);
  });
  EXPECT_TRUE(absl::IsPermissionDenied(launched)) << launched;
  EXPECT_THAT(launched.message(),
              HasSubstr("agent rogue may report only for allocations placed on it: rank 0 of "
                        "allocation " + allocation + " runs on agent a"));
  EXPECT_TRUE(allowed.ok()) << allowed;
  // Its exit report changes nothing.
  EXPECT_TRUE(h_.ReportExit("rogue", rogue, allocation, 0).ok());
  v1::Trial kept = h_.Trial(trial);
  EXPECT_EQ(kept.state(), v1::STATE_STARTING);
  EXPECT_EQ(kept.allocation().id(), allocation);

  // Lines: not of a run on it, not into another trial, never the master's stream.
  auto ship = [&](const std::string& agent, const std::string& alloc, int64_t into,
                  const std::string& stream) {
    absl::Status st;
    h_.Turn([&] {
      std::vector<v1::LogLine> lines(1);
      lines[0].set_agent_id(agent);
      lines[0].set_allocation_id(alloc);
      lines[0].set_trial_id(into);
      lines[0].set_stream(stream);
      lines[0].set_message("hello from " + agent);
      st = h_.logs.AddLines(&lines, {into});
    });
    return st;
  };
  absl::Status st = ship("rogue", allocation, trial, "stdout");
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  st = ship("rogue", "999.0", trial, "stdout");
  EXPECT_THAT(st.message(), HasSubstr("the master placed no allocation '999.0'"));
  st = ship("a", allocation, trial, "master");
  EXPECT_TRUE(absl::IsPermissionDenied(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("may not claim the master's stream 'master'"));
  EXPECT_THAT(h_.Logs(trial), ::testing::Not(HasSubstr("hello from")));
  EXPECT_TRUE(ship("a", allocation, trial, "stdout").ok());
  EXPECT_THAT(h_.Logs(trial), HasSubstr("hello from a"));

  // The run's own agent ends it; lines of the ended run still need their agent.
  ASSERT_TRUE(h_.ReportExit("a", session, allocation, 0).ok());
  EXPECT_EQ(h_.Trial(trial).state(), v1::STATE_COMPLETED);
  EXPECT_TRUE(absl::IsPermissionDenied(ship("rogue", allocation, trial, "stdout")));
  EXPECT_TRUE(ship("a", allocation, trial, "stdout").ok());
}

TEST_F(AllocationManagerTest, DroppedLinesAreATrialWarningWithTheirTotal) {
  const int64_t trial = h_.CreateExperiment("lossy");
  h_.Register("a", 1);
  const std::string allocation = h_.Trial(trial).allocation().id();
  for (int64_t dropped : {5, 7}) {
    absl::Status st;
    h_.Turn([&] {
      std::vector<v1::LogLine> lines(1);
      lines[0].set_agent_id("a");
      lines[0].set_allocation_id(allocation);
      lines[0].set_trial_id(trial);
      lines[0].set_stream("agent");
      lines[0].set_message(absl::StrCat("[", dropped, " log lines dropped while the master was "
                                        "unreachable]"));
      st = h_.logs.AddLines(&lines, {trial});
    });
    ASSERT_TRUE(st.ok()) << st;
  }
  v1::Trial t = h_.Trial(trial);
  ASSERT_EQ(t.warnings_size(), 1) << t.DebugString();
  EXPECT_THAT(t.warnings(0), HasSubstr("12 log lines dropped (the last 7: agent a)"));
}

}  // namespace
}  // namespace det::master

namespace det::master {
namespace {

// Issue 15: an experiment's workers run as the OS user linked to its owner (det user
// link-with-agent-user); an owner without a link gets the agents' default task user.
TEST_F(AllocationManagerTest, LaunchesCarryTheOwnersLinkedAgentUser) {
  UserRow bob;
  bob.username = "bob";
  bob.agent_user_group.set_agent_user("nobody");
  bob.agent_user_group.set_agent_uid(65534);
  bob.agent_user_group.set_agent_group("nogroup");
  bob.agent_user_group.set_agent_gid(65533);
  ASSERT_TRUE(store_.InsertUser(bob).ok());
  UserRow carol;
  carol.username = "carol";
  ASSERT_TRUE(store_.InsertUser(carol).ok());

  for (const std::string owner : {"bob", "carol"}) {
    SCOPED_TRACE(owner);
    v1::CreateExperimentRequest req;
    req.set_config_yaml(testing::ExperimentYaml(owner + "s-experiment"));
    v1::CreateExperimentResponse resp;
    absl::Status st;
    h_.Turn([&] { st = h_.experiments.Create(owner, req, &resp); });
    ASSERT_TRUE(st.ok()) << st;
    const std::string session = h_.Register("agent-" + owner, 1);
    v1::LaunchCommand launch = h_.NextLaunch("agent-" + owner, session);
    if (owner == "bob") {
      EXPECT_EQ(launch.task_user().agent_user(), "nobody");
      EXPECT_EQ(launch.task_user().agent_uid(), 65534);
      EXPECT_EQ(launch.task_user().agent_group(), "nogroup");
      EXPECT_EQ(launch.task_user().agent_gid(), 65533);
    } else {
      EXPECT_FALSE(launch.has_task_user());
    }
  }
}

// det.InvalidHP: rank 0 of a running allocation reports invalid hyperparameters (persisted
// on the trial before the reply); the run exits 0 and the trial ends COMPLETED as invalid,
// not as a restart; random search does not count it and creates a replacement. Other ranks,
// other tokens, unknown reasons and ended allocations are refused.
TEST_F(AllocationManagerTest, InvalidHyperparametersEndTheTrialAndRandomSearchReplacesIt) {
  std::string session = h_.Register("a1", 1);
  std::string yaml = testing::ExperimentYaml("invalid-hp");
  const std::string single = "name: single";
  yaml.replace(yaml.find(single), single.size(),
               "name: random\n  max_trials: 2\n  max_concurrent_trials: 1");
  v1::CreateExperimentRequest create;
  create.set_config_yaml(yaml);
  v1::CreateExperimentResponse created;
  ASSERT_TRUE(h_.Create(create, &created).ok());
  const int64_t experiment = created.experiment().id();
  v1::LaunchCommand launch = h_.NextLaunch("a1", session);
  const int64_t first = launch.trial_id();
  ASSERT_GT(first, 0);

  auto report = [&](const v1::LaunchCommand& l, int rank, v1::EarlyExitReason reason,
                    const std::string& token = "") {
    v1::ReportEarlyExitRequest req;
    req.mutable_auth()->set_allocation_id(l.allocation_id());
    req.mutable_auth()->set_token(token.empty() ? l.env().at("DET_ALLOCATION_TOKEN") : token);
    req.mutable_auth()->set_rank(rank);
    req.set_reason(reason);
    absl::Status st;
    h_.Turn([&] { st = h_.allocations.ReportEarlyExit(req); });
    return st;
  };
  auto best = [&](const v1::LaunchCommand& l, v1::GetExperimentBestValidationResponse* resp) {
    v1::GetExperimentBestValidationRequest req;
    req.mutable_auth()->set_allocation_id(l.allocation_id());
    req.mutable_auth()->set_token(l.env().at("DET_ALLOCATION_TOKEN"));
    absl::Status st;
    h_.Turn([&] { st = h_.allocations.GetExperimentBestValidation(req, resp); });
    return st;
  };
  EXPECT_THAT(report(launch, 1, v1::EARLY_EXIT_REASON_INVALID_HP),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("auth.rank: only rank 0")));
  EXPECT_THAT(report(launch, 0, v1::EARLY_EXIT_REASON_INVALID_HP, "forged"),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("token")));
  EXPECT_THAT(report(launch, 0, v1::EARLY_EXIT_REASON_UNSPECIFIED),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("reason: expected EARLY_EXIT_REASON_INVALID_HP")));
  EXPECT_FALSE(h_.Trial(first).search().invalid_hp());

  // No validation yet: nothing to answer.
  v1::GetExperimentBestValidationResponse none;
  ASSERT_TRUE(best(launch, &none).ok());
  EXPECT_FALSE(none.found());
  v1::Metrics validation;
  validation.set_trial_id(first);
  validation.set_group("validation");
  validation.set_total_batches(50);
  (*validation.mutable_values())["validation_loss"] = 0.4;
  ASSERT_TRUE(h_.ReportMetrics(launch, {validation}).ok());

  ASSERT_TRUE(report(launch, 0, v1::EARLY_EXIT_REASON_INVALID_HP).ok());
  EXPECT_TRUE(h_.Trial(first).search().invalid_hp());
  auto snapshot = store_.Load();
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  bool stored = false;
  for (const v1::Trial& t : snapshot->trials) stored |= t.id() == first && t.search().invalid_hp();
  EXPECT_TRUE(stored) << "persisted before the reply";
  EXPECT_THAT(h_.Logs(first), HasSubstr("rank 0 reported invalid hyperparameters"));

  ASSERT_TRUE(h_.ReportExit("a1", session, launch.allocation_id(), 0).ok());
  v1::Trial ended = h_.Trial(first);
  EXPECT_EQ(ended.state(), v1::STATE_COMPLETED);
  EXPECT_EQ(ended.restarts(), 0);
  EXPECT_TRUE(ended.search().invalid_hp());
  EXPECT_THAT(h_.Logs(first), HasSubstr("invalid hyperparameters"));
  EXPECT_THAT(report(launch, 0, v1::EARLY_EXIT_REASON_INVALID_HP),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr("is not running")));

  // The second trial, then the replacement: two valid trials, as max_trials says.
  v1::LaunchCommand second = h_.NextLaunch("a1", session);
  ASSERT_NE(second.trial_id(), first);
  v1::GetExperimentBestValidationResponse best_so_far;
  ASSERT_TRUE(best(second, &best_so_far).ok());
  EXPECT_TRUE(best_so_far.found());
  EXPECT_DOUBLE_EQ(best_so_far.value(), 0.4);
  validation.set_trial_id(second.trial_id());
  validation.set_total_batches(10);
  (*validation.mutable_values())["validation_loss"] = 0.25;
  ASSERT_TRUE(h_.ReportMetrics(second, {validation}).ok());
  (*validation.mutable_values())["validation_loss"] = 0.5;
  validation.set_total_batches(20);
  ASSERT_TRUE(h_.ReportMetrics(second, {validation}).ok());
  ASSERT_TRUE(best(second, &best_so_far).ok());
  EXPECT_DOUBLE_EQ(best_so_far.value(), 0.25);  // smaller_is_better: the smallest.
  EXPECT_TRUE(report(second, 0, v1::EARLY_EXIT_REASON_USER_REQUESTED_STOP).ok());
  EXPECT_FALSE(h_.Trial(second.trial_id()).search().invalid_hp());
  ASSERT_TRUE(h_.ReportExit("a1", session, second.allocation_id(), 0).ok());
  EXPECT_EQ(h_.Trial(second.trial_id()).state(), v1::STATE_COMPLETED);

  v1::LaunchCommand third = h_.NextLaunch("a1", session);
  ASSERT_GT(third.trial_id(), second.trial_id());
  ASSERT_TRUE(h_.ReportExit("a1", session, third.allocation_id(), 0).ok());
  v1::Experiment done;
  size_t trials = 0;
  h_.Turn([&] {
    done = h_.registry.experiments.at(experiment).experiment;
    trials = h_.registry.experiments.at(experiment).trial_ids.size();
  });
  EXPECT_EQ(done.state(), v1::STATE_COMPLETED);
  EXPECT_EQ(trials, 3u);
  // The two valid trials trained 20 and 0 of their 100 batches; the invalid one's 50
  // count for nothing (with it: (50 + 20 + 0) / 300).
  EXPECT_DOUBLE_EQ(done.progress(), 0.1);
}

// Determined's Core API tutorial, stage 3: adaptive_asha stops a trial at its first
// validation, while its script stores the checkpoint of that step and before it first calls
// should_preempt(). det.core.init() asked the master at once (ShouldPreempt, not waiting),
// so the stop is a cooperative one: no signal, the checkpoint reported during the grace
// period is recorded, and the run's clean exit ends the trial COMPLETED, stopped early.
TEST_F(AllocationManagerTest, ASearcherStopDuringTheFirstCheckpointWaitsForItAndRecordsIt) {
  std::string session = h_.Register("a1", 1);
  std::string yaml = testing::ExperimentYaml("asha-first-rung");
  const std::string single = "name: single";
  yaml.replace(yaml.find(single), single.size(),
               "name: adaptive_asha\n  max_trials: 2\n  max_rungs: 2\n  divisor: 2\n"
               "  mode: aggressive\n  max_concurrent_trials: 1");
  v1::CreateExperimentRequest create;
  create.set_config_yaml(yaml);
  v1::CreateExperimentResponse created;
  ASSERT_TRUE(h_.Create(create, &created).ok());
  const int64_t experiment = created.experiment().id();
  h_.Turn([&] { h_.allocations.SetStopGracePeriod(absl::Minutes(3)); });

  // det.core.init()'s ask: answered at once.
  auto init_asks = [&](const v1::LaunchCommand& l) {
    v1::ShouldPreemptRequest ask;
    ask.mutable_auth()->set_allocation_id(l.allocation_id());
    ask.mutable_auth()->set_token(l.env().at("DET_ALLOCATION_TOKEN"));
    ask.set_wait_ms(0);
    v1::ShouldPreemptResponse answer;
    std::optional<absl::Status> done;
    h_.Turn([&] { h_.allocations.ShouldPreempt(ask, &answer, [&](absl::Status st) { done = st; }); });
    EXPECT_TRUE(done.has_value() && done->ok());
    return answer;
  };
  auto validation = [&](const v1::LaunchCommand& l, int64_t batches, double loss) {
    v1::Metrics m;
    m.set_trial_id(l.trial_id());
    m.set_group("validation");
    m.set_total_batches(batches);
    (*m.mutable_values())["validation_loss"] = loss;
    return h_.ReportMetrics(l, {m});
  };

  // Rungs at 50 and 100 batches. The first trial leads rung 0 and trains to the end.
  v1::LaunchCommand first = h_.NextLaunch("a1", session);
  EXPECT_FALSE(init_asks(first).preempt());
  ASSERT_TRUE(validation(first, 50, 0.1).ok());
  ASSERT_TRUE(validation(first, 100, 0.1).ok());
  ASSERT_TRUE(h_.ReportExit("a1", session, first.allocation_id(), 0).ok());
  ASSERT_EQ(h_.Trial(first.trial_id()).state(), v1::STATE_COMPLETED);

  // The second ranks behind it at rung 0: stopped at its first validation.
  v1::LaunchCommand second = h_.NextLaunch("a1", session);
  const int64_t trial = second.trial_id();
  EXPECT_FALSE(init_asks(second).preempt());
  ASSERT_TRUE(validation(second, 50, 0.9).ok());
  EXPECT_TRUE(h_.Trial(trial).search().stopped_early());
  EXPECT_THAT(h_.Logs(trial), HasSubstr("stopped by adaptive_asha at rung 0"));
  EXPECT_THAT(h_.Logs(trial), HasSubstr("through should_preempt(): it has 3m to checkpoint"));
  EXPECT_EQ(Kills(h_.Commands("a1", session)), 0);  // no SIGTERM mid-store

  // The checkpoint it was storing is reported within the grace period: recorded.
  ASSERT_TRUE(h_.ReportCheckpoint(second, "c-50", 50).ok());
  EXPECT_EQ(h_.Trial(trial).latest_checkpoint(), "/ckpt/c-50");
  absl::StatusOr<std::vector<v1::Checkpoint>> stored;
  h_.loop.RunSync([&] { stored = store_.GetCheckpoints(trial); });
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_EQ(stored->size(), 1u);
  EXPECT_EQ(stored->at(0).total_batches(), 50);
  // Its first should_preempt() says stop; it exits 0 and is not signalled.
  v1::ShouldPreemptResponse told = init_asks(second);
  EXPECT_TRUE(told.preempt());
  EXPECT_EQ(told.reason(), "stopped early by the searcher");
  EXPECT_EQ(AdvancePolling(h_, absl::Minutes(1), "a1", session), 0);
  ASSERT_TRUE(h_.ReportExit("a1", session, second.allocation_id(), 0).ok());
  EXPECT_EQ(AdvancePolling(h_, absl::Minutes(3), "a1", session), 0);
  v1::Trial ended = h_.Trial(trial);
  EXPECT_EQ(ended.state(), v1::STATE_COMPLETED);
  EXPECT_TRUE(ended.search().stopped_early());
  EXPECT_EQ(ended.latest_checkpoint(), "/ckpt/c-50");
  EXPECT_THAT(h_.Logs(trial), ::testing::Not(HasSubstr("did not exit within")));
  v1::State done = v1::STATE_UNSPECIFIED;
  h_.Turn([&] { done = h_.registry.experiments.at(experiment).experiment.state(); });
  EXPECT_EQ(done, v1::STATE_COMPLETED);
}

}  // namespace
}  // namespace det::master
