// det slot list: every slot of every agent (from ListAgents); det slot enable|disable
// AGENT_ID SLOT_ID.
#include <CLI/CLI.hpp>

#include <memory>
#include <set>
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
  std::set<std::string> draining;
  for (const v1::Agent& a : response.agents()) {
    if (a.draining()) draining.insert(a.id());
  }
  Table table({"Agent", "Slot", "Type", "Device", "UUID", "Memory", "Enabled", "Draining",
               "Allocation"});
  for (const v1::Slot& s : slots) {
    table.AddRow({s.agent_id(), s.id(), s.type(), s.device_name(), s.uuid(),
                  s.memory_bytes() > 0 ? FormatBytes(static_cast<uint64_t>(s.memory_bytes())) : "",
                  s.enabled() ? "yes" : "no", draining.count(s.agent_id()) ? "yes" : "no",
                  s.allocation_id()});
  }
  table.Render(ctx.out, ctx.width);
  return absl::OkStatus();
}

absl::Status SetEnabled(CliContext& ctx, const std::string& agent_id, const std::string& slot_id,
                        bool enable) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  if (enable) {
    RETURN_IF_ERROR(api->EnableSlot(agent_id, slot_id).status());
    ctx.out << "Enabled slot " << slot_id << " of agent " << agent_id << '\n';
  } else {
    RETURN_IF_ERROR(api->DisableSlot(agent_id, slot_id).status());
    ctx.out << "Disabled slot " << slot_id << " of agent " << agent_id
            << " (it takes no new work; a trial using it keeps it until it ends)\n";
  }
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

  struct SlotId {
    std::string agent_id;
    std::string slot_id;
  };
  for (const bool enable : {true, false}) {
    auto id = std::make_shared<SlotId>();
    CLI::App* cmd = group->add_subcommand(
        enable ? "enable" : "disable",
        enable ? "let a slot take work again (admins only)"
               : "stop giving a slot new work (admins only; a trial using it keeps it)");
    cmd->add_option("AGENT_ID", id->agent_id, "agent ID")->required();
    cmd->add_option("SLOT_ID", id->slot_id, "slot ID (det slot list)")->required();
    cmd->callback([&ctx, id, enable] {
      ctx.action = [&ctx, id, enable] { return SetEnabled(ctx, id->agent_id, id->slot_id, enable); };
    });
  }
}

}  // namespace det::cli
