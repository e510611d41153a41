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
#include "master/api/handlers.h"
#include "master/cluster/agent_manager.h"
#include "master/store/store.h"

namespace grpc {
class Server;
class Service;
}  // namespace grpc

namespace det::master {

inline constexpr char kVersion[] = "0.1.0";

class Master : public ApiHandler, public AgentHandler, public WorkerHandler {
 public:
  // Creates the data directory, opens and migrates the database, rebuilds state from it,
  // and serves gRPC on config.grpc_listen. `clock` must outlive the master.
  static absl::StatusOr<std::unique_ptr<Master>> Start(const config::MasterConfig& config,
                                                       Clock& clock);
  ~Master() override;

  // host:port the gRPC server is bound to.
  const std::string& address() const { return address_; }
  // Stops serving: answers pending long polls, shuts the server and the loop down.
  void Shutdown();

  // ApiHandler.
  void GetMasterInfo(const v1::GetMasterInfoRequest&, v1::GetMasterInfoResponse*, Done) override;
  void CreateExperiment(const v1::CreateExperimentRequest&, v1::CreateExperimentResponse*,
                        Done) override;
  void ListExperiments(const v1::ListExperimentsRequest&, v1::ListExperimentsResponse*,
                       Done) override;
  void GetExperiment(const v1::GetExperimentRequest&, v1::GetExperimentResponse*, Done) override;
  void KillExperiment(const v1::KillExperimentRequest&, v1::KillExperimentResponse*, Done) override;
  void GetTrial(const v1::GetTrialRequest&, v1::GetTrialResponse*, Done) override;
  void GetTrialMetrics(const v1::GetTrialMetricsRequest&, v1::GetTrialMetricsResponse*,
                       Done) override;
  void GetTrialLogs(const v1::GetTrialLogsRequest&, v1::GetTrialLogsResponse*, Done) override;
  void ListAgents(const v1::ListAgentsRequest&, v1::ListAgentsResponse*, Done) override;

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

 private:
  struct ExperimentState {
    v1::Experiment experiment;
    config::ExperimentConfig config;
    std::string config_json;
    std::vector<int64_t> trial_ids;
  };
  // The trial and its current allocation's runtime bookkeeping (not persisted).
  struct TrialState {
    v1::Trial trial;
    std::string token;
    std::map<int, std::string> exits;      // rank -> how it exited
    std::set<std::string> unattached;      // agents that must re-register to keep the run
    bool killing = false;                  // the master asked for the workers to stop
    bool lost = false;                     // an agent was lost: rerun without counting it
    std::string failure;                   // first abnormal exit
    std::map<int, std::string> rendezvous;  // rank -> address
    std::vector<Done> rendezvous_waiters;
    std::vector<v1::RendezvousResponse*> rendezvous_responses;
  };
  struct LogWaiter {
    const v1::GetTrialLogsRequest* request;
    v1::GetTrialLogsResponse* response;
    Done done;
    EventLoop::TimerId timer;
  };

  Master(const config::MasterConfig& config, Clock& clock, std::unique_ptr<Store> store);
  absl::Status Restore();
  absl::Status Serve();

  // Runs `fn` on the loop; its status goes to `done`.
  void OnLoop(Done done, std::function<absl::Status()> fn);

  void RequestSchedule();
  void SchedulePass();
  void StartAllocation(TrialState& t, const std::vector<std::pair<std::string, std::vector<std::string>>>& agents);
  void OnRankExit(TrialState& t, int rank, const std::string& how, bool abnormal);
  void EndAllocation(TrialState& t);
  void KillAllocation(TrialState& t, const std::string& reason);
  void FinishTrial(TrialState& t, v1::State state, const std::string& error);
  void UpdateExperiment(ExperimentState& e);
  void AgentLost(const std::string& agent_id, const std::string& why);
  // Records an abnormal exit of every rank of t's current run placed on an agent for which
  // `on_agent` holds.
  void ExitRanksOn(TrialState& t, const std::function<bool(const std::string&)>& on_agent,
                   const std::string& how);
  void CheckAgents();
  void TrialEvent(int64_t trial_id, const std::string& message);
  void PersistTrial(const TrialState& t);
  void PersistAllocation(const TrialState& t);
  void AnswerLogWaiters(int64_t trial_id);
  absl::Status FillLogs(const v1::GetTrialLogsRequest& req, v1::GetTrialLogsResponse* resp);
  absl::StatusOr<TrialState*> AuthorizeWorker(const v1::WorkerAuth& auth);
  absl::StatusOr<TrialState*> FindTrial(int64_t id);
  v1::Trial TrialView(const TrialState& t) const;

  config::MasterConfig config_;
  Clock& clock_;
  std::unique_ptr<Store> store_;
  EventLoop loop_;
  AgentManager agents_;
  std::string cluster_id_;
  int64_t start_time_ms_;
  std::string address_;
  std::vector<std::unique_ptr<grpc::Service>> services_;
  std::unique_ptr<grpc::Server> server_;

  // Loop-thread state.
  std::map<int64_t, ExperimentState> experiments_;
  std::map<int64_t, TrialState> trials_;
  std::map<std::string, int64_t> allocation_trial_;  // open allocation id -> trial id
  std::map<int64_t, std::vector<LogWaiter>> log_waiters_;
  bool schedule_requested_ = false;
  bool shutting_down_ = false;
  std::map<std::string, std::string> waiting_reason_;  // trial id -> reason
};

}  // namespace det::master

#endif  // DET_MASTER_SERVER_MASTER_H_
