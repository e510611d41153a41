// SlurmResourceManager: master.yaml's `resource_manager: {type: slurm}` (docs/slurm.md).
// Placement is Slurm's: each queued trial's next run becomes one batch job asking for the
// whole gang, submitted while the trial is QUEUED (its waiting reason is the job's pending
// reason, as squeue gives it). Once Slurm runs the job, the run starts (AllocationManager::
// Start with the token the job carries); det-slurm-launcher, run by srun for every task,
// starts the rank as an agent would and reports to the master as the trial's Slurm agent
// "slurm-trial-<id>" (registered here, in-process; its session travels in the job). Stops
// go through scancel: SIGTERM to the tasks, and the whole job after the grace period. A
// job that ends while its run is open (scancel from outside, a node lost, a time limit)
// ends the ranks not yet reported: a failed run, restarted as max_restarts allows.
//
// After a master restart, open runs on Slurm agents are reattached and found again by their
// job's name (JobNamePrefix + allocation id); pending jobs whose run was never stored are
// cancelled and submitted again.
//
// `det agent list` and `det slot list` show Slurm's nodes (sinfo, read at every poll beside
// squeue) with their state, not the per-trial agents.
//
// Slurm's tools run on a thread of this manager; everything else is loop-thread only.
#ifndef DET_MASTER_SLURM_SLURM_RESOURCE_MANAGER_H_
#define DET_MASTER_SLURM_SLURM_RESOURCE_MANAGER_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "common/event_loop/event_loop.h"
#include "master/allocations/allocation_manager.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/registry.h"
#include "master/logs/log_manager.h"
#include "master/loop/turns.h"
#include "master/slurm/batch_job.h"
#include "master/slurm/slurm_client.h"

namespace det::master {

class SlurmResourceManager : public RunLauncher {
 public:
  // Everything must outlive this. REQUIRES: config.slurm is set.
  SlurmResourceManager(const config::MasterConfig& config, Clock& clock, Turns& turns,
                       AgentManager& agents, LogManager& logs, ExperimentRegistry& registry,
                       TrialManager& trials,
                       AllocationManager& allocations,
                       std::unique_ptr<slurm::SlurmClient> client);
  // Stops the Slurm thread (a call in progress finishes first).
  ~SlurmResourceManager() override;

  // The trial's Slurm agent id ("slurm-trial-<id>"), and whether an agent id is one.
  static std::string AgentId(int64_t trial_id);
  static bool IsSlurmAgent(const std::string& agent_id);
  // A Slurm node as `det agent list` shows it (read-only: no det-agent runs there; its
  // partitions as the resource pool, one slot per GPU, else per CPU).
  static v1::Agent NodeAgent(const slurm::NodeInfo& node);

  // Recovery, after the allocation manager's: names this master's jobs after `cluster_id`
  // and reattaches the open runs on Slurm agents (their jobs are found at the first poll).
  void Restore(const std::string& cluster_id);
  // Jobs reach the master at `master_address` (master.yaml's master_address wins):
  // submitting and polling begin.
  void Serve(const std::string& master_address);
  // The scheduling pass for trials: submits a job for each queued trial without one and
  // cancels pending jobs of trials that no longer wait.
  void SchedulePass();

  // RunLauncher. Launch: nothing to do (the job runs already). Kill: scancel.
  void Launch(int64_t trial_id, const v1::Allocation& allocation,
              std::vector<std::pair<std::string, v1::LaunchCommand>> launches) override;
  void Kill(const v1::Allocation& allocation, const std::string& reason,
            absl::Duration grace) override;

 private:
  struct Job {
    std::string allocation_id;
    std::string token;
    std::string job_id;       // "" while submitting (or, after a restart, until found)
    bool submitting = false;
    bool started = false;     // the run was started (stored) on it
    bool cancelled = false;   // scancel sent
    std::string state;        // as squeue last gave it
    int unlisted_polls = 0;   // polls since squeue last listed it
  };
  struct SlurmAgent {
    std::string session_id;
    std::string credential;
  };

  // The trial's Slurm agent with `slots` slots, registered (again) now: its session.
  absl::StatusOr<std::string> RegisterAgent(int64_t trial_id, int slots);
  void Submit(TrialState& t);
  void OnSubmitted(int64_t trial_id, const std::string& allocation_id,
                   const absl::StatusOr<std::string>& job_id);
  void Poll();
  void OnJobs(const absl::StatusOr<std::vector<slurm::JobInfo>>& jobs);
  // sinfo's nodes, listed by the agent manager in place of the trials' Slurm agents.
  void OnNodes(const absl::StatusOr<std::vector<slurm::NodeInfo>>& nodes);
  // One job of trial `trial_id` as squeue lists it (nullptr: not listed). Returns false when
  // the record is done with (erase it).
  bool Reconcile(int64_t trial_id, Job& job, const slurm::JobInfo* info);
  void Cancel(const std::string& job_id, int64_t trial_id, const std::string& why);
  void SetWaitingReason(int64_t trial_id, const std::string& why);
  void OnSlurmThread(std::function<void()> fn) { slurm_thread_.Post(std::move(fn)); }

  const config::MasterConfig& config_;
  const config::SlurmConfig& slurm_;
  Turns& turns_;
  EventLoop& loop_;
  AgentManager& agents_;
  LogManager& logs_;
  ExperimentRegistry& registry_;
  // Writes the waiting reasons.
  TrialManager& trial_manager_;
  AllocationManager& allocations_;
  std::unique_ptr<slurm::SlurmClient> client_;  // used on slurm_thread_ only
  std::string prefix_;                          // JobNamePrefix(cluster id)
  std::string master_address_;                  // "" until Serve
  std::string launcher_;
  std::map<int64_t, Job> jobs_;                 // trial id -> its current job
  std::map<int64_t, SlurmAgent> slurm_agents_;  // trial id -> its Slurm agent
  std::map<int64_t, std::string> last_state_;   // trial id -> "JOB STATE" of its last event
  bool poll_in_flight_ = false;
  bool polled_once_ = false;
  EventLoop slurm_thread_;
};

}  // namespace det::master

#endif  // DET_MASTER_SLURM_SLURM_RESOURCE_MANAGER_H_
