#include "master/api/grpc_services.h"

#include <functional>
#include <memory>
#include <string>

#include "common/rpc/context_upload.h"

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

// CreateExperimentStream: authenticates the call first, then reads the pieces as they
// arrive (on gRPC's threads, never the master's loop), refusing at the first one past a
// limit (ContextAssembler), and hands the whole request to ApiHandler::CreateExperiment.
class CreateExperimentReader final : public grpc::ServerReadReactor<v1::CreateExperimentChunk> {
 public:
  CreateExperimentReader(grpc::CallbackServerContext* ctx, ApiHandler& api, UserHandler* users,
                         v1::CreateExperimentResponse* response)
      : ctx_(ctx), api_(api), response_(response) {
    if (users == nullptr) {
      StartRead(&chunk_);
      return;
    }
    users->Authenticate(BearerToken(ctx), &caller_, [this](absl::Status st) {
      if (!st.ok()) return Finish(ToGrpcStatus(st));
      StartRead(&chunk_);
    });
  }

  void OnReadDone(bool ok) override {
    if (ok) {
      absl::Status st = assembler_.Add(std::move(chunk_));
      if (!st.ok()) return Finish(ToGrpcStatus(st));
      chunk_.Clear();
      return StartRead(&chunk_);
    }
    if (ctx_->IsCancelled()) {
      return Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the upload was cancelled"));
    }
    absl::StatusOr<v1::CreateExperimentRequest> request = assembler_.Finish();
    if (!request.ok()) return Finish(ToGrpcStatus(request.status()));
    request_ = *std::move(request);
    api_.CreateExperiment(caller_, request_, response_,
                          [this](absl::Status st) { Finish(ToGrpcStatus(st)); });
  }

  void OnDone() override { delete this; }

 private:
  grpc::CallbackServerContext* const ctx_;
  ApiHandler& api_;
  v1::CreateExperimentResponse* const response_;
  Caller caller_;
  v1::CreateExperimentChunk chunk_;
  rpc::ContextAssembler assembler_;
  v1::CreateExperimentRequest request_;
};

// A user API call served by `handler` as its caller (see ApiService::ServeAs).
#define DET_SERVE_AS(Handler, handler, Name)                                               \
  grpc::ServerUnaryReactor* Name(grpc::CallbackServerContext* ctx, const v1::Name##Request* req, \
                                 v1::Name##Response* resp) override {                     \
    return ServeAs(ctx, handler, &Handler::Name, req, resp);                               \
  }
