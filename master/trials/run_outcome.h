// The outcome of a trial's run: a pure function of why the run stopped, its experiment's
// state, its first failure and the trial's restarts (no I/O, no clock), the way
// scheduler::Schedule is one for placement. AllocationManager applies what it returns.
#ifndef DET_MASTER_TRIALS_RUN_OUTCOME_H_
#define DET_MASTER_TRIALS_RUN_OUTCOME_H_

#include <string>

#include "proto/types.pb.h"

namespace det::master {

// The search stop reason of a trial its user killed (det trial kill).
inline constexpr char kKilledByUser[] = "killed by user";
// The exit reason and trial log line of a run that ended after reporting invalid
// hyperparameters.
inline constexpr char kInvalidHp[] = "invalid hyperparameters";

// Why a run stopped, beyond its ranks' exits. kSearcher and kUserKill come from the
// trial's search state (persisted, RunStopCause); the others are noted on the run while it
// stops (TrialState::NoteStopCause) and do not count as a restart. Declared in precedence
// order: when several apply, the later one decides (MorePressing).
enum class StopCause {
  kNone,       // the ranks exited on their own, or one failed
  kPause,      // stopped for a pause; requeued if the experiment is active again
  kLostAgent,  // an agent of the run was lost, stopping or disabled
  kPreempt,    // stopped for a more important trial
  kSearcher,   // the searcher stopped the trial early
  kUserKill,   // the user killed the trial
};

// Of two causes noted on one run, the one that decides its outcome.
inline StopCause MorePressing(StopCause a, StopCause b) { return a < b ? b : a; }

// The cause of `trial`'s run ending: the searcher's or the user's stop when the trial was
// stopped early, else `noted` (what the master noted on the run).
StopCause RunStopCause(const v1::Trial& trial, StopCause noted);

// Whether `trial` ended as invalid: COMPLETED after its rank 0 reported invalid
// hyperparameters (RunOutcome::invalid_hp).
bool IsInvalidTrial(const v1::Trial& trial);

// What decides a run's outcome when its last rank exited.
struct RunEnd {
  v1::State experiment_state = v1::STATE_ACTIVE;
  // The master asked the run to stop (TrialState::killing).
  bool stop_requested = false;
  StopCause cause = StopCause::kNone;
  // The run's first abnormal exit ("rank 0 exited with code 1"); "" when none.
  std::string failure;
  // The trial's restarts before this run ended, and its experiment's limit.
  int restarts = 0;
  int max_restarts = 0;
  // For the trial log's line.
  std::string allocation_id;
  // Its rank 0 reported invalid hyperparameters (ReportEarlyExit) before the run ended.
  bool invalid_hp = false;
};

struct RunOutcome {
  // QUEUED (run again), PAUSED, or the trial's end: COMPLETED, CANCELED or ERROR.
  v1::State trial_state = v1::STATE_COMPLETED;
  // QUEUED after a failure: the trial's restarts go up by one.
  bool restart_counted = false;
  // The ended allocation's state (COMPLETED or ERROR) and exit reason.
  v1::State allocation_state = v1::STATE_COMPLETED;
  std::string exit_reason;
  // ERROR: the failure and the limit reached.
  std::string error;
  // The trial log's line for QUEUED and PAUSED, and kInvalidHp for a trial that ends
  // with invalid hyperparameters; "" for other ends (the end says why).
  std::string event;
  // The trial ends as invalid (invalid hyperparameters reported, then every rank exited
  // normally): COMPLETED, its searcher told (random and adaptive_asha replace it).
  bool invalid_hp = false;
};

RunOutcome DecideRunOutcome(const RunEnd& end);

}  // namespace det::master

#endif  // DET_MASTER_TRIALS_RUN_OUTCOME_H_
