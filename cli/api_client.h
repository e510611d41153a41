// The det CLI's client of the master's user API (det.v1.Api). The only part of the CLI
// that talks gRPC: every call carries a deadline, and failures come back as
// absl::Status with a message fit to show the user.
#ifndef DET_CLI_API_CLIENT_H_
#define DET_CLI_API_CLIENT_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/api.pb.h"

namespace det::cli {

// "host:port" for a master given as "http://host:port", "https://host:port", "host:port"
// or "host" (port 8080); a trailing '/' is ignored. (https:// makes ApiClient use TLS.) InvalidArgument when it names no host or a bad
// port.
absl::StatusOr<std::string> ParseMasterAddress(absl::string_view master);

// host:(port - 1) of `address` (host:port): where a master given by its web port serves
// gRPC. nullopt for port 1 or an unreadable port.
std::optional<std::string> PortBelow(const std::string& address);

struct ApiClientOptions {
  // Deadline of each call; long polls get their wait on top of it. Default: 30 s.
  absl::Duration deadline = absl::Seconds(30);
  // Largest message received. Default: 128 MiB. (None larger than the master receives,
  // rpc::kMaxMasterReceiveBytes, is sent.)
  int max_message_bytes = 128 << 20;
  // Longest pause between attempts to connect after a failed one (for polling a master
  // that is starting). Default: zero = gRPC's own (up to 120 s).
  absl::Duration max_reconnect_backoff = absl::ZeroDuration();
  // Session token sent with every call as "authorization: Bearer TOKEN" (see
  // cli/auth_store.h); empty: none (only Login works then).
  std::string token;
};

// Thread-compatible (one caller at a time). TLS when DET_MASTER_CERT_FILE names the
// master's CA, or for an https:// master (the system's CAs then); never plaintext for
// https://. Errors: UNAVAILABLE reads "cannot reach the master at HOST:PORT: <detail>"
// (with a hint when the port speaks HTTP/1 or no TLS session could be made), DEADLINE_EXCEEDED names the address and the
// deadline; any other code keeps the master's message. A master given by its web port
// (which speaks HTTP/1) is reached at the port below it when a master answers gRPC there
// (web = gRPC + 1, as det deploy local and the example master.yaml set them), so
// `det -m host:WEBPORT` works as it does with Determined; otherwise the web port's error
// (with its hint) stands.
class ApiClient {
 public:
  // Fails only when `master` cannot be parsed (see ParseMasterAddress); connecting
  // happens on the first call.
  static absl::StatusOr<std::unique_ptr<ApiClient>> Create(
      absl::string_view master, ApiClientOptions options = {});
  ~ApiClient();

  ApiClient(const ApiClient&) = delete;
  ApiClient& operator=(const ApiClient&) = delete;

  // host:port the client talks to: the one given, or the port below it once the given
  // one turned out to be the master's web port (see the class comment).
  const std::string& address() const;

  // The gRPC channel and stub; defined in api_client.cc (opaque elsewhere).
  struct Rpc;

