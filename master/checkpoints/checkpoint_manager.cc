#include "master/checkpoints/checkpoint_manager.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_files.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/auth/linked_task_user.h"
#include "master/checkpoints/checkpoint_gc.h"
#include "master/loop/on_loop.h"
#include "master/scheduling/request_id.h"
#include "master/views/views.h"
#include "nlohmann/json.hpp"

namespace det::master {
namespace {

// How many ended checkpoint GC tasks ListTasks shows (the latest), besides every queued and
// running one.
constexpr int kEndedGcTasksListed = 100;

using views::GcAllocationId;
using views::Terminal;

}  // namespace

CheckpointManager::CheckpointManager(Clock& clock, Turns& turns, Store& store,
                                     AgentManager& agents, LogManager& logs,
                                     ExperimentRegistry& registry, TrialManager& trials)
    : clock_(clock),
      turns_(turns),
      loop_(turns.loop()),
      store_(store),
      agents_(agents),
      logs_(logs),
      registry_(registry),
      trials_(trials) {}

void CheckpointManager::SetStorageRoots(std::vector<std::string> roots) {
  DET_CHECK_ON_LOOP(loop_);
  storage_roots_ = std::move(roots);
}

absl::StatusOr<std::string> CheckpointManager::StorageRoot(
    const config::ExperimentConfig& config) const {
  const std::string directory = config::CheckpointDirectory(config);
  if (directory.empty()) return std::string();
  absl::StatusOr<std::string> root = CheckpointStorageRoot(directory, storage_roots_);
  if (!root.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint_storage.host_path: ", root.status().message()));
  }
  return root;
}

void CheckpointManager::Restore(std::vector<v1::CheckpointGcTask> tasks) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& task : tasks) {
    GcTaskState& g = gc_tasks_[task.id()];
    g.task = std::move(task);
    if (g.task.state() == v1::STATE_RUNNING) {
      gc_allocations_[GcAllocationId(g.task)] = g.task.id();
      g.unattached = true;
    }
  }
}

absl::Status CheckpointManager::ReportCheckpoint(const v1::ReportCheckpointRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(TrialState * t, registry_.AuthorizeWorker(req.auth()));
  v1::Checkpoint c = req.checkpoint();
  // Only a directory of its own in the experiment's checkpoint storage: garbage
  // collection later deletes what is registered here.
  const ExperimentState& es = registry_.experiments.at(t->trial.experiment_id());
  RETURN_IF_ERROR(CheckReportedCheckpoint(c, config::CheckpointDirectory(es.config)));
  if (!c.metadata_json().empty()) {
    nlohmann::json metadata =
        nlohmann::json::parse(c.metadata_json(), nullptr, /*allow_exceptions=*/false);
    if (!metadata.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint.metadata_json: expected a JSON object (or nothing), got '",
          c.metadata_json().substr(0, 80), c.metadata_json().size() > 80 ? "...'" : "'"));
    }
  }
  c.set_trial_id(t->trial.id());
  c.set_experiment_id(t->trial.experiment_id());
  c.set_state(v1::STATE_COMPLETED);
  if (c.report_time_ms() == 0) c.set_report_time_ms(clock_.NowMs());
  // A worker retrying a report that was stored (its answer lost) registers nothing twice.
  ASSIGN_OR_RETURN(std::vector<v1::Checkpoint> stored, store_.GetCheckpoints(t->trial.id()));
  const bool retry = std::any_of(stored.begin(), stored.end(), [&](const v1::Checkpoint& s) {
    return s.uuid() == c.uuid() && s.storage_path() == c.storage_path();
  });
  if (retry) return absl::OkStatus();
  // The checkpoint row and the trial's latest_checkpoint in one transaction: both or
  // neither, and acknowledged only once committed.
  if (absl::Status st = trials_.AddCheckpoint(*t, c); absl::IsAlreadyExists(st)) {
    // The worker's mistake (a uuid used twice), not the store's: said plainly, not counted
    // as a refused report.
    return absl::AlreadyExistsError(absl::StrCat(
        "checkpoint.uuid: '", c.uuid(), "' is already registered; each checkpoint needs a "
        "uuid of its own"));
  } else if (!st.ok()) {
    Logger("master")->error("trial {}: cannot store checkpoint {}: {}", t->trial.id(), c.uuid(),
                            st.ToString());
    trials_.NoteRefusedReports(*t, "checkpoint reports", 1, st);
    return st;
  }
  auto& counters = registry_.counters;
  counters.set_checkpoints_stored_total(counters.checkpoints_stored_total() + 1);
  logs_.Event(t->trial.id(), absl::StrCat("checkpoint ", c.uuid(), " at batch ", c.total_batches()));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<v1::Checkpoint>> CheckpointManager::TrialCheckpoints(
    int64_t trial_id) {
  return ReadTrialCheckpoints(store_, trial_id);
}