#define DET_SERVE_API(Name) DET_SERVE_AS(ApiHandler, &h_, Name)
#define DET_SERVE_USER(Name) DET_SERVE_AS(UserHandler, users_, Name)

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
  DET_SERVE_USER(LinkWithAgentUser)
  DET_SERVE_USER(SetUserActive)
  DET_SERVE_USER(RenameUser)

  // Answered without a session too, as Determined's /info: then only the version and the
  // cluster's id and name (det version before det user login).
  grpc::ServerUnaryReactor* GetMasterInfo(grpc::CallbackServerContext* ctx,
                                          const v1::GetMasterInfoRequest* req,
                                          v1::GetMasterInfoResponse* resp) override {
    if (users_ == nullptr) return ServeAs(ctx, &h_, &ApiHandler::GetMasterInfo, req, resp);
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    auto caller = std::make_shared<Caller>();
    users_->Authenticate(
        BearerToken(ctx), caller.get(), [this, caller, req, resp, reactor](absl::Status st) {
          const bool anonymous = !st.ok();
          h_.GetMasterInfo(*caller, *req, resp,
                           [caller, resp, reactor, anonymous](absl::Status s) {
                             if (anonymous && s.ok()) {
                               v1::GetMasterInfoResponse open;
                               open.set_version(resp->version());
                               open.set_cluster_id(resp->cluster_id());
                               open.set_cluster_name(resp->cluster_name());
                               *resp = std::move(open);
                             }
                             reactor->Finish(ToGrpcStatus(s));
                           });
        });
    return reactor;
  }
  DET_SERVE_API(GetMasterStats)
  DET_SERVE_API(GetMasterConfig)
  DET_SERVE_API(GetMasterLogs)
  DET_SERVE_API(CreateExperiment)
  grpc::ServerReadReactor<v1::CreateExperimentChunk>* CreateExperimentStream(
      grpc::CallbackServerContext* ctx, v1::CreateExperimentResponse* resp) override {
    return new CreateExperimentReader(ctx, h_, users_, resp);
  }
  DET_SERVE_API(ListExperiments)
  DET_SERVE_API(GetExperiment)
  DET_SERVE_API(KillExperiment)
  DET_SERVE_API(PauseExperiment)
  DET_SERVE_API(ActivateExperiment)
  DET_SERVE_API(ContinueExperiment)
  DET_SERVE_API(SetExperimentSlots)
  DET_SERVE_API(GetTrial)
  DET_SERVE_API(GetTrialMetrics)
  DET_SERVE_API(GetTrialLogs)
  DET_SERVE_API(ListCheckpoints)
  DET_SERVE_API(ListAgents)
  DET_SERVE_API(ArchiveExperiment)
  DET_SERVE_API(UnarchiveExperiment)
  DET_SERVE_API(PatchExperiment)
  DET_SERVE_API(DeleteExperiment)
  DET_SERVE_API(GetModelDef)
  DET_SERVE_API(KillTrial)
  DET_SERVE_API(GetCheckpoint)
  DET_SERVE_API(DeleteCheckpoints)
  DET_SERVE_API(EnableAgent)
  DET_SERVE_API(DisableAgent)
  DET_SERVE_API(EnableSlot)
  DET_SERVE_API(DisableSlot)
  DET_SERVE_API(ResetAgentCredential)
  DET_SERVE_API(ListJobs)
  DET_SERVE_API(UpdateJobPriority)
  DET_SERVE_API(ListTasks)
  DET_SERVE_API(ListResourcePools)
  DET_SERVE_API(SetTemplate)
  DET_SERVE_API(ListTemplates)
  DET_SERVE_API(GetTemplate)
  DET_SERVE_API(RemoveTemplate)
  DET_SERVE_API(CreateModel)
  DET_SERVE_API(ListModels)
  DET_SERVE_API(GetModel)
  DET_SERVE_API(PatchModel)
  DET_SERVE_API(DeleteModel)
  DET_SERVE_API(RegisterModelVersion)
  DET_SERVE_API(ListModelVersions)
  DET_SERVE_API(GetModelVersion)
  DET_SERVE_API(DeleteModelVersion)
  DET_SERVE_API(PatchModelVersion)

 private:
  // Authenticates the call (see AsCaller), then runs `call` on `handler` as its caller.
  // A null `handler` (no UserHandler) answers UNIMPLEMENTED.
  template <typename H, typename Req, typename Resp>
  grpc::ServerUnaryReactor* ServeAs(grpc::CallbackServerContext* ctx, H* handler,
                                    void (H::*call)(const Caller&, const Req&, Resp*, Done),
                                    const Req* req, Resp* resp) {
    if (handler == nullptr) return Unimplemented(ctx);
    return AsCaller(ctx, users_, [handler, call, req, resp](const Caller& c, Done d) {
      (handler->*call)(c, *req, resp, std::move(d));
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
#undef DET_SERVE_API
#undef DET_SERVE_AS

class AgentService final : public v1::AgentService::CallbackService {
 public:
  explicit AgentService(AgentHandler& h) : h_(h) {}
  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* ctx,
                                     const v1::RegisterRequest* req,
                                     v1::RegisterResponse* resp) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    h_.RegisterFrom(ctx->peer(), *req, resp,
                    [reactor](absl::Status st) { reactor->Finish(ToGrpcStatus(st)); });
    return reactor;
  }
  DET_SERVE(AgentHandler, Heartbeat)
  DET_SERVE(AgentHandler, PollCommands)
  DET_SERVE(AgentHandler, ReportLaunched)
  DET_SERVE(AgentHandler, ReportExit)
  DET_SERVE(AgentHandler, ShipLogs)
  DET_SERVE(AgentHandler, GetModelContext)

 private:
  AgentHandler& h_;
};

class WorkerService final : public v1::WorkerService::CallbackService {
 public:
  explicit WorkerService(WorkerHandler& h) : h_(h) {}
  DET_SERVE(WorkerHandler, ReportMetrics)
  DET_SERVE(WorkerHandler, ReportCheckpoint)
  DET_SERVE(WorkerHandler, Rendezvous)
  DET_SERVE(WorkerHandler, ShouldPreempt)
  DET_SERVE(WorkerHandler, ReportEarlyExit)
  DET_SERVE(WorkerHandler, GetExperimentBestValidation)

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
