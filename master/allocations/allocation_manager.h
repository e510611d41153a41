// AllocationManager: the runs of trials (allocations). Starting one on the agents the
// scheduler chose (stored, then launched with the launch contract of launch_command.h and
// a chief port of chief_ports.h), asking one to stop, rank exits and the end of a run
// (the outcome table: completed, paused, requeued, restarted, failed), agents that stop
// answering or come back (reattach, lost), and the worker channel of a run: rendezvous
// and ShouldPreempt long polls.
//
// Called by: the master service (agent and worker channels, DisableAgent), the scheduling
// service (Start, Kill for preemption), agent liveness (reattach, lost agents), the
// experiment manager (through its KillRun). Calls the experiment manager when a run ends.
// Loop thread only: every public method checks it.
#ifndef DET_MASTER_ALLOCATIONS_ALLOCATION_MANAGER_H_
#define DET_MASTER_ALLOCATIONS_ALLOCATION_MANAGER_H_

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock/clock.h"
#include "master/allocations/chief_ports.h"
#include "master/allocations/launch_command.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/experiment_manager.h"
#include "master/experiments/registry.h"
#include "master/logs/log_manager.h"
#include "master/loop/turns.h"
#include "master/store/store.h"
#include "master/trials/trial_manager.h"

namespace det::master {

// Where a run's ranks are started and stopped when not by det's agents (the Slurm resource
// manager). Loop thread only.
class RunLauncher {
 public:
  virtual ~RunLauncher() = default;
  // The run `allocation` of trial `trial_id` was stored and starts: `launches`, what each of
  // its agents (BuildLaunchCommands) runs.
  virtual void Launch(int64_t trial_id, const v1::Allocation& allocation,
                      std::vector<std::pair<std::string, v1::LaunchCommand>> launches) = 0;
  // Stop the ranks of `allocation`: SIGTERM, SIGKILL after `grace` (zero: the launcher's
  // default). Their exits are reported as the agents' are (OnExit).
  virtual void Kill(const v1::Allocation& allocation, const std::string& reason,
                    absl::Duration grace) = 0;
};

class AllocationManager {
 public:
  // Everything must outlive this.
  AllocationManager(Clock& clock, Turns& turns, Store& store, AgentManager& agents,
                    LogManager& logs, ExperimentRegistry& registry, TrialManager& trials,
                    ExperimentManager& experiments);

  // Recovery: the open allocations stored (their agents must register again with them:
  // LoseUnreturned), and trials whose run was not yet placed back to the queue.
  void Restore(std::vector<std::pair<v1::Allocation, std::string>> open_allocations);

  // Starts t's next run on `agents`; rank 0's agent is agents[0], reached by the other
  // ranks at chief_address:chief_port (a port of its range the allocation holds).
  // False (and t unchanged, its waiting reason saying why) when the store refused it.
  // `token`: the run's worker token ("": a new random one).
  bool Start(TrialState& t, const std::vector<AgentShare>& agents,
             const std::string& chief_address, int chief_port, const std::string& token = "");
  // Runs are started and stopped through `launcher` instead of the agents' command queues
  // (nullptr: the agents). Must outlive this.
  void SetRunLauncher(RunLauncher* launcher) { run_launcher_ = launcher; }
  // What t's next run launches with (BuildLaunchCommands' inputs), for worker token
  // `token`; fails (naming the owner) when the OS user linked to the owner is unreadable.
  absl::StatusOr<LaunchInputs> LaunchInputsFor(const TrialState& t,
                                               const std::string& chief_address, int chief_port,
                                               const std::string& token) const;
  // A new worker token.
  static std::string NewToken();
  // Asks the agents of t's run to stop it (SIGTERM, SIGKILL after `grace`; zero: the
  // agent's default). Also ends the grace period of a cooperative stop under way.
  void Kill(TrialState& t, const std::string& reason, absl::Duration grace = absl::ZeroDuration());
  // A stop the trial can cooperate with (pause, preemption, a searcher's early stop): when
  // a worker of its run has called ShouldPreempt (det.core does in det.core.init(), before
  // the script's first should_preempt(); the C++ harness from its first check), it is told
  // to stop there and has the stop grace period (the experiment's stop_grace_period, else
  // the master's; at most `timeout` when that is set) to checkpoint and exit; only then do
  // the agents send SIGTERM (and SIGKILL after their kill_grace). The trial log says which
  // happened. A run that never asked (a plain script) is killed at once, as by Kill(t,
  // reason, timeout). `timeout`: a resource pool's preemption_timeout, the bound of the
  // whole stop; zero: none.
  void Stop(TrialState& t, const std::string& reason,
            absl::Duration timeout = absl::ZeroDuration());
  // master.yaml's stop_grace_period (default 5 minutes).
  void SetStopGracePeriod(absl::Duration grace) { stop_grace_period_ = grace; }
  // Kill for a more important trial: t is requeued once its run ends (not a restart); when
  // its experiment keeps no checkpoints, t's warnings and log say its progress is lost.
  void Preempt(TrialState& t, const std::string& reason, absl::Duration grace);
  // The lowest port of [first, last] on `agent_id` no open allocation holds.
  std::optional<int> FreeChiefPort(const std::string& agent_id, int first, int last) const;

