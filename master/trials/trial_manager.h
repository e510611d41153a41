// TrialManager: the one writer of a trial's life. Its state (moves checked against the
// table of transitions.h), its restarts and run number, its open and last run, its end
// (time, error), why it waits in the queue, its progress (metric summaries, batches), its
// latest checkpoint and the warnings of reports the store refused: every change of those
// is a method here, persisted as the registry's Persist* helpers do (stored first, then
// kept in memory; a change that already happened outside the master is kept in memory and
// recorded).
//
// The trials stay in the registry (master/experiments/registry.h) for lookup; others read
// them there (TrialView, ExperimentRows, const TrialState&) and ask this for changes:
// the experiment manager (create, pause, activate, end), the allocation manager (a run
// starts, runs, ends; recovery), the scheduling service and the Slurm resource manager
// (why a trial waits), the metrics manager (progress) and the checkpoint manager (latest
// checkpoint). Loop thread only.
#ifndef DET_MASTER_TRIALS_TRIAL_MANAGER_H_
#define DET_MASTER_TRIALS_TRIAL_MANAGER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/clock/clock.h"
#include "master/experiments/registry.h"
#include "master/store/store.h"
#include "master/trials/run_outcome.h"

namespace det::master {

class TrialManager {
 public:
  // Everything must outlive this.
  TrialManager(Clock& clock, Store& store, ExperimentRegistry& registry);

  // A trial the store holds (created, or read at recovery) enters memory as it is stored.
  TrialState& Add(v1::Trial trial);
  // Trial `id` leaves memory (its experiment was deleted).
  void Forget(int64_t id);

  // QUEUED -> STARTING with its run `allocation` (stored by the caller first), persisted;
  // its start time set on its first run; why it waited cleared.
  absl::Status MarkStarting(TrialState& t, const v1::Allocation& allocation);
  // STARTING -> RUNNING, its run's state RUNNING too, persisted.
  absl::Status MarkRunning(TrialState& t);
  // QUEUED -> PAUSED (its experiment paused), persisted; why it waited cleared.
  absl::Status Pause(TrialState& t);
  // PAUSED -> QUEUED (its experiment activated), persisted.
  absl::Status Requeue(TrialState& t);
  // Recovery: a live trial with no run stored that is not QUEUED goes back to the queue
  // (in memory; a PAUSED one too, as before). Nothing for others.
  void RequeueUnplaced(TrialState& t);
  // t's run ended with `outcome` (DecideRunOutcome): its restarts counted, the run kept
  // as its last one (display) and closed. QUEUED or PAUSED: the run number moves on, an
  // invalid-hyperparameters report is forgotten, recorded. An end (COMPLETED, CANCELED,
  // ERROR): the state is left to Finish. FailedPrecondition when the table refuses it.
  absl::Status EndRun(TrialState& t, const RunOutcome& outcome);
  // t ends in `state` (CANCELED instead of COMPLETED for a trial its user killed) with
  // `error`, its end time now; recorded. FailedPrecondition when the table refuses it.
  absl::Status Finish(TrialState& t, v1::State state, const std::string& error);
  // An ended trial revived (its experiment continued, det experiment continue): COMPLETED,
  // CANCELED or ERROR -> QUEUED with `target_batches` and `hparams_json`; its restarts 0;
  // its end time, error, early stop and invalid-hyperparameters mark cleared; its run
  // number moved on. Its batches, metrics, checkpoints and latest checkpoint stay, so its
  // next run resumes from that checkpoint. Persisted first; FailedPrecondition naming the
  // state of a live trial (CheckTrialRevival), memory and the store unchanged.
  absl::Status Revive(TrialState& t, int64_t target_batches, const std::string& hparams_json);

  // Progress: stores metric rows `rows` and `progress` (each a known trial as it is with
  // its summaries and total_batches updated for those rows) in one transaction, and only
  // then keeps each trial's summaries and total_batches in memory. The store's refusal is
  // returned, memory unchanged (the caller notes it: NoteRefusedReports).
  absl::Status AddProgress(std::vector<v1::Trial> progress, const std::vector<v1::Metrics>& rows);
  // Stores checkpoint `c` of t together with t's latest_checkpoint (c's storage path) in
  // one transaction, then keeps it in memory. The store's refusal is returned, memory
  // unchanged (AlreadyExists for a uuid registered before).
  absl::Status AddCheckpoint(TrialState& t, const v1::Checkpoint& c);
  // `n` reports of a kind (`what`: "metric rows", "checkpoint reports") the store refused
  // with `error`, counted in t's warning of that kind (registry.h's NoteRefusedReports).
  // Returns the warning.
  std::string NoteRefusedReports(TrialState& t, absl::string_view what, int64_t n,
                                 const absl::Status& error);

  // Why queued trial `trial_id` waits; returns whether it changed (false for an unknown
  // trial). The caller says so in the trial's log.
  bool SetWaitingReason(int64_t trial_id, const std::string& why);
  // The same with a text shared by many trials (WaitingReason::Share): true when it did not
  // share `why` already.
  bool SetWaitingReason(int64_t trial_id, std::shared_ptr<const std::string> why);

 private:
  // Whether the table lets `trial` go to `to`; a refusal is logged (a bug of the caller).
  static absl::Status Check(const v1::Trial& trial, v1::State to);
  // Sets trial's state to `to` once Check allows it.
  static absl::Status Move(v1::Trial& trial, v1::State to);

  Clock& clock_;
  Store& store_;
  ExperimentRegistry& registry_;
};

}  // namespace det::master

#endif  // DET_MASTER_TRIALS_TRIAL_MANAGER_H_
