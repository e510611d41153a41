#include "cli/api_client.h"

#include "common/rpc/context_upload.h"
#include "common/rpc/rpc.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>

#include <algorithm>
#include <functional>
#include <optional>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "proto/api.grpc.pb.h"

namespace det::cli {
namespace {

constexpr int kDefaultPort = 8080;

}  // namespace

absl::StatusOr<std::string> ParseMasterAddress(absl::string_view master) {
  absl::string_view rest = absl::StripAsciiWhitespace(master);
  const absl::string_view original = rest;
  if (!absl::ConsumePrefix(&rest, "http://")) absl::ConsumePrefix(&rest, "https://");
  while (absl::ConsumeSuffix(&rest, "/")) {
  }
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid master address '", original, "': ", why));
  };
  if (rest.empty()) return bad("no host");
  if (rest.find('/') != absl::string_view::npos) return bad("unexpected path");

  absl::string_view host = rest;
  absl::string_view port;
  if (rest.front() == '[') {  // [IPv6]:port
    size_t close = rest.find(']');
    if (close == absl::string_view::npos) return bad("unclosed '['");
    host = rest.substr(0, close + 1);
    absl::string_view after = rest.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') return bad("expected ':' after ']'");
      port = after.substr(1);
      if (port.empty()) return bad("empty port");
    }
  } else if (std::count(rest.begin(), rest.end(), ':') > 1) {  // bare IPv6
    return absl::StrCat("[", rest, "]:", kDefaultPort);
  } else if (size_t colon = rest.rfind(':'); colon != absl::string_view::npos) {
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
    if (port.empty()) return bad("empty port");
  }
  if (host.empty() || host == "[]") return bad("no host");
  int port_number = kDefaultPort;
  if (!port.empty() && (!absl::SimpleAtoi(port, &port_number) || port_number <= 0 ||
                        port_number > 65535)) {
    return bad(absl::StrCat("bad port '", port, "'"));
  }
  return absl::StrCat(host, ":", port_number);
}

namespace {

// Adds "authorization: Bearer TOKEN" to every call of a channel.
class BearerInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit BearerInterceptor(const std::string& value) : value_(value) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({"authorization", value_});
    }
    methods->Proceed();
  }

 private:
  const std::string& value_;
};

class BearerInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerInterceptorFactory(std::string token) : value_("Bearer " + std::move(token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerInterceptor(value_);
  }

 private:
  const std::string value_;
};

}  // namespace

struct ApiClient::Rpc {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Api::Stub> stub;
  // host:port of `channel`.
  std::string address;
  // Points channel and stub at `address` (the same credentials, token and limits).
  std::function<void(Rpc&, const std::string& address)> connect;
  // The port below the one given was tried (see ApiClient's class comment).
  bool tried_port_below = false;
};

namespace {

// What a person should do about an UNAVAILABLE whose gRPC detail shows a known mistake.
std::string UnavailableHint(const std::string& detail) {
  const std::string lower = absl::AsciiStrToLower(detail);
  if (absl::StrContains(lower, "http1")) {
    return "\n(that port speaks HTTP/1: it is the master's web and REST port; det talks "
           "gRPC to the master's grpc_listen port, 8080 by default)";
  }
  if (absl::StrContains(lower, "handshake")) {
    return "\n(no TLS session with the master: it serves plaintext gRPC on that port, or "
           "its certificate is not signed by a CA this machine trusts; DET_MASTER_CERT_FILE "
           "names the CA to trust)";
  }
  return "";
}

// A failed call of `method_name` (deadline `timeout`) as a Status for the user.
absl::Status UserStatus(const grpc::Status& status, absl::string_view method_name,
                        absl::Duration timeout, const std::string& address) {
  const std::string& detail = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(
          absl::StrCat("cannot reach the master at ", address, ": ", detail,
                       UnavailableHint(detail)));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(
          absl::StrCat("the master at ", address, " did not answer ", method_name,
                       " within ", absl::FormatDuration(timeout)));
    default:
      return absl::Status(
          static_cast<absl::StatusCode>(status.error_code()),
          detail.empty() ? absl::StrCat(method_name, " failed with gRPC code ",
                                        static_cast<int>(status.error_code()))
                         : detail);
  }
}

}  // namespace

