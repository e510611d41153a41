#include "master/api/grpc_services.h"

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

class ApiService final : public v1::Api::CallbackService {
 public:
  explicit ApiService(ApiHandler& h) : h_(h) {}
  DET_SERVE(ApiHandler, GetMasterInfo)
  DET_SERVE(ApiHandler, GetMasterStats)
  DET_SERVE(ApiHandler, CreateExperiment)
  DET_SERVE(ApiHandler, ListExperiments)
  DET_SERVE(ApiHandler, GetExperiment)
  DET_SERVE(ApiHandler, KillExperiment)
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
  ApiHandler& h_;
};

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
                                                             WorkerHandler& worker) {
  std::vector<std::unique_ptr<grpc::Service>> out;
  out.push_back(std::make_unique<ApiService>(api));
  out.push_back(std::make_unique<AgentService>(agent));
  out.push_back(std::make_unique<WorkerService>(worker));
  return out;
}

}  // namespace det::master
