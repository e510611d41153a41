#include "master/allocations/allocation_manager.h"

#include "master/auth/linked_task_user.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config/trial_spec.h"
#include "common/logging/logging.h"
#include "master/auth/linked_task_user.h"
#include "master/loop/on_loop.h"
#include "master/trials/run_outcome.h"
#include "master/trials/transitions.h"
#include "master/views/views.h"

namespace det::master {
namespace {

std::string RandomHex(int bytes) {
  std::random_device rd;
  std::string out;
  for (int i = 0; i < bytes; ++i) absl::StrAppend(&out, absl::Hex(rd() & 0xff, absl::kZeroPad2));
  return out;
}

}  // namespace

AllocationManager::AllocationManager(Clock& clock, Turns& turns, Store& store,
                                     AgentManager& agents, LogManager& logs,
                                     ExperimentRegistry& registry, TrialManager& trials,
                                     ExperimentManager& experiments)
    : clock_(clock),
      turns_(turns),
      loop_(turns.loop()),
      store_(store),
      agents_(agents),
      logs_(logs),
      registry_(registry),
      trial_manager_(trials),
      experiments_manager_(experiments),
      experiments_(registry.experiments),
      trials_(registry.trials),
      allocation_trial_(registry.allocation_trial),
      counters_(registry.counters) {
  logs_.SetShippedLineCheck([this](const v1::LogLine& line) { return CheckShippedLine(line); });
  logs_.SetLinesDropped([this](int64_t trial_id, int64_t count, const std::string& what) {
    LinesDropped(trial_id, count, what);
  });
}

void AllocationManager::Restore(
    std::vector<std::pair<v1::Allocation, std::string>> open_allocations) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& [allocation, token] : open_allocations) {
    auto t = trials_.find(allocation.trial_id());
    if (t == trials_.end() || views::Terminal(t->second.trial.state())) continue;
    TrialState& ts = t->second;
    *ts.trial.mutable_allocation() = allocation;
    ts.token = token;
    allocation_trial_[allocation.id()] = ts.trial.id();
    if (allocation.chief_port() > 0 && allocation.ranks_size() > 0) {
      chief_ports_.Hold(allocation.ranks(0).agent_id(), allocation.chief_port(), allocation.id());
    }
    for (const auto& r : allocation.ranks()) {
      ts.unattached.insert(r.agent_id());
      agents_.SetSlotsUsed(r.agent_id(), {r.slot_ids().begin(), r.slot_ids().end()}, allocation.id());
    }
  }
  // Trials whose run was not yet placed go back to the queue.
  for (auto& [id, ts] : trials_) trial_manager_.RequeueUnplaced(ts);
}

std::optional<int> AllocationManager::FreeChiefPort(const std::string& agent_id, int first,
                                                    int last) const {
  DET_CHECK_ON_LOOP(loop_);
  return chief_ports_.Lowest(agent_id, first, last);
}

std::string AllocationManager::NewToken() { return RandomHex(24); }

absl::StatusOr<LaunchInputs> AllocationManager::LaunchInputsFor(const TrialState& t,
                                                                const std::string& chief_address,
                                                                int chief_port,
                                                                const std::string& token) const {
  const ExperimentState& es = experiments_.at(t.trial.experiment_id());
  // The owner's workers run as the OS user linked to it, else as the agents' default:
  // an unreadable link must not silently become the default, so the run waits.
  absl::StatusOr<v1::AgentUserGroup> task_user = LinkedTaskUser(store_, es.experiment.owner());
  if (!task_user.ok()) {
    return absl::Status(task_user.status().code(),
                        absl::StrCat("cannot read the agent user linked to '",
                                     es.experiment.owner(), "': ", task_user.status().message()));
  }
  // The context's hash only (agents fetch the context off the loop); "" when unreadable:
  // the agents then fetch without caching.
  absl::StatusOr<std::string> context_sha256 = store_.GetExperimentContextSha256(es.experiment.id());
  LaunchInputs in;
  in.experiment_id = es.experiment.id();
  in.trial = t.trial;
  // User code's copy; the stored effective YAML parsed at create (or recovery), so the
  // conversion cannot fail.
  in.config_json =
      config::EffectiveConfigJson(es.experiment.config_yaml(), "experiment config").value_or("{}");
  in.trial_spec = config::BuildTrialSpec(es.config, es.experiment.id(), t.trial);
  in.entrypoint = es.config.entrypoint;
  in.environment.insert(es.config.environment_variables.begin(),
                        es.config.environment_variables.end());
  in.python = es.config.python;
  in.max_restarts = es.config.max_restarts;
  in.token = token;
  if (context_sha256.ok()) in.context_sha256 = *std::move(context_sha256);
  in.chief_address = chief_address;
  in.chief_port = chief_port;
  in.task_user = *std::move(task_user);
  return in;
}