std::optional<std::string> PortBelow(const std::string& address) {
  size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port <= 1) {
    return std::nullopt;
  }
  return absl::StrCat(address.substr(0, colon + 1), port - 1);
}

namespace {

// Whether `status` says the port speaks HTTP/1 (the master's web and REST port).
bool SpeaksHttp1(const grpc::Status& status) {
  return status.error_code() == grpc::StatusCode::UNAVAILABLE &&
         absl::StrContains(absl::AsciiStrToLower(status.error_message()), "http1");
}

// Calls `method` of the stub with a deadline `timeout` from now and turns a failure into
// a Status for the user. When the master's address names its web port (HTTP/1), the port
// below it (grpc_listen's, by the convention web = gRPC + 1) is tried once; if a master
// answers there, the client stays on it.
template <typename Request, typename Response>
absl::StatusOr<Response> Call(
    ApiClient::Rpc& rpc,
    grpc::Status (v1::Api::Stub::*method)(grpc::ClientContext*, const Request&, Response*),
    absl::string_view method_name, const Request& request, absl::Duration timeout) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  Response response;
  grpc::Status status = (rpc.stub.get()->*method)(&context, request, &response);
  if (status.ok()) return response;
  if (SpeaksHttp1(status) && !rpc.tried_port_below) {
    rpc.tried_port_below = true;
    std::optional<std::string> below = PortBelow(rpc.address);
    if (below.has_value()) {
      const std::string web = rpc.address;
      rpc.connect(rpc, *below);
      grpc::ClientContext again;
      again.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      grpc::Status retried = (rpc.stub.get()->*method)(&again, request, &response);
      if (retried.ok()) return response;
      if (retried.error_code() != grpc::StatusCode::UNAVAILABLE) {
        return UserStatus(retried, method_name, timeout, rpc.address);
      }
      rpc.connect(rpc, web);  // nothing there: the web port's own error
    }
  }
  return UserStatus(status, method_name, timeout, rpc.address);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ApiClient>> ApiClient::Create(absl::string_view master,
                                                             ApiClientOptions options) {
  absl::StatusOr<std::string> address = ParseMasterAddress(master);
  if (!address.ok()) return address.status();
  if (absl::Status st = rpc::CheckMasterCertFile(); !st.ok()) return st;
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(options.max_message_bytes);
  args.SetMaxSendMessageSize(std::min(options.max_message_bytes, rpc::kMaxMasterReceiveBytes));
  if (options.max_reconnect_backoff > absl::ZeroDuration()) {
    const int backoff_ms =
        static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, backoff_ms);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, backoff_ms);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
    // The global subchannel pool would share backoff state with other channels.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  }
  // https:// always means TLS: with DET_MASTER_CERT_FILE's CA when it is set, else the
  // system's CAs; never a fallback to plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials = rpc::MasterChannelCredentials();
  if (absl::StartsWith(absl::StripAsciiWhitespace(master), "https://") &&
      std::getenv(rpc::kMasterCertFileEnv) == nullptr) {
    credentials = grpc::SslCredentials(grpc::SslCredentialsOptions());
  }
  auto rpc = std::make_unique<Rpc>();
  const std::string token = options.token;
  rpc->connect = [credentials, args, token](Rpc& r, const std::string& to) {
    r.address = to;
    if (token.empty()) {
      r.channel = grpc::CreateCustomChannel(to, credentials, args);
    } else {
      std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
          interceptors;
      interceptors.push_back(std::make_unique<BearerInterceptorFactory>(token));
      r.channel = grpc::experimental::CreateCustomChannelWithInterceptors(
          to, credentials, args, std::move(interceptors));
    }
    r.stub = v1::Api::NewStub(r.channel);
  };
  rpc->connect(*rpc, *address);
  return std::unique_ptr<ApiClient>(new ApiClient(options, std::move(rpc)));
}