  // Agent channel. An agent reports and ships lines only for ranks placed on it.
  // PERMISSION_DENIED naming the rule when rank `rank` of `allocation_id`, a trial's run
  // open or ended since the master started, is not placed on `agent_id` (or is no rank of
  // it); OK for other ids (checkpoint GC tasks, runs the master does not know).
  absl::Status CheckAgentReport(const std::string& agent_id, const std::string& allocation_id,
                                int rank) const;
  // The experiment of open allocation `allocation_id`, whose model context `agent_id` may
  // fetch when a rank of it is placed there; PERMISSION_DENIED naming the rule otherwise,
  // NOT_FOUND when it is not open.
  absl::StatusOr<int64_t> ContextExperiment(const std::string& agent_id,
                                            const std::string& allocation_id) const;
  // Refused (PERMISSION_DENIED) unless every rank of req.ranks is placed on the agent.
  absl::Status ReportLaunched(const v1::ReportLaunchedRequest& req);
  // A rank of a trial's run exited (`how`; `abnormal`: signal or non-zero code). A report
  // that fails CheckAgentReport changes nothing (logged).
  void OnExit(const v1::ReportExitRequest& req, const std::string& how, bool abnormal);
  // `agent_id` registered still running `allocation_id`: true when the agent must stop it
  // (unknown, or its ranks there already count as exited); else it is reattached.
  bool ReattachOrKill(const std::string& agent_id, const std::string& allocation_id);
  // Runs placed on `agent_id` that it no longer runs (`running`): their ranks there exited.
  void LoseMissing(const std::string& agent_id, const std::set<std::string>& running);
  // `agent_id` stopped answering: its runs wait `wait` for it; returns their allocation ids.
  std::vector<std::string> MarkUnattached(const std::string& agent_id, const std::string& wait);
  // Those of `allocation_ids` still waiting for `agent_id` lose their ranks there.
  void LoseUnattached(const std::vector<std::string>& allocation_ids, const std::string& agent_id,
                      const std::string& wait);
  // After a restart: ranks on agents that `never_returned` count as lost.
  void LoseUnreturned(const std::function<bool(const std::string&)>& never_returned);
  // `agent_id` was disabled without draining: its runs stop and are rescheduled elsewhere.
  void StopRunsOn(const std::string& agent_id);

