// The master daemon: one object owning the store, the agent manager, the experiments and
// trials, the scheduler pass and the gRPC server. All mutable state lives on one event loop;
// the handler methods (called from gRPC threads) post their work to it.
#ifndef DET_MASTER_SERVER_MASTER_H_
#define DET_MASTER_SERVER_MASTER_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "common/config/experiment_config.h"
#include "common/event_loop/event_loop.h"
#include "master/allocations/chief_ports.h"
#include "master/allocations/launch_command.h"
#include "master/api/handlers.h"
#include "master/auth/user_service.h"
#include "master/cluster/agent_manager.h"
#include "master/logs/log_manager.h"
#include "master/searcher/searcher.h"
#include "master/templates/templates.h"
#include "master/views/views.h"
#include "master/store/store.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace det::master {

class HttpServer;

inline constexpr char kVersion[] = "0.1.0";

class Master : public ApiHandler, public AgentHandler, public WorkerHandler {
 public:
  // Creates the data directory, opens and migrates the database, rebuilds state from it,
  // and serves gRPC on config.grpc_listen. `clock` must outlive the master.
  static absl::StatusOr<std::unique_ptr<Master>> Start(const config::MasterConfig& config,
                                                       Clock& clock);
  // The same on `store` (already open and migrated): rebuilds state from it and serves.
  static absl::StatusOr<std::unique_ptr<Master>> Create(const config::MasterConfig& config,
                                                        Clock& clock,
                                                        std::unique_ptr<Store> store);
  ~Master() override;

  // host:port the gRPC server is bound to.
  const std::string& address() const { return address_; }
  // host:port of the HTTP server (REST API, web page), or "" without http_listen.
  const std::string& http_address() const { return http_address_; }
  // Stops serving: answers pending long polls, shuts the server and the loop down.
  void Shutdown();

  // ApiHandler.
  void GetMasterInfo(const Caller&, const v1::GetMasterInfoRequest&,
                     v1::GetMasterInfoResponse*, Done) override;
  void GetMasterStats(const Caller&, const v1::GetMasterStatsRequest&,
                      v1::GetMasterStatsResponse*, Done) override;
  void CreateExperiment(const Caller&, const v1::CreateExperimentRequest&,
                        v1::CreateExperimentResponse*, Done) override;
  void ListExperiments(const Caller&, const v1::ListExperimentsRequest&,
                       v1::ListExperimentsResponse*, Done) override;
  void GetExperiment(const Caller&, const v1::GetExperimentRequest&,
                     v1::GetExperimentResponse*, Done) override;
  void KillExperiment(const Caller&, const v1::KillExperimentRequest&,
                      v1::KillExperimentResponse*, Done) override;
  void PauseExperiment(const Caller&, const v1::PauseExperimentRequest&,
                       v1::PauseExperimentResponse*, Done) override;
  void ActivateExperiment(const Caller&, const v1::ActivateExperimentRequest&,
                          v1::ActivateExperimentResponse*, Done) override;
  void SetExperimentSlots(const Caller&, const v1::SetExperimentSlotsRequest&,
                          v1::SetExperimentSlotsResponse*, Done) override;
  void GetTrial(const Caller&, const v1::GetTrialRequest&, v1::GetTrialResponse*, Done) override;
  void GetTrialMetrics(const Caller&, const v1::GetTrialMetricsRequest&,
                       v1::GetTrialMetricsResponse*, Done) override;
  void GetTrialLogs(const Caller&, const v1::GetTrialLogsRequest&,
                    v1::GetTrialLogsResponse*, Done) override;
  void ListCheckpoints(const Caller&, const v1::ListCheckpointsRequest&,
                       v1::ListCheckpointsResponse*, Done) override;
  void ListAgents(const Caller&, const v1::ListAgentsRequest&,
                  v1::ListAgentsResponse*, Done) override;
  void EnableAgent(const Caller&, const v1::EnableAgentRequest&,
                   v1::EnableAgentResponse*, Done) override;
  void DisableAgent(const Caller&, const v1::DisableAgentRequest&,
                    v1::DisableAgentResponse*, Done) override;
  void ListJobs(const Caller&, const v1::ListJobsRequest&, v1::ListJobsResponse*, Done) override;
  void UpdateJobPriority(const Caller&, const v1::UpdateJobPriorityRequest&,
                         v1::UpdateJobPriorityResponse*, Done) override;
  void ListTasks(const Caller&, const v1::ListTasksRequest&, v1::ListTasksResponse*, Done) override;
  void ListResourcePools(const Caller&, const v1::ListResourcePoolsRequest&,
                         v1::ListResourcePoolsResponse*, Done) override;
  void SetTemplate(const Caller&, const v1::SetTemplateRequest&,
                   v1::SetTemplateResponse*, Done) override;
  void ListTemplates(const Caller&, const v1::ListTemplatesRequest&,
                     v1::ListTemplatesResponse*, Done) override;
  void GetTemplate(const Caller&, const v1::GetTemplateRequest&,
                   v1::GetTemplateResponse*, Done) override;
  void RemoveTemplate(const Caller&, const v1::RemoveTemplateRequest&,
                      v1::RemoveTemplateResponse*, Done) override;