absl::Status CheckpointManager::GetCheckpoint(const v1::GetCheckpointRequest& req,
                                              v1::GetCheckpointResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  if (req.uuid().empty()) return absl::InvalidArgumentError("uuid: must not be empty");
  for (const auto& [experiment_id, es] : registry_.experiments) {
    for (int64_t tid : es.trial_ids) {
      ASSIGN_OR_RETURN(std::vector<v1::Checkpoint> cs, TrialCheckpoints(tid));
      for (v1::Checkpoint& c : cs) {
        if (c.uuid() != req.uuid()) continue;
        c.set_experiment_id(experiment_id);
        if (c.state() == v1::STATE_UNSPECIFIED) c.set_state(v1::STATE_COMPLETED);
        *resp->mutable_checkpoint() = std::move(c);
        return absl::OkStatus();
      }
    }
  }
  return absl::NotFoundError(absl::StrCat("checkpoint ", req.uuid(), " not found"));
}

void CheckpointManager::Collect(ExperimentState& es, int64_t ended_trial) {
  DET_CHECK_ON_LOOP(loop_);
  if (LiveDeletion(es.experiment.id())) return;  // Every checkpoint of it goes already.
  const CheckpointGcPolicy policy = GcPolicyFromConfig(es.config);
  // Without save_experiment_best only the ended trial's checkpoints are at stake; with it,
  // the ranking spans the experiment, which is collected once every trial has ended.
  bool all_ended = true;
  for (int64_t tid : es.trial_ids) {
    all_ended = all_ended && Terminal(registry_.trials.at(tid).trial.state());
  }
  if (policy.save_experiment_best > 0 && !all_ended) return;
  std::vector<v1::Checkpoint> all;
  std::set<int64_t> ended;
  for (int64_t tid : es.trial_ids) {
    if (policy.save_experiment_best == 0 && tid != ended_trial) continue;
    auto cs = TrialCheckpoints(tid);
    if (!cs.ok()) {
      Logger("master")->error("trial {}: cannot read checkpoints: {}", tid, cs.status().ToString());
      return;
    }
    all.insert(all.end(), cs->begin(), cs->end());
    if (Terminal(registry_.trials.at(tid).trial.state())) ended.insert(tid);
  }
  std::vector<const v1::CheckpointGcTask*> tasks;
  for (const auto& [id, g] : gc_tasks_) tasks.push_back(&g.task);
  std::vector<std::string> to_delete =
      NotYetCollected(Unprotected(CheckpointsToDelete(all, ended, policy)), tasks);
  if (to_delete.empty()) return;
  // Logged, and in the trial's log; the trial has ended either way.
  (void)QueueGcTask(es, ended_trial, all, {to_delete.begin(), to_delete.end()});
}

absl::Status CheckpointManager::QueueGcTask(const ExperimentState& es, int64_t ended_trial,
                                            const std::vector<v1::Checkpoint>& all,
                                            const std::set<std::string>& doomed) {
  v1::CheckpointGcTask task;
  task.set_experiment_id(es.experiment.id());
  task.set_trial_id(ended_trial);
  task.set_resource_pool(es.experiment.resource_pool());
  task.set_state(v1::STATE_QUEUED);
  task.set_create_time_ms(clock_.NowMs());
  for (const auto& c : all) {
    if (!doomed.count(c.uuid())) continue;
    v1::Checkpoint* k = task.add_checkpoints();
    k->set_uuid(c.uuid());
    k->set_trial_id(c.trial_id());
    k->set_experiment_id(es.experiment.id());
    k->set_total_batches(c.total_batches());
    k->set_storage_path(c.storage_path());
  }
  absl::StatusOr<int64_t> id = store_.InsertCheckpointGcTask(task);
  if (!id.ok()) {
    Logger("master")->error("experiment {}: cannot store a checkpoint GC task: {}", es.experiment.id(),
                            id.status().ToString());
    TaskEvent(ended_trial,
              absl::StrCat("checkpoint garbage collection not started: ", id.status().message()));
    return id.status();
  }
  task.set_id(*id);
  GcTaskState& g = gc_tasks_[*id];
  g.task = std::move(task);
  TaskEvent(ended_trial, absl::StrCat("checkpoint garbage collection ", RequestId::Gc(*id).Key(),
                                      " queued: ", doomed.size(),
                                      " checkpoint(s) to delete on an agent of resource pool '",
                                      g.task.resource_pool(), "'"));
  turns_.RequestSchedule();
  return absl::OkStatus();
}

