// ExperimentManager: recovery, the searcher glue, the end of trials and experiment
// progress (the user API is in experiment_manager.cc).
#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/experiments/experiment_manager.h"
#include "master/loop/on_loop.h"
#include "master/trials/run_outcome.h"
#include "master/views/views.h"

namespace det::master {

using views::Terminal;

namespace {

// Whether the user killed trial t (det trial kill), as ExperimentManager::KillTrial marks it.
bool IsKilledByUser(const v1::Trial& t) {
  return RunStopCause(t, StopCause::kNone) == StopCause::kUserKill;
}

}  // namespace

absl::Status ExperimentManager::Restore(std::vector<v1::Experiment> experiments,
                                        std::vector<v1::Trial> trials) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& e : experiments) {
    ExperimentState& es = experiments_[e.id()];
    auto parsed = config::ParseExperimentConfig(e.config_yaml(), absl::StrCat("experiment ", e.id()),
                                                static_cast<uint32_t>(e.experiment_seed()));
    if (!parsed.ok()) {
      return absl::DataLossError(absl::StrCat("stored config of experiment ", e.id(),
                                              " no longer parses: ", parsed.status().message()));
    }
    es.config = parsed->config;
    if (e.priority() == 0) e.set_priority(parsed->config.resources.priority);
    if (e.resource_pool().empty()) e.set_resource_pool(parsed->config.resources.resource_pool);
    e.set_slots_per_trial(parsed->config.resources.slots_per_trial);
    es.experiment = std::move(e);
  }
  for (auto& t : trials) {
    auto e = experiments_.find(t.experiment_id());
    if (e == experiments_.end()) continue;
    e->second.trial_ids.push_back(t.id());
    trial_manager_.Add(std::move(t));
  }
  return absl::OkStatus();
}

absl::Status ExperimentManager::RestoreSearchers() {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& [id, es] : experiments_) {
    if (Terminal(es.experiment.state())) continue;
    RETURN_IF_ERROR(RebuildSearcher(es));
    for (int64_t tid : es.trial_ids) {
      TrialState& ts = trials_.at(tid);
      if (ts.trial.search().stopped_early() && !Terminal(ts.trial.state()) &&
          ts.trial.allocation().id().empty()) {
        FinishTrial(ts, v1::STATE_COMPLETED, "");
      }
    }
    absl::Status st = CreateSearcherTrials(es);
    if (!st.ok()) Logger("master")->error("experiment {}: {}", id, st.ToString());
  }
  for (auto& [id, es] : experiments_) UpdateExperiment(es);
  // Deletions whose files were deleted before the restart, but not yet their rows.
  for (int64_t id : checkpoints_.CompletedDeletions()) {
    if (experiments_.count(id)) (void)FinishDelete(id);  // Logged; tried again next start.
  }
  return absl::OkStatus();
}

void ExperimentManager::FinishTrial(TrialState& t, v1::State state, const std::string& error) {
  DET_CHECK_ON_LOOP(loop_);
  // Logged when refused (a bug: nothing ends an ended trial).
  if (!trial_manager_.Finish(t, state, error).ok()) return;
  state = t.trial.state();  // CANCELED for a trial its user killed.
  TrialEvent(t.trial.id(), absl::StrCat("trial ", StateName(state),
                                        error.empty() ? "" : absl::StrCat(": ", error)));
  if (state == v1::STATE_COMPLETED && t.trial.total_batches() == 0 &&
      t.trial.training_summary().empty() && t.trial.validation_summary().empty()) {
    std::string warning =
        absl::StrCat("trial ", t.trial.id(), " reported no metrics and no progress: its "
                     "workers exited normally without reporting a batch (does the "
                     "entrypoint report through det's harness?)");
    if (AddTrialWarning(store_, t, warning)) TrialEvent(t.trial.id(), "warning: " + warning);
  }
  logs_.AnswerWaiters(t.trial.id());
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  if (es.searcher) {
    const int index = ExperimentRegistry::TrialIndex(es, t.trial.id());
    if (IsInvalidTrial(t.trial)) {
      es.searcher->OnTrialInvalid(index);
    } else {
      es.searcher->OnTrialEnded(index);
    }
    absl::Status st = CreateSearcherTrials(es);
    if (!st.ok()) Logger("master")->error("experiment {}: {}", es.experiment.id(), st.ToString());
  }
  UpdateExperiment(es);
  checkpoints_.Collect(experiments_.at(t.trial.experiment_id()), t.trial.id());
}

