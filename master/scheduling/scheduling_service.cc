#include "master/scheduling/scheduling_service.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "master/loop/on_loop.h"
#include "master/scheduler/scheduler.h"
#include "master/scheduling/pools.h"
#include "master/scheduling/request_id.h"

namespace det::master {

SchedulingService::SchedulingService(const config::MasterConfig& config, Turns& turns,
                                     AgentManager& agents, LogManager& logs,
                                     ExperimentRegistry& registry, TrialManager& trials,
                                     AllocationManager& allocations,
                                     CheckpointManager& checkpoints)
    : config_(config),
      loop_(turns.loop()),
      agents_(agents),
      logs_(logs),
      allocations_(allocations),
      checkpoints_(checkpoints),
      experiments_(registry.experiments),
      trials_(registry.trials),
      trial_manager_(trials) {}

namespace {
std::string Group(int64_t experiment_id) { return absl::StrCat("exp-", experiment_id); }
}  // namespace

bool SchedulingService::SeenUnchanged(const RequestId& id, Fed fed) {
  fed.pass = pass_;
  auto [it, added] = fed_.try_emplace(id, fed);
  if (added) return false;
  const bool same = it->second == fed;
  it->second = std::move(fed);
  return same;
}

void SchedulingService::FeedQueue(bool preemption, Fresh* fresh) {
  // Experiment -> slots its open allocations hold (resources.max_slots).
  absl::flat_hash_map<int64_t, int> used;
  // Under Slurm, the trials are its to place (SlurmResourceManager::SchedulePass): the
  // queue holds GC tasks only.
  if (slurm_ == nullptr) {
    const ExperimentState* es = nullptr;
    for (const auto& [id, t] : trials_) {
      const int64_t experiment_id = t.trial.experiment_id();
      if (es == nullptr || es->experiment.id() != experiment_id) es = &experiments_.at(experiment_id);
      const v1::Experiment& e = es->experiment;
      if (!t.trial.allocation().id().empty()) used[experiment_id] += t.trial.allocation().slots();
      if (t.trial.state() == v1::STATE_QUEUED) {
        const RequestId rid = RequestId::Trial(id);
        const int64_t trial_id = id;  // A structured binding cannot be captured in C++17.
        auto request = [&] {
          scheduler::Request r{rid.Key(), e.slots_per_trial(), e.priority(), trial_id,
                               e.resource_pool()};
          r.group = Group(e.id());
          r.group_max_slots = es->config.resources.max_slots;
          return r;  // Labelled when it blocks others (SetLabeler in SchedulePass).
        };
        if (!SeenUnchanged(rid, {e.slots_per_trial(), e.priority(),
                                 es->config.resources.max_slots, PoolId(e.resource_pool())})) {
          scheduler_->SetRequest(request(), rid.Tag());
        } else if (t.waiting_reason().empty()) {
          fresh->lost.push_back(id);
        }
        if (preemption) fresh->queue.push_back(request());
      } else if (preemption && !t.trial.allocation().id().empty() && !t.killing) {
        scheduler::Running r{fresh->running_ids.Add(RequestId::Trial(id)), e.priority(), id,
                             e.resource_pool(), {}};
        std::map<std::string, std::vector<std::string>> shares;
        for (const auto& rank : t.trial.allocation().ranks()) {
          auto& slots = shares[rank.agent_id()];
          slots.insert(slots.end(), rank.slot_ids().begin(), rank.slot_ids().end());
        }
        for (auto& [agent, slots] : shares) r.agents.push_back({agent, std::move(slots)});
        fresh->running.push_back(std::move(r));
      }
    }
  }
  for (const auto& [experiment_id, slots] : used) {
    auto it = group_used_.find(experiment_id);
    if (it == group_used_.end() || it->second != slots) {
      scheduler_->SetGroupUsed(Group(experiment_id), slots);
    }
  }
  for (const auto& [experiment_id, slots] : group_used_) {
    if (!used.contains(experiment_id)) scheduler_->SetGroupUsed(Group(experiment_id), 0);
  }
  group_used_ = std::move(used);
  // Checkpoint GC tasks: zero-slot requests in their experiment's pool.
  for (const auto& [id, g] : checkpoints_.tasks()) {
    if (g.task.state() != v1::STATE_QUEUED) continue;
    auto es = experiments_.find(g.task.experiment_id());
    const int priority = es == experiments_.end() ? 42 : es->second.experiment.priority();
    const RequestId rid = RequestId::Gc(id);
    scheduler::Request r{rid.Key(), 0, priority, id, g.task.resource_pool()};
    if (!SeenUnchanged(rid, {0, priority, 0, PoolId(g.task.resource_pool())})) {
      scheduler_->SetRequest(r, rid.Tag());
    }
    fresh->gc.push_back(id);
    if (preemption) fresh->queue.push_back(std::move(r));
  }
  // What left the queue.
  for (auto it = fed_.begin(); it != fed_.end();) {
    if (it->second.pass == pass_) {
      ++it;
      continue;
    }
    scheduler_->RemoveRequest(it->first.Key());
    fed_.erase(it++);
  }
}

void SchedulingService::FeedAgents(bool preemption, Fresh* fresh) {
  std::vector<scheduler::AgentView> view = agents_.SchedulerView();
  for (const auto& a : view) {
    // Under Slurm, its per-trial agents are its own.
    if (slurm_ != nullptr && SlurmResourceManager::IsSlurmAgent(a.id)) continue;
    agents_fed_[a.id] = pass_;
    scheduler_->SetAgent(a);  // Nothing when unchanged.
    if (preemption) fresh->agents.push_back(a);
  }
  for (auto it = agents_fed_.begin(); it != agents_fed_.end();) {
    if (it->second == pass_) {
      ++it;
      continue;
    }
    scheduler_->RemoveAgent(it->first);
    agents_fed_.erase(it++);
  }
}

void SchedulingService::SchedulePass() {
  DET_CHECK_ON_LOOP(loop_);
  if (slurm_ != nullptr) slurm_->SchedulePass();
  const auto fit = config_.scheduler_fit == "worst_fit" ? scheduler::Fit::kWorstFit
                                                        : scheduler::Fit::kBestFit;
  if (scheduler_ == nullptr) {
    scheduler_ = std::make_unique<scheduler::IncrementalScheduler>(fit);
    // "trial 27 of experiment 5", made for a blocker only (not kept per queued trial).
    scheduler_->SetLabeler([this](const scheduler::Request& r, uint64_t tag) {
      const RequestId rid = RequestId::FromTag(tag);
      auto t = trials_.find(rid.id);
      if (rid.kind != RequestId::Kind::kTrial || t == trials_.end()) return r.id;
      return absl::StrCat("trial ", rid.id, " of experiment ", t->second.trial.experiment_id());
    });
  }
  ++pass_;
  std::vector<std::string> preemptible;
  for (const auto& p : config_.resource_pools) {
    if (p.preemption) preemptible.push_back(p.name);
  }
  const bool preemption = !preemptible.empty();
  Fresh fresh;
  FeedQueue(preemption, &fresh);
  if (scheduler_->num_requests() == 0) return;
  FeedAgents(preemption, &fresh);
  const std::vector<scheduler::Placement>& placements = scheduler_->Schedule();
  std::map<std::string, int> stopping_for;  // waiting request -> trials being preempted
  // Records why request `key` waits.
  auto record = [&](const std::string& key, std::string why) {
    const RequestId rid = IdOf(key);
    if (rid.kind == RequestId::Kind::kGc) {
      checkpoints_.SetPendingReason(rid.id, why);
      return;
    }
    if (auto s = stopping_for.find(key); s != stopping_for.end()) {
      why = absl::StrCat("waiting for ", s->second, " less important trial(s) to stop (preempted)");
    }
    SetWaitingReason(rid.id, why, /*verbose=*/true);
  };
  // Requests behind a pool's blocker share the pool's text (one string per pool).
  scheduler::IncrementalScheduler::ReasonSink sink;
  sink.changed = record;
  sink.behind = [&](const std::string& key, const std::string& pool) {
    const RequestId rid = IdOf(key);
    auto text = behind_.find(pool);
    // The scheduler passes a pool's text before any request behind it, and never holds
    // back a GC task; either way the reason as it reads now.
    if (text == behind_.end() || rid.kind == RequestId::Kind::kGc) {
      record(key, scheduler_->WaitingReason(key));
      return;
    }
    if (trial_manager_.SetWaitingReason(rid.id, text->second)) {
      TrialEvent(rid.id, "waiting: " + *text->second, /*verbose=*/true);
    }
  };
  sink.behind_reason = [&](const std::string& pool, const std::string& why) {
    auto [it, added] = behind_.try_emplace(pool);
    if (added) it->second = std::make_shared<std::string>();
    *it->second = why;  // Every trial sharing it reads the new text.
  };
  if (preemption) {
    // The whole decision: every reason is written, a preempting request's replaced.
    scheduler::Decision d = scheduler_->ToDecision();
    for (const auto& [victim, beneficiary] : scheduler::SelectPreemptions(
             fresh.agents, fresh.queue, fresh.running, d, fit, preemptible)) {
      TrialState& t = trials_.at(fresh.running_ids.At(victim).id);
      ++stopping_for[beneficiary];
      const auto* pool = FindPool(config_, experiments_.at(t.trial.experiment_id()).experiment.resource_pool());
      allocations_.Preempt(t, absl::StrCat("preempted by trial ", beneficiary),
                     pool ? pool->preemption_timeout : absl::ZeroDuration());
    }
    for (const auto& [request, why] : d.waiting) record(request, why);
    // Every reason was written above, as a text of its own (preemption is on for as long as
    // the master runs: no pass reports changes only).
    scheduler::IncrementalScheduler::ReasonSink ignore;
    ignore.changed = [](const std::string&, const std::string&) {};
    ignore.behind = [](const std::string&, const std::string&) {};
    ignore.behind_reason = sink.behind_reason;
    scheduler_->ChangedReasons(ignore);
  } else {
    scheduler_->ChangedReasons(sink);
    // Those whose record was lost, and the GC tasks (few): their reason again.
    for (int64_t id : fresh.lost) scheduler_->PassReason(RequestId::Trial(id).Key(), sink);
    for (int64_t id : fresh.gc) scheduler_->PassReason(RequestId::Gc(id).Key(), sink);
  }
  for (const auto& p : placements) {
    const RequestId rid = IdOf(p.request_id);
    if (rid.kind == RequestId::Kind::kGc) {
      checkpoints_.Start(rid.id, p.agents.at(0).agent_id);
      continue;
    }
    std::vector<AgentShare> agents;
    for (const auto& a : p.agents) agents.push_back({a.agent_id, a.slots});
    // torchrun's MASTER_PORT: a port of rank 0's agent no other open allocation holds.
    const std::string& chief_agent = agents.at(0).agent_id;
    auto chief = agents_.Chief(chief_agent);
    std::optional<int> port;
    if (chief.ok()) port = allocations_.FreeChiefPort(chief_agent, chief->port_first, chief->port_last);
    if (!port) {
      SetWaitingReason(
          rid.id, chief.ok() ? absl::StrCat("waiting for a chief port on agent ", chief_agent,
                                            ": all ", chief->port_last - chief->port_first + 1,
                                            " ports of its chief_port_range ", chief->port_first,
                                            "..", chief->port_last,
                                            " are held by running allocations")
                             : std::string(chief.status().message()));
      continue;
    }
    allocations_.Start(trials_.at(rid.id), agents, chief->address, *port);
  }
}

void SchedulingService::SetWaitingReason(int64_t trial_id, const std::string& why, bool verbose) {
  if (trial_manager_.SetWaitingReason(trial_id, why)) TrialEvent(trial_id, "waiting: " + why, verbose);
}
}  // namespace det::master
