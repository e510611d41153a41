// AgentLiveness: agents joining, heartbeating, going silent and coming back, as the runs on
// them see it. Register (reattach what the agent still runs and the master wants; kill
// what it does not; lose what it no longer runs), Heartbeat (liveness, host metrics),
// the periodic check for silent agents, and agent_reconnect_wait: a silent agent's runs
// and checkpoint GC tasks wait for it that long before they count as lost, as do those of
// agents that do not register again after a master restart.
//
// Called by: the master service (Register, Heartbeat), the composition root (Start,
// AfterRestart). Loop thread only: every public method checks it.
#ifndef DET_MASTER_CLUSTER_AGENT_LIVENESS_H_
#define DET_MASTER_CLUSTER_AGENT_LIVENESS_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "master/allocations/allocation_manager.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/registry.h"
#include "master/loop/turns.h"
#include "master/store/store.h"

namespace det::master {

class AgentLiveness {
 public:
  // Everything must outlive this.
  AgentLiveness(const config::MasterConfig& config, Clock& clock, Turns& turns, Store& store,
                AgentManager& agents, ExperimentRegistry& registry,
                AllocationManager& allocations, CheckpointManager& checkpoints);

  // After recovery: runs and tasks whose agents do not register again within
  // agent_reconnect_wait are lost.
  void AfterRestart();
  // Checks for silent agents now and every second after.
  void CheckAgents();

  // `peer`: the caller's address (logged with a refused or enrolling registration). A
  // registration that enrolls the id (AgentManager::Admission::enrolled) reattaches
  // nothing: what it claims to run is killed and what was placed on the id is lost.
  absl::Status Register(const v1::RegisterRequest& req, v1::RegisterResponse* resp,
                        const std::string& peer = "");
  absl::Status Heartbeat(const v1::HeartbeatRequest& req);

 private:
  // An agent stopped heartbeating: its runs wait agent_reconnect_wait for it to register
  // again (reattach) before their ranks on it count as lost.
  void AgentDisconnected(const std::string& agent_id);

  const config::MasterConfig& config_;
  Clock& clock_;
  Turns& turns_;
  EventLoop& loop_;
  Store& store_;
  AgentManager& agents_;
  ExperimentRegistry& registry_;
  AllocationManager& allocations_;
  CheckpointManager& checkpoints_;
  std::map<std::string, int> agent_disconnects_;  // agent id -> times it stopped answering
};

}  // namespace det::master

#endif  // DET_MASTER_CLUSTER_AGENT_LIVENESS_H_
