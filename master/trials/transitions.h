// The states of a trial and the moves between them, as a table (no I/O, no clock):
//
//   QUEUED   -> STARTING (a run placed), PAUSED (its experiment paused)
//   STARTING -> RUNNING (its ranks launched), QUEUED or PAUSED (its run ended before that)
//   RUNNING  -> QUEUED (requeued or restarted), PAUSED (paused, the run ended)
//   PAUSED   -> QUEUED (its experiment activated; recovery)
//   any of those -> COMPLETED, CANCELED or ERROR (the end); an ended trial does not move,
//   except by a revival:
//   COMPLETED, CANCELED, ERROR -> QUEUED (its experiment continued: det experiment continue)
//
// TrialManager checks every change of a trial's state against it.
#ifndef DET_MASTER_TRIALS_TRANSITIONS_H_
#define DET_MASTER_TRIALS_TRANSITIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "proto/types.pb.h"

namespace det::master {

// QUEUED, STARTING, RUNNING, PAUSED, COMPLETED, CANCELED or ERROR.
bool IsTrialState(v1::State s);
// COMPLETED, CANCELED or ERROR.
bool IsEndedTrialState(v1::State s);

// OK when trial `trial_id` may go from `from` to `to`. Else, naming the trial and both
// states: InvalidArgument when either is no trial state ("STOPPING is not a trial state");
// FailedPrecondition for a move the table refuses, saying why ("trial 3 cannot go from
// PAUSED to STARTING: only a QUEUED trial starts a run").
absl::Status CheckTrialTransition(int64_t trial_id, v1::State from, v1::State to);

// OK when trial `trial_id`, in state `from`, may be revived (an ended trial, to QUEUED).
// Else FailedPrecondition naming the trial and its state ("trial 3 cannot be revived from
// RUNNING: only an ended trial (COMPLETED, CANCELED or ERROR) is revived"), or
// InvalidArgument when `from` is no trial state.
absl::Status CheckTrialRevival(int64_t trial_id, v1::State from);

}  // namespace det::master

#endif  // DET_MASTER_TRIALS_TRANSITIONS_H_