ApiClient::ApiClient(ApiClientOptions options, std::unique_ptr<Rpc> rpc)
    : options_(options), rpc_(std::move(rpc)) {}

ApiClient::~ApiClient() = default;

const std::string& ApiClient::address() const { return rpc_->address; }

absl::StatusOr<v1::GetMasterInfoResponse> ApiClient::GetMasterInfo() {
  return Call(*rpc_, &v1::Api::Stub::GetMasterInfo, "GetMasterInfo",
              v1::GetMasterInfoRequest(), options_.deadline);
}

absl::StatusOr<v1::CreateExperimentResponse> ApiClient::CreateExperiment(
    const v1::CreateExperimentRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::CreateExperiment, "CreateExperiment", request,
              options_.deadline);
}

absl::StatusOr<v1::CreateExperimentResponse> ApiClient::CreateExperimentStream(
    const v1::CreateExperimentRequest& request) {
  // Up to 64 MiB of context: minutes on a slow link.
  const absl::Duration timeout = options_.deadline + absl::Minutes(10);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::CreateExperimentResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::CreateExperimentChunk>> writer =
      rpc_->stub->CreateExperimentStream(&context, &response);
  // A failed write means the master ended the call (a refusal): Finish says why.
  if (rpc::SplitContext(request, [&](const v1::CreateExperimentChunk& chunk) {
        return writer->Write(chunk);
      })) {
    writer->WritesDone();
  }
  grpc::Status status = writer->Finish();
  if (status.ok()) return response;
  // A master older than the stream: the unary call, which takes small requests.
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) return CreateExperiment(request);
  return UserStatus(status, "CreateExperimentStream", timeout, rpc_->address);
}

absl::StatusOr<v1::ListExperimentsResponse> ApiClient::ListExperiments(
    const v1::ListExperimentsRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::ListExperiments, "ListExperiments", request,
              options_.deadline);
}

absl::StatusOr<v1::GetExperimentResponse> ApiClient::GetExperiment(int64_t id) {
  v1::GetExperimentRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::GetExperiment, "GetExperiment", request,
              options_.deadline);
}

absl::StatusOr<v1::PauseExperimentResponse> ApiClient::PauseExperiment(int64_t id) {
  v1::PauseExperimentRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::PauseExperiment, "PauseExperiment", request,
              options_.deadline);
}

absl::StatusOr<v1::GetMasterConfigResponse> ApiClient::GetMasterConfig() {
  return Call(*rpc_, &v1::Api::Stub::GetMasterConfig, "GetMasterConfig",
              v1::GetMasterConfigRequest(), options_.deadline);
}

absl::StatusOr<v1::DeleteCheckpointsResponse> ApiClient::DeleteCheckpoints(
    const v1::DeleteCheckpointsRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::DeleteCheckpoints, "DeleteCheckpoints", request,
              options_.deadline);
}

absl::Status ApiClient::ArchiveExperiment(int64_t id) {
  v1::ArchiveExperimentRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::ArchiveExperiment, "ArchiveExperiment", request,
              options_.deadline)
      .status();
}

absl::Status ApiClient::UnarchiveExperiment(int64_t id) {
  v1::UnarchiveExperimentRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::UnarchiveExperiment, "UnarchiveExperiment",
              request, options_.deadline)
      .status();
}

absl::StatusOr<v1::PatchExperimentResponse> ApiClient::PatchExperiment(
    const v1::PatchExperimentRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::PatchExperiment, "PatchExperiment", request,
              options_.deadline);
}

absl::StatusOr<v1::GetCheckpointResponse> ApiClient::GetCheckpoint(const std::string& uuid) {
  v1::GetCheckpointRequest request;
  request.set_uuid(uuid);
  return Call(*rpc_, &v1::Api::Stub::GetCheckpoint, "GetCheckpoint", request,
              options_.deadline);
}

