// ExperimentManager: the life of experiments and of their trials as the searcher sees
// them. Create (config parsed once, first trials stored with the experiment), list, get,
// kill, pause, activate, slots and priority changes; the searcher glue (trials it asks
// for, validations it judges, trials it stops); the end of a trial (FinishTrial: events,
// searcher, checkpoint GC) and experiment progress and state (UpdateExperiment).
//
// Called by: the master service (user API), the allocation manager (a run ended, a trial
// started), the metrics manager (validations, progress). Asks a run to stop through
// `kill_run` (the allocation manager). Loop thread only: every public method checks it.
#ifndef DET_MASTER_EXPERIMENTS_EXPERIMENT_MANAGER_H_
#define DET_MASTER_EXPERIMENTS_EXPERIMENT_MANAGER_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/registry.h"
#include "master/logs/log_manager.h"
#include "master/loop/turns.h"
#include "master/store/store.h"
#include "master/templates/templates.h"
#include "master/trials/trial_manager.h"

namespace det::master {

class ExperimentManager {
 public:
  // Asks the agents of t's open run to stop it, with `reason`.
  // Stops t's run: cooperative (a pause, an early stop: AllocationManager::Stop, the script
  // may checkpoint first) or not (a kill: AllocationManager::Kill).
  using KillRun =
      std::function<void(TrialState& t, const std::string& reason, bool cooperative)>;

  // Everything must outlive this.
  ExperimentManager(const config::MasterConfig& config, Clock& clock, Turns& turns, Store& store,
                    AgentManager& agents, Templates& templates, LogManager& logs,
                    CheckpointManager& checkpoints, ExperimentRegistry& registry,
                    TrialManager& trials, KillRun kill_run);

  // Recovery, first step: the stored experiments (configs parsed again) and their trials.
  absl::Status Restore(std::vector<v1::Experiment> experiments, std::vector<v1::Trial> trials);
  // Recovery, last step (once allocations are restored): searchers of the experiments
  // still running, rebuilt from their trials; trials the searcher stopped before the
  // restart end; trials it wanted but had no time to create are created.
  absl::Status RestoreSearchers();

  // The checkpoint storage of experiments whose config (template and overrides included)
  // sets none: master.yaml's `checkpoint_storage`, merged into their effective config at
  // Create. nullopt (the default): such experiments keep no checkpoints.
  void SetDefaultCheckpointStorage(std::optional<config::CheckpointStorageConfig> storage);

  // User API.
  absl::Status Create(const std::string& owner, const v1::CreateExperimentRequest& req,
                      v1::CreateExperimentResponse* resp);
  absl::Status List(const v1::ListExperimentsRequest& req, v1::ListExperimentsResponse* resp);
  absl::Status Get(const v1::GetExperimentRequest& req, v1::GetExperimentResponse* resp);
  absl::Status Kill(const v1::KillExperimentRequest& req);
  absl::Status Pause(const v1::PauseExperimentRequest& req, v1::PauseExperimentResponse* resp);
  absl::Status Activate(const v1::ActivateExperimentRequest& req);
  // det experiment continue (Determined's ContinueExperiment): ended experiment `req.id()`
  // becomes ACTIVE again and ends as a run does. Only the single, grid and random searchers
  // (InvalidArgument naming the searcher otherwise); only an ended experiment
  // (FailedPrecondition naming its state). A single-trial experiment takes the override
  // config and KEY.PATH=VALUE items (merged over its config; the searcher stays single) and
  // its trial is revived with the new length and hyperparameters; a grid or random one takes
  // none (InvalidArgument) and its trials that did not complete are revived
  // (FailedPrecondition when every one COMPLETED). A revived trial resumes from its latest
  // checkpoint. The experiment is stored first, then each trial (TrialManager::Revive).
  // experiment_continue.cc.
  absl::Status Continue(const v1::ContinueExperimentRequest& req,
                        v1::ContinueExperimentResponse* resp);
  absl::Status SetSlots(const v1::SetExperimentSlotsRequest& req,
                        v1::SetExperimentSlotsResponse* resp);
  absl::Status UpdateJobPriority(const v1::UpdateJobPriorityRequest& req);
  // Archives (or unarchives) experiment `id`; only an ended one can be archived
  // (FailedPrecondition naming its state). experiment_edits.cc.
  absl::Status SetArchived(int64_t id, bool archived);
  // Changes name, description and labels; InvalidArgument naming the field and its limit.
  absl::Status Patch(const v1::PatchExperimentRequest& req, v1::PatchExperimentResponse* resp);
  // Kills trial `req.id()`: a queued (or paused) one ends CANCELED at once, a running one
  // once its workers exited; its experiment goes on with its other trials. Persisted first
  // (the trial is marked stopped, reason kKilledByUser, so a restarted master does not
  // run it again). FailedPrecondition naming the state of an ended trial.
  absl::Status KillTrial(const v1::KillTrialRequest& req);
  // Deletes an ended experiment (FailedPrecondition naming the state otherwise) with
  // everything of it: its checkpoints' files through a deletion task on an agent
  // (CheckpointManager::QueueExperimentDeletion), then its rows in one store transaction
  // (FinishDelete). experiment_edits.cc.
  absl::Status Delete(const v1::DeleteExperimentRequest& req, v1::DeleteExperimentResponse* resp);
  // The last step of a deletion: the experiment's rows (one transaction), then memory.
  // Called once its deletion task completed, and at start for those whose task completed
  // before a restart.
  absl::Status FinishDelete(int64_t id);
  absl::Status GetTrial(const v1::GetTrialRequest& req, v1::GetTrialResponse* resp);
  // A user was renamed: the experiments `from` owns are stored as `to`'s (their trials then
  // run as the agent user linked to `to`). Stops at the first store error (what was
  // written stays renamed). experiment_edits.cc.
  absl::Status RenameOwner(const std::string& from, const std::string& to);

