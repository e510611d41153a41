#include "agent/master_client/master_client.h"

#include "common/rpc/rpc.h"
#include "proto/agent.grpc.pb.h"

namespace det::agent {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(20);

class GrpcMasterClient : public MasterClient {
 public:
  explicit GrpcMasterClient(const std::string& address)
      : address_(address), stub_(v1::AgentService::NewStub(rpc::MakeChannel(address))) {}

  absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& req) override {
    v1::RegisterResponse resp;
    auto ctx = rpc::Context(kCallTimeout);
    absl::Status st = rpc::FromGrpc(stub_->Register(ctx.get(), req, &resp), address_);
    if (!st.ok()) return st;
    return resp;
  }
  absl::Status Heartbeat(const v1::HeartbeatRequest& req) override {
    v1::HeartbeatResponse resp;
    auto ctx = rpc::Context(kCallTimeout);
    return rpc::FromGrpc(stub_->Heartbeat(ctx.get(), req, &resp), address_);
  }
  absl::StatusOr<v1::PollCommandsResponse> PollCommands(const v1::PollCommandsRequest& req) override {
    v1::PollCommandsResponse resp;
    auto ctx = rpc::Context(kCallTimeout + absl::Milliseconds(req.wait_ms()));
    absl::Status st = rpc::FromGrpc(stub_->PollCommands(ctx.get(), req, &resp), address_);
    if (!st.ok()) return st;
    return resp;
  }
  absl::Status ReportLaunched(const v1::ReportLaunchedRequest& req) override {
    v1::ReportLaunchedResponse resp;
    auto ctx = rpc::Context(kCallTimeout);
    return rpc::FromGrpc(stub_->ReportLaunched(ctx.get(), req, &resp), address_);
  }
  absl::Status ReportExit(const v1::ReportExitRequest& req) override {
    v1::ReportExitResponse resp;
    auto ctx = rpc::Context(kCallTimeout);
    return rpc::FromGrpc(stub_->ReportExit(ctx.get(), req, &resp), address_);
  }
  absl::Status ShipLogs(const v1::ShipLogsRequest& req) override {
    v1::ShipLogsResponse resp;
    auto ctx = rpc::Context(kCallTimeout);
    return rpc::FromGrpc(stub_->ShipLogs(ctx.get(), req, &resp), address_);
  }

 private:
  std::string address_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
};

}  // namespace

std::unique_ptr<MasterClient> NewGrpcMasterClient(const std::string& address) {
  return std::make_unique<GrpcMasterClient>(address);
}

}  // namespace det::agent