  // Worker channel (long polls: `done` may be called in a later turn).
  void Rendezvous(const v1::RendezvousRequest& req, v1::RendezvousResponse* resp, Done done);
  void ShouldPreempt(const v1::ShouldPreemptRequest& req, v1::ShouldPreemptResponse* resp,
                     Done done);
  // Rank 0 of a running allocation says why its trial stops early. INVALID_HP is persisted
  // on the trial (TrialSearch.invalid_hp) before the reply; when the run then ends with
  // every rank exiting normally the trial ends as invalid (run_outcome.h).
  // USER_REQUESTED_STOP is noted in the trial log. PERMISSION_DENIED for another rank, a
  // bad token or an allocation that is not running; INVALID_ARGUMENT naming `reason` for
  // an unknown reason.
  absl::Status ReportEarlyExit(const v1::ReportEarlyExitRequest& req);
  // The best validation value of searcher.metric over every trial of the worker's own
  // experiment (its smallest or largest, as searcher.smaller_is_better says); found =
  // false while none reported it. PERMISSION_DENIED as for the other worker calls.
  absl::Status GetExperimentBestValidation(const v1::GetExperimentBestValidationRequest& req,
                                           v1::GetExperimentBestValidationResponse* resp);
  // Shutdown: answers every waiting rendezvous and ShouldPreempt with `status`.
  void FailWaiters(const absl::Status& status);

 private:
  // The log manager's shipped-line check: a line of a trial's run only from the agent
  // its rank is placed on, and only into that run's trial; a line naming a run the master
  // never placed (not a checkpoint GC task's) is refused.
  absl::Status CheckShippedLine(const v1::LogLine& line) const;
  // Lines of trial `trial_id` lost for good: "N log lines dropped (...)" in its warnings
  // (one such warning, with the running total) and log.
  void LinesDropped(int64_t trial_id, int64_t count, const std::string& what);
  // Answers t's ShouldPreempt long polls with `status` (OK: the current kill state).
  void AnswerPreemptWaiters(TrialState& t, const absl::Status& status);
  void OnRankExit(TrialState& t, int rank, const std::string& how, bool abnormal);
  void EndAllocation(TrialState& t);
  // Records an abnormal exit of every rank of t's current run placed on an agent for which
  // `on_agent` holds.
  void ExitRanksOn(TrialState& t, const std::function<bool(const std::string&)>& on_agent,
                   const std::string& how);
  void TrialEvent(int64_t trial_id, const std::string& message, bool verbose = false) {
    logs_.Event(trial_id, message, verbose);
  }
  void KillAllocation(TrialState& t, const std::string& reason,
                      absl::Duration grace = absl::ZeroDuration()) {
    Kill(t, reason, grace);
  }
  // Sends the kill commands of t's run to its agents.
  void SendKill(TrialState& t, const std::string& reason, absl::Duration grace);

  absl::Duration stop_grace_period_ = absl::Minutes(5);
  Clock& clock_;
  Turns& turns_;
  EventLoop& loop_;
  Store& store_;
  AgentManager& agents_;
  LogManager& logs_;
  ExperimentRegistry& registry_;
  // Every change of a trial's state goes through it.
  TrialManager& trial_manager_;
  ExperimentManager& experiments_manager_;
  // The registry's parts this manager changes most (aliases).
  std::map<int64_t, ExperimentState>& experiments_;
  std::map<int64_t, TrialState>& trials_;
  std::map<std::string, int64_t>& allocation_trial_;
  v1::GetMasterStatsResponse& counters_;
  // Allocations ended since the master started -> their tokens (ShouldPreempt tells their
  // workers they ended).
  std::map<std::string, std::string> ended_allocations_;
  // Allocations ended since the master started, as they ended (where their ranks ran).
  std::map<std::string, v1::Allocation> ended_placements_;
  // Log lines dropped per trial (agents' and the master's), for its warning.
  std::map<int64_t, int64_t> lines_dropped_;
  // torchrun MASTER_PORTs held by open allocations, per chief agent.
  ChiefPorts chief_ports_;
  RunLauncher* run_launcher_ = nullptr;
};

}  // namespace det::master

#endif  // DET_MASTER_ALLOCATIONS_ALLOCATION_MANAGER_H_
