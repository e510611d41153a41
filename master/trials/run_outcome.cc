#include "master/trials/run_outcome.h"

#include "absl/strings/str_cat.h"

namespace det::master {

StopCause RunStopCause(const v1::Trial& trial, StopCause noted) {
  if (!trial.search().stopped_early()) return noted;
  return trial.search().stop_reason() == kKilledByUser ? StopCause::kUserKill
                                                       : StopCause::kSearcher;
}

bool IsInvalidTrial(const v1::Trial& trial) {
  return trial.search().invalid_hp() && trial.state() == v1::STATE_COMPLETED;
}

RunOutcome DecideRunOutcome(const RunEnd& end) {
  RunOutcome out;
  const bool stopping = end.experiment_state == v1::STATE_STOPPING;
  const bool stopped_early =
      end.cause == StopCause::kSearcher || end.cause == StopCause::kUserKill;
  const bool failed = !end.failure.empty();
  // Invalid hyperparameters end the trial (not a restart) once every rank exited normally;
  // a failure after the report is a failure like any other.
  const bool invalid = end.invalid_hp && !failed && !stopped_early;
  if (stopping) {
    out.trial_state = v1::STATE_CANCELED;
  } else if (invalid) {
    out.trial_state = v1::STATE_COMPLETED;
    out.invalid_hp = true;
    out.event = kInvalidHp;
  } else if (end.experiment_state == v1::STATE_PAUSED && end.stop_requested) {
    out.trial_state = v1::STATE_PAUSED;  // Resumes from its checkpoint when activated.
  } else if (stopped_early) {
    out.trial_state = v1::STATE_COMPLETED;  // Done, with the length it has.
  } else if (end.cause != StopCause::kNone) {
    // Losing an agent, a preemption or a pause (the experiment was activated again before
    // the run stopped) is not the trial's fault: rerun, not counted as a restart.
    out.trial_state = v1::STATE_QUEUED;
  } else if (failed) {
    if (end.restarts < end.max_restarts) {
      out.trial_state = v1::STATE_QUEUED;
      out.restart_counted = true;
    } else {
      out.trial_state = v1::STATE_ERROR;
      out.error = absl::StrCat(end.failure, "; max_restarts (", end.max_restarts, ") reached");
    }
  }
  out.allocation_state =
      !failed || stopping || stopped_early ? v1::STATE_COMPLETED : v1::STATE_ERROR;
  out.exit_reason = end.cause == StopCause::kUserKill ? kKilledByUser
                    : end.cause == StopCause::kSearcher ? "stopped early by the searcher"
                    : failed                            ? end.failure
                    : out.invalid_hp                    ? kInvalidHp
                                                        : "all ranks exited normally";
  const std::string& id = end.allocation_id;
  if (out.trial_state == v1::STATE_PAUSED) {
    out.event = absl::StrCat("allocation ", id, " stopped: experiment paused");
  } else if (out.trial_state == v1::STATE_QUEUED) {
    switch (end.cause) {
      case StopCause::kPreempt:
        out.event = absl::StrCat("allocation ", id, " preempted; requeued (not counted as a restart)");
        break;
      case StopCause::kLostAgent:
        out.event = absl::StrCat("allocation ", id, " lost; rescheduling (not counted as a restart)");
        break;
      case StopCause::kPause:
        out.event = absl::StrCat("allocation ", id,
                                 " stopped for a pause; the experiment is active again: requeued");
        break;
      default:
        out.event = absl::StrCat("allocation ", id, " failed: ", end.failure, "; restart ",
                                 end.restarts + 1, " of ", end.max_restarts);
    }
  }
  return out;
}

}  // namespace det::master