  // AgentHandler.
  void Register(const v1::RegisterRequest&, v1::RegisterResponse*, Done) override;
  void Heartbeat(const v1::HeartbeatRequest&, v1::HeartbeatResponse*, Done) override;
  void PollCommands(const v1::PollCommandsRequest&, v1::PollCommandsResponse*, Done) override;
  void ReportLaunched(const v1::ReportLaunchedRequest&, v1::ReportLaunchedResponse*,
                      Done) override;
  void ReportExit(const v1::ReportExitRequest&, v1::ReportExitResponse*, Done) override;
  void ShipLogs(const v1::ShipLogsRequest&, v1::ShipLogsResponse*, Done) override;

  // WorkerHandler.
  void ReportMetrics(const v1::ReportMetricsRequest&, v1::ReportMetricsResponse*, Done) override;
  void ReportCheckpoint(const v1::ReportCheckpointRequest&, v1::ReportCheckpointResponse*,
                        Done) override;
  void Rendezvous(const v1::RendezvousRequest&, v1::RendezvousResponse*, Done) override;
  void ShouldPreempt(const v1::ShouldPreemptRequest&, v1::ShouldPreemptResponse*, Done) override;

 private:
  struct ExperimentState {
    v1::Experiment experiment;
    config::ExperimentConfig config;
    std::string config_json;
    std::vector<int64_t> trial_ids;
    // Decides which trials to create and stop; null for an experiment that had ended when
    // the master started.
    std::unique_ptr<searcher::Searcher> searcher;
  };
  // The trial and its current allocation's runtime bookkeeping (not persisted).
  struct TrialState {
    v1::Trial trial;
    std::string token;
    std::map<int, std::string> exits;      // rank -> how it exited
    std::set<std::string> unattached;      // agents that must re-register to keep the run
    bool killing = false;                  // the master asked for the workers to stop
    bool lost = false;                     // an agent was lost: rerun without counting it
    bool preempting = false;               // stopped for a more important trial: requeue
    bool searcher_metric_missing = false;  // reported once: no searcher.metric in validation
    v1::Allocation last_allocation;        // the latest ended run, for display
    std::string failure;                   // first abnormal exit
    // Rendezvous rounds of the current run: key -> rank -> value. A completed round keeps
    // its values, so a rank that retries gets the same answer.
    std::map<std::string, std::map<int, std::string>> rendezvous;
    std::vector<Done> rendezvous_waiters;
    std::vector<v1::RendezvousResponse*> rendezvous_responses;
    std::vector<std::string> rendezvous_keys;  // parallel to rendezvous_waiters
    // Why the master asked the current run to stop (set with `killing`).
    std::string kill_reason;
    // ShouldPreempt long polls of the current run, answered when it is asked to stop.
    struct PreemptWaiter {
      v1::ShouldPreemptResponse* response;
      Done done;
      EventLoop::TimerId timer;
    };
    std::vector<PreemptWaiter> preempt_waiters;
  };
  // Metric rows accepted on the loop but not yet stored; one transaction stores them all
  // (group commit) before any of their reports is acknowledged.
  struct PendingMetrics {
    std::vector<v1::Metrics> rows;
    std::vector<Done> acks;
    std::vector<size_t> ack_rows;  // rows of each ack, in order
    bool flush_posted = false;
  };
  // A checkpoint garbage-collection task (v1::CheckpointGcTask) and its runtime
  // bookkeeping (not persisted).
  struct GcTaskState {
    v1::CheckpointGcTask task;
    // RUNNING on an agent that has not registered again (with the task) since it went
    // silent or since the master restarted.
    bool unattached = false;
    // Why it waits, while QUEUED.
    std::string pending_reason;
    // The latest line the running attempt wrote to stderr (names a failing checkpoint).
    std::string last_error_line;
  };
  Master(const config::MasterConfig& config, Clock& clock, std::unique_ptr<Store> store);
  absl::Status Restore();
  absl::Status Serve();

