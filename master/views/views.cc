#include "master/views/views.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"

namespace det::master::views {

bool Terminal(v1::State s) {
  return s == v1::STATE_COMPLETED || s == v1::STATE_CANCELED || s == v1::STATE_ERROR;
}

std::vector<v1::Job> Jobs(const std::vector<ExperimentRow>& experiments,
                          const std::string& pool) {
  std::vector<v1::Job> jobs;
  for (const ExperimentRow& row : experiments) {
    const v1::Experiment& e = *row.experiment;
    if (Terminal(e.state())) continue;
    if (!pool.empty() && e.resource_pool() != pool) continue;
    v1::Job j;
    j.set_experiment_id(e.id());
    j.set_name(e.name());
    j.set_priority(e.priority());
    j.set_resource_pool(e.resource_pool());
    j.set_slots_per_trial(e.slots_per_trial());
    j.set_submitted_ms(e.start_time_ms());
    for (const TrialRow& t : row.trials) {
      if (t.trial->state() == v1::STATE_QUEUED) {
        j.set_queued_trials(j.queued_trials() + 1);
        if (j.reason().empty() && t.waiting_reason) j.set_reason(*t.waiting_reason);
      } else if (!t.trial->allocation().id().empty()) {
        j.set_running_trials(j.running_trials() + 1);
        j.set_slots_acquired(j.slots_acquired() + t.trial->allocation().slots());
      }
    }
    if (j.queued_trials() == 0 && j.running_trials() == 0) continue;
    j.set_state(j.running_trials() == 0 ? "QUEUED"
                : j.queued_trials() > 0  ? "SCHEDULED"
                                         : "RUNNING");
    jobs.push_back(std::move(j));
  }
  std::stable_sort(jobs.begin(), jobs.end(), [](const v1::Job& a, const v1::Job& b) {
    return a.priority() != b.priority() ? a.priority() < b.priority()
                                        : a.experiment_id() < b.experiment_id();
  });
  return jobs;
}

v1::Task TrialTask(const TrialRow& t, const std::string& resource_pool) {
  const v1::Allocation& a = t.trial->allocation();
  v1::Task task;
  task.set_allocation_id(a.id());
  task.set_type("TRIAL");
  task.set_experiment_id(t.trial->experiment_id());
  task.set_trial_id(t.trial->id());
  task.set_state(t.stopping ? v1::STATE_STOPPING : a.state());
  task.set_slots(a.slots());
  *task.mutable_ranks() = a.ranks();
  task.set_start_time_ms(a.start_time_ms());
  task.set_resource_pool(resource_pool);
  std::set<std::string> agents;
  for (const auto& r : a.ranks()) {
    if (agents.insert(r.agent_id()).second) task.add_agents(r.agent_id());
  }
  return task;
}

std::string GcAllocationId(const v1::CheckpointGcTask& t) {
  return absl::StrCat("gc-", t.id(), ".", t.attempt());
}

v1::Task GcTask(const v1::CheckpointGcTask& t, const std::string& pending_reason) {
  v1::Task task;
  task.set_allocation_id(GcAllocationId(t));
  task.set_type("CHECKPOINT_GC");
  task.set_experiment_id(t.experiment_id());
  task.set_trial_id(t.trial_id());
  task.set_state(t.state());
  task.set_slots(0);
  if (!t.agent_id().empty()) {
    v1::RankPlacement* r = task.add_ranks();
    r->set_rank(0);
    r->set_agent_id(t.agent_id());
    task.add_agents(t.agent_id());
  }
  task.set_start_time_ms(t.start_time_ms());
  task.set_end_time_ms(t.end_time_ms());
  task.set_resource_pool(t.resource_pool());
  if (t.state() == v1::STATE_QUEUED) task.set_pending_reason(pending_reason);
  task.set_error(t.error());
  for (const auto& c : t.checkpoints()) task.add_checkpoint_uuids(c.uuid());
  return task;
}

std::vector<v1::ResourcePool> ResourcePools(
    const std::vector<config::ResourcePoolConfig>& pools, const std::vector<v1::Agent>& agents,
    const std::vector<ExperimentRow>& experiments) {
  std::vector<v1::ResourcePool> out;
  for (const auto& cfg : pools) {
    v1::ResourcePool& p = out.emplace_back();
    p.set_name(cfg.name);
    p.set_description(cfg.description);
    p.set_preemption(cfg.preemption);
    std::set<int> sizes;
    for (const auto& a : agents) {
      if (a.resource_pool() != cfg.name) continue;
      p.set_agents(p.agents() + 1);
      if (!a.connected()) continue;
      p.set_connected_agents(p.connected_agents() + 1);
      sizes.insert(a.slots_size());
      for (const auto& s : a.slots()) {
        p.set_slots(p.slots() + 1);
        if (!s.allocation_id().empty()) p.set_slots_used(p.slots_used() + 1);
      }
    }
    for (int s : sizes) p.add_agent_sizes(s);
    for (const ExperimentRow& row : experiments) {
      if (row.experiment->resource_pool() != cfg.name) continue;
      for (const TrialRow& t : row.trials) {
        if (t.trial->state() == v1::STATE_QUEUED) p.set_queued_trials(p.queued_trials() + 1);
      }
    }
  }
  return out;
}

void CountCluster(const std::vector<v1::Agent>& agents,
                  const std::vector<ExperimentRow>& experiments,
                  v1::GetMasterStatsResponse* resp) {
  for (const auto& a : agents) {
    resp->set_agents(resp->agents() + 1);
    if (!a.connected()) continue;
    resp->set_agents_connected(resp->agents_connected() + 1);
    if (a.enabled()) resp->set_agents_enabled(resp->agents_enabled() + 1);
    for (const auto& slot : a.slots()) {
      resp->set_slots(resp->slots() + 1);
      if (!slot.allocation_id().empty()) {
        resp->set_slots_used(resp->slots_used() + 1);
      } else if (a.enabled() && slot.enabled()) {
        resp->set_slots_free(resp->slots_free() + 1);
      }
    }
  }
  for (const ExperimentRow& row : experiments) {
    if (Terminal(row.experiment->state())) continue;
    resp->set_experiments_active(resp->experiments_active() + 1);
    bool queued = false;
    for (const TrialRow& t : row.trials) {
      if (t.trial->state() == v1::STATE_QUEUED) {
        resp->set_trials_queued(resp->trials_queued() + 1);
        queued = true;
      } else if (!t.trial->allocation().id().empty()) {
        resp->set_trials_running(resp->trials_running() + 1);
      }
    }
    if (queued) resp->set_jobs_queued(resp->jobs_queued() + 1);
  }
}

}  // namespace det::master::views