size_t CheckpointManager::running() const {
  DET_CHECK_ON_LOOP(loop_);
  return gc_allocations_.size();
}

const std::map<int64_t, CheckpointManager::GcTaskState>& CheckpointManager::tasks() const {
  DET_CHECK_ON_LOOP(loop_);
  return gc_tasks_;
}

void CheckpointManager::SetPendingReason(int64_t task_id, const std::string& why) {
  DET_CHECK_ON_LOOP(loop_);
  gc_tasks_.at(task_id).pending_reason = why;
}

void CheckpointManager::Start(int64_t task_id, const std::string& agent_id) {
  DET_CHECK_ON_LOOP(loop_);
  GcTaskState& g = gc_tasks_.at(task_id);
  v1::CheckpointGcTask running = g.task;
  running.set_state(v1::STATE_RUNNING);
  running.set_agent_id(agent_id);
  running.set_start_time_ms(clock_.NowMs());
  running.clear_error();
  // The files belong to the experiment owner's linked OS user, if any: the GC runs as it.
  auto owner = registry_.experiments.find(g.task.experiment_id());
  absl::StatusOr<v1::AgentUserGroup> task_user = LinkedTaskUser(
      store_, owner == registry_.experiments.end() ? "" : owner->second.experiment.owner());
  if (!task_user.ok()) {
    g.pending_reason = absl::StrCat("cannot read the agent user linked to its experiment's owner: ",
                                    task_user.status().message());
    return;
  }
  // It deletes beneath its experiment's storage root only; an experiment whose storage lies
  // outside the allowed roots (created before they were set) has nothing deleted.
  absl::StatusOr<std::string> root =
      owner == registry_.experiments.end()
          ? absl::StatusOr<std::string>(absl::NotFoundError(
                absl::StrCat("experiment ", g.task.experiment_id(), " is gone")))
          : StorageRoot(owner->second.config);
  if (root.ok() && root->empty()) {
    root = absl::FailedPreconditionError("its experiment has no checkpoint_storage");
  }
  if (!root.ok()) {
    v1::CheckpointGcTask failed = g.task;
    failed.set_state(v1::STATE_ERROR);
    failed.set_end_time_ms(clock_.NowMs());
    failed.set_error(absl::StrCat("refusing to delete: ", root.status().message()));
    g.pending_reason.clear();
    if (PersistGcTask(g, failed).ok()) {
      Logger("master")->error("checkpoint garbage collection {}: {}", GcAllocationId(g.task),
                              g.task.error());
      TaskEvent(g.task.trial_id(), absl::StrCat("checkpoint garbage collection ",
                                                GcAllocationId(g.task), " failed: ",
                                                g.task.error()));
    }
    return;
  }
  // Stored before it is launched; else it stays queued and says why.
  if (absl::Status st = PersistGcTask(g, std::move(running)); !st.ok()) {
    g.pending_reason = absl::StrCat("cannot store its start: ", st.message());
    return;
  }
  v1::CheckpointGcTask& t = g.task;
  g.unattached = false;
  g.pending_reason.clear();
  g.last_error_line.clear();
  const std::string alloc_id = GcAllocationId(t);
  gc_allocations_[alloc_id] = t.id();

  v1::AgentCommand cmd;
  v1::LaunchCommand* l = cmd.mutable_launch();
  l->set_allocation_id(alloc_id);
  l->set_trial_id(t.trial_id());
  l->set_experiment_id(t.experiment_id());
  v1::RankPlacement* r = l->add_ranks();
  r->set_rank(0);
  r->set_agent_id(agent_id);
  r->set_local_rank(0);
  l->set_world_size(1);
  l->set_num_agents(1);
  (*l->mutable_env())["DET_EXPERIMENT_ID"] = absl::StrCat(t.experiment_id());
  (*l->mutable_env())["DET_ALLOCATION_ID"] = alloc_id;
  *l->mutable_checkpoint_gc()->mutable_checkpoints() = t.checkpoints();
  l->mutable_checkpoint_gc()->set_storage_root(*root);
  if (!task_user->agent_user().empty()) *l->mutable_task_user() = *std::move(task_user);
  TaskEvent(t.trial_id(),
            absl::StrCat("checkpoint garbage collection ", alloc_id, " scheduled on ", agent_id,
                         " (0 slots): deleting ", t.checkpoints_size(), " checkpoint(s)"));
  if (!agents_.Send(agent_id, std::move(cmd))) {
    End(g, v1::STATE_QUEUED, absl::StrCat("not started: agent ", agent_id, " is unreachable"));
  }
}

