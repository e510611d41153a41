// det agent|a list
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

absl::Status List(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListAgentsResponse response, api->ListAgents());
  if (ctx.json) return WriteJson(response, ctx.out);
  AgentsTable(response.agents()).Render(ctx.out);
  return absl::OkStatus();
}

}  // namespace

void RegisterAgentCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group = app.add_subcommand("agent", "inspect agents")->alias("a");
  group->require_subcommand(1);
  CLI::App* list = group->add_subcommand("list", "list agents");
  list->add_flag("--json", ctx.json, "print machine-readable JSON");
  list->callback([&ctx] { ctx.action = [&ctx] { return List(ctx); }; });
}

}  // namespace det::cli
