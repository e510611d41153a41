// AllocationManager: the agent and worker channels of runs (launched, reattach, lost
// agents, rendezvous, ShouldPreempt). The life of a run is in allocation_manager.cc.
#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging/logging.h"
#include "common/status/status_macros.h"
#include "master/allocations/allocation_manager.h"
#include "master/loop/on_loop.h"

namespace det::master {
namespace {

constexpr absl::Duration kMaxPollWait = absl::Seconds(60);

}  // namespace

absl::Status AllocationManager::ReportLaunched(const v1::ReportLaunchedRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  RETURN_IF_ERROR(agents_.Touch(req.agent_id(), req.session_id()));
  for (int rank : req.ranks()) {
    RETURN_IF_ERROR(CheckAgentReport(req.agent_id(), req.allocation_id(), rank));
  }
  auto at = allocation_trial_.find(req.allocation_id());
  if (at == allocation_trial_.end()) return absl::OkStatus();
  TrialState& t = trials_.at(at->second);
  if (t.trial.state() == v1::STATE_STARTING) {
    v1::Allocation running = t.trial.allocation();
    running.set_state(v1::STATE_RUNNING);
    RETURN_IF_ERROR(PersistAllocation(store_, running, t.token));
    RETURN_IF_ERROR(trial_manager_.MarkRunning(t));
    experiments_manager_.UpdateExperiment(experiments_.at(t.trial.experiment_id()));
  }
  TrialEvent(t.trial.id(), absl::StrCat("agent ", req.agent_id(), " started rank(s) ",
                                        absl::StrJoin(req.ranks(), ", ")));
  return absl::OkStatus();
}

absl::Status AllocationManager::CheckAgentReport(const std::string& agent_id,
                                                const std::string& allocation_id,
                                                int rank) const {
  DET_CHECK_ON_LOOP(loop_);
  const v1::Allocation* allocation = nullptr;
  if (auto at = allocation_trial_.find(allocation_id); at != allocation_trial_.end()) {
    allocation = &trials_.at(at->second).trial.allocation();
  } else if (auto ended = ended_placements_.find(allocation_id);
             ended != ended_placements_.end()) {
    allocation = &ended->second;
  } else {
    return absl::OkStatus();
  }
  for (const auto& r : allocation->ranks()) {
    if (r.rank() != rank) continue;
    if (r.agent_id() == agent_id) return absl::OkStatus();
    return absl::PermissionDeniedError(absl::StrCat(
        "agent ", agent_id, " may report only for allocations placed on it: rank ", rank,
        " of allocation ", allocation_id, " runs on agent ", r.agent_id()));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "agent ", agent_id, " may report only for allocations placed on it: allocation ",
      allocation_id, " has no rank ", rank));
}

absl::StatusOr<int64_t> AllocationManager::ContextExperiment(
    const std::string& agent_id, const std::string& allocation_id) const {
  DET_CHECK_ON_LOOP(loop_);
  auto at = allocation_trial_.find(allocation_id);
  if (at == allocation_trial_.end()) {
    return absl::NotFoundError(absl::StrCat("allocation ", allocation_id, " is not running"));
  }
  const v1::Trial& trial = trials_.at(at->second).trial;
  for (const auto& r : trial.allocation().ranks()) {
    if (r.agent_id() == agent_id) return trial.experiment_id();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "agent ", agent_id, " may fetch the model context only of allocations placed on it: "
      "allocation ", allocation_id, " has no rank on it"));
}

absl::Status AllocationManager::CheckShippedLine(const v1::LogLine& line) const {
  const std::string& id = line.allocation_id();
  // Checkpoint GC tasks' lines: routed (and their trial set) by the checkpoint manager.
  if (absl::StartsWith(id, "gc-")) return absl::OkStatus();
  int64_t trial_id = -1;
  if (auto at = allocation_trial_.find(id); at != allocation_trial_.end()) {
    trial_id = at->second;
  } else if (auto ended = ended_placements_.find(id); ended != ended_placements_.end()) {
    trial_id = ended->second.trial_id();
  } else {
    return absl::PermissionDeniedError(absl::StrCat(
        "agent ", line.agent_id(), " may ship log lines only of allocations placed on it: the "
        "master placed no allocation '", id, "' (line for trial ", line.trial_id(), ")"));
  }
  if (line.trial_id() != trial_id) {
    return absl::PermissionDeniedError(absl::StrCat(
        "agent ", line.agent_id(), ": a log line of allocation ", id, " belongs to trial ",
        trial_id, ", not trial ", line.trial_id()));
  }
  return CheckAgentReport(line.agent_id(), id, line.rank());
}

