// The agent's narrow view of the master's AgentService.
#ifndef DET_AGENT_MASTER_CLIENT_MASTER_CLIENT_H_
#define DET_AGENT_MASTER_CLIENT_MASTER_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/agent.pb.h"

namespace det::agent {

// Thread-safe. Every call has a deadline; failures are absl::Status with the gRPC code.
class MasterClient {
 public:
  virtual ~MasterClient() = default;
  virtual absl::StatusOr<v1::RegisterResponse> Register(const v1::RegisterRequest& request) = 0;
  virtual absl::Status Heartbeat(const v1::HeartbeatRequest& request) = 0;
  // Waits up to request.wait_ms for commands.
  virtual absl::StatusOr<v1::PollCommandsResponse> PollCommands(
      const v1::PollCommandsRequest& request) = 0;
  virtual absl::Status ReportLaunched(const v1::ReportLaunchedRequest& request) = 0;
  virtual absl::Status ReportExit(const v1::ReportExitRequest& request) = 0;
  virtual absl::Status ShipLogs(const v1::ShipLogsRequest& request) = 0;
  // Up to 64 MiB; its deadline allows for that (2 min).
  virtual absl::StatusOr<v1::GetModelContextResponse> GetModelContext(
      const v1::GetModelContextRequest& request) = 0;
  // Cancels the calls in flight (a long poll included); later calls fail with Cancelled.
  virtual void Shutdown() = 0;
};

// A client for the master at `address` (host:port).
std::unique_ptr<MasterClient> NewGrpcMasterClient(const std::string& address);

}  // namespace det::agent

#endif  // DET_AGENT_MASTER_CLIENT_MASTER_CLIENT_H_
