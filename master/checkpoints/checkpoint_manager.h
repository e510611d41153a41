// CheckpointManager: the checkpoints workers report (registered in the store, listed) and
// their garbage collection: after a trial ends, a CHECKPOINT_GC task (zero slots) deletes on
// an agent what the experiment's checkpoint_storage policy no longer keeps
// (master/checkpoints/checkpoint_gc.h). Owns the GC tasks and their runtime bookkeeping.
// A reported checkpoint becomes its trial's latest through the trial manager
// (TrialManager::AddCheckpoint), the one writer of a trial's record.
//
// Called by: the master service (ReportCheckpoint, ListTasks, ReportExit,
// ShipLogs), the experiment manager (Collect when a trial ends), the scheduling service
// (queued tasks, Start), agent liveness (reattach, lost agents). Loop thread only: every
// public method checks it.
#ifndef DET_MASTER_CHECKPOINTS_CHECKPOINT_MANAGER_H_
#define DET_MASTER_CHECKPOINTS_CHECKPOINT_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock/clock.h"
#include "master/checkpoints/checkpoint_reads.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/registry.h"
#include "master/logs/log_manager.h"
#include "master/loop/turns.h"
#include "master/store/store.h"
#include "master/trials/trial_manager.h"
#include "proto/api.pb.h"

namespace det::master {

class CheckpointManager {
 public:
  // A checkpoint garbage-collection task (v1::CheckpointGcTask) and its runtime
  // bookkeeping (not persisted).
  struct GcTaskState {
    v1::CheckpointGcTask task;
    // RUNNING on an agent that has not registered again (with the task) since it went
    // silent or since the master restarted.
    bool unattached = false;
    // Why it waits, while QUEUED.
    std::string pending_reason;
    // The latest line the running attempt wrote to stderr (names a failing checkpoint).
    std::string last_error_line;
  };

  // Everything must outlive this.
  CheckpointManager(Clock& clock, Turns& turns, Store& store, AgentManager& agents,
                    LogManager& logs, ExperimentRegistry& registry, TrialManager& trials);

  // The checkpoint storage roots experiments may use (config::CheckpointStorageRoots of
  // master.yaml); empty (the default): any absolute path. Set once, before Restore.
  void SetStorageRoots(std::vector<std::string> roots);
  // The storage root (common/checkpoint CheckpointStorageRoot) of `config`'s checkpoint
  // directory: where its checkpoints may be written and deleted. "" when it keeps none.
  // InvalidArgument "checkpoint_storage.host_path: ..." naming the allowed roots.
  absl::StatusOr<std::string> StorageRoot(const config::ExperimentConfig& config) const;

  // Checkpoints nothing may delete (model versions, master/models): `why(uuid)` is "" for a
  // checkpoint that may go, else what keeps it ("version 2 of model 'mnist'"). Garbage
  // collection passes them over; DeleteCheckpoints and QueueExperimentDeletion refuse them
  // with FailedPrecondition naming `why`. Default: none is protected. Set once, before
  // Restore.
  void SetProtection(std::function<std::string(const std::string& uuid)> why) {
    protection_ = std::move(why);
  }
  // The queued or running GC task deleting `uuid`, or null. checkpoint_delete.cc.
  const v1::CheckpointGcTask* DeletingTask(const std::string& uuid) const;

  // Recovery: a queued task waits for the scheduler; a running one waits for its agent to
  // register again with it (LoseUnreturned requeues it if it does not).
  void Restore(std::vector<v1::CheckpointGcTask> tasks);
  // How many tasks are running (placed on an agent).
  size_t running() const;

  // Worker API: registers the checkpoint of the run `req.auth` names (idempotent for a
  // retried report), then records it as the trial's latest.
  absl::Status ReportCheckpoint(const v1::ReportCheckpointRequest& req);
  // (The API's ListCheckpoints and GetCheckpoint read the store off the loop:
  // checkpoint_reads.h.) Checkpoint `uuid` of any experiment, as the API's GetCheckpoint
  // answers it, for the model registry on the loop (each trial's checkpoints read from the
  // store); NotFound "checkpoint UUID not found".
  absl::Status GetCheckpoint(const v1::GetCheckpointRequest& req, v1::GetCheckpointResponse* resp);

  // Queues a CHECKPOINT_GC task deleting `uuids` (checkpoints of ended trials; those
  // deleted or queued already are skipped, the others listed in resp->queued). NotFound
  // naming an unknown UUID, FailedPrecondition naming a trial that has not ended, or what
  // `allowed` answers for the checkpoint's experiment; nothing is queued then.
  // checkpoint_delete.cc.
  absl::Status DeleteCheckpoints(const v1::DeleteCheckpointsRequest& req,
                                 v1::DeleteCheckpointsResponse* resp,
                                 const std::function<absl::Status(const v1::Experiment&)>& allowed);

  // After `ended_trial` ended: queues a CHECKPOINT_GC task for the checkpoints to delete
  // that no queued or running task covers yet.
  void Collect(ExperimentState& es, int64_t ended_trial);

