// MasterService: the master's three services (ApiHandler, AgentHandler, WorkerHandler) on
// its managers. Each write posts one turn to the loop (Turns) that calls the manager
// owning the concern and answers once the turn has ended. Each read of the master's state
// is answered from its read model (master/loop/read_model.h), a snapshot the loop
// publishes at the end of every turn, on the caller's thread and without waiting for the
// loop's queued turns; lists are filtered and paged there (master/views/pages.h). No state
// of its own beyond what GetMasterInfo reports. The gRPC adapters (grpc_services.h) and
// the REST adapter (master/http) call it.
//
// Thread: its methods may be called from any thread (handlers.h).
#ifndef DET_MASTER_API_MASTER_SERVICE_H_
#define DET_MASTER_API_MASTER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/strings/string_view.h"
#include "common/clock/clock.h"
#include "common/config/daemon_config.h"
#include "common/version/version.h"
#include "master/allocations/allocation_manager.h"
#include "master/api/handlers.h"
#include "master/api/model_contexts.h"
#include "master/auth/user_service.h"
#include "master/checkpoints/checkpoint_manager.h"
#include "master/cluster/agent_liveness.h"
#include "master/cluster/agent_manager.h"
#include "master/experiments/experiment_manager.h"
#include "master/experiments/registry.h"
#include "master/logs/log_manager.h"
#include "master/loop/read_model.h"
#include "master/loop/turns.h"
#include "master/metrics/metrics_manager.h"
#include "master/models/model_registry.h"
#include "master/reads/store_reads.h"
#include "master/templates/templates.h"

namespace det::master {

inline constexpr const char* kVersion = kDetVersion;

class MasterService : public ApiHandler, public AgentHandler, public WorkerHandler {
 public:
  // The managers it calls; all must outlive it.
  struct Managers {
    AgentManager& agents;
    AgentLiveness& liveness;
    Templates& templates;
    UserService& users;
    LogManager& logs;
    ExperimentRegistry& registry;
    ExperimentManager& experiments;
    AllocationManager& allocations;
    CheckpointManager& checkpoints;
    MetricsManager& metrics;
    ModelContexts& contexts;
    ModelRegistry& models;
    // Metric, log and checkpoint reads of the store, off the loop.
    StoreReads& reads;
  };
  // Sets turns' publication (SetPublish) to its read model's.
  MasterService(const config::MasterConfig& config, Clock& clock, Turns& turns, Managers managers);

  // Set by the composition root once the store is loaded (before serving).
  void SetClusterId(std::string id) { cluster_id_ = std::move(id); }