void AllocationManager::LinesDropped(int64_t trial_id, int64_t count, const std::string& what) {
  auto t = trials_.find(trial_id);
  if (t == trials_.end() || count <= 0) return;
  int64_t total = lines_dropped_[trial_id] += count;
  Logger("master")->warn("trial {}: {} log lines dropped ({})", trial_id, count, what);
  // One warning with the running total.
  auto* warnings = t->second.trial.mutable_warnings();
  for (int i = warnings->size() - 1; i >= 0; --i) {
    if (absl::StrContains(warnings->Get(i), " log lines dropped")) {
      warnings->DeleteSubrange(i, 1);
    }
  }
  AddTrialWarning(store_, t->second,
                  absl::StrCat(total, " log lines dropped (the last ", count, ": ", what, ")"));
}

void AllocationManager::Rendezvous(const v1::RendezvousRequest& req,
                                   v1::RendezvousResponse* resp, Done done) {
  DET_CHECK_ON_LOOP(loop_);
  auto t_or = registry_.AuthorizeWorker(req.auth());
  if (!t_or.ok()) {
    done(t_or.status());
    return;
  }
  TrialState& t = **t_or;
  int world = t.trial.allocation().ranks_size();
  if (req.auth().rank() < 0 || req.auth().rank() >= world) {
    done(absl::InvalidArgumentError(absl::StrCat("auth.rank: ", req.auth().rank(),
                                                 " is outside the world of ", world)));
    return;
  }
  const std::string key = req.key();  // `req` dies once its waiter is answered.
  std::map<int, std::string>& round = t.rendezvous[key];
  if (static_cast<int>(round.size()) < world) round[req.auth().rank()] = req.address();
  t.rendezvous_waiters.push_back(std::move(done));
  t.rendezvous_responses.push_back(resp);
  t.rendezvous_keys.push_back(key);
  if (static_cast<int>(round.size()) < world) return;
  for (size_t i = 0; i < t.rendezvous_waiters.size();) {
    if (t.rendezvous_keys[i] != key) {
      ++i;
      continue;
    }
    v1::RendezvousResponse* r = t.rendezvous_responses[i];
    r->set_ready(true);
    for (const auto& [rank, addr] : round) r->add_addresses(addr);
    Done waiter = std::move(t.rendezvous_waiters[i]);
    t.rendezvous_waiters.erase(t.rendezvous_waiters.begin() + i);
    t.rendezvous_responses.erase(t.rendezvous_responses.begin() + i);
    t.rendezvous_keys.erase(t.rendezvous_keys.begin() + i);
    waiter(absl::OkStatus());
  }
}

void AllocationManager::ShouldPreempt(const v1::ShouldPreemptRequest& req,
                                      v1::ShouldPreemptResponse* resp, Done done) {
  DET_CHECK_ON_LOOP(loop_);
  const v1::WorkerAuth& auth = req.auth();
  if (auto ended = ended_allocations_.find(auth.allocation_id());
      ended != ended_allocations_.end() && !auth.token().empty() &&
      ended->second == auth.token()) {
    done(absl::FailedPreconditionError(
        absl::StrCat("allocation ", auth.allocation_id(), " has ended")));
    return;
  }
  auto t_or = registry_.AuthorizeWorker(auth);
  if (!t_or.ok()) {
    done(t_or.status());
    return;
  }
  TrialState& t = **t_or;
  // det.core asks from det.core.init() (one ask that does not wait, then long polls): from
  // now on a stop gives the run the grace period to checkpoint (Stop).
  t.asks_should_preempt = true;
  if (t.killing || req.wait_ms() <= 0 || registry_.shutting_down) {
    resp->set_preempt(t.killing);
    resp->set_reason(t.kill_reason);
    done(absl::OkStatus());
    return;
  }
  const int64_t trial_id = t.trial.id();
  auto wait = std::min(absl::Milliseconds(req.wait_ms()), kMaxPollWait);
  auto timer = turns_.PostAfter(wait, [this, trial_id, resp] {
    auto& waiters = trials_.at(trial_id).preempt_waiters;
    for (auto it = waiters.begin(); it != waiters.end(); ++it) {
      if (it->response != resp) continue;
      Done d = std::move(it->done);
      waiters.erase(it);
      d(absl::OkStatus());  // Not asked to stop within the wait.
      return;
    }
  });
  t.preempt_waiters.push_back({resp, std::move(done), timer});
}

