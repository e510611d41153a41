// CheckpointManager: checkpoints deleted on request (det checkpoint delete, det experiment
// delete), through the same CHECKPOINT_GC tasks as the policy's garbage collection.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/checkpoints/checkpoint_gc.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/loop/on_loop.h"
#include "master/views/views.h"

namespace det::master {

absl::Status CheckpointManager::DeleteCheckpoints(
    const v1::DeleteCheckpointsRequest& req, v1::DeleteCheckpointsResponse* resp,
    const std::function<absl::Status(const v1::Experiment&)>& allowed) {
  DET_CHECK_ON_LOOP(loop_);
  if (req.uuids_size() == 0) {
    return absl::InvalidArgumentError("uuids: give at least one checkpoint UUID");
  }
  const std::set<std::string> wanted(req.uuids().begin(), req.uuids().end());
  // Trial -> its checkpoints, for the trials holding a wanted one.
  std::map<int64_t, std::vector<v1::Checkpoint>> by_trial;
  std::set<std::string> found;
  for (const auto& [experiment_id, es] : registry_.experiments) {
    for (int64_t tid : es.trial_ids) {
      ASSIGN_OR_RETURN(std::vector<v1::Checkpoint> cs, store_.GetCheckpoints(tid));
      for (const v1::Checkpoint& c : cs) {
        if (!wanted.count(c.uuid())) continue;
        found.insert(c.uuid());
        const v1::Trial& trial = registry_.trials.at(tid).trial;
        if (!views::Terminal(trial.state())) {
          return absl::FailedPreconditionError(absl::StrCat(
              "checkpoint ", c.uuid(), " belongs to trial ", tid, ", which is ",
              StateName(trial.state()), ": delete checkpoints once their trial has ended"));
        }
        RETURN_IF_ERROR(allowed(es.experiment));
        if (std::string why = protection_ ? protection_(c.uuid()) : ""; !why.empty()) {
          return absl::FailedPreconditionError(
              absl::StrCat("checkpoint ", c.uuid(), " is ", why,
                           ": a registered checkpoint is never deleted; delete the model "
                           "version first"));
        }
        by_trial[tid] = cs;
      }
    }
  }
  for (const std::string& uuid : req.uuids()) {
    if (!found.count(uuid)) return absl::NotFoundError(absl::StrCat("checkpoint ", uuid, " not found"));
  }
  std::vector<const v1::CheckpointGcTask*> tasks;
  for (const auto& [id, g] : gc_tasks_) tasks.push_back(&g.task);
  for (const auto& [tid, cs] : by_trial) {
    std::vector<std::string> uuids;
    for (const v1::Checkpoint& c : cs) {
      if (wanted.count(c.uuid()) && c.state() != v1::STATE_DELETED) uuids.push_back(c.uuid());
    }
    std::vector<std::string> doomed = NotYetCollected(uuids, tasks);
    if (doomed.empty()) continue;
    const ExperimentState& es =
        registry_.experiments.at(registry_.trials.at(tid).trial.experiment_id());
    RETURN_IF_ERROR(QueueGcTask(es, tid, cs, {doomed.begin(), doomed.end()}));
    for (const std::string& uuid : doomed) resp->add_queued(uuid);
    Logger("master")->info("trial {}: {} checkpoint(s) to delete on request", tid, doomed.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::CheckpointGcTask>> CheckpointManager::QueueExperimentDeletion(
    const ExperimentState& es) {
  DET_CHECK_ON_LOOP(loop_);
  const int64_t experiment_id = es.experiment.id();
  for (const auto& [id, g] : gc_tasks_) {
    if (g.task.experiment_id() != experiment_id || views::Terminal(g.task.state())) continue;
    return absl::FailedPreconditionError(
        absl::StrCat("experiment ", experiment_id, ": checkpoint GC task ",
                     views::GcAllocationId(g.task), " is ", StateName(g.task.state()),
                     IsExperimentDeletion(g.task) ? " (the experiment is being deleted)"
                                                  : "; delete the experiment once it has ended"));
  }
  std::vector<v1::Checkpoint> all;
  std::set<std::string> doomed;
  for (int64_t tid : es.trial_ids) {
    ASSIGN_OR_RETURN(std::vector<v1::Checkpoint> cs, store_.GetCheckpoints(tid));
    for (v1::Checkpoint& c : cs) {
      if (c.state() == v1::STATE_DELETED) continue;
      if (std::string why = protection_ ? protection_(c.uuid()) : ""; !why.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "experiment ", experiment_id, " cannot be deleted: its checkpoint ", c.uuid(), " is ",
            why, "; delete the model version first"));
      }
      doomed.insert(c.uuid());
      all.push_back(std::move(c));
    }
  }
  if (doomed.empty()) return std::optional<v1::CheckpointGcTask>();
  RETURN_IF_ERROR(QueueGcTask(es, /*ended_trial=*/0, all, doomed));
  // QueueGcTask stored it under the highest id.
  return std::optional<v1::CheckpointGcTask>(gc_tasks_.rbegin()->second.task);
}

std::vector<std::string> CheckpointManager::Unprotected(std::vector<std::string> uuids) const {
  if (!protection_) return uuids;
  uuids.erase(std::remove_if(uuids.begin(), uuids.end(),
                             [this](const std::string& uuid) { return !protection_(uuid).empty(); }),
              uuids.end());
  return uuids;
}

const v1::CheckpointGcTask* CheckpointManager::DeletingTask(const std::string& uuid) const {
  DET_CHECK_ON_LOOP(loop_);
  for (const auto& [id, g] : gc_tasks_) {
    if (views::Terminal(g.task.state())) continue;
    for (const v1::Checkpoint& c : g.task.checkpoints()) {
      if (c.uuid() == uuid) return &g.task;
    }
  }
  return nullptr;
}

const v1::CheckpointGcTask* CheckpointManager::LiveDeletion(int64_t experiment_id) const {
  DET_CHECK_ON_LOOP(loop_);
  for (const auto& [id, g] : gc_tasks_) {
    if (g.task.experiment_id() == experiment_id && IsExperimentDeletion(g.task) &&
        !views::Terminal(g.task.state())) {
      return &g.task;
    }
  }
  return nullptr;
}

std::set<int64_t> CheckpointManager::CompletedDeletions() const {
  DET_CHECK_ON_LOOP(loop_);
  std::map<int64_t, v1::State> latest;  // experiment -> state of its latest deletion task
  for (const auto& [id, g] : gc_tasks_) {
    if (IsExperimentDeletion(g.task)) latest[g.task.experiment_id()] = g.task.state();
  }
  std::set<int64_t> done;
  for (const auto& [experiment_id, state] : latest) {
    if (state == v1::STATE_COMPLETED) done.insert(experiment_id);
  }
  return done;
}

void CheckpointManager::ForgetExperiment(int64_t experiment_id) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto it = gc_tasks_.begin(); it != gc_tasks_.end();) {
    if (it->second.task.experiment_id() != experiment_id) {
      ++it;
      continue;
    }
    gc_allocations_.erase(views::GcAllocationId(it->second.task));
    it = gc_tasks_.erase(it);
  }
}

void CheckpointManager::TaskEvent(int64_t trial_id, const std::string& message) {
  if (trial_id != 0) {
    logs_.Event(trial_id, message);
  } else {
    Logger("master")->info("experiment deletion: {}", message);
  }
}

}  // namespace det::master
