// SchedulingService: the glue between the master's state and the pure scheduler
// (master/scheduler): one pass builds the queue (queued trials, queued checkpoint GC
// tasks; typed RequestIds) and the running trials, asks scheduler::Schedule and
// SelectPreemptions, then starts placements (allocation manager, checkpoint manager),
// stops preempted runs and records why each request waits.
//
// Called by: Turns at the end of a turn that requested a pass (Turns::RequestSchedule).
// Loop thread only: every public method checks it.
#ifndef DET_MASTER_SCHEDULING_SCHEDULING_SERVICE_H_
#define DET_MASTER_SCHEDULING_SCHEDULING_SERVICE_H_

#include <cstdint>
#include <map>
#include <string>

#include "common/config/daemon_config.h"
#include "master/allocations/allocation_manager.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/registry.h"
#include "master/logs/log_manager.h"
#include "master/loop/turns.h"
#include "master/slurm/slurm_resource_manager.h"

namespace det::master {

class SchedulingService {
 public:
  // Everything must outlive this.
  SchedulingService(const config::MasterConfig& config, Turns& turns, AgentManager& agents,
                    LogManager& logs, ExperimentRegistry& registry, TrialManager& trials,
                    AllocationManager& allocations, CheckpointManager& checkpoints);

  // One scheduling pass.
  void SchedulePass();
  // Trials are placed by `slurm` (resource_manager: slurm) rather than on the agents; the
  // agents (other than its Slurm agents) still run checkpoint GC tasks. Must outlive this.
  void SetSlurm(SlurmResourceManager* slurm) { slurm_ = slurm; }

 private:
  // Records why queued trial `trial_id` waits (an event in its log when it changes).
  void SetWaitingReason(int64_t trial_id, const std::string& why, bool verbose = false);
  void TrialEvent(int64_t trial_id, const std::string& message, bool verbose = false) {
    logs_.Event(trial_id, message, verbose);
  }

  const config::MasterConfig& config_;
  EventLoop& loop_;
  AgentManager& agents_;
  LogManager& logs_;
  AllocationManager& allocations_;
  CheckpointManager& checkpoints_;
  std::map<int64_t, ExperimentState>& experiments_;
  std::map<int64_t, TrialState>& trials_;
  // Writes the waiting reasons.
  TrialManager& trial_manager_;
  SlurmResourceManager* slurm_ = nullptr;
};

}  // namespace det::master

#endif  // DET_MASTER_SCHEDULING_SCHEDULING_SERVICE_H_
