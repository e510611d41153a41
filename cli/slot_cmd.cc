// det slot list: every slot of every agent (from ListAgents).
#include <CLI/CLI.hpp>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

absl::Status List(CliContext& ctx) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::ListAgentsResponse response, api->ListAgents());
  std::vector<v1::Slot> slots;
  for (const v1::Agent& a : response.agents()) {
    for (v1::Slot s : a.slots()) {
      s.set_agent_id(a.id());
      // A slot of a disabled agent takes no work, whatever its own flag says.
      s.set_enabled(s.enabled() && a.enabled());
      slots.push_back(std::move(s));
    }
  }
  if (ctx.json) {
    ctx.out << "{\n  \"slots\": [";
    for (size_t i = 0; i < slots.size(); ++i) {
      ASSIGN_OR_RETURN(std::string json, ToJson(slots[i], /*pretty=*/false));
      ctx.out << (i ? ",\n    " : "\n    ") << json;
    }
    ctx.out << (slots.empty() ? "]\n}\n" : "\n  ]\n}\n");
    return absl::OkStatus();
  }
  Table table({"Agent", "Slot", "Type", "Device", "UUID", "Memory", "Enabled", "Allocation"});
  for (const v1::Slot& s : slots) {
    table.AddRow({s.agent_id(), s.id(), s.type(), s.device_name(), s.uuid(),
                  s.memory_bytes() > 0 ? FormatBytes(static_cast<uint64_t>(s.memory_bytes())) : "",
                  s.enabled() ? "yes" : "no", s.allocation_id()});
  }
  table.Render(ctx.out);
  return absl::OkStatus();
}

}  // namespace

void RegisterSlotCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group =
      app.add_subcommand("slot", "inspect slots (GPUs or CPU slots of agents)")->alias("s");
  group->require_subcommand(1);
  CLI::App* list = group->add_subcommand("list", "list every agent's slots");
  list->add_flag("--json", ctx.json, "print machine-readable JSON");
  list->callback([&ctx] { ctx.action = [&ctx] { return List(ctx); }; });
}

}  // namespace det::cli