absl::Status AllocationManager::ReportEarlyExit(const v1::ReportEarlyExitRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(TrialState * t, registry_.AuthorizeWorker(req.auth()));
  if (req.auth().rank() != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "auth.rank: only rank 0 reports an early exit of trial ", t->trial.id(), ", not rank ",
        req.auth().rank()));
  }
  switch (req.reason()) {
    case v1::EARLY_EXIT_REASON_INVALID_HP: {
      if (t->trial.search().invalid_hp()) return absl::OkStatus();
      v1::Trial updated = t->trial;
      updated.mutable_search()->set_invalid_hp(true);
      RETURN_IF_ERROR(PersistTrial(store_, *t, std::move(updated)));
      TrialEvent(t->trial.id(),
                 "rank 0 reported invalid hyperparameters (det.InvalidHP): the trial ends as "
                 "invalid when its run exits normally");
      return absl::OkStatus();
    }
    case v1::EARLY_EXIT_REASON_USER_REQUESTED_STOP:
      TrialEvent(t->trial.id(), "rank 0 asked to stop early: the trial ends when its run exits");
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "reason: expected EARLY_EXIT_REASON_INVALID_HP or "
          "EARLY_EXIT_REASON_USER_REQUESTED_STOP, got ",
          v1::EarlyExitReason_IsValid(req.reason()) ? v1::EarlyExitReason_Name(req.reason())
                                                    : absl::StrCat(req.reason())));
  }
}

absl::Status AllocationManager::GetExperimentBestValidation(
    const v1::GetExperimentBestValidationRequest& req,
    v1::GetExperimentBestValidationResponse* resp) {
  DET_CHECK_ON_LOOP(loop_);
  ASSIGN_OR_RETURN(TrialState * t, registry_.AuthorizeWorker(req.auth()));
  const ExperimentState& es = experiments_.at(t->trial.experiment_id());
  const std::string& metric = es.config.searcher.metric;
  const bool smaller = es.config.searcher.smaller_is_better;
  for (int64_t tid : es.trial_ids) {
    const auto& summary = trials_.at(tid).trial.validation_summary();
    auto it = summary.find(metric);
    if (it == summary.end() || it->second.count() == 0) continue;
    const double v = smaller ? it->second.min() : it->second.max();
    if (!resp->found() || (smaller ? v < resp->value() : v > resp->value())) {
      resp->set_found(true);
      resp->set_value(v);
    }
  }
  return absl::OkStatus();
}

void AllocationManager::AnswerPreemptWaiters(TrialState& t, const absl::Status& status) {
  std::vector<TrialState::PreemptWaiter> waiters = std::move(t.preempt_waiters);
  t.preempt_waiters.clear();
  for (auto& w : waiters) {
    loop_.Cancel(w.timer);
    w.response->set_preempt(t.killing);
    w.response->set_reason(t.kill_reason);
    w.done(status);
  }
}
void AllocationManager::FailWaiters(const absl::Status& status) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& [id, ts] : trials_) {
    AnswerPreemptWaiters(ts, status);
    for (auto& d : ts.rendezvous_waiters) d(status);
    ts.rendezvous_waiters.clear();
    ts.rendezvous_responses.clear();
    ts.rendezvous_keys.clear();
  }
}

