#include "common/rpc/rpc.h"

#include "absl/strings/str_cat.h"

namespace det::rpc {

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  // Reconnect quickly after a master restart.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

absl::Status FromGrpc(const grpc::Status& status, const std::string& address) {
  if (status.ok()) return absl::OkStatus();
  auto code = static_cast<absl::StatusCode>(status.error_code());
  if (code == absl::StatusCode::kUnavailable) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach the master at ", address, ": ", status.error_message()));
  }
  return absl::Status(code, status.error_message());
}

std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return ctx;
}

bool IsTransient(const absl::Status& status) {
  return absl::IsUnavailable(status) || absl::IsDeadlineExceeded(status) ||
         absl::IsAborted(status) || absl::IsCancelled(status);
}

}  // namespace det::rpc
