#include "master/cluster/agent_liveness.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "master/loop/on_loop.h"
#include "master/scheduling/pools.h"

namespace det::master {
namespace {

constexpr absl::Duration kAgentCheckPeriod = absl::Seconds(1);
// How long agents' host metrics are kept.
constexpr absl::Duration kSystemMetricsRetention = absl::Hours(24);

}  // namespace

AgentLiveness::AgentLiveness(const config::MasterConfig& config, Clock& clock, Turns& turns,
                             Store& store, AgentManager& agents, ExperimentRegistry& registry,
                             AllocationManager& allocations, CheckpointManager& checkpoints)
    : config_(config),
      clock_(clock),
      turns_(turns),
      loop_(turns.loop()),
      store_(store),
      agents_(agents),
      registry_(registry),
      allocations_(allocations),
      checkpoints_(checkpoints) {}

void AgentLiveness::AfterRestart() {
  DET_CHECK_ON_LOOP(loop_);
  turns_.PostAfter(config_.agent_reconnect_wait, [this] {
    // Agents that came back and went silent again since wait for their own deadline
    // (AgentDisconnected).
    auto never_returned = [this](const std::string& agent) {
      return agent_disconnects_[agent] == 0;
    };
    allocations_.LoseUnreturned(never_returned);
    checkpoints_.LoseUnreturned(never_returned);
  });
}

void AgentLiveness::CheckAgents() {
  DET_CHECK_ON_LOOP(loop_);
  if (registry_.shutting_down) return;
  for (const auto& id : agents_.ExpireSilent()) AgentDisconnected(id);
  turns_.PostAfter(kAgentCheckPeriod, [this] { CheckAgents(); });
}

absl::Status AgentLiveness::Register(const v1::RegisterRequest& req, v1::RegisterResponse* resp,
                                     const std::string& peer) {
  DET_CHECK_ON_LOOP(loop_);
  // The secret first: without it, the caller learns nothing (not even which pools exist).
  RETURN_IF_ERROR(agents_.CheckClusterSecret(req));
  std::string pool = req.resource_pool().empty() ? "default" : req.resource_pool();
  if (!FindPool(config_, pool)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "agent ", req.agent_id(), ": resource_pool '", pool,
        "' is not defined in the master's resource_pools"));
  }
  ASSIGN_OR_RETURN(AgentManager::Admission admitted, agents_.Register(req, peer));
  resp->set_session_id(admitted.session_id);
  resp->set_agent_credential(admitted.credential);
  resp->set_heartbeat_interval_ms(static_cast<int32_t>(
      absl::ToInt64Milliseconds(std::min(absl::Seconds(5), config_.agent_timeout / 3))));
  const std::string& agent_id = req.agent_id();
  std::set<std::string> running(req.running_allocations().begin(), req.running_allocations().end());
  if (admitted.enrolled) {
    // Not proven to be the agent that ran them (a new id, or one an admin reset): it gets
    // none of them; whatever runs there is stopped, and what was placed on the id is lost
    // (rescheduled).
    for (const auto& alloc_id : running) resp->add_kill_allocations(alloc_id);
    running.clear();
  }
  // What the agent still runs and we want: reattach. What we do not want: kill.
  for (const auto& alloc_id : running) {
    if (checkpoints_.Reattach(agent_id, alloc_id)) continue;
    if (allocations_.ReattachOrKill(agent_id, alloc_id)) resp->add_kill_allocations(alloc_id);
  }
  // Runs placed on this agent that it no longer has: their processes are gone.
  allocations_.LoseMissing(agent_id, running);
  checkpoints_.LoseMissing(agent_id, running);
  turns_.RequestSchedule();
  return absl::OkStatus();
}

absl::Status AgentLiveness::Heartbeat(const v1::HeartbeatRequest& req) {
  DET_CHECK_ON_LOOP(loop_);
  RETURN_IF_ERROR(agents_.Touch(req.agent_id(), req.session_id()));
  if (req.system_metrics_size() == 0) return absl::OkStatus();
  std::vector<v1::SystemMetrics> samples(req.system_metrics().begin(), req.system_metrics().end());
  for (auto& m : samples) m.set_agent_id(req.agent_id());
  // An error makes the agent keep the samples and send them again.
  return store_.AddSystemMetrics(
      samples, clock_.NowMs() - absl::ToInt64Milliseconds(kSystemMetricsRetention));
}

void AgentLiveness::AgentDisconnected(const std::string& agent_id) {
  int generation = ++agent_disconnects_[agent_id];
  std::string wait = absl::FormatDuration(config_.agent_reconnect_wait);
  std::vector<std::string> allocations = allocations_.MarkUnattached(agent_id, wait);
  std::vector<std::string> gc_allocations = checkpoints_.MarkUnattached(agent_id, wait);
  if (allocations.empty() && gc_allocations.empty()) return;
  turns_.PostAfter(config_.agent_reconnect_wait,
                   [this, agent_id, generation, allocations, gc_allocations, wait] {
                     // Lost again since: a later timer decides.
                     if (agent_disconnects_[agent_id] != generation) return;
                     checkpoints_.LoseUnattached(gc_allocations, agent_id, wait);
                     allocations_.LoseUnattached(allocations, agent_id, wait);
                   });
}

}  // namespace det::master