  // Every closure the master runs on its loop is one turn: the closure, then EndTurn.
  // Runs `fn` on the loop (a turn).
  void Post(std::function<void()> fn);
  // Runs `fn` on the loop once `delay` has passed on the clock (a turn).
  EventLoop::TimerId PostAfter(absl::Duration delay, std::function<void()> fn);
  // Runs `fn` on the loop; its status goes to `done` once the turn has ended.
  void OnLoop(Done done, std::function<absl::Status()> fn);
  // The same, ahead of queued work: for heartbeats only (liveness must not wait behind a
  // backlog). Never for reads: a read must not overtake the writes queued before it.
  void OnLoopUrgent(Done done, std::function<absl::Status()> fn);
  // Completes the turn: the scheduling pass the turn requested, then the trial events it
  // recorded. So no reader ever sees a change without the derived state it implies
  // (waiting reasons, placements, events).
  void EndTurn();

  // Stores the pending metric rows and the trials' summaries, then acknowledges them.
  void FlushMetrics();
  void RequestSchedule();
  void SchedulePass();
  // Records why queued trial `trial_id` waits (an event in its log when it changes).
  void SetWaitingReason(int64_t trial_id, const std::string& why, bool verbose = false);
  // Starts t's next run on `agents`; rank 0's agent is agents[0], reached by the other
  // ranks at chief_address:chief_port (a port of its range the allocation holds).
  // False (and t unchanged, its waiting reason saying why) when the store refused it.
  bool StartAllocation(TrialState& t, const std::vector<AgentShare>& agents,
                       const std::string& chief_address, int chief_port);
  // Answers t's ShouldPreempt long polls with `status` (OK: the current kill state).
  void AnswerPreemptWaiters(TrialState& t, const absl::Status& status);
  void OnRankExit(TrialState& t, int rank, const std::string& how, bool abnormal);
  void EndAllocation(TrialState& t);
  // Asks the agents of t's run to stop it (SIGTERM, SIGKILL after `grace`; zero: the
  // agent's default).
  void KillAllocation(TrialState& t, const std::string& reason,
                      absl::Duration grace = absl::ZeroDuration());
  // Why a request of `slots` can never be placed in `pool` as its agents are configured,
  // or "" when it can (or when the pool has no agents yet).
  std::string NeverFits(const std::string& pool, int slots) const;
  const config::ResourcePoolConfig* FindPool(const std::string& name) const;
  void FinishTrial(TrialState& t, v1::State state, const std::string& error);
  // Moves experiment `id` from state `from` to `to`, persisted first. nullptr when it is
  // already in `to`; NotFound, or FailedPrecondition when it is in neither.
  absl::StatusOr<ExperimentState*> MoveExperiment(int64_t id, v1::State from, v1::State to);
  // The searcher (master/searcher): builds es.searcher from the trials es has; creates the
  // trials it asks for (only while the experiment is ACTIVE); hands it a validation
  // report, stopping the trial when it says so.
  absl::Status RebuildSearcher(ExperimentState& es);
  absl::Status CreateSearcherTrials(ExperimentState& es);
  void SearcherValidation(const v1::Metrics& metrics);
  // Position of `trial_id` in es.trial_ids (its index for the searcher), or -1.
  static int TrialIndex(const ExperimentState& es, int64_t trial_id);
  // Checkpoint garbage collection after `ended_trial` ended (see
  // master/checkpoints/checkpoint_gc.h): queues a CHECKPOINT_GC task for the checkpoints
  // to delete that no queued or running task covers yet.
  void CollectCheckpoints(ExperimentState& es, int64_t ended_trial);
  // Places the GC task on `agent_id` (zero slots): persisted RUNNING, then launched.
  void StartCheckpointGc(GcTaskState& g, const std::string& agent_id);
  // Ends the running attempt of `g`: STATE_QUEUED requeues it (a lost agent; attempt + 1),
  // STATE_COMPLETED marks its checkpoints deleted, STATE_ERROR records `why`.
  void EndCheckpointGc(GcTaskState& g, v1::State outcome, const std::string& why);
  // Persist*: writes `updated` and only then puts it in memory; a refused write is
  // logged once and returned, memory unchanged.
  absl::Status PersistGcTask(GcTaskState& g, v1::CheckpointGcTask updated);
  // The experiments and their trials as the read views (master/views) see them.
  std::vector<views::ExperimentRow> ExperimentRows() const;
  void UpdateExperiment(ExperimentState& e);
  // An agent stopped heartbeating: its runs wait agent_reconnect_wait for it to register
  // again (reattach) before their ranks on it count as lost.
  void AgentDisconnected(const std::string& agent_id);
  // Records an abnormal exit of every rank of t's current run placed on an agent for which
  // `on_agent` holds.
  void ExitRanksOn(TrialState& t, const std::function<bool(const std::string&)>& on_agent,
                   const std::string& how);
  void CheckAgents();
  // A line about the trial in its logs (LogManager::Event).
  void TrialEvent(int64_t trial_id, const std::string& message, bool verbose = false);
  absl::Status PersistExperiment(ExperimentState& es, v1::Experiment updated);
  absl::Status PersistTrial(TrialState& t, v1::Trial updated);
  absl::Status PersistAllocation(const v1::Allocation& allocation, const std::string& token);
  // Writes t.trial after a change that already happened outside the master (ranks
  // exited, an agent was lost): memory follows reality; a refused write is logged, and a
  // restarted master recovers from what is stored (docs/architecture.md).
  void RecordTrial(TrialState& t);
  absl::StatusOr<TrialState*> AuthorizeWorker(const v1::WorkerAuth& auth);
  absl::StatusOr<TrialState*> FindTrial(int64_t id);
  v1::Trial TrialView(const TrialState& t) const;