  // ApiHandler.
  void GetMasterInfo(const Caller&, const v1::GetMasterInfoRequest&,
                     v1::GetMasterInfoResponse*, Done) override;
  void GetMasterStats(const Caller&, const v1::GetMasterStatsRequest&,
                      v1::GetMasterStatsResponse*, Done) override;
  void GetMasterConfig(const Caller&, const v1::GetMasterConfigRequest&,
                       v1::GetMasterConfigResponse*, Done) override;
  void GetMasterLogs(const Caller&, const v1::GetMasterLogsRequest&, v1::GetMasterLogsResponse*,
                     Done) override;
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
  void ContinueExperiment(const Caller&, const v1::ContinueExperimentRequest&,
                          v1::ContinueExperimentResponse*, Done) override;
  void SetExperimentSlots(const Caller&, const v1::SetExperimentSlotsRequest&,
                          v1::SetExperimentSlotsResponse*, Done) override;
  void ArchiveExperiment(const Caller&, const v1::ArchiveExperimentRequest&,
                         v1::ArchiveExperimentResponse*, Done) override;
  void UnarchiveExperiment(const Caller&, const v1::UnarchiveExperimentRequest&,
                           v1::UnarchiveExperimentResponse*, Done) override;
  void PatchExperiment(const Caller&, const v1::PatchExperimentRequest&,
                       v1::PatchExperimentResponse*, Done) override;
  void DeleteExperiment(const Caller&, const v1::DeleteExperimentRequest&,
                        v1::DeleteExperimentResponse*, Done) override;
  void GetModelDef(const Caller&, const v1::GetModelDefRequest&, v1::GetModelDefResponse*,
                   Done) override;
  void KillTrial(const Caller&, const v1::KillTrialRequest&, v1::KillTrialResponse*, Done) override;
  void GetCheckpoint(const Caller&, const v1::GetCheckpointRequest&,
                     v1::GetCheckpointResponse*, Done) override;
  void DeleteCheckpoints(const Caller&, const v1::DeleteCheckpointsRequest&,
                         v1::DeleteCheckpointsResponse*, Done) override;
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
  void EnableSlot(const Caller&, const v1::EnableSlotRequest&, v1::EnableSlotResponse*,
                  Done) override;
  void DisableSlot(const Caller&, const v1::DisableSlotRequest&, v1::DisableSlotResponse*,
                   Done) override;
  void ResetAgentCredential(const Caller&, const v1::ResetAgentCredentialRequest&,
                            v1::ResetAgentCredentialResponse*, Done) override;
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
  // The model registry (ModelRegistry; permissions.h MayChangeModel).
  void CreateModel(const Caller&, const v1::CreateModelRequest&, v1::CreateModelResponse*, Done) override;
  void ListModels(const Caller&, const v1::ListModelsRequest&, v1::ListModelsResponse*, Done) override;
  void GetModel(const Caller&, const v1::GetModelRequest&, v1::GetModelResponse*, Done) override;
  void PatchModel(const Caller&, const v1::PatchModelRequest&, v1::PatchModelResponse*, Done) override;
  void DeleteModel(const Caller&, const v1::DeleteModelRequest&, v1::DeleteModelResponse*, Done) override;
  void RegisterModelVersion(const Caller&, const v1::RegisterModelVersionRequest&, v1::RegisterModelVersionResponse*, Done) override;
  void ListModelVersions(const Caller&, const v1::ListModelVersionsRequest&, v1::ListModelVersionsResponse*, Done) override;
  void GetModelVersion(const Caller&, const v1::GetModelVersionRequest&, v1::GetModelVersionResponse*, Done) override;
  void DeleteModelVersion(const Caller&, const v1::DeleteModelVersionRequest&, v1::DeleteModelVersionResponse*, Done) override;
  void PatchModelVersion(const Caller&, const v1::PatchModelVersionRequest&, v1::PatchModelVersionResponse*, Done) override;

  // AgentHandler.
  void Register(const v1::RegisterRequest&, v1::RegisterResponse*, Done) override;
  void RegisterFrom(const std::string& peer, const v1::RegisterRequest&, v1::RegisterResponse*,
                    Done) override;
  void Heartbeat(const v1::HeartbeatRequest&, v1::HeartbeatResponse*, Done) override;
  void PollCommands(const v1::PollCommandsRequest&, v1::PollCommandsResponse*, Done) override;
  void ReportLaunched(const v1::ReportLaunchedRequest&, v1::ReportLaunchedResponse*,
                      Done) override;
  void ReportExit(const v1::ReportExitRequest&, v1::ReportExitResponse*, Done) override;
  void ShipLogs(const v1::ShipLogsRequest&, v1::ShipLogsResponse*, Done) override;
  void GetModelContext(const v1::GetModelContextRequest&, v1::GetModelContextResponse*,
                       Done) override;

  // WorkerHandler.
  void ReportMetrics(const v1::ReportMetricsRequest&, v1::ReportMetricsResponse*, Done) override;
  void ReportCheckpoint(const v1::ReportCheckpointRequest&, v1::ReportCheckpointResponse*,
                        Done) override;
  void Rendezvous(const v1::RendezvousRequest&, v1::RendezvousResponse*, Done) override;
  void ShouldPreempt(const v1::ShouldPreemptRequest&, v1::ShouldPreemptResponse*, Done) override;
  void ReportEarlyExit(const v1::ReportEarlyExitRequest&, v1::ReportEarlyExitResponse*,
                       Done) override;
  void GetExperimentBestValidation(const v1::GetExperimentBestValidationRequest&,
                                   v1::GetExperimentBestValidationResponse*, Done) override;

 private:
  // OK when `caller` may change experiment `experiment_id` (permissions.h) or the
  // experiment does not exist (the manager then answers NotFound). On the loop.
  absl::Status MayChange(const Caller& caller, int64_t experiment_id, absl::string_view action);
  // Answers `done` with answer(every experiment, archived too, by id) from the read model.
  void ReadExperiments(std::function<absl::Status(const v1::ListExperimentsResponse&)> answer,
                       Done done);

  const config::MasterConfig& config_;
  Clock& clock_;
  Turns& turns_;
  Managers m_;
  std::string cluster_id_;
  const int64_t start_time_ms_;
  ReadModel reads_;
};

}  // namespace det::master

#endif  // DET_MASTER_API_MASTER_SERVICE_H_