absl::Status ApiClient::ActivateExperiment(int64_t id) {
  v1::ActivateExperimentRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::ActivateExperiment, "ActivateExperiment", request,
              options_.deadline)
      .status();
}

absl::StatusOr<v1::ContinueExperimentResponse> ApiClient::ContinueExperiment(
    const v1::ContinueExperimentRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::ContinueExperiment, "ContinueExperiment", request,
              options_.deadline);
}

absl::StatusOr<v1::SetExperimentSlotsResponse> ApiClient::SetExperimentSlots(int64_t id,
                                                                             int32_t slots,
                                                                             bool force) {
  v1::SetExperimentSlotsRequest request;
  request.set_id(id);
  request.set_slots_per_trial(slots);
  request.set_force(force);
  return Call(*rpc_, &v1::Api::Stub::SetExperimentSlots, "SetExperimentSlots", request,
              options_.deadline);
}

absl::Status ApiClient::KillExperiment(int64_t id) {
  v1::KillExperimentRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::KillExperiment, "KillExperiment", request,
              options_.deadline)
      .status();
}

absl::StatusOr<v1::DeleteExperimentResponse> ApiClient::DeleteExperiment(int64_t id) {
  v1::DeleteExperimentRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::DeleteExperiment, "DeleteExperiment", request,
              options_.deadline);
}

absl::Status ApiClient::KillTrial(int64_t id) {
  v1::KillTrialRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::KillTrial, "KillTrial", request, options_.deadline)
      .status();
}

absl::StatusOr<v1::GetMasterLogsResponse> ApiClient::GetMasterLogs(
    const v1::GetMasterLogsRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::GetMasterLogs, "GetMasterLogs", request,
              options_.deadline);
}

absl::StatusOr<v1::GetTrialResponse> ApiClient::GetTrial(int64_t id) {
  v1::GetTrialRequest request;
  request.set_id(id);
  return Call(*rpc_, &v1::Api::Stub::GetTrial, "GetTrial", request,
              options_.deadline);
}

absl::StatusOr<v1::GetTrialMetricsResponse> ApiClient::GetTrialMetrics(
    const v1::GetTrialMetricsRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::GetTrialMetrics, "GetTrialMetrics", request,
              options_.deadline);
}

absl::StatusOr<v1::GetTrialLogsResponse> ApiClient::GetTrialLogs(
    const v1::GetTrialLogsRequest& request) {
  absl::Duration timeout =
      options_.deadline + absl::Milliseconds(std::max(0, request.wait_ms()));
  return Call(*rpc_, &v1::Api::Stub::GetTrialLogs, "GetTrialLogs", request, timeout);
}

absl::StatusOr<v1::ListCheckpointsResponse> ApiClient::ListCheckpoints(
    const v1::ListCheckpointsRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::ListCheckpoints, "ListCheckpoints", request,
              options_.deadline);
}

absl::StatusOr<v1::ListAgentsResponse> ApiClient::ListAgents() {
  return Call(*rpc_, &v1::Api::Stub::ListAgents, "ListAgents",
              v1::ListAgentsRequest(), options_.deadline);
}

absl::StatusOr<v1::EnableAgentResponse> ApiClient::EnableAgent(const std::string& agent_id) {
  v1::EnableAgentRequest request;
  request.set_agent_id(agent_id);
  return Call(*rpc_, &v1::Api::Stub::EnableAgent, "EnableAgent", request,
              options_.deadline);
}

absl::StatusOr<v1::EnableSlotResponse> ApiClient::EnableSlot(const std::string& agent_id,
                                                              const std::string& slot_id) {
  v1::EnableSlotRequest request;
  request.set_agent_id(agent_id);
  request.set_slot_id(slot_id);
  return Call(*rpc_, &v1::Api::Stub::EnableSlot, "EnableSlot", request, options_.deadline);
}

absl::StatusOr<v1::DisableSlotResponse> ApiClient::DisableSlot(const std::string& agent_id,
                                                                const std::string& slot_id) {
  v1::DisableSlotRequest request;
  request.set_agent_id(agent_id);
  request.set_slot_id(slot_id);
  return Call(*rpc_, &v1::Api::Stub::DisableSlot, "DisableSlot", request,
              options_.deadline);
}

