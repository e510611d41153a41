// det master info|config
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

absl::Status Info(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetMasterInfoResponse info, api->GetMasterInfo());
  if (ctx.json) return WriteJson(info, ctx.out);
  RenderKeyValues(MasterInfoFields(info, api->address()), ctx.out);
  return absl::OkStatus();
}

absl::Status Config(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetMasterConfigResponse config, api->GetMasterConfig());
  if (ctx.json) return WriteJson(config, ctx.out);
  ctx.out << config.config_yaml();
  return absl::OkStatus();
}

}  // namespace

void RegisterMasterCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group = app.add_subcommand("master", "inspect the master");
  group->require_subcommand(1);
  CLI::App* info = group->add_subcommand("info", "show the master's version and setup");
  info->add_flag("--json", ctx.json, "print machine-readable JSON");
  info->callback([&ctx] { ctx.action = [&ctx] { return Info(ctx); }; });
  CLI::App* config = group->add_subcommand(
      "config", "show the running master's config (secrets redacted; admins only)");
  config->add_flag("--json", ctx.json, "print machine-readable JSON");
  config->callback([&ctx] { ctx.action = [&ctx] { return Config(ctx); }; });
}

}  // namespace det::cli
