// The master's three services as plain C++ interfaces, separate from the gRPC adapters
// in grpc_services.h that expose them.
//
// Each method may be called from any thread. It fills `response` and then calls `done`
// exactly once, from any thread; `caller`, `request` and `response` stay valid until then.
#ifndef DET_MASTER_API_HANDLERS_H_
#define DET_MASTER_API_HANDLERS_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "proto/agent.pb.h"
#include "proto/api.pb.h"
#include "proto/worker.pb.h"

namespace det::master {

using Done = std::function<void(absl::Status)>;

// Who makes a user API call: established by UserHandler::Authenticate from the call's
// session token. Empty (no user, no token) when the master checks no users.
struct Caller {
  v1::User user;
  std::string token;
};

// The user API. Every method gets the caller the adapters authenticated (an empty Caller
// when the master checks no users).
class ApiHandler {
 public:
  virtual ~ApiHandler() = default;
  virtual void GetMasterInfo(const Caller& caller, const v1::GetMasterInfoRequest& request, v1::GetMasterInfoResponse* response, Done done) = 0;
  virtual void GetMasterStats(const Caller& caller, const v1::GetMasterStatsRequest& request, v1::GetMasterStatsResponse* response, Done done) = 0;
  virtual void GetMasterConfig(const Caller& caller, const v1::GetMasterConfigRequest& request, v1::GetMasterConfigResponse* response, Done done) = 0;
  virtual void GetMasterLogs(const Caller& caller, const v1::GetMasterLogsRequest& request, v1::GetMasterLogsResponse* response, Done done) = 0;
  virtual void CreateExperiment(const Caller& caller, const v1::CreateExperimentRequest& request, v1::CreateExperimentResponse* response, Done done) = 0;
  virtual void ListExperiments(const Caller& caller, const v1::ListExperimentsRequest& request, v1::ListExperimentsResponse* response, Done done) = 0;
  virtual void GetExperiment(const Caller& caller, const v1::GetExperimentRequest& request, v1::GetExperimentResponse* response, Done done) = 0;
  virtual void KillExperiment(const Caller& caller, const v1::KillExperimentRequest& request, v1::KillExperimentResponse* response, Done done) = 0;
  virtual void PauseExperiment(const Caller& caller, const v1::PauseExperimentRequest& request, v1::PauseExperimentResponse* response, Done done) = 0;
  virtual void ActivateExperiment(const Caller& caller, const v1::ActivateExperimentRequest& request, v1::ActivateExperimentResponse* response, Done done) = 0;
  virtual void ContinueExperiment(const Caller& caller, const v1::ContinueExperimentRequest& request, v1::ContinueExperimentResponse* response, Done done) = 0;
  virtual void SetExperimentSlots(const Caller& caller, const v1::SetExperimentSlotsRequest& request, v1::SetExperimentSlotsResponse* response, Done done) = 0;
  virtual void ArchiveExperiment(const Caller& caller, const v1::ArchiveExperimentRequest& request, v1::ArchiveExperimentResponse* response, Done done) = 0;
  virtual void UnarchiveExperiment(const Caller& caller, const v1::UnarchiveExperimentRequest& request, v1::UnarchiveExperimentResponse* response, Done done) = 0;
  virtual void PatchExperiment(const Caller& caller, const v1::PatchExperimentRequest& request, v1::PatchExperimentResponse* response, Done done) = 0;
  virtual void DeleteExperiment(const Caller& caller, const v1::DeleteExperimentRequest& request, v1::DeleteExperimentResponse* response, Done done) = 0;
  virtual void GetModelDef(const Caller& caller, const v1::GetModelDefRequest& request, v1::GetModelDefResponse* response, Done done) = 0;
  virtual void KillTrial(const Caller& caller, const v1::KillTrialRequest& request, v1::KillTrialResponse* response, Done done) = 0;
  virtual void GetCheckpoint(const Caller& caller, const v1::GetCheckpointRequest& request, v1::GetCheckpointResponse* response, Done done) = 0;
  virtual void DeleteCheckpoints(const Caller& caller, const v1::DeleteCheckpointsRequest& request, v1::DeleteCheckpointsResponse* response, Done done) = 0;
  virtual void GetTrial(const Caller& caller, const v1::GetTrialRequest& request, v1::GetTrialResponse* response, Done done) = 0;
  virtual void GetTrialMetrics(const Caller& caller, const v1::GetTrialMetricsRequest& request, v1::GetTrialMetricsResponse* response, Done done) = 0;
  virtual void GetTrialLogs(const Caller& caller, const v1::GetTrialLogsRequest& request, v1::GetTrialLogsResponse* response, Done done) = 0;
  virtual void ListCheckpoints(const Caller& caller, const v1::ListCheckpointsRequest& request, v1::ListCheckpointsResponse* response, Done done) = 0;
  virtual void ListAgents(const Caller& caller, const v1::ListAgentsRequest& request, v1::ListAgentsResponse* response, Done done) = 0;
  virtual void EnableAgent(const Caller& caller, const v1::EnableAgentRequest& request, v1::EnableAgentResponse* response, Done done) = 0;
  virtual void DisableAgent(const Caller& caller, const v1::DisableAgentRequest& request, v1::DisableAgentResponse* response, Done done) = 0;
  virtual void EnableSlot(const Caller& caller, const v1::EnableSlotRequest& request, v1::EnableSlotResponse* response, Done done) = 0;
  virtual void DisableSlot(const Caller& caller, const v1::DisableSlotRequest& request, v1::DisableSlotResponse* response, Done done) = 0;
  virtual void ResetAgentCredential(const Caller& caller, const v1::ResetAgentCredentialRequest& request, v1::ResetAgentCredentialResponse* response, Done done) = 0;
  virtual void ListJobs(const Caller& caller, const v1::ListJobsRequest& request, v1::ListJobsResponse* response, Done done) = 0;
  virtual void UpdateJobPriority(const Caller& caller, const v1::UpdateJobPriorityRequest& request, v1::UpdateJobPriorityResponse* response, Done done) = 0;
  virtual void ListTasks(const Caller& caller, const v1::ListTasksRequest& request, v1::ListTasksResponse* response, Done done) = 0;
  virtual void ListResourcePools(const Caller& caller, const v1::ListResourcePoolsRequest& request, v1::ListResourcePoolsResponse* response, Done done) = 0;
  virtual void SetTemplate(const Caller& caller, const v1::SetTemplateRequest& request, v1::SetTemplateResponse* response, Done done) = 0;
  virtual void ListTemplates(const Caller& caller, const v1::ListTemplatesRequest& request, v1::ListTemplatesResponse* response, Done done) = 0;
  virtual void GetTemplate(const Caller& caller, const v1::GetTemplateRequest& request, v1::GetTemplateResponse* response, Done done) = 0;
  virtual void RemoveTemplate(const Caller& caller, const v1::RemoveTemplateRequest& request, v1::RemoveTemplateResponse* response, Done done) = 0;
  virtual void CreateModel(const Caller& caller, const v1::CreateModelRequest& request, v1::CreateModelResponse* response, Done done) = 0;
  virtual void ListModels(const Caller& caller, const v1::ListModelsRequest& request, v1::ListModelsResponse* response, Done done) = 0;
  virtual void GetModel(const Caller& caller, const v1::GetModelRequest& request, v1::GetModelResponse* response, Done done) = 0;
  virtual void PatchModel(const Caller& caller, const v1::PatchModelRequest& request, v1::PatchModelResponse* response, Done done) = 0;
  virtual void DeleteModel(const Caller& caller, const v1::DeleteModelRequest& request, v1::DeleteModelResponse* response, Done done) = 0;
  virtual void RegisterModelVersion(const Caller& caller, const v1::RegisterModelVersionRequest& request, v1::RegisterModelVersionResponse* response, Done done) = 0;
  virtual void ListModelVersions(const Caller& caller, const v1::ListModelVersionsRequest& request, v1::ListModelVersionsResponse* response, Done done) = 0;
  virtual void GetModelVersion(const Caller& caller, const v1::GetModelVersionRequest& request, v1::GetModelVersionResponse* response, Done done) = 0;
  virtual void DeleteModelVersion(const Caller& caller, const v1::DeleteModelVersionRequest& request, v1::DeleteModelVersionResponse* response, Done done) = 0;
  virtual void PatchModelVersion(const Caller& caller, const v1::PatchModelVersionRequest& request, v1::PatchModelVersionResponse* response, Done done) = 0;
};

// Users and sessions. The gRPC and REST adapters call Authenticate before every user API
// call except Login, and hand the caller to the methods below.
class UserHandler {
 public:
  virtual ~UserHandler() = default;
  // Fills `caller` for a live session token, else UNAUTHENTICATED.
  virtual void Authenticate(const std::string& token, Caller* caller, Done done) = 0;
  virtual void Login(const v1::LoginRequest& request, v1::LoginResponse* response, Done done) = 0;
  virtual void Logout(const Caller& caller, const v1::LogoutRequest& request, v1::LogoutResponse* response, Done done) = 0;
  virtual void WhoAmI(const Caller& caller, const v1::WhoAmIRequest& request, v1::WhoAmIResponse* response, Done done) = 0;
  virtual void CreateUser(const Caller& caller, const v1::CreateUserRequest& request, v1::CreateUserResponse* response, Done done) = 0;
  virtual void ListUsers(const Caller& caller, const v1::ListUsersRequest& request, v1::ListUsersResponse* response, Done done) = 0;
  virtual void ChangePassword(const Caller& caller, const v1::ChangePasswordRequest& request, v1::ChangePasswordResponse* response, Done done) = 0;
  virtual void LinkWithAgentUser(const Caller& caller, const v1::LinkWithAgentUserRequest& request, v1::LinkWithAgentUserResponse* response, Done done) = 0;
  // Admins only: activates or deactivates a user. Default: Unimplemented.
  virtual void SetUserActive(const Caller&, const v1::SetUserActiveRequest&, v1::SetUserActiveResponse*, Done done) {
    done(absl::UnimplementedError("this master does not activate or deactivate users"));
  }
  // Admins only: renames a user. Default: Unimplemented.
  virtual void RenameUser(const Caller&, const v1::RenameUserRequest&, v1::RenameUserResponse*, Done done) {
    done(absl::UnimplementedError("this master does not rename users"));
  }
};

class AgentHandler {
 public:
  virtual ~AgentHandler() = default;
  virtual void Register(const v1::RegisterRequest& request, v1::RegisterResponse* response, Done done) = 0;
  // Register, from the caller at `peer` (its address as gRPC names it; logged with a
  // refused or enrolling registration).
  virtual void RegisterFrom(const std::string& peer, const v1::RegisterRequest& request,
                            v1::RegisterResponse* response, Done done) {
    Register(request, response, std::move(done));
  }
  virtual void Heartbeat(const v1::HeartbeatRequest& request, v1::HeartbeatResponse* response, Done done) = 0;
  virtual void PollCommands(const v1::PollCommandsRequest& request, v1::PollCommandsResponse* response, Done done) = 0;
  virtual void ReportLaunched(const v1::ReportLaunchedRequest& request, v1::ReportLaunchedResponse* response, Done done) = 0;
  virtual void ReportExit(const v1::ReportExitRequest& request, v1::ReportExitResponse* response, Done done) = 0;
  virtual void ShipLogs(const v1::ShipLogsRequest& request, v1::ShipLogsResponse* response, Done done) = 0;
  virtual void GetModelContext(const v1::GetModelContextRequest& request, v1::GetModelContextResponse* response, Done done) = 0;
};

class WorkerHandler {
 public:
  virtual ~WorkerHandler() = default;
  virtual void ReportMetrics(const v1::ReportMetricsRequest& request, v1::ReportMetricsResponse* response, Done done) = 0;
  virtual void ReportCheckpoint(const v1::ReportCheckpointRequest& request, v1::ReportCheckpointResponse* response, Done done) = 0;
  virtual void Rendezvous(const v1::RendezvousRequest& request, v1::RendezvousResponse* response, Done done) = 0;
  // Whether the master asked the allocation to stop (and why); with wait_ms > 0 answered
  // as soon as it does, or after wait_ms (capped at 60 s) with preempt = false.
  // FailedPrecondition once the allocation has ended.
  virtual void ShouldPreempt(const v1::ShouldPreemptRequest& request, v1::ShouldPreemptResponse* response, Done done) = 0;
  // Rank 0's reason for stopping early (invalid hyperparameters), persisted on the trial.
  virtual void ReportEarlyExit(const v1::ReportEarlyExitRequest& request, v1::ReportEarlyExitResponse* response, Done done) = 0;
  // The best searcher.metric validation value of the worker's own experiment.
  virtual void GetExperimentBestValidation(const v1::GetExperimentBestValidationRequest& request, v1::GetExperimentBestValidationResponse* response, Done done) = 0;
};

}  // namespace det::master

#endif  // DET_MASTER_API_HANDLERS_H_
