// det agent|a list|enable|disable|reset-credential
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

absl::Status List(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListAgentsResponse response, api->ListAgents());
  if (ctx.json) return WriteJson(response, ctx.out);
  bool external = false;
  for (const v1::Agent& a : response.agents()) external |= !a.external_state().empty();
  if (!external) {
    AgentsTable(response.agents()).Render(ctx.out, ctx.width);
    return absl::OkStatus();
  }
  // Nodes of an external resource manager (Slurm): its state, CPUs and GPUs.
  Table table({"ID", "State", "CPUs", "GPUs", "Slots", "Used", "Pool"});
  for (const v1::Agent& a : response.agents()) {
    int used = 0;
    for (const v1::Slot& s : a.slots()) used += s.allocation_id().empty() ? 0 : 1;
    table.AddRow({a.id(), a.external_state().empty() ? "det-agent" : a.external_state(),
                  absl::StrCat(a.external_cpus()), absl::StrCat(a.external_gpus()),
                  absl::StrCat(a.slots_size()), absl::StrCat(used), a.resource_pool()});
  }
  table.Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

absl::Status SetEnabled(CliContext& ctx, const std::string& id, bool enable, bool drain) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  if (enable) {
    ASSIGN_OR_RETURN(v1::EnableAgentResponse r, api->EnableAgent(id));
    ctx.out << "Enabled agent " << r.agent().id() << "\n";
  } else {
    ASSIGN_OR_RETURN(v1::DisableAgentResponse r, api->DisableAgent(id, drain));
    ctx.out << "Disabled agent " << r.agent().id()
            << (drain ? " (draining: running trials finish)\n"
                      : " (its running trials are stopped and rescheduled)\n");
  }
  return absl::OkStatus();
}

absl::Status ResetCredential(CliContext& ctx, const std::string& id) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ResetAgentCredentialResponse r, api->ResetAgentCredential(id));
  ctx.out << "Reset the credential of agent " << r.agent().id()
          << ": its next registration is issued a new one (start the agent now; nothing it "
             "ran before is reattached)\n";
  return absl::OkStatus();
}

}  // namespace

void RegisterAgentCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group = app.add_subcommand("agent", "inspect agents")->alias("a");
  group->require_subcommand(1);
  CLI::App* list = group->add_subcommand("list", "list agents");
  list->add_flag("--json", ctx.json, "print machine-readable JSON");
  list->callback([&ctx] { ctx.action = [&ctx] { return List(ctx); }; });

  auto id = std::make_shared<std::string>();
  auto drain = std::make_shared<bool>(false);
  CLI::App* enable = group->add_subcommand("enable", "let an agent take new work");
  enable->add_option("AGENT_ID", *id, "agent ID")->required();
  enable->callback([&ctx, id] { ctx.action = [&ctx, id] { return SetEnabled(ctx, *id, true, false); }; });
  CLI::App* disable = group->add_subcommand(
      "disable", "stop giving an agent new work; stop its trials unless --drain");
  disable->add_option("AGENT_ID", *id, "agent ID")->required();
  disable->add_flag("--drain", *drain, "let running trials finish");
  disable->callback([&ctx, id, drain] {
    ctx.action = [&ctx, id, drain] { return SetEnabled(ctx, *id, false, *drain); };
  });
  CLI::App* reset = group->add_subcommand(
      "reset-credential",
      "admins: re-enrol a disconnected agent that lost its credential (its next registration "
      "is issued a new one)");
  reset->add_option("AGENT_ID", *id, "agent ID")->required();
  reset->callback([&ctx, id] { ctx.action = [&ctx, id] { return ResetCredential(ctx, *id); }; });
}

}  // namespace det::cli