absl::StatusOr<v1::GetModelDefResponse> ApiClient::GetModelDef(int64_t experiment_id) {
  v1::GetModelDefRequest request;
  request.set_experiment_id(experiment_id);
  return Call(*rpc_, &v1::Api::Stub::GetModelDef, "GetModelDef", request,
              options_.deadline + absl::Minutes(2));
}

absl::StatusOr<v1::DisableAgentResponse> ApiClient::DisableAgent(const std::string& agent_id,
                                                                 bool drain) {
  v1::DisableAgentRequest request;
  request.set_agent_id(agent_id);
  request.set_drain(drain);
  return Call(*rpc_, &v1::Api::Stub::DisableAgent, "DisableAgent", request,
              options_.deadline);
}

absl::StatusOr<v1::ResetAgentCredentialResponse> ApiClient::ResetAgentCredential(
    const std::string& agent_id) {
  v1::ResetAgentCredentialRequest request;
  request.set_agent_id(agent_id);
  return Call(*rpc_, &v1::Api::Stub::ResetAgentCredential, "ResetAgentCredential",
              request, options_.deadline);
}

absl::StatusOr<v1::ListJobsResponse> ApiClient::ListJobs(const std::string& resource_pool) {
  v1::ListJobsRequest request;
  request.set_resource_pool(resource_pool);
  return Call(*rpc_, &v1::Api::Stub::ListJobs, "ListJobs", request, options_.deadline);
}

absl::Status ApiClient::UpdateJobPriority(int64_t experiment_id, int32_t priority) {
  v1::UpdateJobPriorityRequest request;
  request.set_experiment_id(experiment_id);
  request.set_priority(priority);
  return Call(*rpc_, &v1::Api::Stub::UpdateJobPriority, "UpdateJobPriority", request,
              options_.deadline)
      .status();
}

absl::StatusOr<v1::ListTasksResponse> ApiClient::ListTasks() {
  return Call(*rpc_, &v1::Api::Stub::ListTasks, "ListTasks", v1::ListTasksRequest(),
              options_.deadline);
}

absl::StatusOr<v1::ListResourcePoolsResponse> ApiClient::ListResourcePools() {
  return Call(*rpc_, &v1::Api::Stub::ListResourcePools, "ListResourcePools",
              v1::ListResourcePoolsRequest(), options_.deadline);
}

absl::StatusOr<v1::SetTemplateResponse> ApiClient::SetTemplate(
    const v1::SetTemplateRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::SetTemplate, "SetTemplate", request,
              options_.deadline);
}

absl::StatusOr<v1::ListTemplatesResponse> ApiClient::ListTemplates() {
  return Call(*rpc_, &v1::Api::Stub::ListTemplates, "ListTemplates",
              v1::ListTemplatesRequest(), options_.deadline);
}

absl::StatusOr<v1::GetTemplateResponse> ApiClient::GetTemplate(const std::string& name) {
  v1::GetTemplateRequest request;
  request.set_name(name);
  return Call(*rpc_, &v1::Api::Stub::GetTemplate, "GetTemplate", request,
              options_.deadline);
}

absl::Status ApiClient::RemoveTemplate(const std::string& name) {
  v1::RemoveTemplateRequest request;
  request.set_name(name);
  return Call(*rpc_, &v1::Api::Stub::RemoveTemplate, "RemoveTemplate", request,
              options_.deadline)
      .status();
}

absl::StatusOr<v1::CreateModelResponse> ApiClient::CreateModel(
    const v1::CreateModelRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::CreateModel, "CreateModel", request,
              options_.deadline);
}

absl::StatusOr<v1::ListModelsResponse> ApiClient::ListModels(const v1::ListModelsRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::ListModels, "ListModels", request, options_.deadline);
}

