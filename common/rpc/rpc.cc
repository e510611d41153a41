#include "common/rpc/rpc.h"

#include <cstdlib>
#include <optional>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace det::rpc {
namespace {

// The contents of DET_MASTER_CERT_FILE, or nullopt when unset or unreadable.
std::optional<std::string> ReadMasterCert(bool* set) {
  const char* path = std::getenv(kMasterCertFileEnv);
  *set = path && *path;
  if (!*set) return std::nullopt;
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::Status CheckMasterCertFile() {
  bool set = false;
  if (!ReadMasterCert(&set) && set) {
    return absl::FailedPreconditionError(absl::StrCat(
        kMasterCertFileEnv, ": cannot read '", std::getenv(kMasterCertFileEnv), "'"));
  }
  return absl::OkStatus();
}

std::shared_ptr<grpc::ChannelCredentials> MasterChannelCredentials() {
  bool set = false;
  std::optional<std::string> pem = ReadMasterCert(&set);
  if (!set) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  // Unreadable: an empty PEM would mean "the system's CAs"; a placeholder trusts nothing.
  options.pem_root_certs = pem ? *pem : std::string("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n");
  return grpc::SslCredentials(options);
}

std::shared_ptr<grpc::Channel> MakeChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(kMaxMasterReceiveBytes);
  // Reconnect quickly after a master restart.
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 200);
  return grpc::CreateCustomChannel(address, MasterChannelCredentials(), args);
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