bool AllocationManager::Start(TrialState& t, const std::vector<AgentShare>& agents,
                              const std::string& chief_address, int chief_port,
                              const std::string& run_token) {
  DET_CHECK_ON_LOOP(loop_);
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  // Checked before its allocation is stored (MarkStarting checks it again).
  if (absl::Status legal = CheckTrialTransition(t.trial.id(), t.trial.state(), v1::STATE_STARTING);
      !legal.ok()) {
    Logger("master")->error("{}", std::string(legal.message()));
    return false;
  }
  const std::string token = run_token.empty() ? NewToken() : run_token;
  absl::StatusOr<LaunchInputs> in = LaunchInputsFor(t, chief_address, chief_port, token);
  if (!in.ok()) {
    trial_manager_.SetWaitingReason(t.trial.id(), std::string(in.status().message()));
    return false;
  }
  if (t.trial.run_id() > 0) {
    // This run starts from the latest checkpoint (or from scratch): what earlier runs
    // reported after it is superseded, so the curve keeps one value per batch.
    int64_t from = 0;
    auto checkpoints = store_.GetCheckpoints(t.trial.id());
    if (checkpoints.ok()) {
      for (const auto& c : *checkpoints) {
        if (!t.trial.latest_checkpoint().empty() && c.storage_path() == t.trial.latest_checkpoint()) {
          from = c.total_batches();
        }
      }
    }
    v1::Trial updated = t.trial;
    auto deleted = store_.SupersedeMetrics(&updated, t.trial.run_id(), from);
    if (!deleted.ok()) {
      Logger("master")->error("trial {}: cannot supersede metrics: {}", t.trial.id(),
                              deleted.status().ToString());
    } else if (*deleted > 0) {
      t.trial = std::move(updated);
      TrialEvent(t.trial.id(), absl::StrCat(*deleted, " metric rows reported after batch ", from,
                                            " by earlier runs superseded by run ", t.trial.run_id()));
    }
  }
  v1::Allocation a;
  a.set_id(absl::StrCat(t.trial.id(), ".", t.trial.run_id()));
  a.set_trial_id(t.trial.id());
  a.set_slots(es.config.resources.slots_per_trial);
  a.set_state(v1::STATE_STARTING);
  a.set_start_time_ms(clock_.NowMs());
  a.set_chief_address(chief_address);
  a.set_chief_port(chief_port);
  for (auto& r : PlaceRanks(agents)) *a.add_ranks() = std::move(r);
  // Stored before anything is launched: a run the store does not know is never started.
  absl::Status stored = PersistAllocation(store_, a, token);
  if (stored.ok()) stored = trial_manager_.MarkStarting(t, a);
  if (!stored.ok()) {
    trial_manager_.SetWaitingReason(
        t.trial.id(), absl::StrCat("cannot store its allocation: ", stored.message()));
    return false;
  }
  t.token = token;
  t.exits.clear();
  t.unattached.clear();
  t.killing = false;
  t.stop_cause = StopCause::kNone;
  t.asks_should_preempt = t.kill_sent = false;
  t.kill_reason.clear();
  t.failure.clear();
  t.rendezvous.clear();
  allocation_trial_[a.id()] = t.trial.id();
  chief_ports_.Hold(agents.at(0).agent_id, chief_port, a.id());
  counters_.set_allocations_started_total(counters_.allocations_started_total() + 1);

  in->trial = t.trial;
  std::vector<std::pair<std::string, v1::LaunchCommand>> launches =
      BuildLaunchCommands(*in, a, agents);
  for (const AgentShare& share : agents) agents_.SetSlotsUsed(share.agent_id, share.slots, a.id());
  if (run_launcher_ != nullptr) {
    run_launcher_->Launch(t.trial.id(), a, std::move(launches));
  } else {
    for (auto& [agent_id, launch] : launches) {
      v1::AgentCommand cmd;
      *cmd.mutable_launch() = std::move(launch);
      agents_.Send(agent_id, std::move(cmd));
    }
  }
  std::vector<std::string> where;
  for (const AgentShare& share : agents) {
    where.push_back(absl::StrCat(share.agent_id, share.slots.empty() ? "" : absl::StrCat(" (slots ", absl::StrJoin(share.slots, ","), ")")));
  }
  TrialEvent(t.trial.id(), absl::StrCat("allocation ", a.id(), " scheduled on ",
                                        absl::StrJoin(where, ", "), "; chief ", chief_address, ":",
                                        chief_port));
  experiments_manager_.UpdateExperiment(es);
  return true;
}

