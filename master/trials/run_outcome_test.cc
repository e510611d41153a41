#include "master/trials/run_outcome.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace det::master {
namespace {

constexpr v1::State kActive = v1::STATE_ACTIVE;
constexpr v1::State kPaused = v1::STATE_PAUSED;
constexpr v1::State kStopping = v1::STATE_STOPPING;
constexpr v1::State kQueued = v1::STATE_QUEUED;
constexpr v1::State kCompleted = v1::STATE_COMPLETED;
constexpr v1::State kCanceled = v1::STATE_CANCELED;
constexpr v1::State kError = v1::STATE_ERROR;

const char kFail[] = "rank 1 exited with code 3";

struct Row {
  std::string name;
  RunEnd in;
  // Expected.
  v1::State trial_state;
  bool restart_counted;
  v1::State allocation_state;
  std::string exit_reason;
  std::string error;
  std::string event;
  bool invalid_hp = false;
};

RunEnd End(v1::State experiment, bool stop_requested, StopCause cause, std::string failure,
           int restarts = 0, int max_restarts = 2) {
  RunEnd e;
  e.experiment_state = experiment;
  e.stop_requested = stop_requested;
  e.cause = cause;
  e.failure = std::move(failure);
  e.restarts = restarts;
  e.max_restarts = max_restarts;
  e.allocation_id = "7.1";
  return e;
}

// `end` after its rank 0 reported invalid hyperparameters (ReportEarlyExit).
RunEnd AfterInvalidHp(RunEnd end) {
  end.invalid_hp = true;
  return end;
}

const std::vector<Row>& Rows() {
  static const std::vector<Row> rows = {
      // kNone: the ranks exited on their own, or one failed.
      {"none_exits_normally", End(kActive, false, StopCause::kNone, ""), kCompleted, false,
       kCompleted, "all ranks exited normally", "", ""},
      {"none_failure_restarts", End(kActive, true, StopCause::kNone, kFail, 0, 2), kQueued, true,
       kError, kFail, "", "allocation 7.1 failed: rank 1 exited with code 3; restart 1 of 2"},
      {"none_failure_last_restart", End(kActive, true, StopCause::kNone, kFail, 1, 2), kQueued,
       true, kError, kFail, "", "allocation 7.1 failed: rank 1 exited with code 3; restart 2 of 2"},
      {"none_failure_limit_reached", End(kActive, true, StopCause::kNone, kFail, 2, 2), kError,
       false, kError, kFail, "rank 1 exited with code 3; max_restarts (2) reached", ""},
      {"none_failure_no_restarts_allowed", End(kActive, false, StopCause::kNone, kFail, 0, 0),
       kError, false, kError, kFail, "rank 1 exited with code 3; max_restarts (0) reached", ""},
      {"none_experiment_stopping", End(kStopping, true, StopCause::kNone, ""), kCanceled, false,
       kCompleted, "all ranks exited normally", "", ""},
      {"none_failure_while_stopping", End(kStopping, true, StopCause::kNone, kFail), kCanceled,
       false, kCompleted, kFail, "", ""},
      {"none_paused_and_stopped", End(kPaused, true, StopCause::kNone, ""), kPaused, false,
       kCompleted, "all ranks exited normally", "", "allocation 7.1 stopped: experiment paused"},
      {"none_paused_not_asked_to_stop", End(kPaused, false, StopCause::kNone, ""), kCompleted,
       false, kCompleted, "all ranks exited normally", "", ""},

      // kPause: stopped for a pause.
      {"pause_experiment_still_paused", End(kPaused, true, StopCause::kPause, kFail), kPaused,
       false, kError, kFail, "", "allocation 7.1 stopped: experiment paused"},
      {"pause_experiment_active_again", End(kActive, true, StopCause::kPause, ""), kQueued, false,
       kCompleted, "all ranks exited normally", "",
       "allocation 7.1 stopped for a pause; the experiment is active again: requeued"},
      {"pause_failure_not_counted", End(kActive, true, StopCause::kPause, kFail, 2, 2), kQueued,
       false, kError, kFail, "",
       "allocation 7.1 stopped for a pause; the experiment is active again: requeued"},
      {"pause_then_experiment_stopping", End(kStopping, true, StopCause::kPause, ""), kCanceled,
       false, kCompleted, "all ranks exited normally", "", ""},

      // kLostAgent.
      {"lost_agent_requeued", End(kActive, false, StopCause::kLostAgent, "rank 0 agent lost", 2, 2),
       kQueued, false, kError, "rank 0 agent lost", "",
       "allocation 7.1 lost; rescheduling (not counted as a restart)"},
      {"lost_agent_while_stopping", End(kStopping, true, StopCause::kLostAgent, "rank 0 agent lost"),
       kCanceled, false, kCompleted, "rank 0 agent lost", "", ""},
      {"lost_agent_while_paused", End(kPaused, true, StopCause::kLostAgent, "rank 0 agent lost"),
       kPaused, false, kError, "rank 0 agent lost", "", "allocation 7.1 stopped: experiment paused"},

      // kPreempt.
      {"preempt_requeued", End(kActive, true, StopCause::kPreempt, ""), kQueued, false, kCompleted,
       "all ranks exited normally", "", "allocation 7.1 preempted; requeued (not counted as a restart)"},
      {"preempt_killed_ranks_fail", End(kActive, true, StopCause::kPreempt, kFail, 2, 2), kQueued,
       false, kError, kFail, "", "allocation 7.1 preempted; requeued (not counted as a restart)"},
      {"preempt_while_stopping", End(kStopping, true, StopCause::kPreempt, ""), kCanceled, false,
       kCompleted, "all ranks exited normally", "", ""},

      // kSearcher: done, with the length it has.
      {"searcher_stop", End(kActive, true, StopCause::kSearcher, ""), kCompleted, false,
       kCompleted, "stopped early by the searcher", "", ""},
      {"searcher_stop_killed_ranks_fail", End(kActive, true, StopCause::kSearcher, kFail, 2, 2),
       kCompleted, false, kCompleted, "stopped early by the searcher", "", ""},
      {"searcher_stop_while_paused", End(kPaused, true, StopCause::kSearcher, ""), kPaused, false,
       kCompleted, "stopped early by the searcher", "", "allocation 7.1 stopped: experiment paused"},
      {"searcher_stop_while_stopping", End(kStopping, true, StopCause::kSearcher, ""), kCanceled,
       false, kCompleted, "stopped early by the searcher", "", ""},

      // kUserKill: det trial kill.
      {"user_kill", End(kActive, true, StopCause::kUserKill, kFail), kCompleted, false, kCompleted,
       "killed by user", "", ""},
      {"user_kill_exits_normally", End(kActive, true, StopCause::kUserKill, ""), kCompleted, false,
       kCompleted, "killed by user", "", ""},
      {"user_kill_while_stopping", End(kStopping, true, StopCause::kUserKill, kFail), kCanceled,
       false, kCompleted, "killed by user", "", ""},

      // Invalid hyperparameters reported (det.InvalidHP), then the run ended.
      {"invalid_hp_exits_normally", AfterInvalidHp(End(kActive, false, StopCause::kNone, "")),
       kCompleted, false, kCompleted, "invalid hyperparameters", "", "invalid hyperparameters",
       true},
      {"invalid_hp_on_last_restart", AfterInvalidHp(End(kActive, false, StopCause::kNone, "", 2, 2)),
       kCompleted, false, kCompleted, "invalid hyperparameters", "", "invalid hyperparameters",
       true},
      {"invalid_hp_then_failure_restarts",
       AfterInvalidHp(End(kActive, true, StopCause::kNone, kFail, 0, 2)), kQueued, true, kError,
       kFail, "", "allocation 7.1 failed: rank 1 exited with code 3; restart 1 of 2", false},
      {"invalid_hp_while_stopping", AfterInvalidHp(End(kStopping, true, StopCause::kNone, "")),
       kCanceled, false, kCompleted, "all ranks exited normally", "", "", false},
      {"invalid_hp_while_paused", AfterInvalidHp(End(kPaused, true, StopCause::kPause, "")),
       kCompleted, false, kCompleted, "invalid hyperparameters", "", "invalid hyperparameters",
       true},
      {"invalid_hp_after_searcher_stop", AfterInvalidHp(End(kActive, true, StopCause::kSearcher, "")),
       kCompleted, false, kCompleted, "stopped early by the searcher", "", "", false},
  };
  return rows;
}

class DecideRunOutcomeTest : public ::testing::TestWithParam<Row> {};

TEST_P(DecideRunOutcomeTest, Decides) {
  const Row& row = GetParam();
  RunOutcome out = DecideRunOutcome(row.in);
  EXPECT_EQ(v1::State_Name(out.trial_state), v1::State_Name(row.trial_state));
  EXPECT_EQ(out.restart_counted, row.restart_counted);
  EXPECT_EQ(v1::State_Name(out.allocation_state), v1::State_Name(row.allocation_state));
  EXPECT_EQ(out.exit_reason, row.exit_reason);
  EXPECT_EQ(out.error, row.error);
  EXPECT_EQ(out.event, row.event);
  EXPECT_EQ(out.invalid_hp, row.invalid_hp);
}

INSTANTIATE_TEST_SUITE_P(EveryCause, DecideRunOutcomeTest, ::testing::ValuesIn(Rows()),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.name; });