void CheckpointManager::End(GcTaskState& g, v1::State outcome, const std::string& why) {
  v1::CheckpointGcTask& t = g.task;
  const std::string alloc_id = GcAllocationId(t);
  const std::string agent_id = t.agent_id();
  gc_allocations_.erase(alloc_id);
  g.unattached = false;
  if (outcome == v1::STATE_QUEUED) {
    // Deleting again what the lost attempt already deleted is harmless.
    t.set_state(v1::STATE_QUEUED);
    t.set_attempt(t.attempt() + 1);
    t.clear_agent_id();
    t.clear_start_time_ms();
    (void)PersistGcTask(g, t);  // Logged; the attempt is gone either way.
    TaskEvent(t.trial_id(),
              absl::StrCat("checkpoint garbage collection ", alloc_id, " ", why, "; requeued"));
    turns_.RequestSchedule();
    return;
  }
  t.set_state(outcome);
  t.set_end_time_ms(clock_.NowMs());
  if (outcome == v1::STATE_ERROR) t.set_error(why);
  // With COMPLETED, its checkpoints become DELETED in the same write. Should it fail, the
  // stored task stays RUNNING and a restarted master runs it again.
  (void)PersistGcTask(g, t);
  if (outcome == v1::STATE_COMPLETED) {
    for (const v1::Checkpoint& c : t.checkpoints()) {
      if (IsExperimentDeletion(t)) break;  // Its trials go with it.
      logs_.Event(c.trial_id(), absl::StrCat("checkpoint ", c.uuid(), " (batch ", c.total_batches(),
                                             ") deleted by garbage collection"));
    }
    TaskEvent(t.trial_id(),
              absl::StrCat("checkpoint garbage collection ", alloc_id, " completed on ", agent_id));
    if (IsExperimentDeletion(t) && deletion_done_) {
      turns_.Post([done = deletion_done_, id = t.experiment_id()] { done(id); });
    }
  } else {
    Logger("master")->error("checkpoint garbage collection {} failed on {}: {}", alloc_id, agent_id, why);
    TaskEvent(t.trial_id(), absl::StrCat("checkpoint garbage collection ", alloc_id, " failed on ",
                                         agent_id, ": ", why));
  }
}

absl::Status CheckpointManager::PersistGcTask(GcTaskState& g, v1::CheckpointGcTask updated) {
  absl::Status written = store_.UpdateCheckpointGcTask(updated);
  std::string what = absl::StrCat("checkpoint GC task ", updated.id());
  return WriteThenKeep(std::move(written), what, &g.task, std::move(updated));
}

void CheckpointManager::AddTaskViews(v1::ListTasksResponse* resp) const {
  DET_CHECK_ON_LOOP(loop_);
  int ended = 0;
  for (const auto& [id, g] : gc_tasks_) ended += Terminal(g.task.state());
  for (const auto& [id, g] : gc_tasks_) {
    if (Terminal(g.task.state()) && ended-- > kEndedGcTasksListed) continue;
    *resp->add_tasks() = views::GcTask(g.task, g.pending_reason);
  }
}

bool CheckpointManager::Reattach(const std::string& agent_id, const std::string& allocation_id) {
  DET_CHECK_ON_LOOP(loop_);
  auto gc = gc_allocations_.find(allocation_id);
  if (gc == gc_allocations_.end() || gc_tasks_.at(gc->second).task.agent_id() != agent_id) {
    return false;
  }
  GcTaskState& g = gc_tasks_.at(gc->second);
  g.unattached = false;
  TaskEvent(g.task.trial_id(),
            absl::StrCat("agent ", agent_id, " reattached checkpoint garbage collection ",
                         allocation_id));
  return true;
}