void AllocationManager::Kill(TrialState& t, const std::string& reason, absl::Duration grace) {
  DET_CHECK_ON_LOOP(loop_);
  if (t.kill_sent) return;
  if (!t.killing) {
    t.killing = true;
    t.kill_reason = reason;
    AnswerPreemptWaiters(t, absl::OkStatus());
  }
  SendKill(t, reason, grace);
}

void AllocationManager::Stop(TrialState& t, const std::string& reason, absl::Duration timeout) {
  DET_CHECK_ON_LOOP(loop_);
  if (t.killing) return;
  if (!t.asks_should_preempt) {
    Kill(t, reason, timeout);
    return;
  }
  const ExperimentState& es = experiments_.at(t.trial.experiment_id());
  absl::Duration grace = es.config.stop_grace_period.value_or(stop_grace_period_);
  if (timeout > absl::ZeroDuration()) grace = std::min(grace, timeout);
  t.killing = true;
  t.kill_reason = reason;
  AnswerPreemptWaiters(t, absl::OkStatus());
  const int64_t trial_id = t.trial.id();
  const std::string allocation = t.trial.allocation().id();
  TrialEvent(trial_id, absl::StrCat("asking allocation ", allocation, " to stop (", reason,
                                    ") through should_preempt(): it has ",
                                    absl::FormatDuration(grace),
                                    " to checkpoint and exit before SIGTERM"));
  turns_.PostAfter(grace, [this, trial_id, allocation, reason, grace] {
    auto it = trials_.find(trial_id);
    if (it == trials_.end()) return;
    TrialState& t = it->second;
    if (t.trial.allocation().id() != allocation || t.kill_sent) return;  // It exited.
    TrialEvent(trial_id, absl::StrCat("allocation ", allocation, " did not exit within ",
                                      absl::FormatDuration(grace),
                                      " of being asked to stop: SIGTERM"));
    SendKill(t, reason, absl::ZeroDuration());
  });
}

void AllocationManager::SendKill(TrialState& t, const std::string& reason, absl::Duration grace) {
  t.kill_sent = true;
  // Copied: an unreachable agent's ranks exit below, which may end the allocation.
  const std::string allocation = t.trial.allocation().id();
  std::set<std::string> agents;
  for (const auto& r : t.trial.allocation().ranks()) agents.insert(r.agent_id());
  TrialEvent(t.trial.id(), absl::StrCat("stopping allocation ", allocation, ": ", reason));
  if (run_launcher_ != nullptr) {
    run_launcher_->Kill(t.trial.allocation(), reason, grace);
    return;
  }
  for (const auto& agent_id : agents) {
    v1::AgentCommand cmd;
    cmd.mutable_kill()->set_allocation_id(allocation);
    cmd.mutable_kill()->set_reason(reason);
    cmd.mutable_kill()->set_grace_ms(static_cast<int32_t>(absl::ToInt64Milliseconds(grace)));
    if (t.trial.allocation().id() == allocation && !agents_.Send(agent_id, std::move(cmd))) {
      // Unreachable agent: its ranks count as gone.
      ExitRanksOn(t, [&](const std::string& agent) { return agent == agent_id; },
                  "agent unreachable");
    }
  }
}

void AllocationManager::Preempt(TrialState& t, const std::string& reason, absl::Duration grace) {
  DET_CHECK_ON_LOOP(loop_);
  t.NoteStopCause(StopCause::kPreempt);
  if (t.killing) return;
  experiments_manager_.WarnProgressLoss(t, nullptr);
  Stop(t, reason, grace);
}