bool AllocationManager::ReattachOrKill(const std::string& agent_id,
                                       const std::string& allocation_id) {
  DET_CHECK_ON_LOOP(loop_);
  auto at = allocation_trial_.find(allocation_id);
  TrialState* t = at == allocation_trial_.end() ? nullptr : &trials_.at(at->second);
  if (t && t->unattached.erase(agent_id)) {
    for (const auto& r : t->trial.allocation().ranks()) {
      if (r.agent_id() == agent_id) {
        agents_.SetSlotsUsed(agent_id, {r.slot_ids().begin(), r.slot_ids().end()}, allocation_id);
      }
    }
    TrialEvent(t->trial.id(), absl::StrCat("agent ", agent_id, " reattached"));
    return false;
  }
  // Unknown, or its ranks on this agent already count as exited (lost): stop them.
  bool ours_exited = true;
  if (t) {
    for (const auto& r : t->trial.allocation().ranks()) {
      ours_exited &= r.agent_id() != agent_id || t->exits.count(r.rank()) > 0;
    }
  }
  return ours_exited;
}

void AllocationManager::LoseMissing(const std::string& agent_id,
                                    const std::set<std::string>& running) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& [tid, t] : trials_) {
    const v1::Allocation& a = t.trial.allocation();
    if (a.id().empty() || running.count(a.id())) continue;
    bool on_agent = false;
    for (const auto& r : a.ranks()) on_agent |= r.agent_id() == agent_id;
    if (!on_agent) continue;
    t.unattached.erase(agent_id);
    t.NoteStopCause(StopCause::kLostAgent);
    ExitRanksOn(t, [&](const std::string& agent) { return agent == agent_id; },
                "agent restarted without it");
  }
}

std::vector<std::string> AllocationManager::MarkUnattached(const std::string& agent_id,
                                                           const std::string& wait) {
  DET_CHECK_ON_LOOP(loop_);
  std::vector<std::string> allocations;
  for (auto& [tid, t] : trials_) {
    const v1::Allocation& a = t.trial.allocation();
    bool on_agent = false;
    for (const auto& r : a.ranks()) on_agent |= r.agent_id() == agent_id;
    if (!on_agent) continue;
    t.unattached.insert(agent_id);
    allocations.push_back(a.id());
    TrialEvent(tid, absl::StrCat("agent ", agent_id, " stopped answering; its workers may still run: "
                                 "waiting up to ", wait, " (agent_reconnect_wait) for it to return"));
  }
  return allocations;
}

void AllocationManager::LoseUnattached(const std::vector<std::string>& allocation_ids,
                                       const std::string& agent_id, const std::string& wait) {
  DET_CHECK_ON_LOOP(loop_);
  for (const auto& id : allocation_ids) {
    auto at = allocation_trial_.find(id);
    if (at == allocation_trial_.end()) continue;
    TrialState& t = trials_.at(at->second);
    if (!t.unattached.erase(agent_id)) continue;  // It came back and reattached.
    t.NoteStopCause(StopCause::kLostAgent);
    TrialEvent(t.trial.id(), absl::StrCat("agent ", agent_id, " did not return within ", wait,
                                          " (agent_reconnect_wait)"));
    ExitRanksOn(t, [&](const std::string& agent) { return agent == agent_id; }, "agent lost");
  }
}

void AllocationManager::LoseUnreturned(
    const std::function<bool(const std::string&)>& never_returned) {
  DET_CHECK_ON_LOOP(loop_);
  for (auto& [id, ts] : trials_) {
    // Agents that came back and went silent again since wait for their own deadline
    // (AgentLiveness).
    std::set<std::string> gone;
    for (const auto& agent : ts.unattached) {
      if (never_returned(agent)) gone.insert(agent);
    }
    if (gone.empty()) continue;
    std::string agents = absl::StrJoin(gone, ", ");
    TrialEvent(id, absl::StrCat("agent(s) ", agents, " did not return after the master restarted"));
    ts.NoteStopCause(StopCause::kLostAgent);
    for (const auto& agent : gone) ts.unattached.erase(agent);
    ExitRanksOn(ts, [&](const std::string& agent) { return gone.count(agent) > 0; },
                "agent did not return");
  }
}

}  // namespace det::master
