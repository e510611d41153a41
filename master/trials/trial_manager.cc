#include "master/trials/trial_manager.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/trials/transitions.h"

namespace det::master {

TrialManager::TrialManager(Clock& clock, Store& store, ExperimentRegistry& registry)
    : clock_(clock), store_(store), registry_(registry) {}

TrialState& TrialManager::Add(v1::Trial trial) {
  TrialState& t = registry_.trials[trial.id()];
  t.trial = std::move(trial);
  return t;
}

void TrialManager::Forget(int64_t id) { registry_.trials.erase(id); }

absl::Status TrialManager::Check(const v1::Trial& trial, v1::State to) {
  absl::Status legal = CheckTrialTransition(trial.id(), trial.state(), to);
  if (!legal.ok()) Logger("master")->error("{}", std::string(legal.message()));
  return legal;
}

absl::Status TrialManager::Move(v1::Trial& trial, v1::State to) {
  RETURN_IF_ERROR(Check(trial, to));
  trial.set_state(to);
  return absl::OkStatus();
}

absl::Status TrialManager::MarkStarting(TrialState& t, const v1::Allocation& allocation) {
  v1::Trial next = t.trial;
  RETURN_IF_ERROR(Move(next, v1::STATE_STARTING));
  *next.mutable_allocation() = allocation;
  if (next.start_time_ms() == 0) next.set_start_time_ms(clock_.NowMs());
  RETURN_IF_ERROR(PersistTrial(store_, t, std::move(next)));
  t.waiting_reason_.clear();
  return absl::OkStatus();
}

absl::Status TrialManager::MarkRunning(TrialState& t) {
  v1::Trial next = t.trial;
  RETURN_IF_ERROR(Move(next, v1::STATE_RUNNING));
  next.mutable_allocation()->set_state(v1::STATE_RUNNING);
  return PersistTrial(store_, t, std::move(next));
}

absl::Status TrialManager::Pause(TrialState& t) {
  v1::Trial next = t.trial;
  RETURN_IF_ERROR(Move(next, v1::STATE_PAUSED));
  RETURN_IF_ERROR(PersistTrial(store_, t, std::move(next)));
  t.waiting_reason_.clear();
  return absl::OkStatus();
}

absl::Status TrialManager::Requeue(TrialState& t) {
  v1::Trial next = t.trial;
  RETURN_IF_ERROR(Move(next, v1::STATE_QUEUED));
  return PersistTrial(store_, t, std::move(next));
}

void TrialManager::RequeueUnplaced(TrialState& t) {
  const v1::State s = t.trial.state();
  if (IsEndedTrialState(s) || !t.trial.allocation().id().empty() || s == v1::STATE_QUEUED) return;
  (void)Move(t.trial, v1::STATE_QUEUED);  // Logged; every live state may be queued.
}

absl::Status TrialManager::EndRun(TrialState& t, const RunOutcome& outcome) {
  const v1::State to = outcome.trial_state;
  RETURN_IF_ERROR(Check(t.trial, to));
  if (outcome.restart_counted) t.trial.set_restarts(t.trial.restarts() + 1);
  t.last_allocation = t.trial.allocation();
  t.trial.clear_allocation();
  if (IsEndedTrialState(to)) {
    if (!outcome.invalid_hp) t.trial.mutable_search()->set_invalid_hp(false);
    return absl::OkStatus();
  }
  t.trial.set_run_id(t.trial.run_id() + 1);
  t.trial.set_state(to);
  // An invalid-hyperparameters report counts only for the run that made it.
  t.trial.mutable_search()->set_invalid_hp(false);
  RecordTrial(store_, t);
  return absl::OkStatus();
}

absl::Status TrialManager::Finish(TrialState& t, v1::State state, const std::string& error) {
  if (!IsEndedTrialState(state)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "trial ", t.trial.id(), ": ", v1::State_Name(state), " is not an end (COMPLETED, "
        "CANCELED or ERROR)"));
  }
  // A trial the user killed ends CANCELED, whatever its workers' exit said.
  if (state == v1::STATE_COMPLETED &&
      RunStopCause(t.trial, StopCause::kNone) == StopCause::kUserKill) {
    state = v1::STATE_CANCELED;
  }
  RETURN_IF_ERROR(Move(t.trial, state));
  t.trial.set_end_time_ms(clock_.NowMs());
  t.trial.set_error(error);
  t.waiting_reason_.clear();
  RecordTrial(store_, t);
  return absl::OkStatus();
}

absl::Status TrialManager::Revive(TrialState& t, int64_t target_batches,
                                  const std::string& hparams_json) {
  absl::Status legal = CheckTrialRevival(t.trial.id(), t.trial.state());
  if (!legal.ok()) return legal;  // The caller's check of the user's request.
  v1::Trial next = t.trial;
  next.set_state(v1::STATE_QUEUED);
  next.set_target_batches(target_batches);
  next.set_hparams_json(hparams_json);
  next.set_restarts(0);
  next.set_end_time_ms(0);
  next.clear_error();
  next.set_run_id(next.run_id() + 1);
  v1::TrialSearch* search = next.mutable_search();
  search->set_stopped_early(false);
  search->clear_stop_reason();
  search->set_invalid_hp(false);
  RETURN_IF_ERROR(PersistTrial(store_, t, std::move(next)));
  t.searcher_metric_missing = false;
  t.waiting_reason_.clear();
  return absl::OkStatus();
}

absl::Status TrialManager::AddProgress(std::vector<v1::Trial> progress,
                                       const std::vector<v1::Metrics>& rows) {
  RETURN_IF_ERROR(store_.AddMetrics(progress, rows));
  for (v1::Trial& p : progress) {
    v1::Trial& live = registry_.trials.at(p.id()).trial;
    live.mutable_training_summary()->swap(*p.mutable_training_summary());
    live.mutable_validation_summary()->swap(*p.mutable_validation_summary());
    live.mutable_timings_summary()->swap(*p.mutable_timings_summary());
    live.set_total_batches(p.total_batches());
  }
  return absl::OkStatus();
}

absl::Status TrialManager::AddCheckpoint(TrialState& t, const v1::Checkpoint& c) {
  v1::Trial next = t.trial;
  next.set_latest_checkpoint(c.storage_path());
  RETURN_IF_ERROR(store_.AddCheckpoint(c, next));
  t.trial = std::move(next);
  return absl::OkStatus();
}

std::string TrialManager::NoteRefusedReports(TrialState& t, absl::string_view what, int64_t n,
                                             const absl::Status& error) {
  return ::det::master::NoteRefusedReports(store_, t, what, n, error);
}

bool TrialManager::SetWaitingReason(int64_t trial_id, const std::string& why) {
  auto it = registry_.trials.find(trial_id);
  if (it == registry_.trials.end() || it->second.waiting_reason_ == why) return false;
  it->second.waiting_reason_ = why;
  return true;
}

bool TrialManager::SetWaitingReason(int64_t trial_id, std::shared_ptr<const std::string> why) {
  auto it = registry_.trials.find(trial_id);
  if (it == registry_.trials.end() || it->second.waiting_reason_.Shares(why)) return false;
  it->second.waiting_reason_.Share(std::move(why));
  return true;
}

}  // namespace det::master