void CheckpointManager::LoseMissing(const std::string& agent_id,
                                    const std::set<std::string>& running) {
  DET_CHECK_ON_LOOP(loop_);
  std::vector<int64_t> gone;
  for (const auto& [alloc_id, id] : gc_allocations_) {
    if (gc_tasks_.at(id).task.agent_id() == agent_id && !running.count(alloc_id)) gone.push_back(id);
  }
  for (int64_t id : gone) {
    End(gc_tasks_.at(id), v1::STATE_QUEUED,
        absl::StrCat("lost: agent ", agent_id, " restarted without it"));
  }
}

std::vector<std::string> CheckpointManager::MarkUnattached(const std::string& agent_id,
                                                           const std::string& wait) {
  DET_CHECK_ON_LOOP(loop_);
  std::vector<std::string> allocations;
  for (const auto& [alloc_id, id] : gc_allocations_) {
    GcTaskState& g = gc_tasks_.at(id);
    if (g.task.agent_id() != agent_id) continue;
    g.unattached = true;
    allocations.push_back(alloc_id);
    TaskEvent(g.task.trial_id(),
              absl::StrCat("agent ", agent_id,
                           " stopped answering during checkpoint garbage collection ", alloc_id,
                           ": waiting up to ", wait, " (agent_reconnect_wait) for it to return"));
  }
  return allocations;
}

void CheckpointManager::LoseUnattached(const std::vector<std::string>& allocation_ids,
                                       const std::string& agent_id, const std::string& wait) {
  DET_CHECK_ON_LOOP(loop_);
  for (const auto& id : allocation_ids) {
    auto gc = gc_allocations_.find(id);
    if (gc == gc_allocations_.end()) continue;  // Ended meanwhile.
    GcTaskState& g = gc_tasks_.at(gc->second);
    if (!g.unattached) continue;  // It came back and reattached.
    End(g, v1::STATE_QUEUED,
        absl::StrCat("lost: agent ", agent_id, " did not return within ", wait,
                     " (agent_reconnect_wait)"));
  }
}

void CheckpointManager::LoseUnreturned(
    const std::function<bool(const std::string&)>& never_returned) {
  DET_CHECK_ON_LOOP(loop_);
  std::vector<int64_t> lost;
  for (const auto& [id, g] : gc_tasks_) {
    if (g.unattached && never_returned(g.task.agent_id())) lost.push_back(id);
  }
  for (int64_t id : lost) {
    GcTaskState& g = gc_tasks_.at(id);
    End(g, v1::STATE_QUEUED,
        absl::StrCat("lost: agent ", g.task.agent_id(), " did not return after the master restarted"));
  }
}

bool CheckpointManager::OnExit(const v1::ReportExitRequest& req, const std::string& how,
                               bool abnormal) {
  DET_CHECK_ON_LOOP(loop_);
  auto gc = gc_allocations_.find(req.allocation_id());
  if (gc == gc_allocations_.end()) return false;
  GcTaskState& g = gc_tasks_.at(gc->second);
  if (g.task.agent_id() != req.agent_id()) return true;
  if (req.agent_stopping()) {
    End(g, v1::STATE_QUEUED, absl::StrCat("stopped: agent ", req.agent_id(), " is shutting down"));
  } else if (!abnormal) {
    End(g, v1::STATE_COMPLETED, "");
  } else {
    End(g, v1::STATE_ERROR,
        g.last_error_line.empty() ? how : absl::StrCat(how, ": ", g.last_error_line));
  }
  return true;
}

bool CheckpointManager::RouteLogLine(v1::LogLine* line) {
  DET_CHECK_ON_LOOP(loop_);
  auto gc = gc_allocations_.find(line->allocation_id());
  if (gc == gc_allocations_.end()) return false;
  GcTaskState& g = gc_tasks_.at(gc->second);
  line->set_trial_id(g.task.trial_id());
  if (line->stream() == "stderr") g.last_error_line = line->message();
  if (IsExperimentDeletion(g.task)) {
    Logger("master")->info("{} [{}] {}", line->allocation_id(), line->stream(), line->message());
  }
  return true;
}

}  // namespace det::master