  config::MasterConfig config_;
  Clock& clock_;
  std::unique_ptr<Store> store_;
  EventLoop loop_;
  AgentManager agents_;
  Templates templates_;
  // Users and sessions; every user API call (gRPC and REST) but Login is checked by it.
  UserService users_;
  // Trial logs and events, GetTrialLogs long polls.
  LogManager logs_;
  std::string cluster_id_;
  int64_t start_time_ms_;
  std::string address_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  std::string http_address_;

  // Loop-thread state.
  std::map<int64_t, ExperimentState> experiments_;
  std::map<int64_t, TrialState> trials_;
  std::map<std::string, int64_t> allocation_trial_;  // open allocation id -> trial id
  // Allocations ended since the master started -> their tokens (ShouldPreempt tells their
  // workers they ended).
  std::map<std::string, std::string> ended_allocations_;
  // torchrun MASTER_PORTs held by open allocations, per chief agent.
  ChiefPorts chief_ports_;
  std::map<int64_t, GcTaskState> gc_tasks_;           // every checkpoint GC task, by id
  std::map<std::string, int64_t> gc_allocations_;     // running GC allocation id -> task id
  PendingMetrics pending_metrics_;
  bool schedule_requested_ = false;  // a pass is due at the end of this turn
  bool schedule_posted_ = false;     // a turn is posted that will run it
  // Counters since start, for GetMasterStats (loop thread).
  v1::GetMasterStatsResponse counters_;
  bool shutting_down_ = false;
  std::map<int64_t, std::string> waiting_reason_;  // queued trial id -> why it waits
  std::map<std::string, int> agent_disconnects_;  // agent id -> times it stopped answering
};

}  // namespace det::master

#endif  // DET_MASTER_SERVER_MASTER_H_