  // Experiment deletion (det experiment delete), checkpoint_delete.cc. A deletion task is
  // a GC task with no trial (trial_id 0) deleting every checkpoint of its experiment not
  // yet DELETED; its events and output go to the master's log. Once it completed, the
  // callback set by SetDeletionDone (the experiment manager's) runs in a turn of its own
  // and deletes the experiment's rows; a master restarted in between finds it in
  // CompletedDeletions().
  static bool IsExperimentDeletion(const v1::CheckpointGcTask& task) {
    return task.trial_id() == 0;
  }
  // Queues (stored first) the deletion task of es, whose trials have all ended; returns
  // it, or nullopt when no checkpoint of es is left to delete. FailedPrecondition naming a
  // queued or running GC task of es (its deletion or another): nothing queued then.
  absl::StatusOr<std::optional<v1::CheckpointGcTask>> QueueExperimentDeletion(
      const ExperimentState& es);
  // The queued or running deletion task of `experiment_id`, if any.
  const v1::CheckpointGcTask* LiveDeletion(int64_t experiment_id) const;
  // Experiments whose latest deletion task completed.
  std::set<int64_t> CompletedDeletions() const;
  void SetDeletionDone(std::function<void(int64_t experiment_id)> done) {
    deletion_done_ = std::move(done);
  }
  // Forgets the tasks of `experiment_id` (its rows were deleted).
  void ForgetExperiment(int64_t experiment_id);

  // Scheduling: the queued tasks, by id; why one waits; placing one on `agent_id`
  // (persisted RUNNING, then launched).
  const std::map<int64_t, GcTaskState>& tasks() const;
  void SetPendingReason(int64_t task_id, const std::string& why);
  void Start(int64_t task_id, const std::string& agent_id);

  // ListTasks: every queued and running task and the latest ended ones.
  void AddTaskViews(v1::ListTasksResponse* resp) const;

  // Agent channel. True when `allocation_id` is a GC task this agent runs (reattached).
  bool Reattach(const std::string& agent_id, const std::string& allocation_id);
  // Tasks placed on `agent_id` that it no longer runs (`running`) are requeued.
  void LoseMissing(const std::string& agent_id, const std::set<std::string>& running);
  // `agent_id` stopped answering: marks its tasks unattached; returns their allocation ids.
  std::vector<std::string> MarkUnattached(const std::string& agent_id, const std::string& wait);
  // Those of `allocation_ids` still unattached are requeued (the agent did not return).
  void LoseUnattached(const std::vector<std::string>& allocation_ids, const std::string& agent_id,
                      const std::string& wait);
  // After a restart: unattached tasks whose agent `never_returned` are requeued.
  void LoseUnreturned(const std::function<bool(const std::string&)>& never_returned);
  // An exit report: true when `req` names a GC task (handled here).
  bool OnExit(const v1::ReportExitRequest& req, const std::string& how, bool abnormal);
  // A log line of a GC task goes to the log of the trial that started it: true (and
  // `line`'s trial set) when `line` is one.
  bool RouteLogLine(v1::LogLine* line);

 private:
  // ReadTrialCheckpoints (checkpoint_reads.h) from the store.
  absl::StatusOr<std::vector<v1::Checkpoint>> TrialCheckpoints(int64_t trial_id);

  // Stores and queues a GC task of es deleting those of `all` in `doomed`; its log lines
  // go to `trial_id`'s log.
  absl::Status QueueGcTask(const ExperimentState& es, int64_t trial_id,
                           const std::vector<v1::Checkpoint>& all,
                           const std::set<std::string>& doomed);
  // `uuids` without the protected ones (SetProtection), in order. checkpoint_delete.cc.
  std::vector<std::string> Unprotected(std::vector<std::string> uuids) const;
  // Ends the running attempt of `g`: STATE_QUEUED requeues it (a lost agent; attempt + 1),
  // STATE_COMPLETED marks its checkpoints deleted, STATE_ERROR records `why`.
  void End(GcTaskState& g, v1::State outcome, const std::string& why);
  absl::Status PersistGcTask(GcTaskState& g, v1::CheckpointGcTask updated);
  // An event of a task started by `trial_id`: in that trial's log; for a deletion task
  // (trial 0) in the master's log.
  void TaskEvent(int64_t trial_id, const std::string& message);

  Clock& clock_;
  Turns& turns_;
  EventLoop& loop_;
  Store& store_;
  AgentManager& agents_;
  LogManager& logs_;
  ExperimentRegistry& registry_;
  TrialManager& trials_;
  std::map<int64_t, GcTaskState> gc_tasks_;        // every checkpoint GC task, by id
  std::map<std::string, int64_t> gc_allocations_;  // running GC allocation id -> task id
  std::function<void(int64_t)> deletion_done_;
  std::vector<std::string> storage_roots_;
  std::function<std::string(const std::string&)> protection_;
};

}  // namespace det::master

#endif  // DET_MASTER_CHECKPOINTS_CHECKPOINT_MANAGER_H_
