// det checkpoint list|ls EXPERIMENT_ID, describe UUID, delete UUID... --yes.
#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"

namespace det::cli {
namespace {

absl::Status Describe(CliContext& ctx, const std::string& uuid) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetCheckpointResponse response, api->GetCheckpoint(uuid));
  if (ctx.json) return WriteJson(response, ctx.out);
  const v1::Checkpoint& c = response.checkpoint();
  KeyValues fields = {
      {"UUID", c.uuid()},
      {"Experiment", absl::StrCat(c.experiment_id())},
      {"Trial", absl::StrCat(c.trial_id())},
      {"Batches", absl::StrCat(c.total_batches())},
      {"State", StateName(c.state())},
      {"Reported", FormatTimeMs(c.report_time_ms())},
      {"Storage Path", c.storage_path()},
  };
  for (const auto& [name, value] : c.metrics()) {
    fields.emplace_back(absl::StrCat("Metric ", name), FormatMetric(value));
  }
  int64_t bytes = 0;
  for (const auto& [path, size] : c.resources()) bytes += size;
  fields.emplace_back("Files", absl::StrCat(c.resources_size(), " (", bytes, " bytes)"));
  if (!c.metadata_json().empty()) fields.emplace_back("Metadata", c.metadata_json());
  RenderKeyValues(fields, ctx.out);
  return absl::OkStatus();
}

struct DeleteOptions {
  std::vector<std::string> uuids;
  bool yes = false;
};

absl::Status Delete(CliContext& ctx, const DeleteOptions& options) {
  if (!options.yes) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint delete removes the files of ", options.uuids.size(),
        " checkpoint(s) for good: confirm with --yes"));
  }
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::DeleteCheckpointsRequest request;
  for (const std::string& uuid : options.uuids) request.add_uuids(uuid);
  ASSIGN_OR_RETURN(v1::DeleteCheckpointsResponse response, api->DeleteCheckpoints(request));
  if (ctx.json) return WriteJson(response, ctx.out);
  ctx.out << "Deleting " << response.queued_size()
          << " checkpoint(s) (a garbage collection task on an agent; det task list shows it)\n";
  return absl::OkStatus();
}

}  // namespace

void RegisterCheckpointCommands(CLI::App& app, CliContext& ctx) {
  CLI::App* group = app.add_subcommand("checkpoint", "inspect checkpoints");
  group->require_subcommand(1);
  auto list = std::make_shared<CheckpointsOptions>();
  CLI::App* ls = group->add_subcommand("list", "list an experiment's checkpoints")->alias("ls");
  ls->add_option("EXPERIMENT_ID", list->id, "experiment ID")->required();
  ls->add_option("--best", list->best, "only the N best by the searcher's metric, best first")
      ->check(CLI::PositiveNumber);
  ls->add_flag("--json", ctx.json, "print machine-readable JSON");
  ls->callback([&ctx, list] {
    ctx.action = [&ctx, list] { return ListExperimentCheckpoints(ctx, *list); };
  });
  auto uuid = std::make_shared<std::string>();
  CLI::App* describe = group->add_subcommand("describe", "describe one checkpoint");
  describe->add_option("UUID", *uuid, "checkpoint UUID")->required();
  describe->add_flag("--json", ctx.json, "print machine-readable JSON");
  describe->callback([&ctx, uuid] {
    ctx.action = [&ctx, uuid] { return Describe(ctx, *uuid); };
  });
  auto del = std::make_shared<DeleteOptions>();
  CLI::App* delete_cmd =
      group->add_subcommand("delete", "delete checkpoints of ended trials (their files too)");
  delete_cmd->add_option("UUIDS", del->uuids, "checkpoint UUIDs")->required();
  delete_cmd->add_flag("--yes,-y", del->yes, "do not ask: delete");
  delete_cmd->add_flag("--json", ctx.json, "print machine-readable JSON");
  delete_cmd->callback([&ctx, del] { ctx.action = [&ctx, del] { return Delete(ctx, *del); }; });
}

}  // namespace det::cli
