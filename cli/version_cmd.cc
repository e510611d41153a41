// det version and det --version: the client's version and the master's.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"
#include "common/version/version.h"
#include "nlohmann/json.hpp"

namespace det::cli {

absl::Status PrintVersion(CliContext& ctx) {
  // The master answers GetMasterInfo without a session (the version and the cluster's id
  // and name); the active session is sent when there is one, and -u never logs in here.
  ASSIGN_OR_RETURN(std::string address, ParseMasterAddress(ctx.master));
  ApiClientOptions options;
  options.deadline = absl::Seconds(10);
  absl::StatusOr<std::string> token = ResolveToken(address);
  if (token.ok()) options.token = *token;
  ASSIGN_OR_RETURN(std::unique_ptr<ApiClient> api, ApiClient::Create(ctx.master, options));
  absl::StatusOr<v1::GetMasterInfoResponse> info = api->GetMasterInfo();
  if (ctx.json) {
    nlohmann::json j = {{"client", {{"version", kDetVersion}}}, {"master_address", address}};
    j["master"] = {{"version", info.ok() ? info->version() : ""},
                   {"cluster_id", info.ok() ? info->cluster_id() : ""},
                   {"cluster_name", info.ok() ? info->cluster_name() : ""}};
    if (!info.ok()) j["master_error"] = std::string(info.status().message());
    ctx.out << j.dump(2) << '\n';
  } else {
    ctx.out << "client:\n  version: " << kDetVersion << "\nmaster:\n";
    if (info.ok()) {
      ctx.out << "  version: " << info->version() << "\n  cluster_id: " << info->cluster_id()
              << "\n  cluster_name: " << info->cluster_name() << '\n';
    } else {
      ctx.out << "  version: \"\"\n";
    }
    ctx.out << "master_address: " << address << '\n';
  }
  if (!info.ok()) {
    ctx.err << "warning: master not found at " << address << " (" << info.status().message()
            << "); set DET_MASTER or pass -m\n";
  } else if (info->version() != kDetVersion) {
    ctx.err << "warning: the CLI's version " << kDetVersion << " differs from the master's "
            << info->version() << "; use the same version on both\n";
  }
  return absl::OkStatus();
}

void RegisterVersionCommand(CLI::App& app, CliContext& ctx) {
  CLI::App* version =
      app.add_subcommand("version", "show the CLI's and the master's versions");
  version->add_flag("--json", ctx.json, "print machine-readable JSON");
  version->callback([&ctx] { ctx.action = [&ctx] { return PrintVersion(ctx); }; });
}

}  // namespace det::cli
