// det master info|config|logs
#include <CLI/CLI.hpp>
#include <algorithm>
#include <memory>

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

struct LogsOptions {
  int tail = 0;
  bool follow = false;
};

constexpr absl::Duration kFollowPoll = absl::Seconds(1);

absl::Status Logs(CliContext& ctx, const LogsOptions& options) {
  ASSIGN_OR_RETURN(ApiClient * api, ctx.Api());
  v1::GetMasterLogsRequest request;
  request.set_tail(options.tail);
  for (bool first = true;; first = false) {
    ASSIGN_OR_RETURN(v1::GetMasterLogsResponse response, api->GetMasterLogs(request));
    if (first && response.dropped() > 0 && !ctx.json) {
      ctx.err << "(" << response.dropped() << " older lines not kept: the master keeps its last "
              << response.capacity() << ")\n";
    }
    for (const v1::MasterLogLine& line : response.lines()) {
      if (ctx.json) {
        RETURN_IF_ERROR(WriteJson(line, ctx.out, /*pretty=*/false));
      } else {
        ctx.out << FormatLogTimeMs(line.time_ms()) << ' ' << line.level() << " ["
                << line.component() << "] " << line.message() << '\n';
      }
      request.set_after_id(std::max(request.after_id(), line.id()));
    }
    ctx.out.flush();
    if (!options.follow) return absl::OkStatus();
    request.set_tail(0);
    ctx.sleep(kFollowPoll);
  }
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
  auto logs_options = std::make_shared<LogsOptions>();
  CLI::App* logs =
      group->add_subcommand("logs", "show the master's own recent log lines (admins only)");
  logs->add_option("--tail", logs_options->tail, "only the last N lines")
      ->check(CLI::PositiveNumber);
  logs->add_flag("-f,--follow", logs_options->follow, "then wait for new lines");
  logs->add_flag("--json", ctx.json, "print each line as a JSON object");
  logs->callback([&ctx, logs_options] {
    ctx.action = [&ctx, logs_options] { return Logs(ctx, *logs_options); };
  });
}

}  // namespace det::cli