absl::StatusOr<v1::GetModelResponse> ApiClient::GetModel(const std::string& name) {
  v1::GetModelRequest request;
  request.set_name(name);
  return Call(*rpc_, &v1::Api::Stub::GetModel, "GetModel", request, options_.deadline);
}

absl::Status ApiClient::DeleteModel(const std::string& name) {
  v1::DeleteModelRequest request;
  request.set_name(name);
  return Call(*rpc_, &v1::Api::Stub::DeleteModel, "DeleteModel", request,
              options_.deadline)
      .status();
}

absl::StatusOr<v1::RegisterModelVersionResponse> ApiClient::RegisterModelVersion(
    const v1::RegisterModelVersionRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::RegisterModelVersion, "RegisterModelVersion", request,
              options_.deadline);
}

absl::StatusOr<v1::ListModelVersionsResponse> ApiClient::ListModelVersions(
    const std::string& model_name) {
  v1::ListModelVersionsRequest request;
  request.set_model_name(model_name);
  return Call(*rpc_, &v1::Api::Stub::ListModelVersions, "ListModelVersions", request,
              options_.deadline);
}

absl::StatusOr<v1::GetModelVersionResponse> ApiClient::GetModelVersion(
    const std::string& model_name, int32_t version) {
  v1::GetModelVersionRequest request;
  request.set_model_name(model_name);
  request.set_version(version);
  return Call(*rpc_, &v1::Api::Stub::GetModelVersion, "GetModelVersion", request,
              options_.deadline);
}

absl::Status ApiClient::DeleteModelVersion(const std::string& model_name, int32_t version) {
  v1::DeleteModelVersionRequest request;
  request.set_model_name(model_name);
  request.set_version(version);
  return Call(*rpc_, &v1::Api::Stub::DeleteModelVersion, "DeleteModelVersion", request,
              options_.deadline)
      .status();
}

absl::StatusOr<v1::LoginResponse> ApiClient::Login(const std::string& username,
                                                   const std::string& password) {
  v1::LoginRequest request;
  request.set_username(username);
  request.set_password(password);
  return Call(*rpc_, &v1::Api::Stub::Login, "Login", request, options_.deadline);
}

absl::Status ApiClient::Logout() {
  return Call(*rpc_, &v1::Api::Stub::Logout, "Logout", v1::LogoutRequest(),
              options_.deadline)
      .status();
}

absl::StatusOr<v1::WhoAmIResponse> ApiClient::WhoAmI() {
  return Call(*rpc_, &v1::Api::Stub::WhoAmI, "WhoAmI", v1::WhoAmIRequest(),
              options_.deadline);
}

absl::StatusOr<v1::CreateUserResponse> ApiClient::CreateUser(
    const v1::CreateUserRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::CreateUser, "CreateUser", request, options_.deadline);
}

absl::StatusOr<v1::ListUsersResponse> ApiClient::ListUsers() {
  return Call(*rpc_, &v1::Api::Stub::ListUsers, "ListUsers", v1::ListUsersRequest(),
              options_.deadline);
}

absl::Status ApiClient::ChangePassword(const v1::ChangePasswordRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::ChangePassword, "ChangePassword", request,
              options_.deadline)
      .status();
}

absl::Status ApiClient::LinkWithAgentUser(const v1::LinkWithAgentUserRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::LinkWithAgentUser, "LinkWithAgentUser", request,
              options_.deadline)
      .status();
}

absl::StatusOr<v1::SetUserActiveResponse> ApiClient::SetUserActive(
    const v1::SetUserActiveRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::SetUserActive, "SetUserActive", request, options_.deadline);
}

absl::StatusOr<v1::RenameUserResponse> ApiClient::RenameUser(const v1::RenameUserRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::RenameUser, "RenameUser", request, options_.deadline);
}

absl::StatusOr<v1::PatchModelVersionResponse> ApiClient::PatchModelVersion(
    const v1::PatchModelVersionRequest& request) {
  return Call(*rpc_, &v1::Api::Stub::PatchModelVersion, "PatchModelVersion", request,
              options_.deadline);
}

}  // namespace det::cli
