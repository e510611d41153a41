// det checkpoint list|ls EXPERIMENT_ID, describe UUID, delete UUID... --yes,
// download UUID [-o DIR].
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cli/checkpoint_download.h"
#include "cli/commands.h"
#include "cli/format.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

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
    fields.emplace_back(absl::StrCat("Metric ", name), FormatMetric(name, value));
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

struct DownloadOptions {
  std::string uuid;
  std::string output;
};

absl::Status Download(CliContext& ctx, const DownloadOptions& options) {
  return DownloadCheckpoint(ctx, options.uuid, options.output, /*quiet=*/false);
}

}  // namespace

absl::Status DownloadCheckpoint(CliContext& ctx, const std::string& uuid,
                                const std::string& output_dir, bool quiet) {
  DownloadOptions options{uuid, output_dir};
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  ASSIGN_OR_RETURN(v1::GetCheckpointResponse response, api->GetCheckpoint(options.uuid));
  const v1::Checkpoint& c = response.checkpoint();
  if (c.state() == v1::STATE_DELETED) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", c.uuid(), " was deleted: its files are gone"));
  }
  const std::string output =
      options.output.empty() ? absl::StrCat("checkpoints/", c.uuid()) : options.output;
  absl::StatusOr<CopiedCheckpoint> copied = CopyCheckpointDirectory(c.storage_path(), output);
  if (!copied.ok()) {
    return absl::Status(copied.status().code(),
                        absl::StrCat("checkpoint ", c.uuid(), ": ", copied.status().message()));
  }
  if (ctx.json) {
    nlohmann::json j = {{"uuid", c.uuid()},
                        {"storage_path", c.storage_path()},
                        {"output", output},
                        {"files", copied->files},
                        {"bytes", copied->bytes}};
    ctx.out << j.dump(2) << '\n';
    return absl::OkStatus();
  }
  if (quiet) {
    ctx.out << output << '\n';
    return absl::OkStatus();
  }
  ctx.out << "Downloaded checkpoint " << c.uuid() << " (" << copied->files << " files, "
          << copied->bytes << " bytes) to " << output << '\n';
  return absl::OkStatus();
}

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
  auto download = std::make_shared<DownloadOptions>();
  CLI::App* download_cmd = group->add_subcommand(
      "download", "copy a checkpoint's files here (its storage must be mounted on this machine)");
  download_cmd->add_option("UUID", download->uuid, "checkpoint UUID")->required();
  download_cmd->add_option("-o,--output", download->output,
                           "directory to copy into (default: checkpoints/UUID)");
  download_cmd->add_flag("--json", ctx.json, "print machine-readable JSON");
  download_cmd->callback(
      [&ctx, download] { ctx.action = [&ctx, download] { return Download(ctx, *download); }; });
  auto del = std::make_shared<DeleteOptions>();
  CLI::App* delete_cmd =
      group->add_subcommand("delete", "delete checkpoints of ended trials (their files too)");
  delete_cmd->add_option("UUIDS", del->uuids, "checkpoint UUIDs")->required();
  delete_cmd->add_flag("--yes,-y", del->yes, "do not ask: delete");
  delete_cmd->add_flag("--json", ctx.json, "print machine-readable JSON");
  delete_cmd->callback([&ctx, del] { ctx.action = [&ctx, del] { return Delete(ctx, *del); }; });
}

}  // namespace det::cli