  // Ends trial t in `state` (persisted as it happened), then tells its log waiters, the
  // searcher and checkpoint GC.
  void FinishTrial(TrialState& t, v1::State state, const std::string& error);
  // Recomputes es's progress and, once every trial ended, its final state (persisted).
  void UpdateExperiment(ExperimentState& es);
  // A validation row: hands it to the searcher, stopping the trial when it says so.
  void SearcherValidation(const v1::Metrics& metrics);
  // Before t's run is stopped for a pause, a preemption or a resize: when its experiment
  // keeps no checkpoints, records "trial N has no checkpoint storage: its progress will be
  // lost" in t's and the experiment's warnings and t's log, and appends it to `warnings`
  // (may be null). Nothing when checkpoints are kept or t has nothing to lose.
  void WarnProgressLoss(TrialState& t, google::protobuf::RepeatedPtrField<std::string>* warnings);

 private:
  // Experiment `id`, or NotFound "experiment N not found".
  absl::StatusOr<ExperimentState*> Find(int64_t id);
  // es's stored config parsed again with `overrides` (KEY.PATH=VALUE) on top.
  static absl::StatusOr<config::ParsedExperiment> Reparse(const ExperimentState& es,
                                                          std::vector<std::string> overrides);
  // InvalidArgument "FILE: ..." when c's checkpoint storage is outside the roots the cluster
  // allows or its resource pool is unknown.
  absl::Status CheckStorageAndPool(const std::string& file, const config::ExperimentConfig& c) const;
  // FailedPrecondition "experiment N is COMPLETED" once es has ended.
  static absl::Status RefuseEnded(const ExperimentState& es);
  // Moves experiment `id` from state `from` to `to`, persisted first. nullptr when it is
  // already in `to`; NotFound, or FailedPrecondition when it is in neither.
  absl::StatusOr<ExperimentState*> MoveExperiment(int64_t id, v1::State from, v1::State to);
  // Builds es.searcher from the trials es has.
  absl::Status RebuildSearcher(ExperimentState& es);
  // Creates the trials the searcher asks for (only while the experiment is ACTIVE).
  absl::Status CreateSearcherTrials(ExperimentState& es);
  void TrialEvent(int64_t trial_id, const std::string& message, bool verbose = false) {
    logs_.Event(trial_id, message, verbose);
  }

  const config::MasterConfig& config_;
  Clock& clock_;
  Turns& turns_;
  EventLoop& loop_;
  Store& store_;
  AgentManager& agents_;
  Templates& templates_;
  LogManager& logs_;
  CheckpointManager& checkpoints_;
  ExperimentRegistry& registry_;
  // Every change of a trial's state goes through it.
  TrialManager& trial_manager_;
  KillRun kill_run_;
  std::optional<config::CheckpointStorageConfig> default_checkpoint_storage_;
  // The registry's parts this manager changes most (aliases).
  std::map<int64_t, ExperimentState>& experiments_;
  std::map<int64_t, TrialState>& trials_;
  v1::GetMasterStatsResponse& counters_;
};

}  // namespace det::master

#endif  // DET_MASTER_EXPERIMENTS_EXPERIMENT_MANAGER_H_
