#include "master/scheduling/scheduling_service.h"

#include <algorithm>
#include <optional>
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

void SchedulingService::SchedulePass() {
  DET_CHECK_ON_LOOP(loop_);
  RequestIds ids;
  std::vector<scheduler::Request> queue;
  std::vector<scheduler::Running> running;
  // Experiment job -> slots its open allocations hold (resources.max_slots).
  std::map<std::string, int> group_used;
  if (slurm_ != nullptr) slurm_->SchedulePass();
  // Under Slurm, the trials are its to place (above): the queue holds GC tasks only.
  if (slurm_ == nullptr) {
    for (const auto& [id, t] : trials_) {
      const ExperimentState& es = experiments_.at(t.trial.experiment_id());
      const v1::Experiment& e = es.experiment;
      const std::string group = absl::StrCat("exp-", e.id());
      if (!t.trial.allocation().id().empty()) group_used[group] += t.trial.allocation().slots();
      if (t.trial.state() == v1::STATE_QUEUED) {
        scheduler::Request r{ids.Add(RequestId::Trial(id)), e.slots_per_trial(), e.priority(), id,
                             e.resource_pool()};
        r.group = group;
        r.group_max_slots = es.config.resources.max_slots;
        r.label = absl::StrCat("trial ", id, " of experiment ", e.id());
        queue.push_back(std::move(r));
      } else if (!t.trial.allocation().id().empty() && !t.killing) {
        scheduler::Running r{ids.Add(RequestId::Trial(id)), e.priority(), id, e.resource_pool(), {}};
        std::map<std::string, std::vector<std::string>> shares;
        for (const auto& rank : t.trial.allocation().ranks()) {
          auto& slots = shares[rank.agent_id()];
          slots.insert(slots.end(), rank.slot_ids().begin(), rank.slot_ids().end());
        }
        for (auto& [agent, slots] : shares) r.agents.push_back({agent, std::move(slots)});
        running.push_back(std::move(r));
      }
    }
  }
  // Checkpoint GC tasks: zero-slot requests in their experiment's pool.
  for (const auto& [id, g] : checkpoints_.tasks()) {
    if (g.task.state() != v1::STATE_QUEUED) continue;
    auto es = experiments_.find(g.task.experiment_id());
    int priority = es == experiments_.end() ? 42 : es->second.experiment.priority();
    queue.push_back({ids.Add(RequestId::Gc(id)), 0, priority, id, g.task.resource_pool()});
  }
  if (queue.empty()) return;
  auto fit = config_.scheduler_fit == "worst_fit" ? scheduler::Fit::kWorstFit
                                                  : scheduler::Fit::kBestFit;
  std::vector<scheduler::AgentView> view = agents_.SchedulerView();
  if (slurm_ != nullptr) {
    view.erase(std::remove_if(view.begin(), view.end(),
                              [](const scheduler::AgentView& a) {
                                return SlurmResourceManager::IsSlurmAgent(a.id);
                              }),
               view.end());
  }
  scheduler::Decision d = scheduler::Schedule(view, queue, fit, group_used);
  std::vector<std::string> preemptible;
  for (const auto& p : config_.resource_pools) {
    if (p.preemption) preemptible.push_back(p.name);
  }
  std::map<std::string, int> stopping_for;  // waiting request -> trials being preempted
  if (!preemptible.empty()) {
    for (const auto& [victim, beneficiary] :
         scheduler::SelectPreemptions(view, queue, running, d, fit, preemptible)) {
      TrialState& t = trials_.at(ids.At(victim).id);
      ++stopping_for[beneficiary];
      const auto* pool = FindPool(config_, experiments_.at(t.trial.experiment_id()).experiment.resource_pool());
      allocations_.Preempt(t, absl::StrCat("preempted by trial ", beneficiary),
                     pool ? pool->preemption_timeout : absl::ZeroDuration());
    }
  }
  for (auto [request, why] : d.waiting) {
    const RequestId& rid = ids.At(request);
    if (rid.kind == RequestId::Kind::kGc) {
      checkpoints_.SetPendingReason(rid.id, why);
      continue;
    }
    if (stopping_for.count(request)) {
      why = absl::StrCat("waiting for ", stopping_for[request],
                         " less important trial(s) to stop (preempted)");
    }
    SetWaitingReason(rid.id, why, /*verbose=*/true);
  }
  for (const auto& p : d.placements) {
    const RequestId& rid = ids.At(p.request_id);
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