void AllocationManager::OnRankExit(TrialState& t, int rank, const std::string& how, bool abnormal) {
  if (t.trial.allocation().id().empty() || t.exits.count(rank)) return;
  t.exits[rank] = how;
  TrialEvent(t.trial.id(), absl::StrCat("rank ", rank, " exited: ", how));
  if (abnormal && t.failure.empty()) {
    t.failure = absl::StrCat("rank ", rank, " ", how);
    KillAllocation(t, absl::StrCat("rank ", rank, " failed"));
  }
  if (static_cast<int>(t.exits.size()) >= t.trial.allocation().ranks_size()) EndAllocation(t);
}

void AllocationManager::EndAllocation(TrialState& t) {
  DET_CHECK_ON_LOOP(loop_);
  v1::Allocation* a = t.trial.mutable_allocation();
  ExperimentState& es = experiments_.at(t.trial.experiment_id());
  RunEnd end;
  end.experiment_state = es.experiment.state();
  end.stop_requested = t.killing;
  end.cause = RunStopCause(t.trial, t.stop_cause);
  end.failure = t.failure;
  end.restarts = t.trial.restarts();
  end.max_restarts = es.config.max_restarts;
  end.allocation_id = a->id();
  end.invalid_hp = t.trial.search().invalid_hp();
  const RunOutcome outcome = DecideRunOutcome(end);
  a->set_state(outcome.allocation_state);
  a->set_end_time_ms(clock_.NowMs());
  a->set_exit_reason(outcome.exit_reason);
  (void)PersistAllocation(store_, *a, t.token);  // Logged; the runs have ended either way.
  agents_.ReleaseSlots(a->id());
  chief_ports_.Release(a->id());
  allocation_trial_.erase(a->id());
  ended_allocations_[a->id()] = t.token;
  ended_placements_[a->id()] = *a;
  AnswerPreemptWaiters(t, absl::FailedPreconditionError(
                              absl::StrCat("allocation ", a->id(), " has ended")));
  for (auto& d : t.rendezvous_waiters) d(absl::AbortedError("allocation ended"));
  t.rendezvous_waiters.clear();
  t.rendezvous_responses.clear();
  t.rendezvous_keys.clear();
  if (!trial_manager_.EndRun(t, outcome).ok()) return;  // Logged (a bug).
  if (outcome.trial_state == v1::STATE_PAUSED || outcome.trial_state == v1::STATE_QUEUED) {
    TrialEvent(t.trial.id(), outcome.event);
    if (outcome.trial_state == v1::STATE_QUEUED) turns_.RequestSchedule();
  } else {
    if (!outcome.event.empty()) TrialEvent(t.trial.id(), outcome.event);
    experiments_manager_.FinishTrial(t, outcome.trial_state, outcome.error);
  }
  experiments_manager_.UpdateExperiment(es);
  turns_.RequestSchedule();
}

void AllocationManager::ExitRanksOn(TrialState& t,
                                    const std::function<bool(const std::string&)>& on_agent,
                                    const std::string& how) {
  // OnRankExit may end the allocation (and clear it): walk a copy, stop when it changes.
  const v1::Allocation allocation = t.trial.allocation();
  for (const auto& r : allocation.ranks()) {
    if (t.trial.allocation().id() != allocation.id()) return;
    if (on_agent(r.agent_id())) OnRankExit(t, r.rank(), how, true);
  }
}
void AllocationManager::OnExit(const v1::ReportExitRequest& req, const std::string& how,
                               bool abnormal) {
  DET_CHECK_ON_LOOP(loop_);
  auto at = allocation_trial_.find(req.allocation_id());
  if (at == allocation_trial_.end()) return;  // Already ended.
  if (absl::Status allowed = CheckAgentReport(req.agent_id(), req.allocation_id(), req.rank());
      !allowed.ok()) {
    Logger("master")->warn("exit report ignored: {}", std::string(allowed.message()));
    return;
  }
  TrialState& t = trials_.at(at->second);
  if (req.agent_stopping()) t.NoteStopCause(StopCause::kLostAgent);
  OnRankExit(t, req.rank(), how, abnormal);
}

void AllocationManager::StopRunsOn(const std::string& agent_id) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& [tid, t] : trials_) {
    bool on_agent = false;
    for (const auto& r : t.trial.allocation().ranks()) on_agent |= r.agent_id() == agent_id;
    if (!on_agent) continue;
    t.NoteStopCause(StopCause::kLostAgent);
    KillAllocation(t, absl::StrCat("agent ", agent_id, " disabled"));
  }
}

}  // namespace det::master
