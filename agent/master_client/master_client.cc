#include "agent/master_client/master_client.h"

#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
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
    absl::Status st = Call(kCallTimeout, [&](grpc::ClientContext* ctx) {
      return stub_->Register(ctx, req, &resp);
    });
    if (!st.ok()) return st;
    return resp;
  }
  absl::Status Heartbeat(const v1::HeartbeatRequest& req) override {
    v1::HeartbeatResponse resp;
    return Call(kCallTimeout, [&](grpc::ClientContext* ctx) { return stub_->Heartbeat(ctx, req, &resp); });
  }
  absl::StatusOr<v1::PollCommandsResponse> PollCommands(const v1::PollCommandsRequest& req) override {
    v1::PollCommandsResponse resp;
    absl::Status st = Call(kCallTimeout + absl::Milliseconds(req.wait_ms()),
                           [&](grpc::ClientContext* ctx) { return stub_->PollCommands(ctx, req, &resp); });
    if (!st.ok()) return st;
    return resp;
  }
  absl::Status ReportLaunched(const v1::ReportLaunchedRequest& req) override {
    v1::ReportLaunchedResponse resp;
    return Call(kCallTimeout, [&](grpc::ClientContext* ctx) { return stub_->ReportLaunched(ctx, req, &resp); });
  }
  absl::Status ReportExit(const v1::ReportExitRequest& req) override {
    v1::ReportExitResponse resp;
    return Call(kCallTimeout, [&](grpc::ClientContext* ctx) { return stub_->ReportExit(ctx, req, &resp); });
  }
  absl::Status ShipLogs(const v1::ShipLogsRequest& req) override {
    v1::ShipLogsResponse resp;
    return Call(kCallTimeout, [&](grpc::ClientContext* ctx) { return stub_->ShipLogs(ctx, req, &resp); });
  }
  absl::StatusOr<v1::GetModelContextResponse> GetModelContext(
      const v1::GetModelContextRequest& req) override {
    v1::GetModelContextResponse resp;
    absl::Status st = Call(absl::Minutes(2), [&](grpc::ClientContext* ctx) {
      return stub_->GetModelContext(ctx, req, &resp);
    });
    if (!st.ok()) return st;
    return resp;
  }
  void Shutdown() override {
    absl::MutexLock l(&mu_);
    shutdown_ = true;
    for (grpc::ClientContext* ctx : in_flight_) ctx->TryCancel();
  }

 private:
  // Runs one call with a deadline, registered so Shutdown() can cancel it.
  template <typename Fn>
  absl::Status Call(absl::Duration timeout, Fn fn) {
    auto ctx = rpc::Context(timeout);
    {
      absl::MutexLock l(&mu_);
      if (shutdown_) return absl::CancelledError("agent is shutting down");
      in_flight_.insert(ctx.get());
    }
    grpc::Status st = fn(ctx.get());
    {
      absl::MutexLock l(&mu_);
      in_flight_.erase(ctx.get());
    }
    return rpc::FromGrpc(st, address_);
  }

  absl::Mutex mu_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  std::set<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  std::string address_;
  std::unique_ptr<v1::AgentService::Stub> stub_;
};

}  // namespace

std::unique_ptr<MasterClient> NewGrpcMasterClient(const std::string& address) {
  return std::make_unique<GrpcMasterClient>(address);
}

}  // namespace det::agent