void ExperimentManager::UpdateExperiment(ExperimentState& es) {
  DET_CHECK_ON_LOOP(loop_);
  v1::Experiment updated = es.experiment;
  double progress = 0;
  int done = 0, completed = 0, killed = 0, invalid = 0;
  // The first failed trial's error, for the experiment's ("trial 5: rank 0 exit code 3").
  std::string first_error;
  for (int64_t tid : es.trial_ids) {
    const v1::Trial& t = trials_.at(tid).trial;
    if (first_error.empty() && t.state() == v1::STATE_ERROR && !t.error().empty()) {
      first_error = absl::StrCat("trial ", tid, ": ", t.error());
    }
    if (IsInvalidTrial(t)) ++invalid;  // Replaced or not, it counts for no progress.
    if (Terminal(t.state())) {
      ++done;
      completed += t.state() == v1::STATE_COMPLETED;
      killed += t.state() == v1::STATE_CANCELED && IsKilledByUser(t);
    }
    // Batches trained of those asked for; a trial the searcher stopped early did all it
    // was going to. An ended trial counts what it trained, never more.
    if (IsInvalidTrial(t)) {
      continue;
    } else if (t.search().stopped_early() && !IsKilledByUser(t)) {
      progress += 1;
    } else if (t.target_batches() > 0) {
      progress += std::min(1.0, static_cast<double>(t.total_batches()) / t.target_batches());
    }
  }
  int n = static_cast<int>(es.trial_ids.size());
  // Trials the searcher has yet to create count as not started.
  const int planned = std::max(n - invalid, es.searcher ? es.searcher->PlannedTrials() : 0);
  updated.set_progress(planned ? progress / planned : 0);
  const bool search_done = !es.searcher || es.searcher->Done() ||
                           updated.state() == v1::STATE_STOPPING;
  if (!Terminal(updated.state()) && n > 0 && done == n && search_done) {
    if (updated.state() == v1::STATE_STOPPING) {
      updated.set_state(v1::STATE_CANCELED);
    } else if (completed > 0) {
      updated.set_state(v1::STATE_COMPLETED);
    } else if (killed > 0) {
      updated.set_state(v1::STATE_CANCELED);  // Its trials were killed, none failed alone.
    } else {
      updated.set_state(v1::STATE_ERROR);
      updated.set_error(first_error.empty() ? "every trial failed"
                                            : absl::StrCat("every trial failed; ", first_error));
    }
    updated.set_end_time_ms(clock_.NowMs());
    Logger("master")->info("experiment {} {}", updated.id(), StateName(updated.state()));
  }
  bool persist = updated.state() != es.experiment.state() ||
                 std::abs(updated.progress() - es.experiment.progress()) >= 0.01 ||
                 updated.progress() == 1.0;
  if (persist && updated.SerializeAsString() != es.experiment.SerializeAsString()) {
    absl::Status st = store_.UpdateExperiment(updated);
    if (!st.ok()) {
      Logger("master")->error("experiment {}: cannot persist: {}", updated.id(), st.ToString());
      return;
    }
  }
  es.experiment = std::move(updated);
}

