// SchedulingService: the glue between the master's state and the scheduler
// (master/scheduler). It keeps an IncrementalScheduler fed between passes: a pass compares
// each queued trial, queued checkpoint GC task, agent and experiment's slots in use with
// what it fed the last pass (cheap per-pass keys) and hands over only the differences;
// asks for the placements, then starts them (allocation manager, checkpoint manager) and
// records why each request waits, writing only the reasons that changed
// (IncrementalScheduler::ChangedReasons). The trials waiting behind a pool's blocker share
// one text per pool (WaitingReason), rewritten when the blocker changes: a trial's log gets
// "waiting: ..." when it starts waiting behind, not again each time the blocker in front
// of it changes. With preemption on in any pool it also builds the queue and the running
// trials for SelectPreemptions and writes every reason as a text of its own (as before).
//
// Called by: Turns at the end of a turn that requested a pass (Turns::RequestSchedule).
// Loop thread only: every public method checks it.
#ifndef DET_MASTER_SCHEDULING_SCHEDULING_SERVICE_H_
#define DET_MASTER_SCHEDULING_SCHEDULING_SERVICE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "common/config/daemon_config.h"
#include "master/allocations/allocation_manager.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/registry.h"
#include "master/logs/log_manager.h"
#include "master/loop/turns.h"
#include "master/scheduler/incremental.h"
#include "master/scheduling/request_id.h"
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

  // What the last pass fed the scheduler about a queued request: a change of any of it
  // is a SetRequest. 24 bytes: one per queued trial (the pool by PoolId, not its name).
  struct Fed {
    int slots = 0;
    int priority = 0;
    int max_slots = 0;
    uint32_t pool = 0;
    uint64_t pass = 0;  // The last pass that saw it queued.
    bool operator==(const Fed& o) const {
      return slots == o.slots && priority == o.priority && max_slots == o.max_slots &&
             pool == o.pool;
    }
  };
  // What a pass learns while feeding the scheduler.
  struct Fresh {
    // Queued trials fed unchanged whose recorded waiting reason is gone (they left the
    // queue and came back between two passes), and the queued GC tasks.
    std::vector<int64_t> lost, gc;
    // With preemption on: SelectPreemptions' inputs.
    std::vector<scheduler::Request> queue;
    std::vector<scheduler::Running> running;
    RequestIds running_ids;  // The keys of `running`.
    std::vector<scheduler::AgentView> agents;
  };
  // Feeds the scheduler what changed since the last pass.
  void FeedQueue(bool preemption, Fresh* fresh);
  void FeedAgents(bool preemption, Fresh* fresh);
  // Marks `id` seen by this pass. Returns whether it was fed as `fed` already; else keeps
  // `fed` (the caller sets the request).
  bool SeenUnchanged(const RequestId& id, Fed fed);
  // A number per resource pool name (Fed::pool).
  uint32_t PoolId(const std::string& pool) {
    return pool_ids_.try_emplace(pool, static_cast<uint32_t>(pool_ids_.size())).first->second;
  }

  // What the scheduler's key `key` stands for (its tag). REQUIRES: the scheduler holds it.
  RequestId IdOf(const std::string& key) const { return RequestId::FromTag(scheduler_->Tag(key)); }

  std::unique_ptr<scheduler::IncrementalScheduler> scheduler_;  // Requests tagged RequestId::Tag.
  uint64_t pass_ = 0;
  absl::flat_hash_map<RequestId, Fed> fed_;
  absl::flat_hash_map<std::string, uint32_t> pool_ids_;
  absl::flat_hash_map<std::string, uint64_t> agents_fed_;  // agent id -> last pass that saw it
  absl::flat_hash_map<int64_t, int> group_used_;           // experiment id -> slots (fed)
  // Resource pool -> the reason of every trial waiting behind its blocker ("waiting behind
  // trial 7 of experiment 2 (priority 42)"), shared by those trials (WaitingReason): a new
  // blocker rewrites this one text, not each trial's.
  absl::flat_hash_map<std::string, std::shared_ptr<std::string>> behind_;
};

}  // namespace det::master

#endif  // DET_MASTER_SCHEDULING_SCHEDULING_SERVICE_H_