  absl::StatusOr<v1::GetMasterInfoResponse> GetMasterInfo();
  absl::StatusOr<v1::GetMasterConfigResponse> GetMasterConfig();
  absl::StatusOr<v1::GetMasterLogsResponse> GetMasterLogs(const v1::GetMasterLogsRequest& request);
  absl::StatusOr<v1::CreateExperimentResponse> CreateExperiment(
      const v1::CreateExperimentRequest& request);
  // The same through CreateExperimentStream: the context goes in pieces of at most 1 MiB
  // (the master receives no message larger than 4 MiB). Deadline: the call's plus 10 min.
  // A master without the stream (UNIMPLEMENTED) gets CreateExperiment.
  absl::StatusOr<v1::CreateExperimentResponse> CreateExperimentStream(
      const v1::CreateExperimentRequest& request);
  absl::StatusOr<v1::ListExperimentsResponse> ListExperiments(
      const v1::ListExperimentsRequest& request);
  absl::StatusOr<v1::GetExperimentResponse> GetExperiment(int64_t id);
  absl::Status KillExperiment(int64_t id);
  absl::StatusOr<v1::DeleteExperimentResponse> DeleteExperiment(int64_t id);
  absl::Status KillTrial(int64_t id);
  absl::StatusOr<v1::PauseExperimentResponse> PauseExperiment(int64_t id);
  absl::Status ArchiveExperiment(int64_t id);
  absl::Status UnarchiveExperiment(int64_t id);
  absl::StatusOr<v1::PatchExperimentResponse> PatchExperiment(
      const v1::PatchExperimentRequest& request);
  absl::StatusOr<v1::GetCheckpointResponse> GetCheckpoint(const std::string& uuid);
  absl::StatusOr<v1::DeleteCheckpointsResponse> DeleteCheckpoints(
      const v1::DeleteCheckpointsRequest& request);
  absl::Status ActivateExperiment(int64_t id);
  absl::StatusOr<v1::ContinueExperimentResponse> ContinueExperiment(
      const v1::ContinueExperimentRequest& request);
  absl::StatusOr<v1::SetExperimentSlotsResponse> SetExperimentSlots(int64_t id, int32_t slots,
                                                                    bool force);
  absl::StatusOr<v1::GetTrialResponse> GetTrial(int64_t id);
  absl::StatusOr<v1::GetTrialMetricsResponse> GetTrialMetrics(
      const v1::GetTrialMetricsRequest& request);
  // Deadline: request.wait_ms() plus the usual deadline.
  absl::StatusOr<v1::GetTrialLogsResponse> GetTrialLogs(
      const v1::GetTrialLogsRequest& request);
  absl::StatusOr<v1::ListCheckpointsResponse> ListCheckpoints(
      const v1::ListCheckpointsRequest& request);
  absl::StatusOr<v1::ListAgentsResponse> ListAgents();
  absl::StatusOr<v1::EnableAgentResponse> EnableAgent(const std::string& agent_id);
  absl::StatusOr<v1::DisableAgentResponse> DisableAgent(const std::string& agent_id, bool drain);
  absl::StatusOr<v1::EnableSlotResponse> EnableSlot(const std::string& agent_id,
                                                    const std::string& slot_id);
  absl::StatusOr<v1::DisableSlotResponse> DisableSlot(const std::string& agent_id,
                                                      const std::string& slot_id);
  // Deadline: the usual plus 2 minutes (up to 64 MiB).
  absl::StatusOr<v1::GetModelDefResponse> GetModelDef(int64_t experiment_id);
  absl::StatusOr<v1::ResetAgentCredentialResponse> ResetAgentCredential(
      const std::string& agent_id);
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const std::string& resource_pool);
  absl::Status UpdateJobPriority(int64_t experiment_id, int32_t priority);
  absl::StatusOr<v1::ListTasksResponse> ListTasks();
  absl::StatusOr<v1::ListResourcePoolsResponse> ListResourcePools();
  // Users and sessions (det user ...).
  absl::StatusOr<v1::LoginResponse> Login(const std::string& username,
                                          const std::string& password);
  absl::Status Logout();
  absl::StatusOr<v1::WhoAmIResponse> WhoAmI();
  absl::StatusOr<v1::CreateUserResponse> CreateUser(const v1::CreateUserRequest& request);
  absl::StatusOr<v1::ListUsersResponse> ListUsers();
  absl::Status ChangePassword(const v1::ChangePasswordRequest& request);
  absl::Status LinkWithAgentUser(const v1::LinkWithAgentUserRequest& request);
  absl::StatusOr<v1::SetUserActiveResponse> SetUserActive(const v1::SetUserActiveRequest& request);
  absl::StatusOr<v1::RenameUserResponse> RenameUser(const v1::RenameUserRequest& request);
  absl::StatusOr<v1::PatchModelVersionResponse> PatchModelVersion(
      const v1::PatchModelVersionRequest& request);
  absl::StatusOr<v1::SetTemplateResponse> SetTemplate(const v1::SetTemplateRequest& request);
  absl::StatusOr<v1::ListTemplatesResponse> ListTemplates();
  absl::StatusOr<v1::GetTemplateResponse> GetTemplate(const std::string& name);
  absl::Status RemoveTemplate(const std::string& name);
  // The model registry (det model ...).
  absl::StatusOr<v1::CreateModelResponse> CreateModel(const v1::CreateModelRequest& request);
  absl::StatusOr<v1::ListModelsResponse> ListModels(const v1::ListModelsRequest& request);
  absl::StatusOr<v1::GetModelResponse> GetModel(const std::string& name);
  absl::Status DeleteModel(const std::string& name);
  absl::StatusOr<v1::RegisterModelVersionResponse> RegisterModelVersion(
      const v1::RegisterModelVersionRequest& request);
  absl::StatusOr<v1::ListModelVersionsResponse> ListModelVersions(const std::string& model_name);
  // `version` <= 0: the latest.
  absl::StatusOr<v1::GetModelVersionResponse> GetModelVersion(const std::string& model_name,
                                                              int32_t version);
  absl::Status DeleteModelVersion(const std::string& model_name, int32_t version);

 private:
  ApiClient(ApiClientOptions options, std::unique_ptr<Rpc> rpc);

  ApiClientOptions options_;
  std::unique_ptr<Rpc> rpc_;
};

}  // namespace det::cli

#endif  // DET_CLI_API_CLIENT_H_