// Every cause appears in the table above.
TEST(DecideRunOutcomeTableTest, CoversEveryCause) {
  std::vector<bool> seen(static_cast<int>(StopCause::kUserKill) + 1, false);
  for (const Row& row : Rows()) seen[static_cast<int>(row.in.cause)] = true;
  for (size_t c = 0; c < seen.size(); ++c) EXPECT_TRUE(seen[c]) << "StopCause " << c;
}

TEST(MorePressingTest, LaterCauseDecides) {
  EXPECT_EQ(MorePressing(StopCause::kNone, StopCause::kPause), StopCause::kPause);
  EXPECT_EQ(MorePressing(StopCause::kPause, StopCause::kLostAgent), StopCause::kLostAgent);
  EXPECT_EQ(MorePressing(StopCause::kLostAgent, StopCause::kPause), StopCause::kLostAgent);
  EXPECT_EQ(MorePressing(StopCause::kPreempt, StopCause::kLostAgent), StopCause::kPreempt);
}

TEST(RunStopCauseTest, SearchStateDecidesOverWhatWasNoted) {
  v1::Trial trial;
  EXPECT_EQ(RunStopCause(trial, StopCause::kNone), StopCause::kNone);
  EXPECT_EQ(RunStopCause(trial, StopCause::kPreempt), StopCause::kPreempt);
  trial.mutable_search()->set_stopped_early(true);
  trial.mutable_search()->set_stop_reason("metric plateaued");
  EXPECT_EQ(RunStopCause(trial, StopCause::kPreempt), StopCause::kSearcher);
  trial.mutable_search()->set_stop_reason(kKilledByUser);
  EXPECT_EQ(RunStopCause(trial, StopCause::kLostAgent), StopCause::kUserKill);
}

TEST(IsInvalidTrialTest, OnlyACompletedTrialThatReportedInvalidHyperparameters) {
  v1::Trial trial;
  trial.set_state(v1::STATE_COMPLETED);
  EXPECT_FALSE(IsInvalidTrial(trial));
  trial.mutable_search()->set_invalid_hp(true);
  EXPECT_TRUE(IsInvalidTrial(trial));
  trial.set_state(v1::STATE_RUNNING);
  EXPECT_FALSE(IsInvalidTrial(trial));
  trial.set_state(v1::STATE_CANCELED);
  EXPECT_FALSE(IsInvalidTrial(trial));
}

}  // namespace
}  // namespace det::master
