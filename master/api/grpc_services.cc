#include "master/api/grpc_services.h"

#include <functional>
#include <memory>
#include <string>

namespace det::master {
namespace {

// Finishes a unary callback RPC through `call` on `handler`.
template <typename H, typename Req, typename Resp>
grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, H& handler,
                                void (H::*call)(const Req&, Resp*, Done), const Req* req,
                                Resp* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  (handler.*call)(*req, resp, [reactor](absl::Status st) { reactor->Finish(ToGrpcStatus(st)); });
  return reactor;
}

#define DET_SERVE(Handler, Name)                                                          \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* ctx, const v1::Name##Request* req, \
                                 v1::Name##Response* resp) override {                     \
    return Serve(ctx, h_, &Handler::Name, req, resp);                                      \
  }

// The session token of a call: metadata "authorization: Bearer TOKEN".
std::string BearerToken(const grpc::CallbackServerContext* ctx) {
  auto it = ctx->client_metadata().find("authorization");
  if (it == ctx->client_metadata().end()) return "";
  std::string value(it->second.data(), it->second.size());
  size_t start = value.find_first_not_of(' ');
  if (start != std::string::npos && value.compare(start, 7, "Bearer ") == 0) start += 7;
  if (start == std::string::npos) return "";
  size_t end = value.find_last_not_of(' ');
  return start > end ? "" : value.substr(start, end - start + 1);
}

// With `users`: authenticates the call, then runs `call` as its caller; the call's
// status finishes it. Without: runs `call` as nobody.
grpc::ServerUnaryReactor* AsCaller(grpc::CallbackServerContext* ctx, UserHandler* users,
                                   std::function<void(const Caller&, Done)> call) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  Done finish = [reactor](absl::Status st) { reactor->Finish(ToGrpcStatus(st)); };
  auto caller = std::make_shared<Caller>();
  if (users == nullptr) {
    call(*caller, [caller, finish](absl::Status st) { finish(st); });
    return reactor;
  }
  users->Authenticate(BearerToken(ctx), caller.get(),
                      [caller, finish, call = std::move(call)](absl::Status st) {
                        if (!st.ok()) return finish(st);
                        // `caller` lives until the call is done.
                        call(*caller, [caller, finish](absl::Status s) { finish(s); });
                      });
  return reactor;
}

#define DET_SERVE_USER(Name)                                                               \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* ctx, const v1::Name##Request* req, \
                                 v1::Name##Response* resp) override {                     \
    if (users_ == nullptr) return Unimplemented(ctx);                                     \
    return AsCaller(ctx, users_, [this, req, resp](const Caller& c, Done d) {              \
      users_->Name(c, *req, resp, std::move(d));                                           \
    });                                                                                    \
  }

// The user API. With a UserHandler, every call but Login needs a session token.
class ApiService final : public v1::Api::CallbackService {
 public:
  ApiService(ApiHandler& h, UserHandler* users) : h_(h), users_(users) {}

  grpc::ServerUnaryReactor* Login(grpc::CallbackServerContext* ctx, const v1::LoginRequest* req,
                                  v1::LoginResponse* resp) override {
    if (users_ == nullptr) return Unimplemented(ctx);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    users_->Login(*req, resp, [reactor](absl::Status st) { reactor->Finish(ToGrpcStatus(st)); });
    return reactor;
  }
  DET_SERVE_USER(Logout)
  DET_SERVE_USER(WhoAmI)
  DET_SERVE_USER(CreateUser)
  DET_SERVE_USER(ListUsers)
  DET_SERVE_USER(ChangePassword)

  DET_SERVE(ApiHandler, GetMasterInfo)
  DET_SERVE(ApiHandler, GetMasterStats)
  DET_SERVE(ApiHandler, CreateExperiment)
  DET_SERVE(ApiHandler, ListExperiments)
  DET_SERVE(ApiHandler, GetExperiment)
  DET_SERVE(ApiHandler, KillExperiment)
  DET_SERVE(ApiHandler, PauseExperiment)
  DET_SERVE(ApiHandler, ActivateExperiment)
  DET_SERVE(ApiHandler, SetExperimentSlots)
  DET_SERVE(ApiHandler, GetTrial)
  DET_SERVE(ApiHandler, GetTrialMetrics)
  DET_SERVE(ApiHandler, GetTrialLogs)
  DET_SERVE(ApiHandler, ListCheckpoints)
  DET_SERVE(ApiHandler, ListAgents)
  DET_SERVE(ApiHandler, EnableAgent)
  DET_SERVE(ApiHandler, DisableAgent)
  DET_SERVE(ApiHandler, ListJobs)
  DET_SERVE(ApiHandler, UpdateJobPriority)
  DET_SERVE(ApiHandler, ListTasks)
  DET_SERVE(ApiHandler, ListResourcePools)
  DET_SERVE(ApiHandler, SetTemplate)
  DET_SERVE(ApiHandler, ListTemplates)
  DET_SERVE(ApiHandler, GetTemplate)
  DET_SERVE(ApiHandler, RemoveTemplate)

 private:
  // Shadows the free Serve for DET_SERVE: ApiHandler calls are authenticated first.
  template <typename Req, typename Resp>
  grpc::ServerUnaryReactor* Serve(grpc::CallbackServerContext* ctx, ApiHandler& handler,
                                  void (ApiHandler::*call)(const Req&, Resp*, Done),
                                  const Req* req, Resp* resp) {
    return AsCaller(ctx, users_, [&handler, call, req, resp](const Caller&, Done d) {
      (handler.*call)(*req, resp, std::move(d));
    });
  }
  grpc::ServerUnaryReactor* Unimplemented(grpc::CallbackServerContext* ctx) {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                                 "users are not enabled on this master"));
    return reactor;
  }

  ApiHandler& h_;
  UserHandler* users_;
};

#undef DET_SERVE_USER

class AgentService final : public v1::AgentService::CallbackService {
 public:
  explicit AgentService(AgentHandler& h) : h_(h) {}
  DET_SERVE(AgentHandler, Register)
  DET_SERVE(AgentHandler, Heartbeat)
  DET_SERVE(AgentHandler, PollCommands)
  DET_SERVE(AgentHandler, ReportLaunched)
  DET_SERVE(AgentHandler, ReportExit)
  DET_SERVE(AgentHandler, ShipLogs)

 private:
  AgentHandler& h_;
};

class WorkerService final : public v1::WorkerService::CallbackService {
 public:
  explicit WorkerService(WorkerHandler& h) : h_(h) {}
  DET_SERVE(WorkerHandler, ReportMetrics)
  DET_SERVE(WorkerHandler, ReportCheckpoint)
  DET_SERVE(WorkerHandler, Rendezvous)

 private:
  WorkerHandler& h_;
};

#undef DET_SERVE

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

std::vector<std::unique_ptr<grpc::Service>> MakeGrpcServices(ApiHandler& api, AgentHandler& agent,
                                                             WorkerHandler& worker,
                                                             UserHandler* users) {
  std::vector<std::unique_ptr<grpc::Service>> out;
  out.push_back(std::make_unique<ApiService>(api, users));
  out.push_back(std::make_unique<AgentService>(agent));
  out.push_back(std::make_unique<WorkerService>(worker));
  return out;
}

}  // namespace det::master