void ExperimentManager::SearcherValidation(const v1::Metrics& m) {
  DET_CHECK_ON_LOOP(loop_);
  auto t_it = trials_.find(m.trial_id());
  if (t_it == trials_.end()) return;
  TrialState& t = t_it->second;
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  if (!es.searcher || Terminal(t.trial.state())) return;
  if (t.trial.search().stopped_early()) {
    // Still reporting: the stop did not reach the run (the master restarted meanwhile).
    if (!t.trial.allocation().id().empty()) {
      kill_run_(t, "stopped early by the searcher", /*cooperative=*/true);
    }
    return;
  }
  const std::string& metric = es.config.searcher.metric;
  auto value = m.values().find(metric);
  if (value == m.values().end()) {
    if (!t.searcher_metric_missing) {
      t.searcher_metric_missing = true;
      TrialEvent(t.trial.id(), absl::StrCat("warning: the validation metrics lack searcher.metric '",
                                            metric, "'; the searcher cannot judge this trial"));
    }
    return;
  }
  const int index = ExperimentRegistry::TrialIndex(es, t.trial.id());
  if (index < 0) return;
  searcher::Decision d = es.searcher->OnValidation(index, m.total_batches(), value->second);
  const searcher::TrialRecord& r = es.searcher->Record(index);
  v1::TrialSearch* s = t.trial.mutable_search();
  if (r.rung_metrics.size() == static_cast<size_t>(s->rung_metrics_size()) && !d.stop) return;
  s->mutable_rung_metrics()->Assign(r.rung_metrics.begin(), r.rung_metrics.end());
  if (d.stop) {
    s->set_stopped_early(true);
    s->set_stop_reason(d.reason);
  }
  RecordTrial(store_, t);
  if (!d.stop) return;
  TrialEvent(t.trial.id(), d.reason);
  if (!t.trial.allocation().id().empty()) {
    kill_run_(t, "stopped early by the searcher", /*cooperative=*/true);
  } else {
    FinishTrial(t, v1::STATE_COMPLETED, "");
  }
}

absl::Status ExperimentManager::RebuildSearcher(ExperimentState& es) {
  std::vector<searcher::TrialRecord> records;
  for (int64_t tid : es.trial_ids) {
    const v1::Trial& t = trials_.at(tid).trial;
    searcher::TrialRecord& r = records.emplace_back();
    r.bracket = t.search().bracket();
    r.rung_metrics.assign(t.search().rung_metrics().begin(), t.search().rung_metrics().end());
    r.stopped = t.search().stopped_early();
    r.ended = Terminal(t.state());
    r.invalid = IsInvalidTrial(t);
  }
  auto search = searcher::NewSearcher(es.config, std::move(records));
  if (!search.ok()) {
    return absl::DataLossError(absl::StrCat("experiment ", es.experiment.id(),
                                            ": cannot rebuild its searcher: ",
                                            search.status().message()));
  }
  es.searcher = *std::move(search);
  return absl::OkStatus();
}

absl::Status ExperimentManager::CreateSearcherTrials(ExperimentState& es) {
  // Only an active experiment grows (a paused one catches up when activated).
  if (!es.searcher || es.experiment.state() != v1::STATE_ACTIVE) return absl::OkStatus();
  for (const searcher::TrialRequest& r : es.searcher->NextTrials()) {
    v1::Trial t;
    t.set_experiment_id(es.experiment.id());
    t.set_state(v1::STATE_QUEUED);
    t.set_seed(r.seed);
    t.set_hparams_json(r.hparams_json);
    t.set_target_batches(r.target_batches);
    t.mutable_search()->set_bracket(r.bracket);
    absl::StatusOr<int64_t> id = store_.InsertTrial(t);
    if (!id.ok()) {
      // The searcher counted trials that do not exist: start it again from those that do.
      absl::Status rebuilt = RebuildSearcher(es);
      return absl::Status(id.status().code(),
                          absl::StrCat("cannot create trial ", r.index, " of the search: ",
                                       id.status().message(),
                                       rebuilt.ok() ? "" : absl::StrCat("; ", rebuilt.message())));
    }
    t.set_id(*id);
    es.trial_ids.push_back(*id);
    trial_manager_.Add(t);
    TrialEvent(*id, absl::StrCat("created by the ", es.config.searcher.name, " searcher (trial ",
                                 r.index + 1, " of ", es.searcher->PlannedTrials(), ")"));
  }
  turns_.RequestSchedule();
  return absl::OkStatus();
}
}  // namespace det::master
