// Client-side gRPC helpers shared by the agent, the worker harness and the CLI.
#ifndef DET_COMMON_RPC_RPC_H_
#define DET_COMMON_RPC_RPC_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace det::rpc {

// A channel to `address` (host:port) with det's message size limits.
std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address);

// grpc::Status -> absl::Status with the same code and message, except UNAVAILABLE, which
// becomes "cannot reach the master at ADDRESS: ...".
absl::Status FromGrpc(const grpc::Status& status, const std::string& address);

// A client context whose deadline is `timeout` from now.
std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout);

// Transient failures worth retrying (unreachable, deadline, aborted by a restart).
bool IsTransient(const absl::Status& status);

}  // namespace det::rpc

#endif  // DET_COMMON_RPC_RPC_H_
