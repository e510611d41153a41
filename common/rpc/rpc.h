// Client-side gRPC helpers shared by the agent, the worker harness and the CLI.
#ifndef DET_COMMON_RPC_RPC_H_
#define DET_COMMON_RPC_RPC_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"

namespace det::rpc {

// The environment variable naming the PEM file of the CA that signed the master's gRPC
// certificate. Set: clients speak TLS and verify the master against it. Unset: plaintext.
inline constexpr char kMasterCertFileEnv[] = "DET_MASTER_CERT_FILE";

// The largest message the master receives (gRPC refuses a larger one with
// RESOURCE_EXHAUSTED): 4 MiB. Model contexts go in pieces (CreateExperimentStream).
inline constexpr int kMaxMasterReceiveBytes = 4 << 20;

// Checks that DET_MASTER_CERT_FILE, when set, names a readable file; the error names it.
absl::Status CheckMasterCertFile();

// Credentials for channels to the master, chosen by DET_MASTER_CERT_FILE. An unreadable
// file gives TLS with no trusted CA, so connections fail rather than fall back to
// plaintext.
std::shared_ptr<grpc::ChannelCredentials> MasterChannelCredentials();

// A channel to `address` (host:port) with MasterChannelCredentials(), sending messages of
// at most kMaxMasterReceiveBytes (a larger one fails here, unsent) and receiving up to
// 256 MiB (a model context of 64 MiB in one GetModelContextResponse).
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
